# examples/readme_atomic_pipe_tour.py: runs as it is
import os

from fdkit.atomic_pipe import AtomicPipe

r, w = AtomicPipe.pair()  # or read_fifo(path) / write_fifo(path) / from_fd('w', fd)
if os.fork() == 0:
    w.write_message(b"x" * 100_000)  # 25 chunks of <= 4096 bytes, each one atomic write
    w.write_messages([b"a", b"b", b"c"])  # small messages share a write while <= PIPE_BUF
    os._exit(0)
w.close()
for msg in r:  # whole messages, until every writer is gone
    print(len(msg))
r.read_message(timeout=0.5, with_writer=True)  # (pid, tid, data); None at EOF or timeout
os.wait()

# Plain prints, bursts and messages on one stream (Atomic::Pipe's mixed data mode), and zstd.
r, w = AtomicPipe.pair(mixed_data_mode=True, compression="zstd")  # dictionary=: a raw zstd one
os.write(w.fileno(), b"a plain print\n")  # any process may print lines into the pipe
w.write_burst(b"short, one atomic write")
w.write_message(b"x" * 10_000)
w.close()  # the last writer gone: EOF once all is read
while (event := r.get_line_burst_or_data(timeout=5)) is not None:
    print(event[0], len(event[1]))  # ('line', b'...\n') | ('burst', …) | ('message', …)
