# examples/docs_uring_ring.py: runs as it is
import errno
import socket
import sys

from fdkit import fd
from fdkit.uring import Ring, available, probe

ok, why = available()  # (False, "EPERM: io_uring is disabled by ...") where it is not
if not ok:
    sys.exit(f"no io_uring here: {why}")
print(sorted(op for op, there in probe()["ops"].items() if there))

listener = fd.socket(fd.AF_INET, fd.SOCK_STREAM)
fd.bind(listener, ("127.0.0.1", 0))
fd.listen(listener, 128)
client = fd.socket(fd.AF_INET, fd.SOCK_STREAM)
fd.connect(client, fd.getsockname(listener))
fd.send(client, b"ping")

replied = False
with Ring(256) as ring:  # SINGLE_ISSUER|DEFER_TASKRUN when the kernel has it
    ring.accept(listener, user_data=1, multishot=True)  # one op, every connection
    ring.provide_buffers(group=7, count=64, size=4096)  # a provided-buffer ring
    ring.submit()
    while not replied:
        for c in ring.wait(min_complete=1, timeout=1.0):  # GIL released, Ctrl-C works
            if c.user_data == 1 and c.error is None:
                conn = c.result  # the accepted connection's fd
                ring.recv_multishot(conn, group=7, user_data=2)
            elif c.user_data == 2 and c.data:  # bytes copied out, buffer given back
                ring.send(conn, b"pong: " + c.data, user_data=3, flags=socket.MSG_NOSIGNAL)
            elif c.user_data == 3:  # the send is done: the ring kept the bytes alive till now
                replied = True
print(fd.recv(client, 64))  # b'pong: ping'

r, w = fd.pipe()
with Ring() as ring:
    # Linked ops run in order; when one fails, the rest of its chain is cancelled.
    ring.read(w, 8, user_data=4, link=True)  # reading a pipe's write end: EBADF ...
    ring.write(w, b"never", user_data=5)  # ... so this completes with ECANCELED, unrun
    print([(c.op, errno.errorcode[-c.result]) for c in ring.wait(2, timeout=5)])
    # A link_timeout bounds the op before it: a recv that gets no data is cancelled.
    ring.recv(client, 64, user_data=6, link=True)
    ring.link_timeout(0.05, user_data=7)
    print(sorted((c.op, errno.errorcode[-c.result]) for c in ring.wait(2, timeout=5)))
    # Registered files (fixed=True: the fd is an index) and ring-owned buffers (copied in
    # and out); skip_success: no completion when it works, the chain's last op reports.
    ring.register_files([r, w])
    ring.register_buffers(count=1, size=4096)
    ring.write_fixed(1, 0, b"fixed", user_data=8, fixed=True, link=True, skip_success=True)
    ring.read_fixed(0, 0, 64, user_data=9, fixed=True)
    print([(c.op, c.fd, c.data) for c in ring.wait(timeout=5)])  # [('read_fixed', 0, b'fixed')]
    print(ring.wait(timeout=0.01, timeout_error=True), ring.in_flight)  # [] 0: nothing left

for n in (client, conn, listener, r, w):
    fd.close(n)
