# examples/readme_zerocopy.py: runs as it is
import os

from fdkit import fd, zerocopy

src, src_path = fd.mkstemp()
fd.write(src, os.urandom(1 << 20))
fd.lseek(src, 0, os.SEEK_SET)
dst, dst_path = fd.mkstemp()
n = zerocopy.transfer(src, dst)  # any two fds, by the best kernel path, with fallbacks
print(n, zerocopy.transfer_stats())  # 1048576 {'path': 'copy_file_range', ...}
for x, path in ((src, src_path), (dst, dst_path)):
    fd.close(x)
    os.unlink(path)
