"""R5's memory test: a STREAM-style Copy/Scale/Add/Triad bandwidth kernel (a STREAM variant).

iolab's own C code (native/iolab_stream.c), not STREAM's source, following STREAM's rules:
double arrays each at least 4x the last-level cache, 16/16/24/24 bytes counted per element,
best (minimum) time of ntimes iterations excluding the first, MB = 10^6 bytes, and the final
array contents checked against their analytically computed values. Single-threaded.

The array size comes from the HOST's largest cache (a guest runs on the same hardware and
its virtual cache topology may be made up), so the host and every guest move the same
number of bytes.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from iolab.core.errors import TrialFailed
from iolab.core.exec import ExecRequest, ExecResult
from iolab.native import helper_for
from iolab.targets.base import Placement
from iolab.workloads.base import Workload, WorkloadParams, WorkloadResult
from iolab.workloads.sysbench_cpu import contention_flags

HELPER = "iolab_stream"
MiB = 1 << 20
CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")
FALLBACK_LLC = 32 * MiB  # when sysfs shows no cache sizes (assumed, and flagged)
KERNELS = ("copy", "scale", "add", "triad")
ELEMENT = 8  # bytes of a double
MIN_KERNEL_S = 1e-3  # a best time shorter than this is mostly timer and loop overhead
_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)\s*$", re.IGNORECASE)


def host_llc_bytes(cache_dir: Path | None = None) -> int | None:
    """The largest cache of cpu0 on the host (its last-level cache), or None if unknown."""
    sizes = []
    for f in (cache_dir or CACHE_DIR).glob("index*/size"):
        try:
            m = _SIZE.match(f.read_text())
        except OSError:
            continue
        if m:
            sizes.append(int(m.group(1)) * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2).lower()])
    return max(sizes) if sizes else None


def default_array_mib(llc: int) -> int:
    """4x the last-level cache, rounded up to whole MiB (STREAM's rule, per array)."""
    return math.ceil(4 * llc / MiB)


class StreamParams(WorkloadParams):
    """array_mib: MiB per array (three arrays); None = 4x the host's LLC. ntimes: iterations."""

    kind: Literal["stream"] = "stream"
    array_mib: int | None = Field(None, ge=1, le=64 * 1024,
                                  description="MiB per array (3 arrays); default 4x the host LLC")
    ntimes: int = Field(10, ge=2, le=100, description="iterations; the first is not counted")


class StreamWorkload(Workload):
    kind: ClassVar[str] = "stream"
    Params: ClassVar[type[WorkloadParams]] = StreamParams
    main_metric: ClassVar[str] = "triad_mb_s"
    metrics: ClassVar[tuple[str, ...]] = ("copy_mb_s", "scale_mb_s", "add_mb_s", "triad_mb_s")
    params: StreamParams

    def sizing(self) -> tuple[int, int, list[str]]:
        """(elements per array, host LLC bytes, flags) for this trial."""
        flags = []
        llc = host_llc_bytes()
        if llc is None:
            llc = FALLBACK_LLC
            flags.append(f"llc_unknown: no cache sizes in {CACHE_DIR}; assumed {FALLBACK_LLC // MiB} MiB")
        mib = self.params.array_mib or default_array_mib(llc)
        if mib * MiB < 4 * llc:
            flags.append(f"array_below_4x_llc: {mib} MiB per array, last-level cache {llc / MiB:g} MiB "
                         "(part of the traffic may be served by the cache)")
        return mib * MiB // ELEMENT, llc, flags

    def estimate_seconds(self) -> float:
        elements, _, _ = self.sizing()
        # first touch + ntimes x 80 bytes per element, at a conservative 4 GB/s
        return 1.0 + (self.params.ntimes + 1) * 80 * elements / 4e9

    def command(self, helper: str, elements: int) -> list[str]:
        return [helper, "--elements", str(elements), "--ntimes", str(self.params.ntimes)]

    def run(self, placement: Placement, timeout_s: float) -> WorkloadResult:
        elements, llc, flags = self.sizing()
        argv = self.command(helper_for(HELPER, placement), elements)
        res = placement.executor.run(ExecRequest(argv=argv, timeout_s=timeout_s))
        raw = parse(res, timeout_s, elements)
        raw["host_llc_bytes"] = llc
        metrics = {f"{k}_mb_s": float(raw["kernels"][k]["best_mb_s"]) for k in KERNELS}
        short = [k for k in KERNELS if raw["kernels"][k]["min_s"] < MIN_KERNEL_S]
        if short:
            flags.append(f"stream_kernel_too_short: best time of {', '.join(short)} below "
                         f"{MIN_KERNEL_S * 1e3:g} ms (timer overhead matters; use bigger arrays)")
        flags += contention_flags(res, 1)
        return WorkloadResult(metrics=metrics, raw=raw, job_text=shlex.join(argv), flags=flags,
                              cpu_busy=res.cpu_busy)

    def describe(self) -> list[str]:
        elements, llc, _ = self.sizing()
        mib = elements * ELEMENT // MiB
        return [f"workload stream: iolab's STREAM-style kernel (a STREAM variant, not STREAM's source), "
                f"single-threaded, 3 arrays x {mib} MiB (host LLC {llc / MiB:g} MiB), "
                f"best of {self.params.ntimes - 1} iterations after the first; needs {3 * mib} MiB of memory"]


def parse(res: ExecResult, timeout_s: float, elements: int) -> dict[str, Any]:
    """The helper's JSON, validated; TrialFailed with the reason otherwise."""
    if res.timed_out:
        raise TrialFailed(f"{HELPER} timed out after {timeout_s:g}s")
    raw: dict[str, Any] | None = None
    try:
        raw = json.loads(res.stdout)
        for k in KERNELS:
            float(raw["kernels"][k]["best_mb_s"]), float(raw["kernels"][k]["min_s"])
        ok = raw["validation"]["ok"]
    except (ValueError, KeyError, TypeError) as e:
        if res.returncode != 0:
            hint = " (killed: out of memory? it needs 3 arrays)" if res.returncode in (-9, 137) else ""
            raise TrialFailed(f"{HELPER} failed (exit {res.returncode}){hint}: {res.tail()}") from e
        raise TrialFailed(f"{HELPER} printed no valid JSON ({e}): {res.stdout[-400:]!r}") from e
    if not ok:
        raise TrialFailed(f"{HELPER} results failed validation (average relative error above "
                          f"{raw['validation'].get('epsilon')}): {raw['validation'].get('avg_rel_err')}")
    if res.returncode != 0:
        raise TrialFailed(f"{HELPER} failed (exit {res.returncode}): {res.tail()}")
    if raw.get("elements") != elements:
        raise TrialFailed(f"{HELPER} ran {raw.get('elements')} elements, asked for {elements}")
    return raw
