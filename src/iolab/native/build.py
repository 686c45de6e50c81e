"""Compile iolab's small C helpers on demand and cache the binaries.

The C sources ship inside this package (the single source of truth, see native/README.md)
so an installed iolab can build them on the machine it measures. A binary is named after
the hash of its source and compiler flags: editing the source builds a new one, and two
iolab processes building at once never see a half-written file (build to a temp name,
then rename).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from iolab.core import children
from iolab.core.errors import CapabilityMissing, IolabError, TrialFailed
from iolab.core.exec import ExecResult
from iolab.core.paths import cache_dir

if TYPE_CHECKING:
    from iolab.targets.base import Placement

# No -Werror here: a newer compiler's new warning must not stop a user's run. The test
# suite compiles with -Werror to keep the sources warning-free.
CFLAGS: tuple[str, ...] = ("-O2", "-Wall", "-Wextra", "-std=gnu11")
STRICT_CFLAGS: tuple[str, ...] = CFLAGS + ("-Werror",)
# What a helper needs beyond libc, by name: varmail runs threads and draws gamma-distributed
# file sizes (log, sqrt). Part of the binary's name (digest) like CFLAGS.
LINK_FLAGS: dict[str, tuple[str, ...]] = {"iolab_varmail": ("-pthread", "-lm")}


def available() -> list[str]:
    """Names of the helpers whose sources ship in the package."""
    return sorted(p.name[:-2] for p in resources.files(__package__).iterdir()
                  if p.name.endswith(".c"))


def source_text(name: str) -> bytes:
    """The C source of helper `name`; a clear error for an unknown name."""
    src = resources.files(__package__) / f"{name}.c"
    if not src.is_file():
        raise IolabError(f"unknown native helper {name!r}; available: {', '.join(available())}")
    return src.read_bytes()


def compiler() -> str:
    """The C compiler ($CC, else gcc); CapabilityMissing if it is not installed."""
    cc = os.environ.get("CC") or "gcc"
    found = shutil.which(cc)
    if not found:
        raise CapabilityMissing(
            f"C compiler {cc!r} not found: iolab's native helpers are built from source on "
            "first use. Install gcc (Debian/Ubuntu: apt-get install gcc) or set $CC.")
    return found


def _digest(source: bytes, flags: tuple[str, ...]) -> str:
    h = hashlib.sha256(source)
    h.update("\0".join(flags).encode())
    return h.hexdigest()[:16]


def binary_dir() -> Path:
    return cache_dir() / "native"


def compile_helper(name: str, out: Path, flags: tuple[str, ...] = CFLAGS) -> Path:
    """Compile helper `name` to `out` atomically; IolabError with gcc's message on failure."""
    source = source_text(name)
    cc = compiler()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{name}-", dir=out.parent) as tmp:
        src = Path(tmp) / f"{name}.c"
        src.write_bytes(source)
        tmp_out = Path(tmp) / name
        proc = children.run([cc, *flags, "-o", str(tmp_out), str(src), *LINK_FLAGS.get(name, ())],
                            capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise IolabError(f"building native helper {name} failed:\n"
                             f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
        os.replace(tmp_out, out)
    return out


def _remove_stale(name: str, keep: Path) -> None:
    """Drop binaries built from older versions of the source, so the cache does not grow."""
    for old in binary_dir().glob(f"{name}-*"):
        if old != keep and old.is_file():
            old.unlink(missing_ok=True)


def helper_path(name: str) -> Path:
    """Path of the up-to-date binary of helper `name`, compiling it if missing or outdated."""
    out = binary_dir() / f"{name}-{_digest(source_text(name), CFLAGS + LINK_FLAGS.get(name, ()))}"
    if out.is_file() and os.access(out, os.X_OK):
        return out
    compile_helper(name, out)
    _remove_stale(name, out)
    return out


def build_all() -> list[Path]:
    """Build every helper (for `iolab setup`), so the first study does not pay for it."""
    return [helper_path(name) for name in available()]


GUEST_DIR = "/usr/libexec/iolab"  # where a guest target installs the helpers it was asked for


def helper_for(name: str, placement: Placement) -> str:
    """Helper `name`'s path as the placement's executor sees it.

    On the host: built on demand. In a guest: the target put the binary there (qemu target,
    `native_helpers = [...]`) and named it in placement.extras["native_helpers"][name].
    """
    from iolab.core.errors import TrialFailed

    provided = (placement.extras.get("native_helpers") or {}).get(name)
    if provided:
        return str(provided)
    if placement.executor.name == "host":
        return str(helper_path(name))
    raise TrialFailed(f"the {placement.executor.name!r} executor has no native helper {name}; its target must "
                      f"install it (qemu target: native_helpers = [\"{name}\"])")


def helper_stdout(res: ExecResult, helper: str, timeout_s: float) -> str:
    """What a helper printed, when it ran to its end; TrialFailed naming the helper when it
    timed out or exited non-zero (with its output's tail). Each workload then parses and
    checks the text against what it asked for."""
    if res.timed_out:
        raise TrialFailed(f"{helper} timed out after {timeout_s:g}s")
    if res.returncode != 0:
        raise TrialFailed(f"{helper} failed (exit {res.returncode}): {res.tail()}")
    return res.stdout
