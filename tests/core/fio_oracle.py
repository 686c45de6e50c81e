"""fio's own reading of a job file, as an oracle for the job-file sandbox.

`fio --showcmd FILE` parses a job file with fio's parser (sections, includes, ${VAR},
$-keywords and bc, comments, option matching) and prints each job as the command line
that would define it, without running anything. The sandbox tests compare that view with
the sandbox's own, so "iolab reads the file as fio does" is checked against fio itself.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Mapping

from iolab.fio import allowlist as allow
from iolab.fio import sandbox as fio_sandbox

PATH_OPTIONS = {"filename", "directory", "filename_format", "opendir", "write_iolog", "write_bw_log",
                "write_lat_log", "write_iops_log", "write_hist_log", "read_iolog", "replay_redirect",
                "merge_blktrace_file", "exec_prerun", "exec_postrun", "ioscheduler", "cgroup"}


def fio_view(job_text: str, env: Mapping[str, str] | None = None) -> list[tuple[str, str, str | None]]:
    """[(section, option, value)] as fio reads the text; section '' is the global part.

    Values are stripped of surrounding blanks (fio keeps them for some options, iolab never
    writes them). Raises AssertionError when fio cannot parse the text (fio refuses `rw = write`,
    whose value starts with a blank; iolab renders it as rw=write).
    """
    with tempfile.NamedTemporaryFile("w", suffix=".fio", delete=False) as f:
        f.write(job_text)
        path = f.name
    try:
        run_env = dict(os.environ if env is None else env)
        res = subprocess.run(["fio", "--showcmd", path], capture_output=True, text=True, env=run_env, timeout=30)
    finally:
        os.unlink(path)
    line = next((ln for ln in res.stdout.splitlines() if ln.startswith("fio")), None)
    failed = any(w in res.stdout + res.stderr for w in ("failed parsing", "dropped", "Bad option", "valid values"))
    assert line is not None and not failed, f"fio could not parse the job:\n{res.stdout}\n{res.stderr}\n---\n{job_text}"
    out: list[tuple[str, str, str | None]] = []
    section = ""
    for token in line.split(" --")[1:]:
        name, eq, value = token.partition("=")
        name = name.strip()
        if name == "name":
            section = value.strip()
            continue
        out.append((section, name, value.strip() if eq else None))
    return out


def escapes_sandbox(view: list[tuple[str, str, str | None]], devices: set[str],
                    directories: tuple[str, ...] = ()) -> list[str]:
    """Everything in fio's view of a job that the sandbox must never let through.

    `directories`: the directory iolab itself gives the job (rendered as directory=...)."""
    bad = []
    allowed_devices = devices | {"/dev/null", "/dev/zero"}
    for section, name, value in view:
        if allow.lookup(name) is None:
            bad.append(f"[{section}] {name}: not an allowed option")
            continue
        if name == "ioengine" and value not in allow.ENGINES:
            bad.append(f"[{section}] ioengine={value}")
        if name == "rw" and value and value.split(":")[0] in allow.REFUSED_RW:
            bad.append(f"[{section}] rw={value}")
        if name in PATH_OPTIONS and value:
            parts = value.split(":") if name in ("filename", "directory") else [value]
            for p in filter(None, parts):
                if name == "directory" and p in directories:
                    continue
                if p.startswith("/") and not (name == "filename" and p in allowed_devices):
                    bad.append(f"[{section}] {name}={p}: absolute")
                if ".." in p.split("/") or "$" in re.sub(r"\$(jobname|jobnum|filenum|clientuid)", "", p, flags=re.I):
                    bad.append(f"[{section}] {name}={p}: escapes")
    for section, _name, _value in view:
        if section and not fio_sandbox._NAME.match(section):
            bad.append(f"job name {section!r}")
    return bad


def normalised(view: list[tuple[str, str, str | None]]) -> list[tuple[str, str, str | None]]:
    """Order-free form (fio sorts options by priority, with an unstable sort)."""
    canon = [(s, allow.ALIASES.get(n, n), v) for s, n, v in view]
    return sorted(canon, key=lambda t: (t[0], t[1], t[2] or ""))
