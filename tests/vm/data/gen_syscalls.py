"""Makes a known number of the syscalls the qemu_syscalls probe counts, from two threads."""
import os
import tempfile
import threading

d = tempfile.mkdtemp(dir="/var/tmp")
fd = os.open(os.path.join(d, "img"), os.O_RDWR | os.O_CREAT, 0o600)
def worker():
    for i in range(5):
        os.pwrite(fd, b"x" * 4096, i * 4096)     # 5 pwrite64
        os.fdatasync(fd)                          # 5 fdatasync
t = threading.Thread(target=worker)
t.start()
t.join()
for i in range(3):
    os.pwritev(fd, [b"a" * 512, b"b" * 512], 65536 + i * 1024)   # 3 pwritev
os.pwritev(fd, [b"c" * 512], 0, os.RWF_DSYNC)                     # 1 pwritev2
os.fsync(fd)                                                      # 2 fsync
os.fsync(fd)
r, w = os.pipe()
for _ in range(4):
    try:
        os.fsync(r)                                               # 4 fsync errors (EINVAL on a pipe)
    except OSError:
        pass
os.close(fd)
os.unlink(os.path.join(d, "img"))
os.rmdir(d)
