# examples/readme_zerocopy_tour.py: runs as it is
import os

from fdkit import fd, zerocopy

src_fd, src_path = fd.mkstemp()
fd.write(src_fd, os.urandom(4 << 20))
fd.lseek(src_fd, 0, os.SEEK_SET)
dst_fd, dst_path = fd.mkstemp()

# Any two fds: file→file, file→socket, socket→socket, pipe→anything…
n = zerocopy.transfer(src_fd, dst_fd)  # until EOF; or count=…, src_offset=…, dst_offset=…
print(n, zerocopy.transfer_stats())
# 4194304 {'path': 'copy_file_range', 'bytes': 4194304, 'remembered': False, 'fallbacks': []}

# A pipe as an object; tee duplicates without consuming (camera → client + recording).
camera_fd, camera = fd.pipe()  # the camera: 60 KiB of frames, then EOF
fd.write(camera, b"frame" * 12288)
fd.close(camera)
client_fd, viewer = fd.socketpair()
recording_fd = dst_fd
with zerocopy.Pipe() as p, zerocopy.Pipe() as rec:
    p.resize_or_max(1 << 20)
    while n := p.read_from(camera_fd, 1 << 20):
        p.tee(rec, n)
        rec.write_to(recording_fd, n)
        p.write_to(client_fd, n)
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
