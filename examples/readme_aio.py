# examples/readme_aio.py: runs as it is
import asyncio

import fdkit.aio


async def main() -> None:
    loop = asyncio.get_running_loop()
    print(loop.engine)  # io_uring (epoll where io_uring is denied)
    await asyncio.sleep(0)


fdkit.aio.run(main())  # or asyncio.Runner(loop_factory=fdkit.aio.new_event_loop)
