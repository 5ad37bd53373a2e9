# examples/readme_fd.py: runs as it is
from fdkit import fd

lfd = fd.socket(fd.AF_INET, fd.SOCK_STREAM | fd.SOCK_NONBLOCK)  # a plain int, close-on-exec
fd.bind(lfd, ("127.0.0.1", 0))
fd.listen(lfd)
client = fd.socket(fd.AF_INET, fd.SOCK_STREAM)
fd.connect(client, fd.getsockname(lfd))
fd.poll([(lfd, fd.POLLIN)], timeout=5)
for conn, (host, port) in fd.accept_many(lfd, max=None):  # every pending connection, one call
    fd.send(conn, f"hello {host}:{port}\n".encode())
    fd.close(conn)
print(fd.recv(client, 64))  # b'hello 127.0.0.1:40312\n'
fd.close(client)
fd.close(lfd)
