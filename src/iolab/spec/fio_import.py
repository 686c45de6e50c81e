"""`iolab run jobs.fio`: an existing fio job file becomes a study with iolab's statistics.

The file was read by `spec.study.load_spec_file` (a regular file, at most 1 MiB, UTF-8);
the `fio-jobfile` workload checks it against the job-file sandbox (fio/sandbox.py)
when the spec is validated, so a refused file exits 2 before anything is created.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def spec_from_jobfile(path: Path, text: str) -> dict[str, Any]:
    name = "".join(c if (c.isascii() and c.isalnum()) or c in "._-" else "-" for c in path.stem)
    name = name.lstrip("._-")[:60] or "fio-jobfile"
    return {
        "study": {"name": name, "description": f"fio job file {path.name}", "repetitions": 3},
        "target": {"kind": "host"},
        "workload": {"kind": "fio-jobfile", "job_file": os.path.abspath(path), "job_text": text},
    }
