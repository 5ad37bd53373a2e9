# examples/docs_fd_tour.py: runs as it is
import os

from fdkit import fd

# A listener: plain ints, close-on-exec from birth, addresses spelled as in `socket`.
lfd = fd.socket(fd.AF_INET, fd.SOCK_STREAM | fd.SOCK_NONBLOCK)
fd.setsockopt(lfd, fd.SOL_SOCKET, fd.SO_REUSEADDR, 1)
fd.bind(lfd, ("127.0.0.1", 0))  # port 0: the kernel picks a free one
fd.listen(lfd, 4096)
client = fd.socket(fd.AF_INET, fd.SOCK_STREAM)
fd.connect(client, fd.getsockname(lfd))
fd.poll([(lfd, fd.POLLIN)], timeout=5)  # the connection is queued

# Drain every pending connection in one call (max=None: all of them).
for conn, (host, port) in fd.accept_many(lfd, max=None):
    fd.send(conn, b"hello\n")  # MSG_NOSIGNAL: a gone peer is BrokenPipeError, never SIGPIPE
    fd.close(conn)
    print(f"greeted {host}:{port}")
print(fd.recv(client, 64))  # b'hello\n'

# Files and pipes.
tmp, path = fd.mkstemp(suffix=".dat")  # (fd, path), mode 0600, close-on-exec
fd.write(tmp, b"x" * 1_000_000)
r, w = fd.pipe(fd.O_NONBLOCK)
st = fd.fstat(tmp)  # StatResult with 64-bit fields, ns times
ready = fd.poll([(r, fd.POLLIN)], timeout=0.5)  # seconds; [] on timeout
print(st.st_size, ready)  # 1000000 []

# Datagrams, and an fd passed over a unix socket (received close-on-exec).
u1, u2 = fd.socket(fd.AF_INET, fd.SOCK_DGRAM), fd.socket(fd.AF_INET, fd.SOCK_DGRAM)
fd.bind(u1, ("127.0.0.1", 0))
fd.sendto(u2, b"ping", fd.getsockname(u1))
print(fd.recvfrom(u1, 64)[0])  # b'ping'
a, b = fd.socketpair(fd.AF_UNIX)
fd.send_fds(a, [b"take this"], [w])  # like socket.send_fds
msg, (w2,), flags, _ = fd.recv_fds(b, 64, 1)
fd.write(w2, b"via the passed fd")
print(msg, fd.read(r, 64))  # b'take this' b'via the passed fd'

for n in (client, lfd, tmp, r, w, u1, u2, a, b, w2):
    fd.close(n)
os.unlink(path)
