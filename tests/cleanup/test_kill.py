"""Kill iolab at random instants; `iolab clean` must leave nothing, and no finished trial is lost.

Two campaigns: 10 kills of a loop-device study (scratch image, loop device, ext4 mount,
BFQ scheduler and tunable claims, cgroup parent, work dir, fio) and 10 of a guest study
(scratch loop + ext4 for the image, qcow2 image, QEMU under TCG or KVM, fio in the guest).
The signals take turns (SIGKILL, SIGINT, SIGTERM, SIGHUP, ...), so each is sent at least
twice per campaign (IOLAB_KILLS=40: ten times each); a run that ends before its instant came
(a resumed run is shorter than a whole one) does not count, and the signal is drawn again.
Instants are seeded (IOLAB_KILL_SEED, printed) and drawn two ways:

* uniformly over the length of a whole run (measured by an uninterrupted warm-up run), so
  they land during setup, mid-trial and during teardown;
* inside a pending window: with IOLAB_TEST_CREATE_DELAY, iolab sleeps between a pending
  ledger entry and the creation it announces; the signal is sent when the k-th pending
  entry shows up in the ledger file (the image, losetup, mkdir, mount, a scheduler claim,
  the cgroup, a load generator, QEMU).

After each kill: `iolab clean` exits 0 (and, after SIGINT/SIGTERM/SIGHUP, finds nothing:
the run cleaned up itself); then nothing of that run is left on the machine (processes,
QEMU, loop devices, mounts, cgroups, scheduler claims, files), every trial stored before
the signal is still stored unchanged, and the next iteration resumes the same run. At the
end a --resume finishes it.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from tests.core import owned
from tests.core.helpers import IOLAB, Lab, fio_workload, needs_fio, needs_root, study_table
from tests.runner.test_concurrent_runs import _bfq_and_cgroups

# Kill instants are drawn over a run length a warm-up measured, shrunk to any run that ended before
# its instant (a neighbour that stretched the warm-up, or a resumed run): so runs beside other tests
# still take every signal, and the campaigns need not have the machine alone. They kill iolab and
# run `iolab clean`: dead_owners (tests/conftest.py).
pytestmark = [needs_root, needs_fio, pytest.mark.dead_owners]

SEED = int(os.environ.get("IOLAB_KILL_SEED", "20261123"))
# kills per campaign; IOLAB_KILLS=40 sends each of the four signals ten times (a longer run by hand)
KILLS = int(os.environ.get("IOLAB_KILLS", "10"))
SIGNALS = (signal.SIGKILL, signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
CREATE_DELAY_S = 0.25


def _loop_study() -> str:
    if _bfq_and_cgroups():
        target = ('[target]\nkind = "cgroups"\ncontroller = "bfq"\nsize = "192M"\nfilesystem = "ext4"\n'
                  'data_size = "64M"\n')
    else:
        target = '[target]\nkind = "loop"\nsize = "64M"\nfilesystem = "ext4"\nscheduler = "mq-deadline"\n'
    return study_table("kill-loop", repetitions=3, max_repetitions=3) + target + fio_workload(runtime=1)


def _guest_study() -> str:
    return (study_table("kill-guest", repetitions=2, max_repetitions=2)
            + '[target]\nkind = "qemu"\ndisk_size = "64M"\nmemory = "384M"\n'
            + fio_workload(runtime=1, size="16M"))


def _stored(lab: Lab) -> dict[tuple[str, str], tuple]:
    """Every stored trial by (run, trial): trial ids repeat across the campaign's runs (keyed by
    trial id alone, a trial the killed run stored just before the signal replaced the warm-up
    run's in the map and read as a "changed" trial: stressed run 10)."""
    return {(r[0], r[1]): tuple(r) for r in
            lab.query("SELECT run_id, trial_id, config_id, status, error, started FROM trials")}


def _pending_seen(ledger: Path, seen: set[str]) -> None:
    try:
        items = json.loads(ledger.read_text())
    except (OSError, ValueError):
        return
    seen |= {i["rid"] for i in items if i.get("state") == "pending"}


def _one_kill(lab: Lab, args: list[str], sig: int, rng: random.Random, full_run_s: float, i: int
              ) -> tuple[bool, float]:
    """Start iolab, signal it at the drawn instant, clean, check; whether the signal was sent (not
    if the run ended before the instant came: a resumed run is shorter than a whole one), and the
    seconds the run lived."""
    pending_mode = rng.random() < 0.4
    env = dict(lab.env)
    if pending_mode:
        env["IOLAB_TEST_CREATE_DELAY"] = str(CREATE_DELAY_S)
        k = rng.randint(1, 8)
        drawn = f"at pending entry #{k}"
    else:
        at = rng.uniform(0.0, full_run_s)
        drawn = f"at {at:.2f} s"
    proc = subprocess.Popen([str(IOLAB), *args], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=lab.root)
    token = owned.token_of(proc.pid)
    ledger = lab.ledger_dir / f"{token}.json"
    t0 = time.monotonic()
    seen: set[str] = set()
    sent = False
    while proc.poll() is None and time.monotonic() - t0 < 300:
        if pending_mode:
            _pending_seen(ledger, seen)
            due = len(seen) >= k
        else:
            due = time.monotonic() - t0 >= at
        if due:
            before = _stored(lab)
            proc.send_signal(sig)
            sent = True
            break
        time.sleep(0.005 if pending_mode else 0.01)
    lived = time.monotonic() - t0
    if not sent:
        before = _stored(lab)
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    label = (f"kill {i}: {signal.Signals(sig).name} {drawn} -> exit {proc.returncode}"
             + ("" if sent else " (run ended first: drawn again)"))
    print(label, flush=True)

    r = lab.iolab("clean", timeout=120)
    assert r.returncode == 0, f"{label}\n{r.stdout}{r.stderr}"
    if sig != signal.SIGKILL and sent:
        assert "nothing to clean" in r.stdout, f"{label}: the run should have cleaned up itself:\n{r.stdout}\n{err}"
    left = owned.nothing(token, lab.scratch)
    assert left == {}, f"{label}: left after `iolab clean`: {left}\n{r.stdout}"
    lab.assert_nothing_left()
    after = _stored(lab)
    lost = [t for t in before if after.get(t) != before[t]]
    assert not lost, f"{label}: finished trials lost or changed: {lost}"
    assert "Traceback" not in err or sig == signal.SIGKILL or _in_interpreter_start(err), f"{label}:\n{err}"
    assert "panicked" not in err or sig == signal.SIGKILL, f"{label}:\n{err}"
    return sent, lived


# what runs before iolab.entry installs its handlers: a SIGINT there is Python's own traceback
_BEFORE_HANDLERS = ("/bin/iolab", "/iolab/__init__.py", "/iolab/entry.py", "/iolab/core/__init__.py",
                    "/iolab/core/signals.py")


def _in_interpreter_start(err: str) -> bool:
    """A KeyboardInterrupt traceback from the interpreter's own start-up (site, the launcher, the
    few lines before iolab.entry installs its handlers; test_entry_signals.py covers the rest): no
    frame in any other iolab module, so no iolab code had run."""
    frames = re.findall(r'File "([^"]+)"', err)
    return (err.rstrip().endswith("KeyboardInterrupt") and bool(frames)
            and all("/iolab/" not in f or f.endswith(_BEFORE_HANDLERS) for f in frames))


def _campaign(lab: Lab, study: str, kills: int, warm_timeout: float) -> None:
    spec = lab.spec(study)
    t0 = time.monotonic()
    warm = lab.iolab("run", spec, timeout=warm_timeout)  # how long a whole run takes: the window for instants
    full_run_s = time.monotonic() - t0
    assert warm.returncode == 0, warm.stderr
    lab.assert_nothing_left()
    rng = random.Random(SEED)
    print(f"\nkill campaign: seed {SEED} (IOLAB_KILL_SEED), a whole run takes {full_run_s:.1f} s", flush=True)
    run_id: str | None = None
    window = full_run_s  # instants are drawn in [0, window)
    sent = 0  # a kill whose run ended before its instant does not count: the signal is sent again
    for i in range(3 * kills):
        if sent == kills:
            break
        args = ["run", "--resume", run_id] if run_id else ["run", str(spec)]
        landed, lived = _one_kill(lab, args, SIGNALS[sent % len(SIGNALS)], rng, window, i)
        sent += landed
        if not landed:  # a run this short is possible: draw within it from now on
            window = min(window, lived)
        runs = dict(lab.run_rows())
        newest = lab.query("SELECT id FROM runs ORDER BY created DESC LIMIT 1")[0][0]
        run_id = None if runs[newest] == "complete" else newest
    assert sent == kills, f"only {sent} of {kills} signals landed before their run ended"
    if run_id is not None:
        r = lab.iolab("run", "--resume", run_id, timeout=warm_timeout)
        assert r.returncode == 0, r.stderr
    doc = lab.report_json()
    assert doc["status"] == "complete", [(t["status"], t["error"]) for t in doc["trials"]]
    lab.assert_nothing_left()


def test_kill_a_loop_device_study_at_random_instants(lab: Lab) -> None:
    _campaign(lab, _loop_study(), kills=KILLS, warm_timeout=180)


@pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None, reason="needs QEMU")
def test_kill_a_guest_study_at_random_instants(lab: Lab) -> None:
    # the guest image and the KVM/TCG verdict are cached where the other VM tests keep them,
    # and made before the warm-up run, so the measured run length is that of a warm run
    lab.env.pop("IOLAB_CACHE", None)
    prime = subprocess.run([str(IOLAB.parent / "python"), "-c",
                            "from iolab.vm.guest_image import build_guest\n"
                            "from iolab.vm.accel import probe_accel\n"
                            "print(probe_accel(build_guest().kernel).accel)"],
                           env=lab.env, capture_output=True, text=True, timeout=600)
    assert prime.returncode == 0, prime.stderr
    print(f"\nguest accel: {prime.stdout.strip()}")
    _campaign(lab, _guest_study(), kills=KILLS, warm_timeout=600)
