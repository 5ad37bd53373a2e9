# examples/readme_aio.py: runs as it is
import asyncio

import fdkit.aio


async def main() -> None:
    loop = asyncio.get_running_loop()
    assert isinstance(loop, fdkit.aio.EventLoop)
    print(type(loop).__name__, loop.engine)  # EpollEventLoop epoll (UringEventLoop io_uring)
    await asyncio.sleep(0)


fdkit.aio.run(main())  # or asyncio.Runner(loop_factory=fdkit.aio.new_event_loop)
