"""The accelerator probe: the real probe on this host, its cache, and the KVM arguments.

This machine may have only TCG (a /dev/kvm whose guests fail, e.g. kvm-pvm): the real
probe is checked for a verdict that fits what it tried, whichever it is; the KVM path of
the command line (-accel kvm -cpu host) is checked on the argv itself.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from iolab.core import owner
from iolab.vm import accel
from iolab.vm.cmdline import RunFiles, VmSpec, accel_args, build_command
from iolab.vm.guest_image import host_kernel


def _argv(info: accel.AccelInfo, tmp_path: Path) -> list[str]:
    spec = VmSpec(disk=None, image=None, kernel=tmp_path / "k", initramfs=tmp_path / "i",
                  accel=info.accel, cpu=info.cpu)
    return build_command(spec, RunFiles(tmp_path))


def _after(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


@pytest.mark.parametrize("how", ["spec", "env"])
def test_forced_kvm_boots_with_cpu_host_and_tcg_without_a_cpu(how: str, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IOLAB_CACHE", str(tmp_path / "cache"))
    for wanted in ("kvm", "tcg"):
        if how == "env":
            monkeypatch.setenv("IOLAB_ACCEL", wanted)
            info = accel.choose("auto", tmp_path / "no-kernel")  # forced: no probe, no kernel needed
            assert info.reason == f"forced by IOLAB_ACCEL={wanted}"
        else:
            monkeypatch.delenv("IOLAB_ACCEL", raising=False)
            info = accel.choose(wanted, tmp_path / "no-kernel")  # type: ignore[arg-type]
            assert info.reason == "set in the spec"
        argv = _argv(info, tmp_path)
        assert _after(argv, "-accel") == wanted
        assert _after(argv, "-cpu") == ("host" if wanted == "kvm" else None)
    assert not (tmp_path / "cache").exists()  # a forced verdict is never cached


def test_accel_args_refuse_what_qemu_would_misparse() -> None:
    assert accel_args("kvm", None) == ["-accel", "kvm"]
    assert accel_args("tcg", "host") == ["-accel", "tcg"]  # -cpu host needs KVM: TCG keeps the default
    for cpu in ("host,+vmx", "host -S", ""):
        with pytest.raises(ValueError):
            accel_args("kvm", cpu)
    with pytest.raises(ValueError, match="kvm or tcg"):
        accel_args("xen", None)  # type: ignore[arg-type]


def _write(cache: Path, **data: object) -> Path:
    cache.write_text(json.dumps({"boot_id": accel.boot_id(), "accel": "kvm", "reason": "booted",
                                 "checked_at": time.time(), "cpu": "host", **data}))
    return cache


def test_the_cache_holds_for_this_boot_and_an_hour_only(tmp_path: Path) -> None:
    cache = tmp_path / "accel.json"
    got = accel.read_cache(_write(cache))
    assert got is not None and (got.accel, got.cpu) == ("kvm", "host") and got.reason == "booted (cached)"
    stale = [{"boot_id": "another-boot"}, {"checked_at": time.time() - accel.ACCEL_TTL_S - 1},
             {"checked_at": time.time() + 3600},  # from the future: the clock moved, do not trust it
             {"accel": "xen"}, {"cpu": "host,+vmx"}, {"checked_at": "soon"}, {"reason": None, "accel": None}]
    for bad in stale:
        assert accel.read_cache(_write(cache, **bad)) is None, bad
    for text in ("", "{", "[]", "null", '{"accel": "kvm"}'):
        cache.write_text(text)
        assert accel.read_cache(cache) is None, text
    assert accel.read_cache(tmp_path / "missing.json") is None


@pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None, reason="QEMU not installed")
def test_the_real_probe_gives_a_verdict_that_fits_what_it_tried(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IOLAB_CACHE", str(tmp_path))
    monkeypatch.delenv("IOLAB_ACCEL", raising=False)
    kernel = host_kernel()[0]
    info = accel.probe_accel(kernel)
    usable = os.access("/dev/kvm", os.R_OK | os.W_OK)
    if info.accel == "kvm":
        assert usable and info.cpu in accel.KVM_CPU_MODELS and "printed its first kernel line" in info.reason
    elif not usable:
        assert info.reason == "/dev/kvm missing or not accessible"
    else:  # KVM is there but no guest boots on it: each model tried is named with its failure
        assert info.cpu is None and "-cpu host:" in info.reason and "-cpu default:" in info.reason
    print(f"\naccel: {info.accel} ({info.reason})")
    again = accel.probe_accel(kernel)
    assert (again.accel, again.cpu, again.reason) == (info.accel, info.cpu, info.reason + " (cached)")
    assert not list(tmp_path.glob(".accel.json.*"))  # written through a temp file and renamed
    mine = owner.tag("accel-probe")  # the -name of this process's probe QEMUs
    assert subprocess.run(["pgrep", "-f", mine], capture_output=True, text=True).stdout == ""
