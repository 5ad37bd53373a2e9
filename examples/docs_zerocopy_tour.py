# examples/docs_zerocopy_tour.py: runs as it is
import os

from fdkit import fd, zerocopy

src_fd, src_path = fd.mkstemp()
fd.write(src_fd, os.urandom(4 << 20))
fd.lseek(src_fd, 0, os.SEEK_SET)
dst_fd, dst_path = fd.mkstemp()

# Any two fds: file→file, file→socket, socket→socket, pipe→anything…
n = zerocopy.transfer(src_fd, dst_fd)  # until EOF; or count=…, src_offset=…, dst_offset=…
print(n, zerocopy.transfer_stats())
# 4194304 {'path': 'copy_file_range', 'bytes': 4194304, 'remembered': False, 'would_block': None,
#          'held': 0, 'fallbacks': []}

# A pipe as an object with a standing tee (camera → client + recording): every chunk that
# leaves the pipe reaches each mirror first, whole (tee(2) through a private pipe).
camera_fd, camera = fd.pipe()  # the camera: 60 KiB of frames, then EOF
fd.write(camera, b"frame" * 12288)
fd.close(camera)
client_fd, viewer = fd.socketpair()
recording_fd = dst_fd
with zerocopy.Pipe() as p:
    p.add_mirror(recording_fd)  # any fd: a file, a socket, another Pipe
    p.read_from(camera_fd)  # n=None: until EOF (it fits; a live camera: in its own thread)
    p.close_write()  # half-close: the pipe ends once drained
    p.write_to(client_fd)  # n=None: until the pipe's end, each chunk recorded first
print(len(fd.recv(viewer, 1 << 20)))  # 61440

# Two connected sockets each: a request one way, a reply the other, then half-closes.
a_fd, a_peer = fd.socketpair()
b_fd, b_peer = fd.socketpair()
fd.send(a_peer, b"request")
fd.shutdown(a_peer, fd.SHUT_WR)
fd.send(b_peer, b"reply")
fd.shutdown(b_peer, fd.SHUT_WR)
a_to_b, b_to_a = zerocopy.proxy(a_fd, b_fd, idle_timeout=30)  # both ways, half-close passed on
print(a_to_b, b_to_a, fd.recv(b_peer, 64), fd.recv(a_peer, 64))  # 7 5 b'request' b'reply'

# One way, teed to a recording: the client gets the bytes, the log a copy.
feed_fd, feed = fd.pipe()
fd.write(feed, b"one line\n")
fd.close(feed)
log_fd = recording_fd
zerocopy.relay(feed_fd, client_fd, record_fd=log_fd)  # one way, teed to a recording
print(fd.recv(viewer, 64))  # b'one line\n'

for n in (src_fd, dst_fd, camera_fd, feed_fd, client_fd, viewer, a_fd, a_peer, b_fd, b_peer):
    fd.close(n)
os.unlink(src_path)
os.unlink(dst_path)
