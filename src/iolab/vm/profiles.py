"""VM profiles: named guest configurations a study compares against the host (R5).

A profile is a set of qemu-target settings. A target table picks one with
`profile = "performance"`; any key it also sets wins over the profile's value, so a user's
own profile is a target table with a name of its own (docs/studies/vm-profile.md).
"""

from __future__ import annotations

from typing import Any

PROFILES: dict[str, dict[str, Any]] = {
    # R5's "high performance" mode: nothing between the guest and the disk but QEMU's block layer.
    "performance": {"format": "raw", "cache": "none", "aio": "io_uring"},
    # R5's "balanced" mode, disk side: the image is encrypted (qcow2 + LUKS, AES-XTS by default);
    # same cache and aio as `performance`, so the difference is the encryption (and qcow2).
    "encrypted": {"format": "qcow2", "encrypt": "luks", "cache": "none", "aio": "io_uring"},
}

DESCRIPTIONS: dict[str, str] = {
    "performance": "raw image, cache=none, aio=io_uring",
    "encrypted": "qcow2 image with LUKS encryption (key passed through an inherited pipe), cache=none, aio=io_uring",
}


def apply(values: dict[str, Any]) -> dict[str, Any]:
    """The target's values with its profile's settings filled in under the keys it did not set."""
    name = values.get("profile")
    if name is None:
        return values
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; built in: {', '.join(PROFILES)} "
                         "(or leave profile out and set the keys yourself)")
    return {**PROFILES[name], **values}
