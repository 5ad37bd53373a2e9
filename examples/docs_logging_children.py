# examples/docs_logging_children.py: runs as it is
import logging
import multiprocessing as mp

from fdkit.logging import AtomicPipeListener, child_setup


def work(i: int) -> int:
    logging.getLogger("work").warning("item %d done in process %d", i, mp.current_process().pid)
    return i


if __name__ == "__main__":  # spawn children import this file
    logging.basicConfig(format="%(processName)s: %(message)s")
    # A FIFO in a private 0700 directory; the listener re-emits the records here.
    with AtomicPipeListener() as listener:
        handler = listener.handler()
        ctx = mp.get_context("spawn")  # fork, spawn and forkserver alike
        with ctx.Pool(4, initializer=child_setup, initargs=(handler,)) as pool:
            pool.map(work, range(100))  # records (exc_info, extra fields) arrive whole
