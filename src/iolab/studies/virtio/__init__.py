"""Study virtio (R1): host vs guests with virtio-blk, emulated IDE and other buses.

The same iozone-style workload runs on the host and in guests, so the study reuses
iozone's spec, analysis and presentation parts. Every guest cell is paired with the host
cell of the same run: a ratio with a 95% CI. docs/studies/virtio.md explains the findings.
"""

from iolab.studies.virtio import analysis, presentation, spec
from iolab.studies.virtio.analysis import analyze, findings
from iolab.studies.virtio.presentation import present
from iolab.studies.virtio.spec import NAME, SUMMARY, build

__all__ = ["NAME", "SUMMARY", "analysis", "analyze", "findings", "build", "present", "presentation", "spec"]
