"""`iolab run jobs.fio`: unsafe job files are refused line by line; a safe one runs as a study."""

from __future__ import annotations

import pytest
from tests.core.helpers import Lab, needs_fio, needs_root, one_line

REFUSED = {
    # id: (job text, line number, words the message must contain)
    "exec_prerun": ("[global]\nrw=randread\n\n[job]\nexec_prerun=touch {canary}\nsize=16M\n", 5,
                    ["exec_prerun"]),
    "exec_postrun": ("[job]\nsize=16M\nexec_postrun = touch {canary}\n", 3, ["exec_postrun"]),
    "exec_prerun_upper": ("[job]\nEXEC_PRERUN=touch {canary}\n", 2, ["exec_prerun"]),
    "external_engine": ("[job]\nioengine=external:{canary}.so\nsize=16M\n", 2, ["ioengine=external"]),
    "exec_engine": ("[job]\nioengine=exec\nprogram=touch\nsize=16M\n", 2, ["ioengine=exec"]),
    "include": ("include {canary}.fio\n[job]\nsize=16M\n", 1, ["include"]),
    "write_lat_log": ("[job]\nsize=16M\nwrite_lat_log={canary}\n", 3, ["write_lat_log"]),
}


@needs_root
@pytest.mark.parametrize("case", sorted(REFUSED))
def test_unsafe_job_file_is_refused(lab: Lab, case: str) -> None:
    text, line, words = REFUSED[case]
    canary = lab.root / "canary"
    job = lab.root / "jobs.fio"
    job.write_text(text.format(canary=canary))
    r = lab.iolab("run", job)
    msg = one_line(r.stderr)
    assert r.returncode == 2, r.stderr
    assert f"{job}:{line}:" in msg, f"the message must name the line:\n{r.stderr}"
    for w in words:
        assert w in msg, r.stderr
    assert "refused" in msg
    assert not canary.exists()
    assert lab.run_rows() == [] and lab.scratch_entries() == []


@needs_root
def test_refusal_message_does_not_dump_the_whole_job(lab: Lab) -> None:
    """The refusal is one clear sentence, not the job file echoed back as a Python dict.

    BUG (src/iolab/spec/study.py _pydantic_problems): a ValueError raised by a model
    validator carries the whole input, so the message ends with "(got {'kind': 'fio-jobfile',
    'job_file': ..., 'job_text': '...'})": the entire job file, mangled by the console markup.
    """
    job = lab.root / "jobs.fio"
    job.write_text("[global]\nrw=randread\n\n[job]\nexec_prerun=true\nsize=16M\n" + "# filler\n" * 30)
    r = lab.iolab("run", job)
    assert r.returncode == 2
    assert "job_text" not in r.stderr and "# filler" not in r.stderr, r.stderr


@needs_root
@needs_fio
def test_safe_job_file_runs_as_a_study(lab: Lab) -> None:
    job = lab.root / "small-randread.fio"
    job.write_text("; a plain fio job file\n[global]\nrw=randread\nbs=4k\nsize=16M\nruntime=1\ntime_based\n"
                   "ioengine=libaio\ndirect=1\n\n[small]\n")
    r = lab.iolab("run", job, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "report: " in r.stdout
    doc = lab.report_json()
    assert doc["study"] == "small-randread"
    assert doc["status"] == "complete"
    ok = [t for t in doc["trials"] if t["status"] == "ok"]
    # an imported job file gets the default statistics: at least 3 repetitions, adaptive up to the cap
    assert 3 <= len(ok) == len(doc["trials"]) <= 10
    assert {t["repetition"] for t in ok} == set(range(len(ok)))
    for t in ok:
        assert t["metrics"]["iops"] > 0 and t["metrics"]["read_iops"] > 0
    # the job that ran is the user's, kept in the manifest
    assert "rw=randread" in ok[0]["manifest"]["job"]
    lab.assert_nothing_left()
