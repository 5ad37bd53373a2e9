# examples/docs_uvloop_engine.py: runs as it is
import asyncio

import fdkit.aio


async def main() -> None:
    loop = asyncio.get_running_loop()
    assert isinstance(loop, fdkit.aio.EventLoop)
    print(isinstance(loop, asyncio.SelectorEventLoop), loop.engine in ("io_uring", "epoll"))
    print(loop.engine_reason is None or isinstance(loop.engine_reason, str))


fdkit.aio.run(main())  # True True / True
default = fdkit.aio.EventLoop()  # epoll, unless FDKIT_AIO_ENGINE=io_uring asks otherwise
print(type(default).__name__, default.engine)
default.close()  # EpollEventLoop epoll
epoll = fdkit.aio.EventLoop(engine="epoll")  # chosen: engine_reason says who asked
print(type(epoll).__name__, epoll.engine, epoll.engine_reason)
epoll.close()  # EpollEventLoop epoll engine='epoll' was asked for
why = fdkit.aio.engine_unavailable("io_uring")  # None where the io_uring engine can run
if why is None:
    uring = fdkit.aio.EventLoop(engine="io_uring")  # on request (OSError where it cannot run)
    print(type(uring).__name__, uring.engine, uring.engine_reason)
    uring.close()  # UringEventLoop io_uring None
else:
    print("io_uring engine unavailable:", why)
