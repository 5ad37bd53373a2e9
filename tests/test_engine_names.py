"""The names an engine goes by ("io_uring", its alias "uring", "epoll") are written once, in the
core (``ENGINE_NAMES``), and exported as ``_fdkit.ENGINE_NAMES``: ``serve_static``,
``fdkit serve``, ``fdkit doctor``, ``fdkit.aio`` and the types all take exactly those."""

from __future__ import annotations

import argparse
from typing import get_args

import pytest

from fdkit import _fdkit
from fdkit._fdkit import ENGINE_NAMES
from fdkit.aio._loop import engine_name
from fdkit.cli import doctor
from fdkit.cli import serve as serve_cli
from fdkit.types import Engine, EngineName


def test_the_types_say_the_names() -> None:
    assert set(get_args(EngineName)) == set(ENGINE_NAMES.values())
    assert set(get_args(Engine)) == {"auto", *ENGINE_NAMES}


def test_fdkit_serve_takes_the_names() -> None:
    assert set(serve_cli.ENGINES) == {"auto", *ENGINE_NAMES}


@pytest.mark.parametrize("name", sorted(ENGINE_NAMES))
def test_the_aio_loop_reads_each_name(name: str) -> None:
    assert engine_name(name) == ENGINE_NAMES[name]


def test_the_aio_loop_names_them_all_when_refusing() -> None:
    with pytest.raises(ValueError, match="not 'kqueue'") as e:
        engine_name("kqueue")
    assert all(repr(name) in str(e.value) for name in ENGINE_NAMES)


def test_serve_static_names_them_all_when_refusing() -> None:
    with pytest.raises(ValueError, match="engine must be") as e:
        _fdkit.serve_static("/nonexistent", engine="kqueue")  # type: ignore[arg-type]
    assert all(repr(name) in str(e.value) for name in ["auto", *ENGINE_NAMES])


@pytest.mark.parametrize("name", sorted(n for n, e in ENGINE_NAMES.items() if e == "io_uring"))
def test_fdkit_doctor_requires_io_uring_by_each_of_its_names(name: str) -> None:
    parser = argparse.ArgumentParser()
    doctor.add_parser(parser.add_subparsers())
    assert parser.parse_args(["doctor", "--require", name]).require == ["io_uring"]
