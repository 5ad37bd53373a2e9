"""Command-line numbers, checked before anything starts: one message per way to get them
wrong, naming the option and what was typed."""

from __future__ import annotations

import math

#: The longest duration an option may ask for, in seconds: what fits a signed 64-bit count of
#: nanoseconds (about 292 years), the limit of CPython's own timeouts and of the native
#: module's (``fdkit._fdkit``'s ``MAX_SECONDS``).
MAX_SECONDS = 9_223_372_036


def positive(text: str, what: str, kind: type[int | float]) -> int | float:
    """``text`` as a positive ``kind``; ``ValueError`` naming ``what`` and ``text`` otherwise.
    A float option is a duration in seconds: above :data:`MAX_SECONDS` is "too large"."""
    try:
        value = kind(text)
    except ValueError:
        raise ValueError(f"{what} must be a positive number, got {text!r}") from None
    if kind is float and (value > MAX_SECONDS or math.isinf(value)):
        raise ValueError(
            f"{what} is too large: {text!r} seconds (the limit is {MAX_SECONDS} seconds, "
            "about 292 years)"
        )
    if value <= 0 or not math.isfinite(value):
        raise ValueError(f"{what} must be a positive number, got {text!r}")
    return value
