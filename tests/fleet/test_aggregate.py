"""The fleet aggregate on given logs (pure): the common window, skew, merged histograms."""

from __future__ import annotations

import pytest

from iolab.fleet.aggregate import HostRun, Sample, aggregate, common_window, merged_percentiles, parse_log


def _stats(iops: float, bins: dict[str, int]) -> dict:
    n = sum(bins.values())
    return {"read": {"iops": iops, "bw_bytes": iops * 4096, "io_bytes": n * 4096, "total_ios": n,
                     "lat_ns": {"N": n, "mean": 1000.0}, "clat_ns": {"bins": bins}}, "job_runtime": 3000}


def _log(t0: float, n: int, value: float, step: float = 100) -> list[Sample]:
    return [Sample(t0 + step * (i + 1), value, 0) for i in range(n)]


def test_window_is_where_all_hosts_ran_and_sums_only_there() -> None:
    # host a runs 0..3000 ms at 100 IOPS; host b starts 1000 ms later at 50 IOPS and runs on
    # alone after a stopped at 500 IOPS: only samples inside [1000, 3000] may count
    a = HostRun("a", _stats(100, {"1000": 10}), iops_logs=[_log(0, 30, 100)], bw_logs=[_log(0, 30, 400)])
    b_log = _log(1000, 20, 50) + _log(3000, 10, 500)  # b runs on alone after a stopped
    b = HostRun("b", _stats(200, {"1000": 10}), iops_logs=[b_log], bw_logs=[_log(1000, 30, 200)])
    w = common_window([a, b], 100)
    assert w is not None and (w.start_ms, w.end_ms) == (1000, 3000) and w.spread_ms == 1000
    m, flags = aggregate([a, b], 100)
    assert [f.split(":")[0] for f in flags] == ["fleet_percentiles_whole_run"]  # no histogram logs given here
    assert m["read_iops"] == pytest.approx(150)  # not 100 + 200 (b's whole-run mean)
    assert m["fleet_start_spread_ms"] == 1000 and m["runtime_s"] == pytest.approx(2.0)


def test_skew_is_corrected_before_aligning() -> None:
    # b's clock is 5 s ahead: its samples carry t+5000 but it ran at the same time as a
    a = HostRun("a", _stats(100, {"1000": 1}), iops_logs=[_log(0, 20, 100)])
    b = HostRun("b", _stats(100, {"1000": 1}), iops_logs=[_log(5000, 20, 100)], skew_ms=5000)
    w = common_window([a, b], 100)
    assert w is not None and w.spread_ms == 0 and w.seconds == pytest.approx(2.0)


def test_percentiles_come_from_merged_histograms_not_averages() -> None:
    # 90 fast I/Os on one host, 10 slow on another: the fleet's p50 is fast, its p95 slow;
    # averaging the hosts' p50s would give (1+100)/2 µs, which no I/O took
    fast = {"read": {"clat_ns": {"bins": {"1000": 90}}}}
    slow = {"read": {"clat_ns": {"bins": {"100000": 10}}}}
    p = merged_percentiles([fast, slow], "read")
    assert p["read_clat_p50_us"] == 1.0 and p["read_clat_p95_us"] == 100.0


def test_no_logs_falls_back_to_whole_runs_and_says_so() -> None:
    a = HostRun("a", _stats(100, {"1000": 1}))
    m, flags = aggregate([a], 100)
    assert m["read_iops"] == 100 and flags and flags[0].startswith("fleet_window_unmeasured")


def test_parse_log_skips_garbage() -> None:
    assert parse_log("1795433382674, 15220, 0, 0, 0\nnonsense\n1, x, 0\n5, 6, 1, 4096, 0, 0\n") == [
        Sample(1795433382674.0, 15220.0, 0), Sample(5.0, 6.0, 1)]


def test_percentiles_come_from_the_histogram_logs_inside_the_common_window() -> None:
    """Host b alone after a stopped took 100 µs per I/O; inside the window both took 1 µs: the
    aggregate's p99 is 1 µs (fio's bin 1000 ns), not the whole jobs' mix."""
    from iolab.fleet.aggregate import HistSample, plat_idx_to_val, window_percentiles

    fast_idx = next(i for i in range(2000) if plat_idx_to_val(i) >= 1000)
    slow_idx = next(i for i in range(2000) if plat_idx_to_val(i) >= 100_000)
    hist = [HistSample(100.0 * (i + 1), 0, {fast_idx: 50}) for i in range(30)]
    a = HostRun("a", _stats(100, {"1000": 10}), iops_logs=[_log(0, 30, 100)], hist_logs=[hist])
    b_hist = [HistSample(1000 + 100.0 * (i + 1), 0, {fast_idx: 50}) for i in range(20)] + \
        [HistSample(3000 + 100.0 * (i + 1), 0, {slow_idx: 500}) for i in range(10)]
    b = HostRun("b", _stats(200, {"1000": 10, "100000": 5000}), iops_logs=[_log(1000, 30, 50)], hist_logs=[b_hist])
    m, flags = aggregate([a, b], 100)
    assert not flags, flags
    assert m["read_clat_p99_us"] == pytest.approx(plat_idx_to_val(fast_idx) / 1000)
    w = common_window([a, b], 100)
    assert w is not None
    assert window_percentiles([a, b], 0, w, 100)["read_clat_p99_us"] < 2
    # without histogram logs: the whole jobs' merged bins, and the flag says so
    a.hist_logs, b.hist_logs = [], []
    m, flags = aggregate([a, b], 100)
    assert m["read_clat_p99_us"] == 100.0 and flags[0].startswith("fleet_percentiles_whole_run"), flags


def test_plat_idx_to_val_matches_fio_json_bins_and_hist_log_parses() -> None:
    """fio's own mapping (stat.c): exact below 128, then 64 buckets per power of two, bucket middles."""
    from iolab.fleet.aggregate import parse_hist_log, plat_idx_to_val

    assert [plat_idx_to_val(i) for i in (0, 1, 127)] == [0, 1, 127]
    assert plat_idx_to_val(128) == 129 and plat_idx_to_val(129) == 131 and plat_idx_to_val(192) == 258
    assert plat_idx_to_val(1855) > 1.7e10  # the last bin of 1856: ~ 17 s
    line = "1795444785586, 0, 4096, " + ", ".join(["0"] * 10 + ["7"] + ["0"] * 1845)
    (s,) = parse_hist_log(line + "\ngarbage\n1, x, 3, 4\n")
    assert s.t_ms == 1795444785586 and s.ddir == 0 and s.bins == {10: 7}
