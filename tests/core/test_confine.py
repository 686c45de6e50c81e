"""The confinement (core/confine.py), done for real: the harm is tried and must not happen.

Every test runs real processes through the host executor inside a real trial cgroup and
tries to write what it must not: a canary loop device (standing in for the root disk)
reached through a symlink, a file on the root filesystem, a file that was in a host
directory before, a device node it makes itself. The canaries' checksums decide.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.core.canary import Canaries
from tests.core.helpers import needs_fio, needs_root

from iolab.cgroups.executor import HostExecutor
from iolab.cgroups.trial import TrialCgroup
from iolab.core import diskguard
from iolab.core.confine import NOBODY, Confinement
from iolab.core.errors import RefusedError
from iolab.core.exec import ExecRequest

pytestmark = [needs_root, pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bwrap (bubblewrap)")]



@pytest.fixture
def trial() -> Iterator[TrialCgroup]:
    cg = TrialCgroup.create(None)
    try:
        yield cg
    finally:
        cg.close()


def _executor(tmp_path: Path, confinement: Confinement, cg: TrialCgroup | None) -> HostExecutor:
    scratch = tmp_path / "scratch"
    return HostExecutor(scratch, confinement=confinement).within(cg)


def _sh(ex: HostExecutor, script: str, *args: str, timeout: float = 60) -> tuple[int, str]:
    r = ex.run(ExecRequest(["sh", "-c", script, "sh", *args], timeout_s=timeout))
    return r.returncode, r.stdout + r.stderr


@needs_fio
def test_symlinks_to_a_disk_and_to_root_files_point_at_nothing_writable(tmp_path: Path, canaries: Canaries,
                                                                         trial: TrialCgroup) -> None:
    """The three cases issue 23 confirmed for real, in their OS form: fio writes through a symlink
    at the name it opens (`j.0.0`, `f0`, `iolab-fio.dat`) to the canary disk, and to a file on the
    root filesystem. Confined, the link points at nothing writable: fio either fails on it or,
    finding no file there, replaces the link with a file of its own; the canaries never change.
    With the confinement off, the first job overwrites the canary disk (checked last)."""
    host = tmp_path / "host"
    host.mkdir()
    assert canaries.device and canaries.device.startswith("/dev/loop")
    links = {"j.0.0": canaries.device, "f0": canaries.device, "iolab-fio.dat": canaries.device,
             "etc.0.0": str(canaries.files[1])}
    jobs = {"j.0.0": "[j]\nrw=write\nsize=1m\n",
            "f0": "[g]\nrw=write\nsize=1m\nfilename_format=f$filenum\n",
            "iolab-fio.dat": "[iolab]\nrw=write\nsize=1m\nfilename=iolab-fio.dat\n",
            "etc.0.0": "[etc]\nrw=write\nsize=4k\n"}
    ex = _executor(tmp_path, Confinement(writable=(str(host),)), trial)
    try:
        for name, job in jobs.items():
            (host / name).symlink_to(links[name])
            r = ex.run(ExecRequest(["fio", f"--directory={host}", "job.fio"], timeout_s=60, files={"job.fio": job}))
            assert canaries.changed() == [], f"{name}: the confinement let fio write {canaries.changed()}"
            replaced = not (host / name).is_symlink() and (host / name).is_file()
            assert r.returncode != 0 or replaced, f"{name}: fio succeeded, so it must have written a new file"
            (host / name).unlink()
    finally:
        ex.close()
    (host / "j.0.0").symlink_to(canaries.device)
    plain = HostExecutor(tmp_path / "scratch").within(trial)
    try:
        r = plain.run(ExecRequest(["fio", f"--directory={host}", "job.fio"], timeout_s=60,
                                  files={"job.fio": jobs["j.0.0"]}))
        assert r.returncode == 0, r.stderr
        assert canaries.device in canaries.changed(), "unconfined, the symlink reaches the canary disk"
    finally:
        plain.close()


def test_root_filesystem_is_read_only_and_dev_holds_only_standard_devices(tmp_path: Path, canaries: Canaries,
                                                                          trial: TrialCgroup) -> None:
    ex = _executor(tmp_path, Confinement(), trial)
    try:
        code, out = _sh(ex, 'for f in "$@"; do echo x >> "$f" && echo "WROTE $f"; done; ls /dev; '
                            'ls /dev/loop* /dev/vda 2>&1; echo x > /dev/newfile && echo WROTE-DEV',
                        *[str(f) for f in canaries.files], "/etc/iolab-confine-test", canaries.device)
        assert "WROTE" not in out, out
        listed = set(out.split())
        assert {"null", "zero", "full", "random", "urandom", "tty"} <= listed, out
        assert not any(n.startswith(("loop", "vd", "sd", "nvme", "mem", "kmsg")) for n in listed), out
        assert not os.path.exists("/etc/iolab-confine-test")
        assert canaries.changed() == []
        code, out = _sh(ex, "echo hello > inside.txt && cat inside.txt")  # its own work dir is writable
        assert code == 0 and out.strip() == "hello", out
    finally:
        ex.close()


def test_no_mount_mknod_raw_io_realtime_priority_or_negative_nice(tmp_path: Path, canaries: Canaries,
                                                                 trial: TrialCgroup) -> None:
    """What root could do to get past the mounts: each is refused by the kernel inside."""
    work = tmp_path / "w"
    work.mkdir()
    rdev = os.stat(canaries.device).st_rdev
    ex = _executor(tmp_path, Confinement(writable=(str(work),)), trial)
    try:
        tries = {
            "mount": "mount -t tmpfs none /mnt",
            "remount": "mount -o remount,rw /",
            "umount": "umount -l /dev",
            "mknod": f"mknod {work}/disk b {os.major(rdev)} {os.minor(rdev)} && echo x > {work}/disk",
            "ionice-rt": "ionice -c 1 -n 0 true",
            "nice": "renice -n -5 -p $$",
            "chroot": "chroot / true",
            "cgroup-escape": "echo $$ > /sys/fs/cgroup/freezer/cgroup.procs",
            "sysrq": "echo h > /proc/sysrq-trigger",
            "drop-caches": "echo 1 > /proc/sys/vm/drop_caches",
        }
        for what, script in tries.items():
            code, out = _sh(ex, script)
            assert code != 0, f"{what} succeeded inside the confinement: {out}"
        code, out = _sh(ex, "grep ^CapEff /proc/self/status")
        eff = int(out.split()[1], 16)
        allowed = (1 << 1) | (1 << 2) | (1 << 3)  # DAC_OVERRIDE, DAC_READ_SEARCH, FOWNER
        assert eff & ~allowed == 0, f"effective capabilities beyond reading and writing files: {out}"
        code, out = _sh(ex, "grep ^NoNewPrivs /proc/self/status")
        assert out.split()[1] == "1", out
        assert canaries.changed() == []
    finally:
        ex.close()


def test_a_host_directory_target_writes_only_in_the_directory_it_makes_there(tmp_path: Path) -> None:
    """The `host` target, set up for real on a directory of the user's: its trials' processes can
    neither change, remove, rename over, hard-link nor *add* anything in it (an authorized_keys
    in a ~/.ssh), only write in the directory iolab made inside, which teardown removes."""
    from iolab.core.resources import Ledger
    from iolab.targets.hostdir import HostDirParams, HostDirTarget

    host = tmp_path / "host"
    (host / "sub").mkdir(parents=True)
    (host / "data.bin").write_bytes(b"user data")
    (host / "sub" / "deep.txt").write_text("deep")
    ledger = Ledger()
    target = HostDirTarget(HostDirParams(kind="host", directory=str(host)), ledger)
    placement = target.setup()
    try:
        own = Path(placement.directory or "")
        assert own.parent == host and own.name.startswith("iolab-o") and own.is_dir()
        d = str(host)
        for what, script in {
            "overwrite": f"echo x > {d}/data.bin", "append": f"echo x >> {d}/data.bin",
            "truncate": f"truncate -s 0 {d}/data.bin", "remove": f"rm -f {d}/data.bin",
            "rename-away": f"mv {d}/data.bin {d}/moved", "add": f"echo 'ssh-ed25519 AAAA x' > {d}/authorized_keys",
            "add-from-inside": f"echo x > {own}/../authorized_keys", "mkdir": f"mkdir {d}/new",
            "rename-over": f"echo n > {own}/n && mv -f {own}/n {d}/data.bin",
            "hard-link": f"ln {d}/data.bin {own}/hl && echo x >> {own}/hl",
            "deep-write": f"echo x > {d}/sub/deep.txt", "deep-new": f"echo x > {d}/sub/new.txt",
            "remove-dir": f"rm -rf {d}/sub",
        }.items():
            r = placement.executor.run(ExecRequest(["sh", "-c", script], timeout_s=60))
            assert r.returncode != 0, f"{what} succeeded in the user's directory: {r.stdout + r.stderr}"
        r = placement.executor.run(ExecRequest(["sh", "-c", f"echo mine > {own}/f && cat {own}/f"], timeout_s=60))
        assert r.returncode == 0 and r.stdout.strip() == "mine", r.stderr
    finally:
        target.teardown()
    assert (host / "data.bin").read_bytes() == b"user data" and (host / "sub" / "deep.txt").read_text() == "deep"
    assert sorted(p.name for p in host.iterdir()) == ["data.bin", "sub"], "iolab's directory went with the target"
    assert ledger.items == []


def test_a_device_iolab_did_not_make_is_visible_only_with_destroy_data(tmp_path: Path, canaries: Canaries,
                                                                       trial: TrialCgroup,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(diskguard, "_DESTROY_ALLOWED", set())
    ex = _executor(tmp_path, Confinement(), trial)
    try:
        with pytest.raises(RefusedError, match="--destroy-data"):
            ex.run(ExecRequest(["true"], timeout_s=10, devices=[canaries.device]))
        assert canaries.changed() == []
        diskguard.allow_destroy([canaries.device])
        code, out = _sh(ex, 'ls -l "$1" && head -c 4096 /dev/urandom > "$1" && echo WROTE', canaries.device)
        r = ex.run(ExecRequest(["sh", "-c", 'head -c 4096 /dev/urandom > "$0" && echo WROTE', canaries.device],
                               timeout_s=10, devices=[canaries.device]))
        assert "WROTE" in r.stdout, r.stderr
        assert canaries.device in canaries.changed(), "named with --destroy-data, the device is the trial's"
    finally:
        ex.close()


def test_confined_processes_stay_in_the_trial_cgroup_and_end_with_it(tmp_path: Path) -> None:
    """bwrap, its pid namespace and what the command forks (also a daemonised sleeper) are in the
    trial's leaf; ending the trial cgroup ends all of them, as without the confinement."""
    cg = TrialCgroup.create(None)
    ex = _executor(tmp_path, Confinement(), cg)
    try:
        running = ex.spawn(ExecRequest(["sh", "-c", "setsid sleep 300 & sleep 300 & echo started; wait"],
                                       timeout_s=600))
        deadline = time.monotonic() + 20
        while len(cg.pids()) < 4 and time.monotonic() < deadline:  # bwrap, its init, sh, the sleepers
            time.sleep(0.05)
        pids = cg.pids()
        names = {_comm(p) for p in pids}
        assert {"bwrap", "sh", "sleep"} <= names, names
        for pid in pids:
            assert f":/{cg.name}/s-" in Path(f"/proc/{pid}/cgroup").read_text()
        cg.kill()
        assert cg.pids() == []
        res = running.wait()
        assert res.returncode != 0
        # a zombie waits for init to reap it; a killed process on a loaded machine takes a moment to exit
        deadline = time.monotonic() + 30
        while (alive := [(p, _comm(p)) for p in pids if _state(p) not in ("", "Z")]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert alive == [], alive
    finally:
        cg.close()
        ex.close()


def test_own_dir_only_runs_as_nobody_and_writes_only_its_directory(tmp_path: Path, canaries: Canaries,
                                                                   trial: TrialCgroup) -> None:
    """The mode for a process a remote party can steer (the fleet's fio --client)."""
    own = Path(tempfile.mkdtemp(prefix="iolab-confine-client-", dir="/var/tmp"))  # reachable by nobody
    os.chown(own, NOBODY, NOBODY)
    conf = Confinement.own_dir_only(str(own))
    ex = _executor(tmp_path, conf, trial)
    os.chmod(ex.workdir, 0o755)
    try:
        code, out = _sh(ex, 'id -u; echo ok > "$1/mine" && echo OWN; cat /etc/shadow 2>&1 | head -c 40; '
                            'ls /root 2>&1; for f in "$2" "$3"; do echo x >> "$f" && echo "WROTE $f"; done; '
                            "grep ^CapEff /proc/self/status", str(own), str(canaries.files[0]), canaries.device)
        assert out.split()[0] == str(NOBODY), out
        assert "OWN" in out and (own / "mine").read_text() == "ok\n"
        assert "WROTE" not in out and "root:" not in out, out
        assert "CapEff:\t0000000000000000" in out, out
        assert canaries.changed() == []
    finally:
        ex.close()
        shutil.rmtree(own, ignore_errors=True)


def test_own_dir_only_with_the_executors_work_dir(tmp_path: Path, canaries: Canaries, trial: TrialCgroup) -> None:
    """How the fleet client is meant to call it: HostExecutor(..., confinement=Confinement.own_dir_only());
    the work dir becomes the unprivileged user's, job files written there are readable, results collected."""
    parent = Path(tempfile.mkdtemp(prefix="iolab-confine-parent-", dir="/var/tmp"))
    os.chmod(parent, 0o755)
    ex = HostExecutor(parent, confinement=Confinement.own_dir_only()).within(trial)
    try:
        assert os.stat(ex.workdir).st_uid == NOBODY
        r = ex.run(ExecRequest(["sh", "-c", 'cat job.txt > result.txt; id -u >> result.txt; echo x >> "$0" || true',
                                str(canaries.files[0])], timeout_s=30, files={"job.txt": "job\n"},
                               collect=["result.txt"]))
        assert r.collected["result.txt"] == f"job\n{NOBODY}\n", (r.collected, r.stderr)
        assert canaries.changed() == []
    finally:
        ex.close()
        shutil.rmtree(parent, ignore_errors=True)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def test_the_plan_names_what_a_trial_can_write(tmp_path: Path) -> None:
    host = tmp_path / "h"
    host.mkdir()
    lines = Confinement(writable=(str(host),)).describe()
    assert f"can write {host}" in lines and "no network; no unix sockets" in lines[-1], lines
    assert "unix sockets" not in Confinement(unix_sockets=True).describe()[-1]
    assert subprocess.run(["bwrap", "--version"], capture_output=True).returncode == 0


@needs_fio
def test_a_trial_cannot_reach_a_unix_socket_on_the_host(tmp_path: Path, trial: TrialCgroup) -> None:
    """A read-only root does not stop connect(): a socket file answers a confined uid 0 unless the
    kernel refuses the socket itself (core/socketfilter.py). The harm, for real: fio's net engine
    over a unix socket (the attack a job file would make if the check missed `ioengine=net`) and a
    plain connect() to a listener of the test's own. Neither reaches it; a confinement that may
    make unix sockets (QEMU's, the fleet client's) does, so the listener would notice. socketpair()
    and an inet socket in the private network namespace still work."""
    import socket

    path = str(tmp_path / "canary.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(8)
    listener.settimeout(0.5)
    os.chmod(path, 0o777)
    connect = ("import socket, sys\na, b = socket.socketpair(); a.send(b'x'); assert b.recv(1) == b'x'\n"
               "socket.socket(socket.AF_INET).bind(('127.0.0.1', 0))\n"
               "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.send(b'reached'); print('CONNECTED')\n")
    fio_job = f"[j]\nioengine=net\nprotocol=unix\nfilename={path}\nrw=write\nbs=16\nsize=64\n"

    def accepted() -> list[bytes]:
        got = []
        while True:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                return got
            with conn:
                conn.settimeout(2)
                try:
                    got.append(conn.recv(64))
                except TimeoutError:
                    got.append(b"")

    try:
        for unix_sockets in (False, True):
            ex = _executor(tmp_path, Confinement(unix_sockets=unix_sockets), trial)
            try:
                py = ex.run(ExecRequest(["python3", "-c", connect, path], timeout_s=60))
                fio = ex.run(ExecRequest(["fio", "job.fio"], timeout_s=60, files={"job.fio": fio_job}))
            finally:
                ex.close()
            got = accepted()
            if unix_sockets:  # the control: the same programs do reach it when allowed
                assert "CONNECTED" in py.stdout and b"reached" in got, (py.stdout + py.stderr, got)
                assert len(got) >= 2, f"fio's net engine should have connected too: {fio.stderr}"
            else:
                assert got == [], f"a confined trial reached the host's socket: {got}"
                assert "Permission denied" in py.stderr and "CONNECTED" not in py.stdout, py.stdout + py.stderr
                assert fio.returncode != 0, fio.stdout
    finally:
        listener.close()
