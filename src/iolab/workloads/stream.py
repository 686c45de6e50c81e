"""R5's memory test: a STREAM-style Copy/Scale/Add/Triad bandwidth kernel (a STREAM variant).

iolab's own C code (native/iolab_stream.c), not STREAM's source, following STREAM's rules:
double arrays each at least 4x the last-level cache, 16/16/24/24 bytes counted per element,
best (minimum) time of ntimes iterations excluding the first, MB = 10^6 bytes, and the final
array contents checked against their analytically computed values. Single-threaded.

The array size comes from the HOST's largest cache (a guest runs on the same hardware and
its virtual cache topology may be made up), so the host and every guest move the same
number of bytes, unless that does not fit in the memory available where the kernel runs
(read through the executor: inside a guest, the guest's /proc/meminfo). Then the arrays
are reduced to fit and the trial is flagged with the reason (core/sizing.py): a study never
fails because a cache is large or a guest is small.
"""

from __future__ import annotations

import json
import shlex
from typing import Any, ClassVar, Literal

from pydantic import Field

from iolab.core import sizing
from iolab.core.errors import TrialFailed
from iolab.core.exec import ExecRequest, ExecResult
from iolab.core.metrics import Metric
from iolab.native import helper_for
from iolab.targets.base import Needs, Placement
from iolab.workloads.base import Workload, WorkloadParams, WorkloadResult
from iolab.workloads.sysbench_cpu import contention_flags

HELPER = "iolab_stream"
MiB = 1 << 20
KERNELS = ("copy", "scale", "add", "triad")
ELEMENT = 8  # bytes of a double
MIN_KERNEL_S = 1e-3  # a best time shorter than this is mostly timer and loop overhead


class StreamParams(WorkloadParams):
    """array_mib: MiB per array (three arrays); None = 4x the host's LLC. ntimes: iterations."""

    kind: Literal["stream"] = "stream"
    array_mib: int | None = Field(None, ge=1, le=64 * 1024,
                                  description="MiB per array (3 arrays); default 4x the host LLC. Either is "
                                              "reduced (and flagged) to fit the memory where it runs")
    ntimes: int = Field(10, ge=2, le=100, description="iterations; the first is not counted")


class StreamWorkload(Workload):
    kind: ClassVar[str] = "stream"
    Params: ClassVar[type[WorkloadParams]] = StreamParams
    main_metric = "triad_mb_s"
    # Each is the best of ntimes iterations (STREAM's rule), not a mean: aggregated arithmetically.
    metrics: ClassVar[tuple[Metric, ...]] = (
        Metric("{kernel:copy|scale|add|triad}_mb_s", "MB/s", "higher",
               "STREAM-style kernel bandwidth, best iteration (MB = 10^6 bytes)"),
    )
    params: StreamParams

    def sizing(self, mem: sizing.Memory | None = None) -> tuple[sizing.ArraySizing, list[str]]:
        """The arrays for a trial where `mem` is the memory available (None: not known yet), and
        the flags that say what the numbers may not mean because of it."""
        llc = sizing.read_llc()
        s = sizing.stream_arrays(llc, mem, self.params.array_mib)
        flags = []
        if llc.source == "assumed":
            flags.append(f"llc_unknown: no cache sizes in {sizing.CACHE_DIR}; assumed {llc.bytes // MiB} MiB")
        if s.reduced:
            flags.append(f"array_below_4x_llc: {s.reason} (part of the traffic may be served by the cache)"
                         if s.array_mib * MiB < sizing.LLC_FACTOR * llc.bytes else f"array_reduced: {s.reason}")
        elif s.array_mib * MiB < sizing.LLC_FACTOR * llc.bytes:
            flags.append(f"array_below_4x_llc: {s.array_mib} MiB per array, last-level cache {llc.bytes / MiB:g} MiB "
                         "(part of the traffic may be served by the cache)")
        return s, flags

    @classmethod
    def needs(cls, workload: dict[str, Any]) -> Needs:
        """memory bandwidth: its C helper sizes its arrays to what the machine it runs on has."""
        return Needs(apps=frozenset({HELPER}))

    def estimate_seconds(self) -> float:
        s, _ = self.sizing(sizing.host_memory())
        # first touch + ntimes x 80 bytes per element, at a conservative 4 GB/s
        return 1.0 + (self.params.ntimes + 1) * 80 * s.elements / 4e9

    def command(self, helper: str, elements: int) -> list[str]:
        return [helper, "--elements", str(elements), "--ntimes", str(self.params.ntimes)]

    def run(self, placement: Placement, timeout_s: float) -> WorkloadResult:
        mem = sizing.memory_where(placement.executor)
        try:
            size, flags = self.sizing(mem)
        except sizing.DoesNotFit as exc:
            raise TrialFailed(str(exc)) from None
        if mem is None:
            flags.append("memory_unknown: could not read /proc/meminfo where the kernel runs; "
                         "the arrays were not checked against the memory available")
        argv = self.command(helper_for(HELPER, placement), size.elements)
        res = placement.executor.run(ExecRequest(argv=argv, timeout_s=timeout_s))
        raw = parse(res, timeout_s, size.elements)
        raw["host_llc_bytes"] = size.llc.bytes
        raw["sizing"] = size.as_dict()
        metrics = {f"{k}_mb_s": float(raw["kernels"][k]["best_mb_s"]) for k in KERNELS}
        short = [k for k in KERNELS if raw["kernels"][k]["min_s"] < MIN_KERNEL_S]
        if short:
            flags.append(f"stream_kernel_too_short: best time of {', '.join(short)} below "
                         f"{MIN_KERNEL_S * 1e3:g} ms (timer overhead matters; use bigger arrays)")
        flags += contention_flags(res, 1)
        return WorkloadResult(metrics=metrics, raw=raw, job_text=shlex.join(argv), flags=flags,
                              cpu_busy=res.cpu_busy, manifest={"sizing": raw["sizing"]})

    def describe(self) -> list[str]:
        s, _ = self.sizing()
        llc = f"host LLC {s.llc.bytes / MiB:g} MiB" + ("" if s.llc.source == "sysfs" else f" ({s.llc.source})")
        return [f"workload stream: iolab's STREAM-style kernel (a STREAM variant, not STREAM's source), "
                f"single-threaded, 3 arrays x {s.array_mib} MiB ({llc}), "
                f"best of {self.params.ntimes - 1} iterations after the first; needs {3 * s.array_mib} MiB of memory "
                "where it runs, or the arrays are reduced to fit (and flagged)"]


def parse(res: ExecResult, timeout_s: float, elements: int) -> dict[str, Any]:
    """The helper's JSON, validated; TrialFailed with the reason otherwise."""
    if res.timed_out:
        raise TrialFailed(f"{HELPER} timed out after {timeout_s:g}s")
    raw: dict[str, Any]  # bound below, or TrialFailed is raised
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
