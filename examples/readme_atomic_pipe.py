# examples/readme_atomic_pipe.py: runs as it is
import os

from fdkit.atomic_pipe import AtomicPipe

r, w = AtomicPipe.pair()
if os.fork() == 0:  # any number of writer processes
    w.write_message(b"x" * 100_000)  # arrives whole, never interleaved with another writer's
    os._exit(0)
w.close()
print([len(m) for m in r])  # [100000]
os.wait()
