"""refusal() on given offers and needs: each rule both ways, the sentence it makes, and the
targets' offers computed from their parameters alone (nothing created)."""

from __future__ import annotations

from pathlib import Path

import pytest

from iolab.core import registry
from iolab.core.units import parse_size
from iolab.targets.base import Needs, TargetOffer, refusal

MiB = 1 << 20


def offer(**over: object) -> TargetOffer:
    base: dict[str, object] = {"kind": "t", "settings": "k = 1", "where": "host", "storage": frozenset({"directory"}),
                               "capacity": 100 * MiB, "inodes": 1000}
    base.update(over)
    return TargetOffer(**base)  # type: ignore[arg-type]


def test_an_empty_need_runs_on_the_host_and_in_a_guest_never_on_a_fleet() -> None:
    assert refusal(Needs(), offer()) is None
    assert refusal(Needs(), offer(where="guest")) is None
    why = refusal(Needs(), offer(where="fleet"))
    assert why == "it runs only on the host or in a guest: this target runs workloads on a fleet of fio servers"


def test_where_is_told_alone_and_each_other_need_with_why_and_remedy() -> None:
    needs = Needs(where=frozenset({"host"}), storage=frozenset({"directory"}), apps=frozenset({"x"}),
                  why={"where": "it benches the host"})
    assert refusal(needs, offer(where="guest", storage=frozenset())) == (
        "it runs only on the host (it benches the host): this target runs workloads in a guest")
    needs = Needs(storage=frozenset({"directory"}), memory=1536 * MiB, apps=frozenset({"x"}),
                  capabilities=frozenset({"network"}), why={"storage": "files", "memory": "a heap"})
    got = refusal(needs, offer(storage=frozenset({"block_device"}), memory=512 * MiB, apps=frozenset({"fio"}),
                               remedies={"storage:directory": 'set fs = "ext4"', "memory": 'memory = "{need}"',
                                         "app": "add {app}"}))
    assert got == ('it needs a directory on a filesystem (files): this target offers a raw block device; '
                   'set fs = "ext4"; it needs 1536 MiB of memory (a heap): this target gives it 512 MiB; '
                   'memory = "1536M"; it needs x: this target does not carry it; add x; it needs a network path '
                   "to the host (on the host itself: loopback): this target does not offer it")


def test_room_is_checked_in_a_filesystem_only_and_unknown_room_is_not_refused() -> None:
    needs = Needs(storage=frozenset({"directory", "block_device"}), capacity=200 * MiB, inodes=5000)
    assert "of space" in (refusal(needs, offer()) or "") and "5000 files" in (refusal(needs, offer()) or "")
    assert refusal(needs, offer(storage=frozenset({"block_device"}), capacity=64 * MiB)) is None  # fio stops at the end
    assert refusal(needs, offer(capacity=None, inodes=None)) is None


def test_a_workloads_own_check_runs_last_and_only_when_the_rest_holds() -> None:
    seen: list[TargetOffer] = []

    def check(o: TargetOffer) -> str | None:
        seen.append(o)
        return "a link points out"

    assert refusal(Needs(check=check), offer()) == "a link points out" and len(seen) == 1
    assert refusal(Needs(check=check, apps=frozenset({"y"})), offer(apps=frozenset())) == (
        "it needs y: this target does not carry it")
    assert len(seen) == 1


@pytest.mark.parametrize("table,expect", [
    ({"kind": "loop", "size": "64M"}, {"storage": {"block_device"}, "capacity": 64 * MiB, "filesystem": None}),
    ({"kind": "loop", "size": "128M", "filesystem": "ext4"}, {"storage": {"directory"}, "filesystem": "ext4"}),
    ({"kind": "cgroups", "size": "256M", "filesystem": "ext4", "data_size": "64M"},
     {"storage": {"directory", "file"}, "capabilities": {"weighted_groups", "network", "network_peer"}}),
    ({"kind": "qemu"}, {"where": "guest", "storage": {"block_device"}, "memory": 512 * MiB, "apps": {"fio", "mke2fs"},
                        "capabilities": set()}),
    ({"kind": "qemu", "guest_fs": "ext4", "guest_apps": ["ycsb"], "native_helpers": ["iolab_varmail"],
      "extra_binaries": ["/usr/bin/sysbench"], "network": "user"},
     {"storage": {"directory"}, "apps": {"fio", "mke2fs", "ycsb", "iolab_varmail", "sysbench"},
      "capabilities": {"network"}}),
    ({"kind": "qemu", "kernel": "/boot/k", "initramfs": "/boot/i"}, {"apps": None}),
    ({"kind": "fleet", "hosts": [{"name": "a", "address": "192.0.2.1", "filename": "/x"}]},
     {"where": "fleet", "storage": {"file"}, "apps": {"fio"}, "writable": ()}),
])
def test_each_target_says_what_it_offers_from_its_parameters(table: dict, expect: dict) -> None:
    cls = registry.target_class(table["kind"])
    got = cls.offer(cls.Params(**table))
    for k, v in expect.items():
        value = getattr(got, k)
        assert (set(value) if isinstance(value, frozenset) else value) == v, (k, value)
    if table.get("filesystem") == "ext4":
        reserved = parse_size(table["data_size"]) if "data_size" in table else 0
        assert 0.75 * parse_size(table["size"]) <= got.capacity + reserved <= parse_size(table["size"])


def test_a_host_directorys_offer_is_its_room_now(tmp_path: Path) -> None:
    cls = registry.target_class("host")
    got = cls.offer(cls.Params(kind="host", directory=str(tmp_path)))
    (writable,) = got.writable  # a directory iolab makes inside it at setup: not known by name before
    assert got.directory is None and writable.startswith(f"{tmp_path}/iolab-") and got.capacity and got.capacity > 0
    assert "directory" in got.summary() and str(tmp_path) in got.summary()
