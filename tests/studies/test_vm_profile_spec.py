"""vm-profile's spec on machines iolab does not own: the --quick STREAM arrays stay small enough
for a TCG guest whatever the cache, and the full study keeps R5's 4x-LLC rule."""

from __future__ import annotations

import pytest

from iolab.core import sizing
from iolab.core.units import parse_size
from iolab.studies.vm_profile.spec import QUICK_ARRAY_MIB, build


def _stream(spec: dict) -> dict:
    (w,) = [w for w in spec["workloads"] if w["kind"] == "stream"]
    return w


@pytest.mark.parametrize(("llc", "quick_mib"), [("260M", QUICK_ARRAY_MIB), ("16M", 64)])
def test_quick_caps_the_arrays_and_sizes_the_guests_for_them(monkeypatch: pytest.MonkeyPatch, llc: str,
                                                             quick_mib: int) -> None:
    monkeypatch.setenv(sizing.FAKE_LLC_ENV, llc)
    quick = build(True)
    assert _stream(quick)["array_mib"] == quick_mib  # host and guests run the same arrays
    guest_mem = sizing.guest_memory_for(quick_mib, sizing.host_memory())
    for t in quick["targets"][1:]:
        assert parse_size(t["memory"]) == guest_mem.bytes, t
    full = build(False)
    assert "array_mib" not in _stream(full)  # the full study: 4x the LLC, bounded by memory per system
    want = sizing.guest_memory_for(-(-4 * parse_size(llc) // sizing.MiB), sizing.host_memory())
    assert parse_size(full["targets"][1]["memory"]) == want.bytes
    if llc == "260M":
        assert want.bytes > 4 * guest_mem.bytes  # the cap is what keeps --quick's guests small
