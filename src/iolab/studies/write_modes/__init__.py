"""Study write-modes (R2): O_SYNC, O_DIRECT, mmap and buffered writes as the block size grows.

A native helper does all four modes the same way (fio cannot express R2's mmap writes);
its o_sync and o_direct numbers are cross-checked against fio in the same run
(crosscheck.py, part of the analysis). docs/studies/write-modes.md explains the findings.
"""

from iolab.studies.write_modes import analysis, presentation, spec, verdicts
from iolab.studies.write_modes.analysis import analyze, findings
from iolab.studies.write_modes.presentation import present
from iolab.studies.write_modes.spec import NAME, SUMMARY, build
from iolab.studies.write_modes.verdicts import study_verdicts

__all__ = ["NAME", "SUMMARY", "analysis", "analyze", "build", "findings", "present", "presentation", "spec",
           "study_verdicts", "verdicts"]
