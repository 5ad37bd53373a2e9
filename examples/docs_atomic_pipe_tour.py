# examples/docs_atomic_pipe_tour.py: runs as it is
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
print(w.write_message(b"x" * 10_000))  # the chunks it took, as Perl's: 1 (zstd shrank it)
w.close()  # the last writer gone: EOF once all is read
while not r.eof():  # Perl's loop: mixed mode made the reader non-blocking, nothing waits
    kind, data = r.get_line_burst_or_data()  # (None, None) when nothing is ready yet
    if data is not None:
        print(kind, len(data))  # 'line' (b'...\n') | 'burst' | 'message'

# Perl's new(): one object holding both ends; clone writers off it, then keep the reader.
p = AtomicPipe.new()  # read_fifo(path, read_write=True): a FIFO reader that sees no EOF
writers = [p.clone_writer() for _ in range(3)]  # between writers, as Perl's read_fifo
p.reader()  # closes the write end it held; p now reads
for i, writer in enumerate(writers):
    with writer:
        writer.write_message(b"from writer %d" % i)
print(p.read_messages(timeout=5), p.eof())  # [b'from writer 0', …] True
