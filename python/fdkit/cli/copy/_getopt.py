"""The command line read as GNU ``getopt_long`` reads cp's: options anywhere among the operands
(until ``--``), short options in clusters (``-rfv``, ``-Sbak``), long options by any unique
prefix (``--rec``), a long option's optional value only after ``=`` (``--reflink`` alone is
``--reflink`` without one), and glibc's words for each mistake. Option values that name a
choice (``--sparse=al``) are matched as gnulib's ``argmatch`` does: exactly, or by a prefix
that means one thing."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

Arg = Literal["none", "required", "optional"]

T = TypeVar("T")


@dataclass(frozen=True)
class Option:
    """One option: its long name, its short letter, whether it takes a value, the key the
    parser returns for it, and whether it may be abbreviated (fdkit's own options may not, so
    that every abbreviation cp accepts means what it means to cp)."""

    long: str | None
    short: str | None
    arg: Arg
    key: str
    exact: bool = False


class GetoptError(Exception):
    """A command line getopt refuses: the message (without the program's name)."""


def _quote(text: str) -> str:
    return f"'{text}'"


def getopt(
    argv: Sequence[str],
    options: Sequence[Option],
    operands: list[str],
    *,
    posixly_correct: bool | None = None,
) -> Iterator[tuple[str, str | None]]:
    """``(key, value)`` for each option, in order, as they are read (an option after a
    mistake is never read, as with getopt_long); the operands are appended to
    ``operands``."""
    if posixly_correct is None:
        posixly_correct = "POSIXLY_CORRECT" in os.environ
    shorts = {o.short: o for o in options if o.short}
    i = 0
    args = list(argv)
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            operands.extend(args[i:])
            break
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            opt = _long(name, arg, options)
            if opt.arg == "none":
                if eq:
                    raise GetoptError(f"option '--{opt.long}' doesn't allow an argument")
                yield (opt.key, None)
            elif opt.arg == "optional":
                yield (opt.key, value if eq else None)
            elif eq:
                yield (opt.key, value)
            elif i < len(args):
                yield (opt.key, args[i])
                i += 1
            else:
                raise GetoptError(f"option '--{opt.long}' requires an argument")
            continue
        if arg.startswith("-") and arg != "-":
            j = 1
            while j < len(arg):
                c = arg[j]
                j += 1
                sopt = shorts.get(c)
                if sopt is None:
                    raise GetoptError(f"invalid option -- {_quote(c)}")
                if sopt.arg == "none":
                    yield (sopt.key, None)
                    continue
                if j < len(arg):
                    yield (sopt.key, arg[j:])
                elif sopt.arg == "optional":
                    yield (sopt.key, None)
                elif i < len(args):
                    yield (sopt.key, args[i])
                    i += 1
                else:
                    raise GetoptError(f"option requires an argument -- {_quote(c)}")
                break
            continue
        operands.append(arg)
        if posixly_correct:
            operands.extend(args[i:])
            break


def _long(name: str, arg: str, options: Sequence[Option]) -> Option:
    for o in options:
        if o.long == name:
            return o
    matches = [o for o in options if o.long and not o.exact and o.long.startswith(name)]
    if not matches:
        raise GetoptError(f"unrecognized option {_quote(arg)}")
    first = matches[0]
    if any((m.key, m.arg) != (first.key, first.arg) for m in matches[1:]):
        names = " ".join(_quote(f"--{m.long}") for m in matches)
        raise GetoptError(f"option {_quote('--' + name)} is ambiguous; possibilities: {names}")
    return first


def argmatch(context: str, value: str, choices: Sequence[tuple[str, T]]) -> T:
    """The choice ``value`` names, as gnulib's XARGMATCH: the word itself, or a prefix of
    words that all mean the same; else :class:`GetoptError` with argmatch's message and the
    list of valid words."""
    for word, meaning in choices:
        if word == value:
            return meaning
    matches = [(w, m) for w, m in choices if w.startswith(value)]
    if matches and all(m == matches[0][1] for _, m in matches):
        return matches[0][1]
    problem = "ambiguous" if matches else "invalid"
    lines = [f"{problem} argument {_quote(value)} for {_quote(context)}", "Valid arguments are:"]
    last: object = object()
    for word, meaning in choices:
        if meaning != last:
            lines.append(f"  - {_quote(word)}")
            last = meaning
        else:
            lines[-1] += f", {_quote(word)}"
    raise GetoptError("\n".join(lines))
