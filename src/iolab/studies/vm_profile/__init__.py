"""Study vm-profile (R5): CPU, memory, disk and network of guests per VM profile, host as baseline.

Every system runs the same workloads: prime counting and sysbench cpu (CPU), a STREAM-style
kernel (memory), fio 4 KiB patterns (disk) and iperf3 TCP (network). The host is a scratch
loop device with ext4 (disk) and its loopback (network); each profile is a guest whose test
disk carries ext4 the same way. Each guest metric gets a ratio to the host's with a 95% CI.
docs/studies/vm-profile.md explains the findings.
"""

from iolab.studies.vm_profile import analysis, presentation, spec
from iolab.studies.vm_profile.analysis import analyze, findings
from iolab.studies.vm_profile.presentation import present
from iolab.studies.vm_profile.spec import NAME, SUMMARY, build

__all__ = ["NAME", "SUMMARY", "analysis", "analyze", "findings", "build", "present", "presentation", "spec"]
