"""Study fleet-scan: the same quick fio matrix on every host of a fleet; which hosts are outliers.

docs/studies/fleet-scan.md explains the findings.
"""

from iolab.studies.fleet_scan import analysis, presentation, spec
from iolab.studies.fleet_scan.analysis import analyze, findings
from iolab.studies.fleet_scan.presentation import present
from iolab.studies.fleet_scan.spec import NAME, SUMMARY, build

__all__ = ["NAME", "SUMMARY", "analysis", "analyze", "findings", "build", "present", "presentation", "spec"]
