"""fio's own example job files (Debian fio-examples): each is run or refused with a reason, none escapes.

Every examples/*.fio goes through `iolab run FILE --dry-run` (the real entry point, all in one
process: tests/core/cli_driver.py). A refused one exits 2 naming the file, the line and why; an
accepted one is read by fio itself (`fio --showcmd`) after the sandbox rendered it, and fio's
reading must name no path outside the sandbox. A sample of the accepted ones then runs for real,
with runtime and size capped, against the lab's scratch space only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tests.core.fio_oracle import escapes_sandbox, fio_view
from tests.core.helpers import REPO, Lab, drive, needs_fio, needs_root

from iolab.fio import sandbox as fio_sandbox

EXAMPLES = Path("/usr/share/doc/fio/examples")
needs_examples = pytest.mark.skipif(not EXAMPLES.is_dir(), reason="needs the fio-examples package (setup.sh)")

# What must come out for a few well-known examples (a sandbox refusing everything must fail here).
EXPECTED = {
    "fio-rand-read.fio": None, "null.fio": None, "zipf.fio": None, "tiobench-example.fio": None,
    "exec.fio": "engine 'exec' runs a program",
    "basic-verify.fio": "/dev/XXX",
    "surface-scan.fio": "fill_device",
    "aio-read.fio": "'/data1' is absolute",
    "filedelete-ioengine.fio": "deletes files",
    "netio.fio": "network",
    "zbd-rand-write.fio": "zonemode",
    "xnvme-compare.fio": "unset ${VAR}",
}
RUN_FOR_REAL = ["fio-rand-read.fio", "tiobench-example.fio", "backwards-read.fio", "iometer-file-access-server.fio"]


@needs_examples
@needs_fio
def test_every_fio_example_runs_or_is_refused_with_a_reason(lab: Lab) -> None:
    files = sorted(EXAMPLES.glob("*.fio"))
    assert len(files) > 50, "the examples are not all there"
    results = drive(lab, [["run", str(f), "--dry-run"] for f in files])
    accepted, refused = [], []
    for f, r in zip(files, results, strict=False):
        assert r["traceback"] is None and not r["hang"], f"{f.name}: {r['traceback'] or 'hang'}"
        assert "Traceback" not in r["stderr"], f"{f.name}: {r['stderr']}"
        assert r["exit"] in (0, 2), f"{f.name}: exit {r['exit']}: {r['stderr']}"
        if r["exit"] == 2:
            msg = " ".join(r["stderr"].split())
            assert f"{f}:" in msg, f"{f.name}: the message must name the file: {msg}"
            assert "refused" in msg or "does not exist" in msg or "defines no job" in msg, msg
            refused.append((f.name, msg))
            continue
        accepted.append(f.name)
        # fio's own reading of the text iolab would run names nothing outside the sandbox
        job = fio_sandbox.parse(f.read_text(), str(f))
        devices = fio_sandbox.check_paths(job)
        given = "/var/tmp/iolab-sandbox-check"
        escapes = escapes_sandbox(fio_view(job.render(given)), set(devices), (given,))
        assert escapes == [], f"{f.name}: {escapes}"
        assert devices == [], f"{f.name} writes to {devices}: the examples name devices that are not there"
    for name, want in EXPECTED.items():
        if want is None:
            assert name in accepted, f"{name} should be accepted"
        else:
            msg = dict(refused).get(name, "")
            assert want in msg, f"{name}: expected a refusal mentioning {want!r}, got {msg!r}"
    print(f"\nfio examples: {len(accepted)} accepted, {len(refused)} refused of {len(files)}")
    print("accepted: " + ", ".join(accepted))
    assert len(accepted) >= 15
    assert lab.run_rows() == [] and lab.scratch_entries() == [] and not lab.data.exists(), "a dry run creates nothing"


@needs_examples
@needs_root
@needs_fio
@pytest.mark.parametrize("name", RUN_FOR_REAL)
def test_accepted_example_runs_inside_the_scratch_space(lab: Lab, name: str) -> None:
    """A sample runs for real (1 s, 16 MiB per job): every file fio makes is in the lab's scratch dir."""
    text = (EXAMPLES / name).read_text()
    job = fio_sandbox.parse(text, name)
    names = {s.name for s, _ in job.jobs()}  # default file names start with the job name
    for _, eff in job.jobs():
        names |= set(fio_sandbox.path_names(eff["filename"])) if "filename" in eff else set()
    names = {n for n in names if not n.startswith("/")} | {f"{n}.0.0" for n in names}
    spec = lab.spec("[study]\nname = \"example\"\nrepetitions = 1\nmax_repetitions = 1\n"
                    "[target]\nkind = \"host\"\n"
                    "[workload]\nkind = \"fio-jobfile\"\n"
                    f"job_file = {json.dumps(str(EXAMPLES / name))}\njob_text = {json.dumps(text)}\n"
                    "max_runtime = \"1s\"\nmax_size = \"16M\"\n")
    before = set(os.listdir(lab.root))
    elsewhere = [Path(d) / n for d in ("/tmp", "/root", "/", str(REPO)) for n in names]
    assert not any(p.exists() for p in elsewhere), "leftovers from another run: the check below would be void"
    r = lab.iolab("run", spec, timeout=300)
    assert r.returncode == 0, r.stderr
    doc = lab.report_json()
    assert [t["status"] for t in doc["trials"]] == ["ok"], doc["trials"]
    ran = doc["trials"][0]["manifest"]["job"]
    assert f"directory={lab.scratch}/" in ran, "relative names land in the target's scratch dir"
    assert "runtime=1000ms" in ran and "size=16777216" in ran
    assert set(os.listdir(lab.root)) - before <= {"data"}, f"files appeared beside the spec: {os.listdir(lab.root)}"
    assert not any(p.exists() for p in elsewhere), [str(p) for p in elsewhere if p.exists()]
    lab.assert_nothing_left()
