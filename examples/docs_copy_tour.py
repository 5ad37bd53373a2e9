# examples/docs_copy_tour.py: runs as it is
import os
import shutil
import tempfile

import fdkit.copy

with tempfile.TemporaryDirectory() as tmp:
    src = os.path.join(tmp, "src")
    os.makedirs(os.path.join(src, "sub"))
    with open(os.path.join(src, "sub", "disk.img"), "wb") as f:
        f.write(b"header")
        f.truncate(64 << 20)  # 64 MiB, all of it a hole but the header
    os.symlink("sub/disk.img", os.path.join(src, "latest"))

    dst = fdkit.copy.copytree(src, os.path.join(tmp, "dst"), symlinks=True)
    copied = os.path.join(dst, "sub", "disk.img")
    print(os.path.getsize(copied), os.stat(copied).st_blocks * 512 < 1 << 20)  # 67108864 True
    print(os.readlink(os.path.join(dst, "latest")))  # sub/disk.img

    try:
        fdkit.copy.copy2(copied, copied)
    except shutil.SameFileError as e:
        print(type(e).__name__)  # SameFileError
