"""Results documents made up for compare tests: the shape `iolab report --format json` gives,
with every trial a real dict of metrics (so compare reads them exactly as from a run)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from iolab.core.model import config_id

Values = Callable[[np.random.Generator, int], dict[str, float]]


def document(run_id: str, configs: dict[str, tuple[dict[str, Any], Values]], rng: np.random.Generator,
             n: int = 5, study: str = "sim", environment: dict[str, Any] | None = None,
             scheduler: str = "none", failed: dict[str, int] | None = None) -> dict[str, Any]:
    """configs: {label: (workload params, values(rng, repetition) -> metrics)}; n repetitions each."""
    trials = []
    for label, (workload, values) in configs.items():
        target = {"kind": "loop", "size": 64 << 20}
        cid = config_id(target, workload)
        for r in range(n):
            trials.append({"id": f"{cid}-r{r}", "params": {"cell": label, "_target": target, "_workload": workload},
                           "repetition": r, "status": "ok", "error": None, "metrics": values(rng, r), "probes": {},
                           "flags": [], "manifest": {"target": {"queue": {"scheduler_active": scheduler}}},
                           "started": 0.0, "ended": 1.0})
        for k in range((failed or {}).get(label, 0)):
            trials.append({"id": f"{cid}-r{n + k}", "params": {"cell": label, "_target": target,
                                                                "_workload": workload},
                           "repetition": n + k, "status": "failed", "error": "fio exited with status 1",
                           "metrics": {}, "probes": {}, "flags": [], "manifest": {}, "started": 0.0, "ended": 1.0})
    env = {"hostname": "lab", "kernel": "6.1.0", "cpu_model": "cpu", "fio_version": "fio-3.33",
           "qemu_version": "QEMU 7.2", "iolab_version": "0.1.0"}
    env.update(environment or {})
    return {"run_id": run_id, "study": study, "status": "complete", "source": "test",
            "spec": {"study": {"name": study, "repetitions": 3, "max_repetitions": 10}}, "options": {},
            "environment": env, "extra": {}, "trials": trials, "findings": {}}


def fio_values(iops: float, cv: float, bs: int = 4096) -> Values:
    """The directional metrics of a randread fio trial, all from one draw of IOPS (as in fio:
    bandwidth is IOPS × bs and latency is its inverse at a fixed depth)."""
    def values(rng: np.random.Generator, _r: int) -> dict[str, float]:
        x = iops * (1 + cv * rng.standard_normal())
        lat = 1e6 / x
        return {"iops": x, "bw_mib_s": x * bs / 2**20, "read_iops": x, "read_bw_mib_s": x * bs / 2**20,
                "read_lat_mean_us": lat, "read_clat_p99_us": 3 * lat * (1 + cv * rng.standard_normal()),
                "runtime_s": 1.0, "read_ios": x}
    return values


def one_metric(name: str, level: float, cv: float) -> Values:
    def values(rng: np.random.Generator, _r: int) -> dict[str, float]:
        return {name: level * (1 + cv * rng.standard_normal())}
    return values
