"""The built-in guest's static fio (native/guest_fio.py), against the real build set-up made, the
real host fio and real tarballs: what it is, when the guest falls back to Debian's fio (and says
why), and a source that is not the pinned one refused with nothing left behind."""

from __future__ import annotations

import contextlib
import functools
import gzip
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from iolab.core.errors import CapabilityMissing
from iolab.fio import allowlist
from iolab.native import guest_fio
from iolab.targets.qemu_guest import guest_fio_check
from iolab.vm import guest_image, saved_states

pytestmark = pytest.mark.skipif(shutil.which("fio") is None, reason="fio not installed")

HOST_FIO = guest_fio.HOST_FIO


@pytest.fixture()
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("IOLAB_CACHE", str(cache))
    return cache


def _static() -> guest_fio.StaticFio:
    """The build ./setup.sh install made (the suite's set-up runs it)."""
    try:
        return guest_fio.installed()
    except CapabilityMissing as exc:
        pytest.fail(f"set-up did not build the static guest fio: {exc}")


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def test_a_dead_builders_processes_are_ended_before_its_work_is_removed(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in for a killed builder's make (a process in a session of its own, working in the
    dead build's tree and marked by its TMPDIR, as `_build_into` marks configure, make and gcc) is
    ended and the work removed; a process with another TMPDIR is left running."""
    monkeypatch.setenv("IOLAB_CACHE", str(tmp_path / "cache"))
    work = guest_fio.root() / ".build-dead"
    (work / "src").mkdir(parents=True)
    other = tmp_path / "elsewhere"
    other.mkdir()
    procs = [subprocess.Popen(["sleep", "300"], env={"PATH": "/usr/bin:/bin", "TMPDIR": str(d)}, cwd=work / "src",
                              start_new_session=True) for d in (work, other)]
    try:
        deadline = time.monotonic() + 10
        while guest_fio._builders_in(work) != [procs[0].pid] and time.monotonic() < deadline:  # exec'd
            time.sleep(0.05)
        assert guest_fio._builders_in(work) == [procs[0].pid]
        guest_fio._remove_dead_work()
        assert procs[0].wait(timeout=10) == -signal.SIGKILL
        assert not work.exists()
        assert procs[1].poll() is None, "a process of no dead build is left alone"
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def _leftovers(cache: Path) -> list[str]:
    root = cache / "guest-fio"
    return sorted(str(p.relative_to(root)) for p in root.iterdir() if p.name not in (".lock", "sources")) \
        if root.is_dir() else []


def test_upstream_version_is_read_from_debians_version_string() -> None:
    assert guest_fio.upstream_version("3.33-3") == "3.33"
    assert guest_fio.upstream_version("1:3.35-1+b1") == "3.35"
    assert guest_fio.upstream_version("3.36") == "3.36"
    assert guest_fio.upstream_version("3.33-3\n") == "3.33"


def test_the_build_engines_are_exactly_those_a_job_may_use() -> None:
    assert set(guest_fio.REQUIRED_ENGINES) == set(allowlist.ENGINES)


def test_the_static_build_is_the_hosts_fio_version_static_with_every_allowed_engine(tmp_path: Path) -> None:
    if guest_fio.host_version() not in guest_fio.KNOWN_SOURCES:
        pytest.skip(f"the host's fio {guest_fio.host_version()} has no pinned source: no static build here")
    static = _static()
    assert guest_fio.fio_version(static.binary) == guest_fio.fio_version(HOST_FIO)
    ldd = subprocess.run(["ldd", str(static.binary)], capture_output=True, text=True)
    assert "not a dynamic executable" in ldd.stdout + ldd.stderr
    engines = guest_fio.engines_of(static.binary)
    assert set(allowlist.ENGINES) <= set(engines), set(allowlist.ENGINES) - set(engines)
    assert {"rbd", "http", "nfs", "rdma", "gfapi"}.isdisjoint(engines)  # what it leaves out
    assert static.facts["sha256"] == guest_fio.KNOWN_SOURCES[static.version]
    # and it runs a job on the host: libaio writes to a file, JSON out
    out = subprocess.run([str(static.binary), "--name=t", f"--filename={tmp_path / 'f'}", "--rw=write", "--bs=4k",
                          "--size=64k", "--ioengine=libaio", "--output-format=json"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    job = json.loads(out.stdout)["jobs"][0]
    assert job["write"]["io_bytes"] == 64 << 10 and job["error"] == 0


def test_the_guest_image_carries_the_static_fio_alone_and_says_so() -> None:
    if guest_fio.host_version() not in guest_fio.KNOWN_SOURCES:
        pytest.skip("no pinned source for the host's fio: the guest carries Debian's")
    static = _static()
    image = guest_image.build_guest()
    fio = image.manifest()["guest_fio"]
    assert fio["build"] == "static-minimal" and fio["version"] == guest_fio.fio_version(HOST_FIO)
    members = json.loads((image.initramfs.parent / "manifest.json").read_text())["members"]
    assert "usr/bin/fio" in members
    assert not any("librbd" in m or "libaio" in m or "libglusterfs" in m for m in members), members
    entries = {e.name: e for e in guest_image.fio_entries(guest_fio.for_guest())}
    assert list(entries) == ["usr/bin/fio"] and entries["usr/bin/fio"].source == static.binary
    check = guest_fio_check(guest_fio.for_guest())
    assert check.state == "ok" and "static" in check.detail


def test_without_the_build_the_guest_carries_debians_fio_and_says_why(empty_cache: Path) -> None:
    fio = guest_fio.for_guest()
    assert fio.build == "debian" and fio.binary == HOST_FIO
    assert "not built" in fio.why and str(empty_cache) in fio.why
    image = guest_image.build_guest()  # a whole image in the empty cache: the real fallback
    assert image.manifest()["guest_fio"] == fio.manifest()
    members = json.loads((image.initramfs.parent / "manifest.json").read_text())["members"]
    libs = subprocess.run(["ldd", str(HOST_FIO)], capture_output=True, text=True).stdout
    needed = [ln.split("=>")[1].split()[0] for ln in libs.splitlines() if "=>" in ln]
    assert needed and all(lib.strip("/") in members for lib in needed)
    if guest_fio.host_version() in guest_fio.KNOWN_SOURCES:
        check = guest_fio_check(fio)
        assert check.state == "warn" and "setup.sh install" in check.detail


def test_the_image_digest_and_so_the_saved_states_key_follow_the_fio_build() -> None:
    if guest_fio.host_version() not in guest_fio.KNOWN_SOURCES:
        pytest.skip("no pinned source for the host's fio: only one build here")
    kernel, release = guest_image.host_kernel()
    static = guest_fio.for_guest()
    assert static.build == "static-minimal"
    debian = guest_fio.GuestFio("debian", HOST_FIO, static.version, "test")
    digests = {f.build: guest_image.content_digest(kernel, guest_image.image_entries(release, fio=f))
               for f in (static, debian)}
    assert digests["static-minimal"] != digests["debian"]
    keys = {saved_states.key_of({"guest": {"image_digest": d}}) for d in digests.values()}
    assert len(keys) == 2


def test_a_static_build_of_another_version_is_not_used(empty_cache: Path) -> None:
    """A build directory whose fio says another version than the host's (a stale or tampered
    build): the guest gets Debian's fio, and the manifest says both versions."""
    v = guest_fio.host_version()
    if v not in guest_fio.KNOWN_SOURCES:
        pytest.skip("no pinned source for the host's fio")
    d = guest_fio.build_dir(v)
    d.mkdir(parents=True)
    other = d / "fio"
    other.write_text("#!/bin/sh\necho fio-0.1\n")
    other.chmod(0o755)
    (d / "build.json").write_text("{}")
    fio = guest_fio.for_guest()
    assert fio.build == "debian" and fio.binary == HOST_FIO
    assert "fio-0.1" in fio.why and guest_fio.fio_version(HOST_FIO) in fio.why


def test_a_host_fio_without_a_pinned_source_gets_no_static_build(monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    v = guest_fio.host_version()
    monkeypatch.setattr(guest_fio, "KNOWN_SOURCES", {"0.1": "0" * 64})  # a host fio iolab does not know
    with pytest.raises(CapabilityMissing, match=rf"no static guest fio for fio {v}: iolab pins .*0\.1 only"):
        guest_fio.installed()
    fio = guest_fio.for_guest()
    assert fio.build == "debian" and "no static guest fio" in fio.why and fio.remedy == ""
    assert guest_fio_check(fio).state == "ok"  # nothing set-up could do better
    assert guest_fio.main([]) == 0
    assert "skipped: no static guest fio" in capsys.readouterr().out


def _real_or_fake_tarball() -> bytes:
    cached = guest_fio.root() / "sources" / f"fio_{guest_fio.host_version()}.orig.tar.gz"
    return cached.read_bytes() if cached.is_file() else gzip.compress(b"not fio" * 1000)


@pytest.mark.parametrize("damage", ["one byte flipped", "truncated"])
def test_a_tarball_that_is_not_the_pinned_one_is_refused_and_nothing_is_left(
        tmp_path: Path, damage: str) -> None:
    v = guest_fio.host_version()
    if v not in guest_fio.KNOWN_SOURCES:
        pytest.skip("no pinned source for the host's fio")
    data = bytearray(_real_or_fake_tarball())
    if damage == "truncated":
        data = data[: len(data) // 2]
    else:
        data[len(data) // 3] ^= 0x01
    bad = tmp_path / f"fio_{v}.orig.tar.gz"
    bad.write_bytes(bytes(data))
    cache = tmp_path / "cache"
    proc = subprocess.run([sys.executable, "-m", "iolab.native.guest_fio", "--source", str(bad)],
                          capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin",
                                                                            "IOLAB_CACHE": str(cache)})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert str(bad) in proc.stderr and "sha256" in proc.stderr and guest_fio.KNOWN_SOURCES[v] in proc.stderr
    assert "refused, nothing built" in proc.stderr
    assert _leftovers(cache) == []
    assert not list(cache.glob("guest-fio/sources/*"))  # a refused source is not kept either


def test_a_damaged_cached_download_is_fetched_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fetch goes to a Debian mirror on loopback (IOLAB_DEBIAN_MIRROR) serving the verified
    source set-up kept: a damaged cached copy is replaced by a checked download, and no
    temporary file is left. No test reaches beyond loopback."""
    v = guest_fio.host_version()
    if v not in guest_fio.KNOWN_SOURCES:
        pytest.skip("no pinned source for the host's fio")
    kept = guest_fio.root() / "sources" / f"fio_{v}.orig.tar.gz"
    if not kept.is_file():
        pytest.fail(f"set-up keeps the verified source at {kept}; it is missing")
    pool = tmp_path / "mirror" / "pool" / "main" / "f" / "fio"
    pool.mkdir(parents=True)
    shutil.copy(kept, pool / kept.name)
    monkeypatch.setenv("IOLAB_CACHE", str(tmp_path / "cache"))
    sources = guest_fio.root() / "sources"
    sources.mkdir(parents=True)
    (sources / kept.name).write_bytes(b"damaged")
    with _loopback_http(tmp_path / "mirror") as base:
        monkeypatch.setenv(guest_fio.MIRROR_ENV, base)
        assert guest_fio.source_url(v).startswith(base)
        got = guest_fio.fetch(v)
    assert got.parent == sources
    assert guest_fio.sha256_of(got) == guest_fio.KNOWN_SOURCES[v]
    assert sorted(p.name for p in sources.iterdir()) == [got.name]  # no .download- left


@contextlib.contextmanager
def _loopback_http(directory: Path) -> Iterator[str]:
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


COMPILERS = ("cc1", "as", "gcc", "cc", "x86_64-linux-gnu-gcc-12", "clang")  # comm of a compile under make


def test_a_build_killed_midway_leaves_nothing_the_next_build_trips_on(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The real build from the pinned source in a fresh cache, with a first builder killed
    (SIGKILL of its process group) while make compiles. make and gcc run in sessions of their own
    (core/children.py), so they outlive it and go on writing in its directory: the second build
    waits for the lock, ends them, clears the dead one's work, and leaves one finished build and
    the verified source. (Clearing the tree under the running make left one of its directories
    behind: seen once in the suite.)"""
    v = guest_fio.host_version()
    if v not in guest_fio.KNOWN_SOURCES:
        pytest.skip("no pinned source for the host's fio")
    source = guest_fio.root() / "sources" / f"fio_{v}.orig.tar.gz"
    if not source.is_file():
        pytest.fail(f"set-up keeps the verified source at {source}; it is missing")
    cache, scratch = tmp_path / "cache", tmp_path / "tmpdir"
    scratch.mkdir()  # the builders' $TMPDIR: fio's configure left its probes there when killed
    env = {"PATH": "/usr/bin:/bin", "IOLAB_CACHE": str(cache), "TMPDIR": str(scratch)}
    # niced: two whole builds (make -j on every CPU, 80-130 s) beside the parallel suite would take the
    # CPUs from the tests around them, the reproduce run's guests among them; what is tested (the kill
    # during make, the next build clearing it) does not depend on how fast make runs
    argv = ["nice", "-n", "19", sys.executable, "-m", "iolab.native.guest_fio", "--source", str(source)]
    first = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    root = cache / "guest-fio"
    deadline = time.monotonic() + 300
    # killed while a compiler runs under make: a make caught at its start died of SIGPIPE on its first
    # line (its output goes to the dead builder) before starting any, and nothing outlived the builder
    # (a stressed suite's run); a compiler that runs then goes on for its file whatever make does
    def compiling_under_make() -> bool:  # configure compiles its probes too, without a make
        comms = [{_comm(pid) for pid in guest_fio._builders_in(work)} for work in root.glob(".build-*")]
        return any("make" in c and c & set(COMPILERS) for c in comms)

    while not compiling_under_make():
        assert first.poll() is None, first.communicate()
        assert time.monotonic() < deadline, "the build never got to compiling"
        time.sleep(0.2)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    dead = list(root.glob(".build-*"))
    assert dead, "the killed build left its work (what the next build must clear)"
    assert any(guest_fio._builders_in(work) for work in dead), "make outlived its builder (what the next build ends)"
    assert not list(scratch.iterdir()), f"the killed build left files outside its own work: {list(scratch.iterdir())}"
    second = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
    assert not [pid for work in dead for pid in guest_fio._builders_in(work)], "the dead build's make still runs"
    assert second.returncode == 0, second.stdout + second.stderr
    monkeypatch.setenv("IOLAB_CACHE", str(cache))
    built = guest_fio.installed(v)
    assert _leftovers(cache) == [built.binary.parent.name]
    assert guest_fio.fio_version(built.binary) == f"fio-{v}"
    assert set(allowlist.ENGINES) <= set(guest_fio.engines_of(built.binary))
