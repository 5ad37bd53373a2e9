"""The benches of fdkit.fd's calls (accept, socket_create, memory, file_open, fd) at smoke-test
size: the contract every bench's rows keep, and accept's contenders and variants."""

from __future__ import annotations

import pytest

from helpers.bench import HAVE_GCC, RESULTS_TIMEOUT, RowContract, bench_rows

pytestmark = pytest.mark.source_tree


class TestRows(RowContract):
    """The rows of accept, socket_create, memory, file_open and fd (see RowContract)."""


@pytest.mark.slow
@RESULTS_TIMEOUT
def test_accept_has_every_contender_and_variant() -> None:
    ids = {r.id for r in bench_rows("accept")}
    contenders = ["stdlib_accept", "stdlib_selectors", "fd_accept"]
    contenders += ["c_accept4"] if HAVE_GCC else []
    for variant in ("reset", "live"):
        for key in contenders:
            for metric in ("cpu", "rate"):
                assert f"accept_{variant}_{key}_{metric}" in ids
