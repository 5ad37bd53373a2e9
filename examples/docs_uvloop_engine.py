# examples/docs_uvloop_engine.py: runs as it is
import asyncio

import fdkit.aio


async def main() -> None:
    loop = asyncio.get_running_loop()
    assert isinstance(loop, fdkit.aio.EventLoop)
    print(isinstance(loop, asyncio.SelectorEventLoop), loop.engine in ("io_uring", "epoll"))
    print(loop.engine_reason is None or isinstance(loop.engine_reason, str))


fdkit.aio.run(main())  # True True / True
epoll = fdkit.aio.EventLoop(engine="epoll")  # chosen: engine_reason says who asked
print(type(epoll).__name__, epoll.engine, epoll.engine_reason)
epoll.close()  # EpollEventLoop epoll engine='epoll' was asked for
