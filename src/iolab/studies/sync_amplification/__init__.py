"""Study sync-amplification (R3): every flush from a guest's fdatasync down to the host disk.

A guest makes a known number of 64 KiB writes, each made durable (workload `sync-writes`:
write + fdatasync for append and overwrite, O_DSYNC writes for the dd-style sequential
pattern), on the raw guest disk or a file in a guest ext4. Each trial counts
the same syncs at every layer (docs/studies/sync-amplification.md):

  guest fio (syncs)  ->  guest block layer (probe guest_disk: flushes, writes)
  ->  QEMU device (probe qmp_blockstats: flush_operations)
  ->  QEMU's host syscalls for the image (probe qemu_syscalls: fdatasync/fsync/pwrite*,
      plus io_uring flushes and qcow2 metadata trace events)
  ->  the host block device under the image (probe host_disk: writes, flushes)

Counts do not depend on CPU speed, so they hold under TCG; throughput does not. The hook
prefills the overwrite regions before any probe runs.
"""

from iolab.studies.sync_amplification import analysis, hook, presentation, spec, verdicts
from iolab.studies.sync_amplification.analysis import analyze, findings
from iolab.studies.sync_amplification.hook import before_group
from iolab.studies.sync_amplification.presentation import present
from iolab.studies.sync_amplification.spec import NAME, SUMMARY, build
from iolab.studies.sync_amplification.verdicts import study_verdicts

__all__ = ["NAME", "SUMMARY", "analysis", "analyze", "before_group", "build", "findings", "hook", "present",
           "presentation", "spec", "study_verdicts", "verdicts"]
