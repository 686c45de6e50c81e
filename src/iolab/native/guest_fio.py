"""A static, minimal fio for the built-in guest: the host's fio version, without its 64 libraries.

Why: Debian's /usr/bin/fio links 64 shared libraries (Ceph, GlusterFS, ICU, Boost, gnutls, ...)
for engines no guest trial may use (fio/allowlist.py refuses them). Under TCG every exec of it
pays the dynamic linker and the translation of all of them: measured (issue 28), a restored
guest's first I/O took 0.996 s median with Debian's fio and 0.690 s with this build.

What: the same upstream source Debian builds its package from (the `.orig.tar.gz` in Debian's
package pool, checked against a pinned sha256; Debian's own patches to fio 3.33 touch only its
build: configure's log, hardening flags, the man page path), configured `--build-static` with
the engines that need libraries iolab refuses anyway (Ceph, GlusterFS, NFS, HTTP, RDMA, pmem,
xNVMe, libzbc, DAOS) left out. libaio and io_uring stay: the build refuses a result that lacks
any engine in REQUIRED_ENGINES (configure drops libaio silently when libaio.a is missing).

Which version: the host's fio package's upstream version (dpkg), so guest and host run the
same fio; a version without a pinned sha256 here gets no static build, and the guest carries
Debian's fio with its libraries as before (guest_image says which, and why, in every manifest).

Like the ycsb build (native/ycsb_build.py) it is cached under `$IOLAB_CACHE/guest-fio/`, named
by a hash of the source digest, version and flags, built in a temporary directory renamed into
place under a lock. Set-up builds it (`./setup.sh install` runs `python -m
iolab.native.guest_fio`, ~10 s on 2 cores); a trial never builds, it only looks (`installed()`).

Size: one build whole, as ycsb_build.py is: which version and which fio the guest gets
(`for_guest`), the cache, fetching and checking the source, building and checking the result,
the set-up command. If a second guest program gets a static build, the fetch-verify-build
half becomes a shared module.
"""

from __future__ import annotations

import argparse
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from iolab.core import children
from iolab.core.digests import sha256_file
from iolab.core.errors import CapabilityMissing, IolabError
from iolab.core.paths import cache_dir

# Upstream version -> sha256 of Debian's fio_<version>.orig.tar.gz (the release tarball as
# Debian ships it). Add a line when Debian moves to a new fio, after checking the tarball.
KNOWN_SOURCES: dict[str, str] = {
    "3.33": "d2410e13e0f379d061d077cc5ae325835bb7c6186aa7bafc1df954cbc9b014fc",
}
DEBIAN_MIRROR = "https://deb.debian.org/debian"  # the only host this module talks to, unless told otherwise
MIRROR_ENV = "IOLAB_DEBIAN_MIRROR"  # a local Debian mirror (the same pool layout); the sha256 pin still decides
MAX_TARBALL = 64 << 20  # fio's source is ~6 MB; a larger answer is not it
CONFIGURE_FLAGS: tuple[str, ...] = (
    "--build-static", "--disable-native", "--disable-numa", "--disable-rdma", "--disable-rados",
    "--disable-rbd", "--disable-http", "--disable-gfapi", "--disable-libnfs", "--disable-pmem",
    "--disable-xnvme", "--disable-libzbc", "--disable-tcmalloc", "--disable-dfs",
)
# Every engine fio/allowlist.py lets a job use (tests check the two lists agree).
REQUIRED_ENGINES: tuple[str, ...] = (
    "sync", "psync", "vsync", "pvsync", "pvsync2", "libaio", "io_uring", "posixaio", "mmap", "null",
    "cpuio", "falloc", "filecreate", "filestat",
)
# Static libraries the build links that are not in libc6-dev: file -> Debian package.
STATIC_LIBS: dict[str, str] = {"libaio.a": "libaio-dev", "libz.a": "zlib1g-dev"}
FORMAT = "1"  # of the build directory's layout; part of the hash
SETUP_HINT = "run ./setup.sh install (or: python -m iolab.native.guest_fio)"
HOST_FIO = Path("/usr/bin/fio")


@dataclass(frozen=True)
class StaticFio:
    """A finished build: the binary, its upstream version, and how it was made."""

    binary: Path
    version: str
    facts: dict[str, object]


@dataclass(frozen=True)
class GuestFio:
    """The fio the built-in guest carries at /usr/bin/fio: `binary` on the host, and why that one."""

    build: Literal["static-minimal", "debian"]
    binary: Path
    version: str
    why: str
    remedy: str = ""  # what would give the guest the static build, when set-up can


    def manifest(self) -> dict[str, str]:
        return {"build": self.build, "version": self.version, "why": self.why}


# ---------------------------------------------------------------- versions

def upstream_version(debian_version: str) -> str:
    """Debian's `[epoch:]upstream[-revision]` -> upstream ("3.33-3" -> "3.33", "1:3.35-1" -> "3.35")."""
    v = debian_version.strip().split(":", 1)[-1]
    return v.rsplit("-", 1)[0] if "-" in v else v


DPKG_STATUS = Path("/var/lib/dpkg/status")


def host_version() -> str:
    """The upstream version of the host's installed fio package; CapabilityMissing if unknown.
    Asked of dpkg once per state of its database (every guest start asks)."""
    try:
        st = DPKG_STATUS.stat()
        stamp = (st.st_size, st.st_mtime_ns)
    except OSError:
        stamp = (0, 0)
    return _host_version(stamp)


@functools.lru_cache(maxsize=4)
def _host_version(_stamp: tuple[int, int]) -> str:
    dpkg = shutil.which("dpkg-query")
    if not dpkg:
        raise CapabilityMissing("dpkg-query not found: the static guest fio follows the host's Debian fio package")
    proc = children.run([dpkg, "-W", "-f=${Version}", "fio"], capture_output=True, text=True, timeout=30)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise CapabilityMissing("the fio package is not installed (Debian/Ubuntu: apt-get install fio)")
    return upstream_version(proc.stdout)


@functools.lru_cache(maxsize=16)
def _version_of(path: str, _stamp: tuple[int, int]) -> str:
    proc = children.run([path, "--version"], capture_output=True, text=True, timeout=60)
    out = proc.stdout.strip()
    if proc.returncode != 0 or not out.startswith("fio-"):
        raise IolabError(f"{path} --version did not name a fio version (exit {proc.returncode}): "
                         f"{(proc.stdout + proc.stderr).strip()[-300:]}")
    return out


def fio_version(binary: Path) -> str:
    """`binary --version` ("fio-3.33"), asked once per file content (path, size, mtime)."""
    st = binary.stat()
    return _version_of(str(binary), (st.st_size, st.st_mtime_ns))


def pinned_sha256(version: str) -> str:
    """The pinned sha256 of version's source; CapabilityMissing when iolab does not know it."""
    sha = KNOWN_SOURCES.get(version)
    if sha is None:
        raise CapabilityMissing(f"no static guest fio for fio {version}: iolab pins the source of fio "
                                f"{', '.join(sorted(KNOWN_SOURCES))} only (native/guest_fio.py KNOWN_SOURCES)")
    return sha


# ---------------------------------------------------------------- the cache

def root() -> Path:
    return cache_dir() / "guest-fio"


def digest(version: str) -> str:
    """Hash of everything that decides the build: version, source digest, flags, engines, layout."""
    h = hashlib.sha256(f"{FORMAT}\0{version}\0{pinned_sha256(version)}\0".encode())
    h.update("\0".join(CONFIGURE_FLAGS + ("engines",) + REQUIRED_ENGINES).encode())
    return h.hexdigest()[:16]


def build_dir(version: str) -> Path:
    return root() / f"fio-{version}-{digest(version)}"


def installed(version: str | None = None) -> StaticFio:
    """The build for `version` (default: the host's), or CapabilityMissing saying why (never builds)."""
    v = version or host_version()
    d = build_dir(v)
    try:
        facts = json.loads((d / "build.json").read_text())
    except (OSError, ValueError):
        raise CapabilityMissing(f"the static guest fio {v} is not built ({d} missing): {SETUP_HINT}") from None
    binary = d / "fio"
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        raise CapabilityMissing(f"the static guest fio build in {d} is incomplete (no fio): remove {d} and "
                                f"{SETUP_HINT}")
    return StaticFio(binary, v, facts)


def for_guest(host_fio: Path = HOST_FIO) -> GuestFio:
    """What the built-in guest carries: the static build when it is installed and says the same
    `--version` as the host's fio; otherwise the host's fio with its libraries, and why."""
    if not host_fio.is_file():
        raise CapabilityMissing(f"fio not found at {host_fio}: the built-in guest carries the host's fio version "
                                "(Debian/Ubuntu: apt-get install fio)")
    host_v = fio_version(host_fio)
    try:
        static = installed()
        static_v = fio_version(static.binary)
    except (IolabError, OSError) as exc:
        try:
            remedy = SETUP_HINT if host_version() in KNOWN_SOURCES else ""
        except CapabilityMissing:
            remedy = ""
        return GuestFio("debian", host_fio, host_v, f"Debian's fio with its shared libraries: {exc}", remedy)
    if static_v != host_v:
        return GuestFio("debian", host_fio, host_v,
                        f"Debian's fio with its shared libraries: the static build {static.binary} says {static_v}, "
                        f"the host's {host_fio} says {host_v}; guest and host must run the same fio")
    return GuestFio("static-minimal", static.binary, static_v,
                    f"a static build of the host's {static_v} from Debian's source (sha256 checked), without "
                    "the engines iolab refuses and their libraries: under TCG each exec of Debian's fio pays "
                    "the dynamic linking of dozens of shared libraries (64 for Debian 12's)")


# ---------------------------------------------------------------- fetching the source

def source_url(version: str) -> str:
    """Where fio's source is fetched: Debian's pool on deb.debian.org, or on the mirror that
    $IOLAB_DEBIAN_MIRROR names (machines that reach only a local mirror; the tests' loopback one)."""
    mirror = os.environ.get(MIRROR_ENV, "").strip() or DEBIAN_MIRROR
    return f"{mirror.rstrip('/')}/pool/main/f/fio/fio_{version}.orig.tar.gz"


def sha256_of(path: Path) -> str:
    return sha256_file(path)


def verify(tarball: Path, version: str) -> None:
    """IolabError unless `tarball` is the pinned source of `version`."""
    want = pinned_sha256(version)
    got = sha256_of(tarball)
    if got != want:
        raise IolabError(f"{tarball}: sha256 {got} is not the pinned {want} of fio {version}'s source "
                         f"({source_url(version)}): refused, nothing built")


def fetch(version: str) -> Path:
    """Debian's source tarball of `version`, downloaded once into the cache and checked each time."""
    sources = root() / "sources"
    sources.mkdir(parents=True, exist_ok=True)
    cached = sources / f"fio_{version}.orig.tar.gz"
    if cached.is_file():
        try:
            verify(cached, version)
            return cached
        except IolabError:
            cached.unlink()  # damaged since it was checked: fetch it again
    url = source_url(version)
    fd, tmp_name = tempfile.mkstemp(prefix=".download-", dir=sources)
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=60) as resp:  # noqa: S310 -- fixed https URL
            got = 0
            while chunk := resp.read(1 << 20):
                got += len(chunk)
                if got > MAX_TARBALL:
                    raise IolabError(f"{url} sent more than {MAX_TARBALL >> 20} MiB: not fio's source")
                out.write(chunk)
        verify(Path(tmp_name), version)
        os.replace(tmp_name, cached)
    except OSError as exc:
        raise IolabError(f"downloading fio {version}'s source from {url} failed: {exc}") from None
    finally:
        Path(tmp_name).unlink(missing_ok=True)
    return cached


# ---------------------------------------------------------------- building

def _tool(name: str, package: str) -> str:
    found = shutil.which(name)
    if not found:
        raise CapabilityMissing(f"{name} not found: building the static guest fio needs it "
                                f"(Debian/Ubuntu: apt-get install {package})")
    return found


def _check_static_libs(cc: str) -> None:
    """gcc finds each static library the link needs, or CapabilityMissing naming its package."""
    for lib, package in STATIC_LIBS.items():
        found = children.run([cc, f"-print-file-name={lib}"], capture_output=True, text=True,
                             timeout=30).stdout.strip()
        if not os.path.isabs(found):
            raise CapabilityMissing(f"{lib} not found: the static guest fio links it "
                                    f"(Debian/Ubuntu: apt-get install {package})")


def _run(argv: list[str], cwd: Path, what: str, timeout: float, env: dict[str, str] | None = None) -> str:
    try:
        proc = children.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise IolabError(f"{what} took longer than {timeout:g} s") from None
    if proc.returncode != 0:
        raise IolabError(f"{what} failed (exit {proc.returncode}):\n{(proc.stdout + proc.stderr).strip()[-3000:]}")
    return proc.stdout


def _unpack(tarball: Path, into: Path, version: str) -> Path:
    """The source tree; members that would land outside `into` are refused (tarfile's data filter)."""
    with tarfile.open(tarball) as tar:
        tar.extractall(into, filter="data")
    top = into / f"fio-{version}"
    if not (top / "configure").is_file():
        raise IolabError(f"{tarball} holds no fio-{version}/configure")
    return top


def engines_of(binary: Path) -> list[str]:
    """The I/O engines `binary` has built in (`fio --enghelp`)."""
    out = children.run([str(binary), "--enghelp"], capture_output=True, text=True, timeout=60).stdout
    return [ln.strip() for ln in out.splitlines()[1:] if ln.strip()]


def _is_static(binary: Path) -> bool:
    proc = children.run(["ldd", str(binary)], capture_output=True, text=True, timeout=30)
    return "not a dynamic executable" in proc.stdout + proc.stderr


def _build_into(tmp: Path, tarball: Path, version: str) -> dict[str, object]:
    """Configure, make and strip in `tmp`; leaves tmp/fio and returns the build's facts."""
    cc = _tool(os.environ.get("CC") or "gcc", "gcc")
    make = _tool("make", "make")
    strip = _tool("strip", "binutils")
    _check_static_libs(cc)
    t0 = time.monotonic()
    src = _unpack(tarball, tmp / "src", version)
    # configure's probes (fio-conf-*) and gcc's temporaries go in $TMPDIR and are removed on exit,
    # which a killed build never reaches: they go in this build's own directory, which the next clears
    env = {**os.environ, "TMPDIR": str(tmp)}
    _run(["./configure", f"--cc={cc}", *CONFIGURE_FLAGS], src, "fio's configure", 300, env)
    config = (src / "config-host.mak").read_text()
    if not re.search(r"^CONFIG_LIBAIO=y$", config, re.M):
        raise IolabError("fio's configure left out libaio (is libaio-dev installed?); refusing a guest fio without it")
    _run([make, f"-j{os.cpu_count() or 1}", "fio"], src, "building fio (make)", 1800, env)
    binary = tmp / "fio"
    shutil.move(src / "fio", binary)
    _run([strip, str(binary)], tmp, "strip fio", 120)
    shutil.rmtree(tmp / "src")
    said = fio_version(binary)
    if said != f"fio-{version}":
        raise IolabError(f"the built fio says {said!r}, expected fio-{version}")
    engines = engines_of(binary)
    lacking = [e for e in REQUIRED_ENGINES if e not in engines]
    if lacking:
        raise IolabError(f"the built fio lacks the engines {', '.join(lacking)} (it has {', '.join(engines)})")
    if not _is_static(binary):
        raise IolabError(f"the built fio {binary} is not static")
    compiler = children.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout.splitlines()
    return {"version": version, "fio_version": said, "source": source_url(version),
            "sha256": pinned_sha256(version), "configure": list(CONFIGURE_FLAGS), "engines": engines,
            "compiler": compiler[0] if compiler else cc, "bytes": binary.stat().st_size,
            "seconds": round(time.monotonic() - t0, 1), "digest": digest(version)}


def build(version: str | None = None, tarball: Path | None = None) -> StaticFio:
    """The build for `version` (default: the host fio's), made now if missing. `tarball`: a copy of
    Debian's source the user fetched (an offline machine); it is checked against the pinned sha256
    like a download. A failure leaves nothing in the cache but the verified source."""
    v = version or host_version()
    pinned_sha256(v)
    final = build_dir(v)
    root().mkdir(parents=True, exist_ok=True)
    with open(root() / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time; the second finds the first's
        _remove_dead_work()
        if not (final / "build.json").is_file():
            if tarball is not None:
                verify(tarball, v)
            source = tarball if tarball is not None else fetch(v)
            tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=root()))
            try:
                facts = _build_into(tmp, source, v)
                (tmp / "build.json").write_text(json.dumps(facts, indent=1))  # written last: a finished build
                tmp.chmod(0o755)  # mkdtemp made it private; the build is for every user of this cache
                shutil.rmtree(final, ignore_errors=True)  # a broken leftover without build.json
                os.replace(tmp, final)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            _remove_stale(final)
    return installed(v)


def _remove_dead_work() -> None:
    """Temporary build directories and partial downloads of a builder that was killed: with the
    lock held nobody else is building, so whatever is there is dead (~60 MB of objects). A killed
    builder's configure, make and gcc outlive it (each child runs in a session of its own,
    core/children.py) and go on writing in its directory, so they are ended first: removing the
    tree under a running make left a directory it had just written (seen in the suite)."""
    for dead in [*root().glob(".build-*"), *root().glob("sources/.download-*")]:
        if dead.is_dir():
            _end_builders_in(dead)
            shutil.rmtree(dead, ignore_errors=True)
        else:
            dead.unlink(missing_ok=True)


def _builders_in(work: Path) -> list[int]:
    """Processes of the build in `work`: `_build_into` gives configure, make and every compiler
    they start TMPDIR=`work`, a mark no other process carries."""
    mark = b"TMPDIR=" + os.fsencode(work)
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            if mark in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                found.append(int(entry))
        except OSError:
            continue
    return found


def _end_builders_in(work: Path, wait_s: float = 30.0) -> None:
    """SIGKILL the dead build's processes in `work` and wait until they are gone (a zombie shows
    no environment, so it no longer counts)."""
    deadline = time.monotonic() + wait_s
    while (pids := _builders_in(work)) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def _remove_stale(keep: Path) -> None:
    """Builds of other versions or flags go; the source tarballs stay (a downgrade needs no download)."""
    for old in root().glob("fio-*"):
        if old != keep and old.is_dir():
            shutil.rmtree(old, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """The set-up step: build (or find) the static guest fio. A host fio iolab has no pinned source
    for is not an error (the guest carries Debian's fio): exit 0 with the reason. Exit 1 when a
    build that should work fails (a tarball that is not the pinned one, a missing tool)."""
    ap = argparse.ArgumentParser(prog="python -m iolab.native.guest_fio", description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", type=Path, help="a local copy of Debian's fio_<version>.orig.tar.gz (offline "
                                                "machines); checked against the pinned sha256")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    try:
        v = host_version()
        if v not in KNOWN_SOURCES:
            print(f"   skipped: {pinned_sha_reason(v)}; the guest carries Debian's fio with its libraries")
            return 0
        b = build(v, args.source)
    except IolabError as exc:
        print(f"iolab: {exc}", file=sys.stderr)
        return 1
    print(f"   {b.binary} (fio-{b.version}, {b.binary.stat().st_size / 1e6:.1f} MB, {time.monotonic() - t0:.1f} s)")
    return 0


def pinned_sha_reason(version: str) -> str:
    try:
        pinned_sha256(version)
    except CapabilityMissing as exc:
        return str(exc)
    return f"fio {version} is pinned"


if __name__ == "__main__":
    sys.exit(main())
