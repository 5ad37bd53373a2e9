# examples/docs_aio_tour.py: runs as it is
import asyncio
import os
import socket
import tempfile

import fdkit.aio
from fdkit.atomic_pipe import AtomicPipe


async def main() -> None:
    loop = asyncio.get_running_loop()
    assert isinstance(loop, fdkit.aio.EventLoop)
    print(type(loop).__name__, loop.engine)  # EpollEventLoop epoll (UringEventLoop io_uring)

    # Plain asyncio: streams, servers, tasks. The loop sleeps while nothing is ready.
    async def shout(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write((await reader.readline()).upper())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(shout, "127.0.0.1", 0)
    reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname())
    writer.write(b"hello, ring\n")
    print(await reader.readline())  # b'HELLO, RING\n'
    writer.close()

    # Zero-copy from a coroutine: a file into a socket by the kernel's own path, awaited.
    with tempfile.TemporaryFile() as f:
        f.write(os.urandom(1 << 20))
        f.flush()
        f.seek(0)
        a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        sent = asyncio.ensure_future(fdkit.aio.transfer(f.fileno(), a.fileno()))
        got = 0
        while got < 1 << 20:
            got += len(await loop.sock_recv(b, 1 << 16))
        print(await sent, got)  # (1048576, 'splice_via_pipe') 1048576
        a.close()
        b.close()

    # Whole atomic-pipe messages from coroutines, on any asyncio loop.
    r, w = AtomicPipe.pair()
    await fdkit.aio.write_message(w, b"x" * 20000)  # many PIPE_BUF chunks, one message
    w.close()
    async for msg in fdkit.aio.messages(r):
        print(len(msg))  # 20000
    r.close()
    server.close()
    await server.wait_closed()


fdkit.aio.run(main())  # or asyncio.Runner(loop_factory=fdkit.aio.new_event_loop)
