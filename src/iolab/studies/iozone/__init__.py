"""Study iozone (R1, host rows): iozone's six tests x record sizes, O_DIRECT, flush in the timing.

docs/studies/iozone.md explains the findings.
"""

from iolab.studies.iozone import analysis, presentation, spec
from iolab.studies.iozone.analysis import analyze, findings
from iolab.studies.iozone.presentation import present
from iolab.studies.iozone.spec import NAME, SUMMARY, build

__all__ = ["NAME", "SUMMARY", "analysis", "analyze", "findings", "build", "present", "presentation", "spec"]
