"""fio's latency percentiles are histogram buckets, and iolab's resolution for them is the half
bucket fio's own numbers show (issue 24, the compare point: a one-bucket difference is no change).

Real fio, as the fio workload runs it (JSON output): every clat percentile it prints at or above
2^7 ns is the middle of a bucket 2^(msb - 6) ns wide (stat.c plat_idx_to_val with
FIO_IO_U_PLAT_BITS = 6), and fio_engine.resolution gives each percentile metric half that width.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from iolab.fio import engine as fio_engine

pytestmark = pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed")


def test_fio_prints_bucket_middles_and_the_resolution_is_half_a_bucket(tmp_path: Path) -> None:
    r = subprocess.run(["fio", "--name=p", f"--filename={tmp_path / 'f'}", "--size=4m", "--rw=randread", "--bs=4k",
                        "--ioengine=psync", "--time_based", "--runtime=1", "--output-format=json",
                        "--percentile_list=1:5:10:25:50:75:90:95:99:99.5:99.9"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    pct = data["jobs"][0]["read"]["clat_ns"]["percentile"]
    checked = 0
    for value in pct.values():
        if value < 2**7:
            continue
        msb = int(value).bit_length() - 1
        width = 2 ** (msb - fio_engine.PLAT_BITS)
        k = (value - 2**msb) / width - 0.5
        assert k == int(k) and 0 <= k < 64, (value, msb, k)  # the middle of one of the group's 64 buckets
        assert fio_engine.bucket_half_width_ns(value) == width / 2
        checked += 1
    assert checked >= 5, pct
    # the percentiles iolab keeps (p50, p95, p99, p99.9) get half their bucket as resolution, in µs
    data["jobs"][0]["read"]["clat_ns"]["percentile"] = {k: v for k, v in pct.items()
                                                        if k in fio_engine.PERCENTILES.values()}
    res = fio_engine.resolution(data)
    for name, key in fio_engine.PERCENTILES.items():
        metric = f"read_clat_{name}_us"
        if key in pct and pct[key] >= 2**7:
            assert res[metric] == pytest.approx(fio_engine.bucket_half_width_ns(pct[key]) / 1000)
            assert 1 / 256 <= res[metric] * 1000 / pct[key] <= 1 / 128
