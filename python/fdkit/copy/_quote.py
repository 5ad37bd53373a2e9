"""File names in messages, quoted as GNU cp quotes them (gnulib's ``shell-escape-always``
style): ``'a b'``, ``"it's"``, ``'a'\\''b"c'``, ``'line'$'\\n''break'``, so that a name can be
pasted back into a shell."""

from __future__ import annotations

import os

# Characters that mean something inside double quotes: a name with a single quote and one of
# these is quoted with '\'' instead.
_DOUBLE_QUOTE_SPECIAL = frozenset('"$`\\!')

_LETTER_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\v": "\\v",
    "\f": "\\f",
    "\r": "\\r",
}


def _printable(ch: str) -> bool:
    return ch.isprintable() and not "\udc80" <= ch <= "\udcff"


def _escaped(ch: str) -> str:
    if ch in _LETTER_ESCAPES:
        return _LETTER_ESCAPES[ch]
    return "".join(f"\\{b:03o}" for b in os.fsencode(ch))


def quote(name: str | os.PathLike[str]) -> str:
    """``name`` as cp prints it in a message: in single quotes, a ``'`` as ``'\\''`` (or the
    whole name in double quotes when that is all it needs), and characters that cannot be
    printed as ``$'\\n'`` or octal escapes of their bytes."""
    text = os.fspath(name)
    if "'" in text and all(_printable(c) and c not in _DOUBLE_QUOTE_SPECIAL for c in text):
        return f'"{text}"'
    out = ["'"]
    literal = True
    for ch in text:
        if _printable(ch):
            if not literal:
                out.append("''")
                literal = True
            out.append("'\\''" if ch == "'" else ch)
        else:
            if literal:
                out.append("'$'")
                literal = False
            out.append(_escaped(ch))
    out.append("'")
    return "".join(out)


def quote_if_needed(name: str) -> str:
    """``name`` as cp prints it where it quotes only when needed (gnulib's ``quotef``): bare
    when every character is safe in a shell word, else as :func:`quote`."""
    if name and all(_printable(c) and (c.isalnum() or c in "+-./:=@^_,%") for c in name):
        return name
    return quote(name)
