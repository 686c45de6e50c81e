"""`iolab run jobs.fio`: an existing fio job file becomes a study with iolab's statistics."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def spec_from_jobfile(path: Path) -> dict[str, Any]:
    name = "".join(c if c.isalnum() or c in "._-" else "-" for c in path.stem)[:60] or "fio-jobfile"
    return {
        "study": {"name": name, "description": f"fio job file {path}", "repetitions": 3},
        "target": {"kind": "host"},
        "workload": {"kind": "fio-jobfile", "job_file": str(path.resolve()), "job_text": path.read_text()},
    }
