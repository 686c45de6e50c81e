"""Every flag iolab raises reaches the reader with its measured detail and its meaning."""

from __future__ import annotations

import re
from pathlib import Path

from iolab.analysis import flags
from iolab.analysis.generic import analyze, present

SRC = Path(__file__).resolve().parents[2] / "src" / "iolab"


def raised_names() -> set[str]:
    """Every flag name the code raises: 'name: detail' strings appended to a flags list or
    returned as one (a workload's flags_of)."""
    names = set()
    for f in SRC.rglob("*.py"):
        for m in re.finditer(r'(?:flags?(?:\.append\(|\s*\+?=\s*\[)|return \[)\s*f?"([a-z_]+): ', f.read_text()):
            names.add(m.group(1))
    return names


def test_every_raised_flag_is_in_the_catalogue() -> None:
    names = raised_names()
    assert {"generator_cpu_bound", "reads_hit_page_cache", "mode_not_effective"} <= names, names
    assert names - set(flags.CATALOGUE) == set(), "flags without a meaning in analysis/flags.py"


def test_generic_report_gives_detail_meaning_and_advice() -> None:
    t = {"id": "c1-r0", "status": "ok", "error": None, "params": {"bs": 4096, "_workload": {"kind": "fio"}},
         "metrics": {"iops": 100.0}, "flags": ["generator_cpu_bound: fio used 0.98 cores for 1 process(es)"]}
    doc = {"trials": [t, {**t, "id": "c1-r1", "flags": []}], "spec": {"study": {"name": "x"}}}
    f = analyze(doc)
    [d] = f["configs"][0]["flag_details"]
    assert d == {"flag": "generator_cpu_bound", "detail": "fio used 0.98 cores for 1 process(es)", "trials": 1,
                 "of": 2, "meaning": flags.CATALOGUE["generator_cpu_bound"][0],
                 "advice": flags.CATALOGUE["generator_cpu_bound"][1]}
    _, sections = present(doc, f)
    notes = [n.text for n in sections[0].blocks[0].notes]
    assert any("bs=4096: generator_cpu_bound (1 of 2 trials): fio used 0.98 cores" in n and "what to do" in n
               for n in notes), notes
