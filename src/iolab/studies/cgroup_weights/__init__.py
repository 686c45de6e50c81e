"""Study cgroup-weights (R4): does proportional I/O sharing hold as groups grow, where does it
break, and why. N fio processes in cgroups weighted 100/200/400/800 (shuffled per trial),
kernel per-group counters as ground truth, BFQ against scheduler `none` as the negative
control, a sanity gate before each sweep (the hook), and YCSB workload A on RocksDB as a real
tenant, as R4 ran (db_bench selectable).
docs/studies/cgroup-weights.md explains every finding.
"""

from iolab.studies.cgroup_weights import analysis, hook, presentation, spec, verdicts
from iolab.studies.cgroup_weights.analysis import analyze, findings
from iolab.studies.cgroup_weights.hook import before_group
from iolab.studies.cgroup_weights.presentation import present
from iolab.studies.cgroup_weights.spec import NAME, SUMMARY, build
from iolab.studies.cgroup_weights.verdicts import study_verdicts

__all__ = ["NAME", "SUMMARY", "analysis", "analyze", "before_group", "build", "findings", "hook", "present",
           "presentation", "spec", "study_verdicts", "verdicts"]
