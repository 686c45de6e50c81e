"""A seccomp filter that refuses to create unix-domain sockets: what a trial's processes get.

Why: the confinement (core/confine.py) makes the root filesystem read-only, but connecting to a
unix socket is not a write. A trial's processes run as uid 0 with DAC_OVERRIDE, so a socket
file anywhere on the host (systemd's, D-Bus's, a container runtime's, another run's QEMU
monitor, a fleet server's) would answer them: if the job-file check ever missed an option that
opens a socket (fio's `net` engine with `protocol=unix`, an `exec`), one connect() would be a
way out of every other wall. A private network namespace closes TCP/UDP and abstract unix
sockets, not path sockets. So the kernel refuses `socket(AF_UNIX, ...)` itself, with EACCES:
nothing a trial runs needs one (fio, iozone, the native helpers, db_bench, YCSB's JVM; glibc's
name-service lookups fall back to files when nscd's socket is refused). `socketpair()` stays
allowed: its two ends reach nothing outside.

The program is classic BPF, ten instructions, handed to bubblewrap's `--seccomp FD` (it
installs it under no_new_privs just before the command's exec, so bwrap's own set-up is not
filtered and every descendant inherits it). Written out rather than built with libseccomp: the
library's Python binding ships with the C library (Debian's python3-seccomp), not on PyPI, and
the whole rule is "this syscall, this first argument". A system call of another architecture
(the i386 or x32 entry points of an x86_64 kernel, where `socket` has other numbers or goes
through socketcall) is refused whole with EPERM: nothing iolab runs in a trial is built for one.
"""

from __future__ import annotations

import contextlib
import os
import platform
import struct
from collections.abc import Iterator

# linux/filter.h, linux/bpf_common.h, linux/seccomp.h, linux/audit.h
BPF_LD_W_ABS = 0x20
BPF_JEQ_K = 0x15
BPF_AND_K = 0x54
BPF_RET_K = 0x06
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
EACCES, EPERM = 13, 1
AF_UNIX = 1
X32_SYSCALL_BIT = 0x40000000
# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]
OFF_NR, OFF_ARCH, OFF_ARG0_LOW = 0, 4, 16  # args[0]'s low word on a little-endian machine

# machine -> (AUDIT_ARCH_*, the socket syscall's number)
ARCHES: dict[str, tuple[int, int]] = {
    "x86_64": (0xC000003E, 41),
    "aarch64": (0xC00000B7, 198),
}


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def program(machine: str | None = None) -> bytes | None:
    """The filter for `machine` (default: this one) as struct sock_filter[]; None for a machine it
    does not know (the confinement then runs without it and says so: Confinement.describe)."""
    arch = ARCHES.get(machine or platform.machine())
    if arch is None:
        return None
    audit_arch, nr_socket = arch
    return b"".join([
        _insn(BPF_LD_W_ABS, 0, 0, OFF_ARCH),
        _insn(BPF_JEQ_K, 1, 0, audit_arch),            # this machine's own system calls: on to 3
        _insn(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | EPERM),
        _insn(BPF_LD_W_ABS, 0, 0, OFF_NR),
        _insn(BPF_AND_K, 0, 0, ~X32_SYSCALL_BIT & 0xFFFFFFFF),
        _insn(BPF_JEQ_K, 0, 3, nr_socket),             # not socket(): allowed
        _insn(BPF_LD_W_ABS, 0, 0, OFF_ARG0_LOW),
        _insn(BPF_JEQ_K, 0, 1, AF_UNIX),               # socket() of another family: allowed
        _insn(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | EACCES),
        _insn(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
    ])


def available() -> bool:
    return program() is not None


@contextlib.contextmanager
def program_fd() -> Iterator[int | None]:
    """An fd holding this machine's filter, for bubblewrap's `--seccomp FD` (pass it to the child:
    Popen's pass_fds); None where no filter is known. Closed on exit (after the Popen)."""
    prog = program()
    if prog is None:
        yield None
        return
    fd = os.memfd_create("iolab-no-unix-sockets")  # close-on-exec: only pass_fds hands it on
    try:
        os.write(fd, prog)
        os.lseek(fd, 0, os.SEEK_SET)
        yield fd
    finally:
        os.close(fd)
