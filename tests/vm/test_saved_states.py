"""The saved-state cache (vm/saved_states.py) against the real file system, real locks and real
processes: one writer per key when two runs want the same state at once, nothing half written
after a kill, a reader unharmed by eviction, the size bound, the key covering every input."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest

from iolab.core.errors import InputError
from iolab.core.resources import Ledger, clean_orphans
from iolab.vm import restore, saved_states
from iolab.vm.cmdline import NetSpec, VmSpec
from iolab.vm.disk import DiskSpec
from iolab.vm.errors import VmError

MiB = 1 << 20


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("IOLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("IOLAB_DATA", str(tmp_path / "data"))
    monkeypatch.delenv(saved_states.MAX_ENV, raising=False)
    return tmp_path / "cache"


def _maker(payload: bytes, delay: float = 0.0):
    def make(out: Path) -> dict:
        time.sleep(delay)
        out.write_bytes(payload)
        return {"made_by": os.getpid()}
    return make


# A separate process asking for a state: it writes its payload slowly and records that it made it.
CHILD = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from iolab.core.resources import Ledger
    from iolab.vm import saved_states
    key, log, delay, mode = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    def make(out):
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\\n")
        with open(out, "wb") as f:
            f.write(b"A" * (1 << 20))
            f.flush()
            if mode == "hang":
                print("writing", flush=True)
                time.sleep(3600)
            time.sleep(delay)
            f.write(b"B" * (1 << 20))
        return {}
    state, made = saved_states.obtain(key, {"k": key}, make, Ledger(), wait_s=60)
    print(f"{made} {state.path.stat().st_size}", flush=True)
""")


def _child(key: str, log: Path, delay: float, mode: str = "normal") -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", CHILD, key, str(log), str(delay), mode],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())


def test_two_runs_at_once_make_one_state_and_both_read_it_whole(cache: Path, tmp_path: Path) -> None:
    log = tmp_path / "makers.log"
    procs = [_child("k" * 24, log, 1.5) for _ in range(2)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1] for o in outs]
    assert len(log.read_text().split()) == 1, "both processes made the state"
    results = sorted(o[0].split()[0] for o in outs)
    assert results == ["False", "True"]
    assert {o[0].split()[1] for o in outs} == {str(2 * MiB)}, "a reader saw a half-written state"


def test_a_writer_killed_mid_state_leaves_no_state_and_its_leftovers_are_cleaned(cache: Path, tmp_path: Path) -> None:
    key = "d" * 24
    p = _child(key, tmp_path / "log", 0, "hang")
    assert p.stdout is not None and p.stdout.readline().strip() == "writing"
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert saved_states.lookup(key) is None
    root = saved_states.states_dir()
    assert not (root / key).exists()
    tmp = [d for d in root.iterdir() if d.name.startswith(".tmp-")]
    assert len(tmp) == 1, "the half-written state should be in its temporary directory"
    # the dead writer's ledger names the temporary directory: `iolab clean` removes it
    cleaned, errors = clean_orphans()
    assert not errors and not tmp[0].exists(), cleaned
    # and the lock died with the writer: the next run makes the state at once
    t0 = time.monotonic()
    state, made = saved_states.obtain(key, {"k": key}, _maker(b"x" * 100), Ledger(), wait_s=5)
    assert made and state.path.read_bytes() == b"x" * 100 and time.monotonic() - t0 < 5


def test_prune_removes_dead_writers_temporary_directories(cache: Path) -> None:
    root = saved_states.states_dir()
    p = subprocess.Popen(["true"])  # a pid that is gone below
    p.wait()
    (root / f".tmp-{'e' * 24}-{p.pid}-abcd").mkdir(parents=True)
    (root / f".tmp-{'f' * 24}-{os.getpid()}-abcd").mkdir()  # a live writer's: kept
    removed = saved_states.prune(limit=0)
    assert any(f".tmp-{'e' * 24}" in r for r in removed)
    assert (root / f".tmp-{'f' * 24}-{os.getpid()}-abcd").exists()


def test_a_reader_keeps_its_state_when_it_is_evicted(cache: Path) -> None:
    state, _ = saved_states.obtain("a" * 24, {}, _maker(b"s" * MiB), Ledger(), wait_s=5)
    fd = state.open()
    try:
        assert saved_states.discard(state.key)
        assert saved_states.lookup(state.key) is None
        with os.fdopen(os.dup(fd), "rb") as fh:
            assert fh.read() == b"s" * MiB
    finally:
        os.close(fd)
    with pytest.raises(FileNotFoundError):
        state.open()


def test_the_cache_is_bounded_least_recently_used_first(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = [c * 24 for c in "1234"]
    for i, k in enumerate(keys):
        saved_states.obtain(k, {}, _maker(b"z" * MiB), Ledger(), wait_s=5)
        os.utime(saved_states.states_dir() / k / saved_states.META_FILE, (1000 + i, 1000 + i))
    saved_states.lookup(keys[0])  # used now: the most recent
    monkeypatch.setenv(saved_states.MAX_ENV, str(int(2.5 * MiB)))
    removed = saved_states.prune()
    left = {s.key for s in saved_states.states()}
    assert left == {keys[0], keys[3]}, removed
    # the newest state stays even when it alone is over the bound; a kept key is never removed
    saved_states.prune(keep=keys[3], limit=1)
    assert {s.key for s in saved_states.states()} == {keys[0], keys[3]}
    saved_states.prune(limit=1)
    assert {s.key for s in saved_states.states()} == {keys[0]}


def test_a_state_being_remade_is_not_evicted(cache: Path) -> None:
    for k in ("5" * 24, "6" * 24):
        saved_states.obtain(k, {}, _maker(b"z" * MiB), Ledger(), wait_s=5)
    os.utime(saved_states.states_dir() / ("5" * 24) / saved_states.META_FILE, (1000, 1000))
    fd = saved_states._try_lock(saved_states.states_dir() / f"{'5' * 24}.lock")
    assert fd is not None
    try:
        saved_states.prune(limit=1)
        assert saved_states.lookup("5" * 24) is not None
    finally:
        os.close(fd)


def test_a_bad_bound_is_an_input_error_naming_the_variable(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(saved_states.MAX_ENV, "lots")
    with pytest.raises(InputError, match=saved_states.MAX_ENV):
        saved_states.max_bytes()
    monkeypatch.setenv(saved_states.MAX_ENV, "512M")
    assert saved_states.max_bytes() == 512 * MiB


def test_a_failing_maker_leaves_nothing(cache: Path) -> None:
    def make(out: Path) -> dict:
        out.write_bytes(b"half")
        raise RuntimeError("QEMU died")
    ledger = Ledger()
    with pytest.raises(RuntimeError):
        saved_states.obtain("9" * 24, {}, make, ledger, wait_s=5)
    assert saved_states.lookup("9" * 24) is None
    assert [d.name for d in saved_states.states_dir().iterdir() if not d.name.endswith(".lock")] == []
    assert ledger.items == []


def test_an_unsupported_shape_is_not_tried_again(cache: Path) -> None:
    saved_states.mark_unsupported("7" * 24, "agent too old")
    calls = []
    with pytest.raises(saved_states.StateUnsupported, match="agent too old"):
        saved_states.obtain("7" * 24, {}, lambda out: calls.append(out) or {}, Ledger(), wait_s=5)
    assert calls == []


# ---------------------------------------------------------------- the key


def _spec(tmp_path: Path, **kw: object) -> VmSpec:
    kernel, initrd = tmp_path / "vmlinuz", tmp_path / "initrd"
    if not kernel.exists():
        kernel.write_bytes(b"kernel")
        initrd.write_bytes(b"initrd")
    base = VmSpec(disk=DiskSpec(size=64 * MiB), image=tmp_path / "disk.raw", kernel=kernel, initramfs=initrd,
                  memory_mb=512, vcpus=1, accel="tcg", tag="iolab-test-a", module_groups=("virtio-blk",))
    return replace(base, **kw)  # type: ignore[arg-type]


@pytest.mark.skipif(not Path("/usr/bin/qemu-system-x86_64").exists(), reason="QEMU not installed")
def test_the_key_covers_what_the_state_depends_on_and_nothing_per_run(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    key = lambda spec, digest=None: saved_states.key_of(restore.state_material(spec, digest))  # noqa: E731
    base = _spec(tmp_path)
    k0 = key(base)
    # per-run and per-trial facts do not split the cache: one state serves every hot-pluggable bus
    same = [_spec(tmp_path, tag="iolab-other"), _spec(tmp_path, image=tmp_path / "other.qcow2"),
            _spec(tmp_path, disk=DiskSpec(size=128 * MiB, bus="nvme", cache="writeback")),
            _spec(tmp_path, disk=DiskSpec(size=MiB, bus="virtio-scsi", iothread=True), module_groups=("virtio-scsi",))]
    assert {key(s) for s in same} == {k0}
    assert key(_spec(tmp_path, net=NetSpec(((1234, 5201),)))) == key(_spec(tmp_path, net=NetSpec(((999, 5201),))))
    # what the saved guest is made of does
    different = [_spec(tmp_path, memory_mb=1024), _spec(tmp_path, vcpus=2), _spec(tmp_path, accel="kvm", cpu="host"),
                 _spec(tmp_path, net=NetSpec()), _spec(tmp_path, disk=None, module_groups=("net",))]
    keys = [key(s) for s in different]
    assert k0 not in keys and len(set(keys)) == len(keys)
    assert key(base, "digest-a") != key(base, "digest-b") != k0
    (tmp_path / "vmlinuz").write_bytes(b"another kernel")
    k_kernel = key(base)
    (tmp_path / "initrd").write_bytes(b"another initramfs")
    assert len({k0, k_kernel, key(base)}) == 3
    # another QEMU binary (and version) is another key
    fake = tmp_path / "bin" / "qemu-system-x86_64"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'QEMU emulator version 99.0.0'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    assert restore.qemu_identity()["version"] == "99.0.0"
    assert key(base) not in {k0, k_kernel}


def test_doctor_says_whether_restore_works(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from iolab.doctor import restore_check

    now = time.time()
    empty = restore_check(saved_states.status(), now)
    assert empty.state == "ok" and "0 saved guest state(s)" in empty.detail and "none restored yet" in empty.detail
    saved_states.obtain("b" * 24, {}, _maker(b"z" * MiB), Ledger(), wait_s=5)
    saved_states.record_outcome("b" * 24, None)
    worked = restore_check(saved_states.status(), now)
    assert worked.state == "ok" and "1 saved guest state(s), 1 MB" in worked.detail and "worked" in worked.detail
    saved_states.record_outcome("b" * 24, "restoring saved state bbbb failed: load of migration failed")
    failed = restore_check(saved_states.status(), now)
    assert failed.state == "warn" and "load of migration failed" in failed.detail
    tight = restore_check({**saved_states.status(), "last": None, "free": 100 * MiB}, now)
    assert tight.state == "warn" and "IOLAB_CACHE" in tight.detail
    monkeypatch.setenv(saved_states.MAX_ENV, "-3")
    bad = restore_check(saved_states.status(), now)
    assert bad.state == "fail" and saved_states.MAX_ENV in bad.detail


def test_the_base_guest_is_the_shape_without_its_disk(tmp_path: Path) -> None:
    spec = _spec(tmp_path, net=NetSpec(((1234, 5201),)), module_groups=("nvme", "ext4", "net"))
    base = restore.base_spec(spec)
    assert base.disk is None and base.image is None and base.secret is None
    assert base.module_groups == (*restore.BASE_GROUPS, "net") and base.net == NetSpec()
    assert restore.restored_spec(spec).net == spec.net and restore.restored_spec(spec).tag == spec.tag
    peer = _spec(tmp_path, disk=None, module_groups=("net",), net=NetSpec(((99, 5201),)))
    assert restore.base_spec(peer).module_groups == ("net",)
    assert restore.restore_problem(_spec(tmp_path, disk=DiskSpec(size=MiB, bus="ahci")), "auto") is not None
    assert restore.restore_problem(spec, "cold") is not None and restore.restore_problem(spec, "auto") is None


def test_a_failed_restore_is_summed_up_with_qemus_own_words() -> None:
    exc = VmError("guest iolab-x did not come up: QEMU exited before its QMP socket answered\n"
                  "QEMU exited with status 1\nQEMU stderr:\nqemu-system-x86_64: Unknown savevm section type 0\n"
                  "qemu-system-x86_64: load of migration failed: Invalid argument\n"
                  "guest console tail:\n(empty)")
    text = restore._summary(exc)
    assert text.startswith("guest iolab-x did not come up") and "load of migration failed: Invalid argument" in text
