"""sync-amplification's spec: a guest's known number of durable 64 KiB writes per pattern, on
raw and qcow2 images (and, in the full study, every qcow2 option and cache/aio mode that
changes the count), on the raw guest disk and in a guest ext4; the syscall and guest block
tracepoint probes on."""

from __future__ import annotations

from typing import Any

NAME = "sync-amplification"
SUMMARY = ("R3: host syncs and device flushes per guest data sync, raw vs qcow2 (+options), "
           "append/overwrite/sequential")
OPTION_KEYS = ("cluster_size", "preallocation", "lazy_refcounts", "cache", "aio", "bus")
DEFAULTS = {"bus": "virtio-blk", "cache": "none", "aio": "threads", "cluster_size": None,
            "preallocation": "off", "lazy_refcounts": False}
PATTERNS = ("append", "overwrite", "sequential")
PATTERNS_QUICK = ("append", "overwrite", "sequential")


def build(quick: bool) -> dict[str, Any]:
    count = 64 if quick else 256
    base = {"kind": "qemu", "bus": "virtio-blk", "cache": "none", "aio": "threads", "preallocation": "off",
            "lazy_refcounts": False, "disk_size": "256M" if quick else "1G", "memory": "512M",
            "prefill": False, "accel": "auto"}
    targets = []
    variants: list[tuple[str, dict[str, Any]]] = [("raw", {"format": "raw"}), ("qcow2", {"format": "qcow2"})]
    if not quick:
        variants += [
            ("qcow2-lazy", {"format": "qcow2", "lazy_refcounts": True}),
            ("qcow2-prealloc-metadata", {"format": "qcow2", "preallocation": "metadata"}),
            ("qcow2-prealloc-falloc", {"format": "qcow2", "preallocation": "falloc"}),
            ("qcow2-prealloc-full", {"format": "qcow2", "preallocation": "full"}),
            ("qcow2-cluster-64k", {"format": "qcow2", "cluster_size": "64k"}),
            ("qcow2-cluster-1M", {"format": "qcow2", "cluster_size": "1M"}),
            ("qcow2-writeback", {"format": "qcow2", "cache": "writeback"}),
            ("qcow2-unsafe", {"format": "qcow2", "cache": "unsafe"}),
            ("qcow2-directsync", {"format": "qcow2", "cache": "directsync"}),
            ("qcow2-native", {"format": "qcow2", "aio": "native"}),
            ("qcow2-io_uring", {"format": "qcow2", "aio": "io_uring"}),
            ("raw-native", {"format": "raw", "aio": "native"}),
            ("raw-io_uring", {"format": "raw", "aio": "io_uring"}),
        ]
    for name, extra in variants:
        for fs in ("none", "ext4"):
            targets.append(dict(base, **extra, name=f"{name}/{fs}", guest_fs=fs))
    return {
        "study": {"name": NAME, "analysis": NAME, "repetitions": 3, "max_repetitions": 3 if quick else 5,
                  "ci_target": 0.1, "description": SUMMARY, "probes": ["qemu_syscalls", "guest_blocktrace"]},
        "targets": targets,
        "workload": {"kind": "sync-writes", "pattern": list(PATTERNS_QUICK if quick else PATTERNS), "bs": "64k",
                     "count": count},
    }
