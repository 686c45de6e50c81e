"""QEMU's block layer alone, without a guest: `qemu-img bench` on an image or a device.

Under TCG every guest number includes instruction emulation, which hides the device
model; the host side of a virtual disk (format driver, cache mode, aio engine, qcow2
options) runs natively and can be measured on any machine. This workload does that.

What `qemu-img bench` does (qemu-img.c, img_bench/bench_cb, QEMU 7.2): it opens the image
with the given format, cache mode and aio engine, then keeps `depth` requests of `bs` bytes
in flight until `count` have completed. Offsets are sequential: the first request is at 0,
each next one `step` (= bs here) further, wrapping with `offset %= image size` (7.2 wraps
modulo the whole size, so an image that is not a multiple of bs could get a request past
its end: refused here). Write buffers are filled with zero bytes. The time it prints
("Run completed in X seconds.", millisecond resolution) covers the requests only: opening
the image and the flush at close are outside it, so no `end_fsync` is in the rate.

Where the image is:
* a target that offers a block device (a scratch loop device, or a `device` that passed
  iolab's data-safety guard): format raw benches that device itself; nothing is created.
* a target that offers a directory: a fresh image file of its own per trial
  (`iolab-qemu-img-bench-<random>.<format>`), created with the qcow2 options given and removed
  at the end of the trial, also when it fails or is interrupted. If iolab itself is killed,
  the file goes with the target's scratch filesystem or directory; in a directory the user
  named it stays, like fio's data file. Reads first write the whole image once (untimed,
  O_DIRECT), so they read allocated data instead of holes or unallocated qcow2 clusters.

Rates are over a fixed number of requests: they average harmonically over repetitions.
The mean latency is derived (depth / IOPS, Little's law with the queue kept full), not
measured: qemu-img bench reports only the total time.
"""

from __future__ import annotations

import re
import shutil
import time
import uuid
from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator

from iolab.core.errors import TrialFailed
from iolab.core.exec import ExecRequest, ExecResult
from iolab.core.metrics import Metric
from iolab.core.units import format_size, parse_size
from iolab.targets.base import Needs, Placement, Storage
from iolab.workloads.base import Workload, WorkloadParams, WorkloadResult, remove_own_file

MiB = float(1 << 20)
DEFAULT_SIZE = 32 << 20
MAX_BUFFER = 1 << 30  # qemu-img allocates depth x bs bytes of buffers at once
INT_MAX = (1 << 31) - 1
PREFILL_CHUNK = 1 << 20
PREFILL_DEPTH = 8
# Below this, qemu-img's millisecond clock alone moves the rate by more than 1 %.
SHORT_RUN_S = 0.1
# cache modes that open the image with O_DIRECT (QEMU's -drive cache= table): aio=native needs one
DIRECT_CACHE = ("none", "directsync")
IMAGE_PREFIX = "iolab-qemu-img-bench-"  # the trial's own image in a target's directory

_SENDING = re.compile(r"Sending (\d+) (read|write) requests, (\d+) bytes each, (\d+) in parallel "
                      r"\(starting at offset (\d+), step size (\d+)\)")
_COMPLETED = re.compile(r"Run completed in ([0-9]+(?:\.[0-9]+)?) seconds\.")


class QemuImgBenchParams(WorkloadParams):
    """count or size (total bytes, a whole number of requests) says how much work; image_size,
    preallocation, cluster_size and lazy_refcounts apply to the image a directory target gets.

    Each check that involves two keys sits on the later one (fields validate in order), so an
    error names the key to change: `workload.aio: aio = "native" needs ...`."""

    kind: Literal["qemu_img_bench"] = "qemu_img_bench"
    format: Literal["raw", "qcow2"] = "raw"
    rw: Literal["read", "write"] = "read"
    cache: Literal["none", "writeback", "writethrough", "directsync", "unsafe"] = "none"
    aio: Literal["threads", "native", "io_uring"] = "threads"
    depth: int = Field(1, ge=1, le=1024, description="requests in flight (qemu-img bench -d)")
    bs: int = Field(4096, description="bytes per request, a multiple of 512 (-s; the step -S is the same)")
    count: int | None = Field(None, ge=1, le=INT_MAX, description="requests (-c); or give size")
    size: int | None = Field(None, description=f"total bytes moved (count = size / bs); "
                                               f"default {format_size(DEFAULT_SIZE)} when count is not given")
    image_size: int | None = Field(None, description="size of the image created in a directory; "
                                                     "default count x bs (no request wraps around)")
    preallocation: Literal["off", "metadata", "falloc", "full"] = "off"
    cluster_size: int | None = Field(None, description="qcow2 only: a power of two between 512 and 2M")
    lazy_refcounts: bool = Field(False, description="qcow2 only")
    flush_interval: int = Field(0, ge=0, le=INT_MAX, description="writes only: a flush every N requests "
                                                                  "(0: none), at least depth")

    @field_validator("aio")
    @classmethod
    def _aio(cls, v: str, info: ValidationInfo) -> str:
        cache = info.data.get("cache")
        if v == "native" and cache is not None and cache not in DIRECT_CACHE:
            raise ValueError(f"aio = \"native\" needs cache.direct=on (cache = \"none\" or \"directsync\"); "
                             f"QEMU refuses it with cache = \"{cache}\"")
        return v

    @field_validator("bs", mode="before")
    @classmethod
    def _bs(cls, v: Any, info: ValidationInfo) -> int:
        n = parse_size(v)
        if n % 512 or n > (64 << 20):
            raise ValueError(f"bs must be a multiple of 512 bytes, at most 64M, got {v!r}")
        depth = info.data.get("depth")
        if depth is not None and depth * n > MAX_BUFFER:
            raise ValueError(f"depth x bs = {format_size(depth * n)}: qemu-img allocates that at once; "
                             f"at most {format_size(MAX_BUFFER)}")
        return n

    @field_validator("size", mode="before")
    @classmethod
    def _size(cls, v: Any, info: ValidationInfo) -> int | None:
        if v is None:
            return None
        n = parse_size(v)
        if info.data.get("count") is not None:
            raise ValueError("give count (requests) or size (bytes), not both")
        bs = info.data.get("bs")
        if bs is not None and n % bs:
            raise ValueError(f"size ({n}) must be a whole number of requests of bs ({bs})")
        if bs is not None and n // bs > INT_MAX:
            raise ValueError(f"size / bs = {n // bs} requests; qemu-img bench counts at most {INT_MAX}")
        return n

    @field_validator("image_size", mode="before")
    @classmethod
    def _image_size(cls, v: Any, info: ValidationInfo) -> int | None:
        if v is None:
            return None
        n = parse_size(v)
        bs = info.data.get("bs")
        if bs is not None and (n < bs or n % bs):
            raise ValueError(f"image_size ({n}) must be a whole number of requests of bs ({bs}): qemu-img 7.2 "
                             "wraps offsets modulo the image size, so a remainder would put a request past the end")
        return n

    @field_validator("preallocation")
    @classmethod
    def _preallocation(cls, v: str, info: ValidationInfo) -> str:
        if v == "metadata" and info.data.get("format") == "raw":
            raise ValueError("preallocation = \"metadata\" applies to format = \"qcow2\" only "
                             "(raw: off, falloc, full)")
        return v

    @field_validator("cluster_size", mode="before")
    @classmethod
    def _cluster(cls, v: Any, info: ValidationInfo) -> int | None:
        if v is None:
            return None
        n = parse_size(v)
        if n < 512 or n > (2 << 20) or n & (n - 1):
            raise ValueError(f"cluster_size must be a power of two between 512 and 2M, got {v!r}")
        if info.data.get("format") == "raw":
            raise ValueError("cluster_size applies to format = \"qcow2\" only")
        return n

    @field_validator("lazy_refcounts")
    @classmethod
    def _lazy(cls, v: bool, info: ValidationInfo) -> bool:
        if v and info.data.get("format") == "raw":
            raise ValueError("lazy_refcounts applies to format = \"qcow2\" only")
        return v

    @field_validator("flush_interval")
    @classmethod
    def _flush(cls, v: int, info: ValidationInfo) -> int:
        if v and info.data.get("rw") == "read":
            raise ValueError("flush_interval applies to rw = \"write\" only (qemu-img refuses it for reads)")
        depth = info.data.get("depth")
        if v and depth is not None and v < depth:
            raise ValueError(f"flush_interval ({v}) must be at least depth ({depth})")
        return v

    @property
    def requests(self) -> int:
        if self.count is not None:
            return self.count
        return self.size // self.bs if self.size is not None else max(1, DEFAULT_SIZE // self.bs)

    @property
    def total_bytes(self) -> int:
        return self.requests * self.bs

    @property
    def created_image_size(self) -> int:
        return self.image_size if self.image_size is not None else self.total_bytes

    def create_options(self) -> str:
        """qemu-img create -o (validated enums and integers only)."""
        opts = [f"preallocation={self.preallocation}"]
        if self.format == "qcow2":
            if self.cluster_size is not None:
                opts.append(f"cluster_size={self.cluster_size}")
            opts.append(f"lazy_refcounts={'on' if self.lazy_refcounts else 'off'}")
        return ",".join(opts)


class QemuImgBenchWorkload(Workload):
    """One `qemu-img bench` per trial on the target's device or on a fresh image in its directory."""

    kind: ClassVar[str] = "qemu_img_bench"
    Params: ClassVar[type[WorkloadParams]] = QemuImgBenchParams
    main_metric = "iops"
    # A fixed number of requests per trial (fixed work): rates average harmonically.
    metrics: ClassVar[tuple[Metric, ...]] = (
        Metric("iops", "IOPS", "higher", "requests / qemu-img bench's own time (open and close excluded)",
               "harmonic"),
        Metric("bw_mib_s", "MiB/s", "higher", "requests x bs / qemu-img bench's own time (2^20 bytes/s)",
               "harmonic"),
        Metric("lat_mean_us", "µs", "lower",
               "mean latency DERIVED as depth / IOPS (Little's law, queue kept full), not measured"),
        Metric("seconds", "s", "lower", "qemu-img bench's own time for all requests (millisecond resolution)"),
        Metric("requests", "requests", "neither", "requests qemu-img bench said it sent (-c)"),
        # under fio's names, so the runner's confounder checks (reads served by the page cache) apply
        Metric("{side:read|write}_bytes", "bytes", "neither", "bytes the timed requests moved (requests x bs)"),
    )

    params: QemuImgBenchParams

    @classmethod
    def needs(cls, workload: dict[str, Any]) -> Needs:
        """qemu-img on the host, on a block device itself (format raw) or a fresh image in a directory."""
        fmt = workload.get("format", "raw")
        storage: frozenset[Storage] = frozenset({"directory", "block_device"} if fmt == "raw" else {"directory"})
        return Needs(where=frozenset({"host"}), storage=storage, apps=frozenset({"qemu-img"}),
                     why={"where": "qemu-img runs on the host: it measures the host's own block layer",
                          "storage": f'format = "{fmt}" needs a filesystem to hold the image file; only format = '
                                     '"raw" benches a block device itself'})

    def estimate_seconds(self) -> float:
        p = self.params
        per_request = 2e-4 / min(p.depth, 8) + p.bs / (100 * MiB)
        prefill = p.created_image_size / (100 * MiB) if p.rw == "read" else 0.0
        return 1.0 + p.requests * per_request + prefill

    def describe(self) -> list[str]:
        p = self.params
        return [f"workload qemu_img_bench: {p.requests} sequential {p.rw}s of {format_size(p.bs)}, depth {p.depth}, "
                f"format={p.format}, cache={p.cache}, aio={p.aio} (a block device itself for raw; else a fresh "
                f"{format_size(p.created_image_size)} image per trial, -o {p.create_options()})"]

    def bench_argv(self, path: str) -> list[str]:
        """The exact qemu-img bench command line of one trial (also the manifest's job text)."""
        p = self.params
        argv = ["qemu-img", "bench", "-f", p.format, "-t", p.cache, "-i", p.aio, "-c", str(p.requests),
                "-d", str(p.depth), "-s", str(p.bs), "-S", str(p.bs), "-o", "0"]
        if p.rw == "write":
            argv.append("-w")
        if p.flush_interval:
            argv.append(f"--flush-interval={p.flush_interval}")
        return argv + [path]

    def run(self, placement: Placement, timeout_s: float) -> WorkloadResult:
        p = self.params
        if placement.executor.name != "host" or placement.fio_fleet is not None:
            raise TrialFailed("qemu_img_bench runs on the host (targets host, loop, device), not in a guest or fleet")
        if shutil.which("qemu-img") is None:
            raise TrialFailed("qemu-img not found (Debian: apt-get install qemu-utils)")
        facts: dict[str, Any] = {}
        created: str | None = None
        if placement.is_block_device and placement.path:
            if p.format != "raw":
                raise TrialFailed(f"format {p.format} needs a directory for its image file; this target offers "
                                  f"the block device {placement.path} only (format raw benches it directly)")
            path = placement.path
            image_size = _device_bytes(placement, path)
            facts.update(image="device", image_size=image_size)
        elif placement.directory:
            path = created = f"{placement.directory.rstrip('/')}/{IMAGE_PREFIX}{uuid.uuid4().hex[:12]}.{p.format}"
            image_size = p.created_image_size
            facts.update(image="file", image_size=image_size, create_options=p.create_options())
        else:
            raise TrialFailed("the target offers neither a block device nor a directory for an image")
        if p.total_bytes > image_size and image_size % p.bs:
            raise TrialFailed(f"{p.requests} requests of {p.bs} bytes wrap around the {image_size}-byte image, which "
                              f"is not a multiple of bs: qemu-img 7.2 would send a request past its end")
        facts["passes"] = p.total_bytes / image_size
        deadline = time.monotonic() + timeout_s  # creating and prefilling count against the trial's time
        try:
            if created:
                _create(placement, p, created, image_size, _left(deadline))
                if p.rw == "read":
                    facts["prefill"] = _prefill(placement, p.format, created, image_size, _left(deadline))
            argv = self.bench_argv(path)
            res = placement.executor.run(ExecRequest(argv=argv, timeout_s=_left(deadline)))
        finally:
            if created:
                remove_own_file(placement, created)
        raw = parse(res, timeout_s)
        _check_asked(raw, p)
        metrics = metrics_of(raw, p.depth)
        return WorkloadResult(metrics=metrics, raw=raw, job_text=" ".join(argv), flags=flags_of(raw, res),
                              cpu_busy=res.cpu_busy, manifest=facts, resolution=resolution_of(metrics))


def _left(deadline: float) -> float:
    """Seconds left of the trial's timeout (at least one, so a late step still reports its own failure)."""
    return max(1.0, deadline - time.monotonic())


def _device_bytes(placement: Placement, path: str) -> int:
    res = placement.executor.run(ExecRequest(argv=["blockdev", "--getsize64", path], timeout_s=30))
    out = res.stdout.strip()
    if res.returncode != 0 or not out.isdigit():
        raise TrialFailed(f"could not read the size of {path}: {res.tail()}")
    return int(out)


def _create(placement: Placement, p: QemuImgBenchParams, path: str, size: int, timeout_s: float) -> None:
    argv = ["qemu-img", "create", "-q", "-f", p.format, "-o", p.create_options(), path, str(size)]
    res = placement.executor.run(ExecRequest(argv=argv, timeout_s=timeout_s))
    if res.returncode != 0 or res.timed_out:
        raise TrialFailed(f"qemu-img create failed (exit {res.returncode}): {res.tail()}")


def _prefill(placement: Placement, fmt: str, path: str, size: int, timeout_s: float) -> dict[str, Any]:
    """Write the whole image once (O_DIRECT, untimed), so reads find allocated data: a hole or an
    unallocated qcow2 cluster reads as zeros without touching the disk."""
    chunk = PREFILL_CHUNK if size % PREFILL_CHUNK == 0 else _largest_block(size)
    argv = ["qemu-img", "bench", "-f", fmt, "-t", "none", "-i", "threads", "-w", "-c", str(size // chunk),
            "-d", str(PREFILL_DEPTH), "-s", str(chunk), "-S", str(chunk), "-o", "0", "--pattern=165", path]
    res = placement.executor.run(ExecRequest(argv=argv, timeout_s=timeout_s))
    if res.timed_out or res.returncode != 0:
        raise TrialFailed(f"prefilling the image before the read test failed (exit {res.returncode}): {res.tail()}")
    return {"bytes": size, "chunk": chunk, "command": " ".join(argv)}


def _largest_block(size: int) -> int:
    """The largest power of two up to 1 MiB that divides size (size is a multiple of 512)."""
    chunk = PREFILL_CHUNK
    while size % chunk:
        chunk //= 2
    return chunk



def parse(res: ExecResult, timeout_s: float) -> dict[str, Any]:
    """What qemu-img bench said it did and how long it took; TrialFailed with its own words otherwise."""
    if res.timed_out:
        raise TrialFailed(f"qemu-img bench did not finish within {timeout_s:.0f} s and was killed")
    if res.returncode != 0:
        raise TrialFailed(f"qemu-img bench exited with status {res.returncode}: {res.tail()}")
    sent, done = _SENDING.search(res.stdout), _COMPLETED.search(res.stdout)
    if not sent or not done:
        raise TrialFailed(f"qemu-img bench printed no result: {res.stdout[-400:]!r} {res.stderr[-400:]!r}")
    return {"requests": int(sent.group(1)), "rw": sent.group(2), "bs": int(sent.group(3)),
            "depth": int(sent.group(4)), "offset": int(sent.group(5)), "step": int(sent.group(6)),
            "seconds": float(done.group(1)), "stdout": res.stdout[-2000:]}


def _check_asked(raw: dict[str, Any], p: QemuImgBenchParams) -> None:
    """qemu-img's own account must be what was asked: the rate is computed from the request."""
    asked = {"requests": p.requests, "rw": p.rw, "bs": p.bs, "depth": p.depth, "step": p.bs}
    wrong = {k: (raw[k], v) for k, v in asked.items() if raw[k] != v}
    if wrong:
        raise TrialFailed("qemu-img bench did not run what was asked: " +
                          ", ".join(f"{k} {got} instead of {want}" for k, (got, want) in wrong.items()))


def metrics_of(raw: dict[str, Any], depth: int) -> dict[str, float]:
    seconds = raw["seconds"]
    if seconds <= 0:
        raise TrialFailed(f"qemu-img bench reported {seconds} s for {raw['requests']} requests: too short to time "
                          "(it prints milliseconds); ask for more requests")
    iops = raw["requests"] / seconds
    return {"iops": iops, "bw_mib_s": iops * raw["bs"] / MiB, "lat_mean_us": depth / iops * 1e6,
            "seconds": seconds, "requests": float(raw["requests"]),
            f"{raw['rw']}_bytes": float(raw["requests"] * raw["bs"])}


def resolution_of(metrics: dict[str, float]) -> dict[str, float]:
    """qemu-img prints its time rounded to the millisecond: the time is known to ±0.5 ms, so a
    rate over s seconds to within 0.5 ms / (s − 0.5 ms) of itself, the mean latency (derived from
    the rate) likewise."""
    rel = 0.0005 / max(metrics["seconds"] - 0.0005, 0.0005)
    return {"seconds": 0.0005} | {k: metrics[k] * rel for k in ("iops", "bw_mib_s", "lat_mean_us")}


def flags_of(raw: dict[str, Any], res: ExecResult) -> list[str]:
    """Confounders: a run too short for qemu-img's clock, or qemu-img itself out of CPU."""
    flags = []
    if raw["seconds"] < SHORT_RUN_S:
        flags.append(f"short_run: qemu-img bench took {raw['seconds']:.3f} s and prints milliseconds, so rounding "
                     f"alone moves the rate by up to {0.0005 / raw['seconds']:.1%}; ask for more requests")
    if res.cpu_busy >= 0.9:
        flags.append(f"generator_cpu_bound: qemu-img used {res.cpu_busy:.2f} cores")
    return flags
