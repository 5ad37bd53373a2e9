"""Atomic pipe messages: many writers, one pipe, whole messages.

Wire-compatible with Perl's Atomic::Pipe 0.028: each message is cut into chunks of at most
``PIPE_BUF`` bytes (header: pid, tid, countdown chunk id, size) that the kernel writes
atomically, and the reader reassembles them per writer. Mixed data mode carries plain lines,
bursts and messages on one stream; zstd compression (with an optional dictionary) is
supported on both ends.

>>> r, w = AtomicPipe.pair()
>>> w.write_message(b"hello")  # the number of atomic chunks
1
>>> r.read_message()
b'hello'

The API is documented in ``docs/atomic_pipe_api.md``; :class:`ProtocolError` (a
``ValueError``) reports a broken stream with the writer and byte offset.
"""

from __future__ import annotations

from fdkit._fdkit import AtomicPipe, AtomicPipeEnds, Decompressed, ProtocolError

#: The largest write the kernel keeps atomic on a pipe (Linux: 4096). See pipe(7).
PIPE_BUF: int = AtomicPipe.PIPE_BUF

__all__ = ["PIPE_BUF", "AtomicPipe", "AtomicPipeEnds", "Decompressed", "ProtocolError"]
