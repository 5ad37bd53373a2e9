# examples/readme_uring_ring.py: runs as it is
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

for n in (client, conn, listener):
    fd.close(n)
