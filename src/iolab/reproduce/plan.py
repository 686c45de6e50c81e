"""Which built-in study reproduces which reference study, and in which order they run.

The order puts the short studies first, so an interrupted reproduction has already
answered the most claims (and a resume starts where it stopped).
"""

from __future__ import annotations

# (reference, title, built-in study) in the order of ../shared/reference-studies.md
REFERENCES: list[tuple[str, str, str]] = [
    ("R1", "host vs VM storage, virtio-blk vs emulated", "virtio"),
    ("R2", "write modes and block size", "write-modes"),
    ("R3", "qcow2 sync amplification", "sync-amplification"),
    ("R4", "cgroup I/O weights: does proportional sharing hold?", "cgroup-weights"),
    ("R5", "two VM modes: performance vs encrypted", "vm-profile"),
]

RUN_ORDER: list[str] = ["write-modes", "cgroup-weights", "sync-amplification", "virtio", "vm-profile"]
