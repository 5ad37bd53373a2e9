# examples/readme_uring.py: runs as it is
import sys

from fdkit import fd
from fdkit.uring import Ring, available

ok, why = available()
if not ok:
    sys.exit(f"no io_uring here: {why}")
r, w = fd.pipe()
fd.write(w, b"ping")
with Ring() as ring:
    ring.read(r, 64, user_data=1)
    print([(c.op, c.data) for c in ring.wait(timeout=5)])  # [('read', b'ping')]
fd.close(r)
fd.close(w)
