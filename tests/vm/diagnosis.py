"""What a guest test prints when I/O in the guest fails or hangs.

Two fresh-clone CI runs each saw one guest fio time out at 120 s (an NVMe 2 MiB read in
test_vm.py; a virtio-blk 4k randrw at depth 8 in test_restore.py), neither reproduced alone: a
lost completion interrupt, a controller reset or a stuck fio show in the guest kernel's last
messages and its interrupt counts, so a failure carries them.
"""

from __future__ import annotations

from iolab.core.exec import ExecRequest, Executor


def guest_kernel_tail(executor: Executor) -> str:
    """The guest kernel's last messages and its interrupt counts, for a failure's message."""
    try:
        script = ("for d in /sys/block/*; do echo \"${d##*/} inflight $(cat $d/inflight) stat $(cat $d/stat)\"; done; "
                  "ps -o pid,stat,wchan,args 2>/dev/null || ps; dmesg | tail -60; cat /proc/interrupts")
        out = executor.run(ExecRequest(["sh", "-c", script], timeout_s=30))
        return ("guest block devices (requests in flight: a lost completion leaves them), processes, dmesg (tail) "
                "and /proc/interrupts:\n" + out.stdout[-8000:])
    except Exception as exc:  # the guest may be gone: the failure itself is the finding
        return f"guest dmesg unavailable: {exc}"
