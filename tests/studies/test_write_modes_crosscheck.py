"""The write-modes cross-check on stored-shape data: its verdict follows the ratio's interval,
and its reason names the measured cause (the issue's case: helper 3.25 MiB/s appending,
fio 11.0 MiB/s overwriting a laid-out file)."""

from __future__ import annotations

from typing import Any

from iolab.studies.write_modes.crosscheck import crosscheck, verdict

MiB = 1 << 20


def _helper(mode: str, bs: int, mib_s: float, commits: int, calls: int = 512) -> dict[str, Any]:
    return {"id": f"helper{mode}{bs}-r0", "params": {"_workload": {"kind": "writemode", "mode": mode, "bs": bs}},
            "status": "ok",
            "metrics": {"throughput_mib_s": mib_s, "calls": calls},
            "probes": {"fs_journal": {"commits": commits}, "host_disk": {"flushes": commits}}, "flags": []}


def _fio(mode: str, bs: int, mib_s: float, commits: int, before: int, ios: int = 512,
         flags: list[str] | None = None) -> dict[str, Any]:
    return {"id": f"fio{mode}{bs}-r0", "params": {"_workload": {"kind": "fio", "bs": bs, "direct": mode == "o_direct",
                                     "sync": mode == "o_sync"}}, "status": "ok",
            "metrics": {"write_bw_mib_s": mib_s, "write_ios": ios},
            "probes": {"fs_journal": {"commits": commits}, "host_disk": {"flushes": commits}},
            "manifest": {"workload_facts": {"data_file_bytes_before": before}}, "flags": flags or []}


def test_the_issue_case_is_explained_by_append_against_overwrite() -> None:
    helper = [_helper("o_sync", 4096, v, 512) for v in (3.2, 3.25, 3.3)]
    fio = [_fio("o_sync", 4096, v, 46, 2 * MiB) for v in (10.8, 11.0, 11.2)]
    [row] = crosscheck(fio, helper)
    assert row["verdict"] == "differs" and not row["agrees"]
    assert 0.28 < row["helper_over_fio"]["mean"] < 0.31
    assert row["evidence"]["helper"]["layout"] == "append"
    assert row["evidence"]["fio"]["layout"] == f"overwrite:{2 * MiB}"
    why = row["reason"]
    assert "overwrote a laid-out file (2 MiB existed" in why, why
    assert "committed 1.00 times per write for the helper and 1 time per 11 writes for fio" in why, why
    assert "commits the inode's size" in why, why


def test_like_for_like_agreement_says_so_with_its_evidence() -> None:
    helper = [_helper("o_sync", 4096, v, 512) for v in (4.0, 4.1, 4.2, 4.1)]
    fio = [_fio("o_sync", 4096, v, 512, 0) for v in (4.1, 4.2, 4.0, 4.15)]
    [row] = crosscheck(fio, helper)
    assert row["verdict"] == "holds" and row["agrees"]
    assert "both appended to a new file" in row["reason"] and "journal commits 1.00 per write" in row["reason"]


def test_same_evidence_but_a_clear_gap_points_at_time_per_call() -> None:
    helper = [_helper("o_direct", 65536, v, 1) for v in (200, 205, 210)]
    fio = [_fio("o_direct", 65536, v, 1, 0) for v in (400, 405, 410)]
    [row] = crosscheck(fio, helper)
    assert row["verdict"] == "differs"
    assert "time per call" in row["reason"] and "µs per write" in row["reason"], row["reason"]
    # 64 KiB at ~205 MiB/s is ~305 µs per write; fio's ~154 µs
    assert "helper 305 µs" in row["reason"] and "fio 154 µs" in row["reason"], row["reason"]


def test_flags_are_named_as_causes() -> None:
    helper = [_helper("o_direct", 4096, v, 1) for v in (20, 21, 22)]
    fio = [_fio("o_direct", 4096, v, 1, 0, flags=["generator_cpu_bound: fio used 0.99 cores"])
           for v in (40, 41, 42)]
    [row] = crosscheck(fio, helper)
    assert "fio's trials were flagged generator_cpu_bound" in row["reason"]


def test_a_wide_interval_is_undecided_not_agreement() -> None:
    helper = [_helper("o_direct", 65536, v, 1) for v in (150, 550, 300)]
    fio = [_fio("o_direct", 65536, v, 1, 0) for v in (330, 700, 400)]
    [row] = crosscheck(fio, helper)
    assert row["verdict"] == "undecided"
    assert row["reason"].startswith("undecided") and "0.80–1.25" in row["reason"]
    assert "more repetition" in row["reason"] and row["decide"]["configurations"], row
    assert row["decide"]["config_ids"] == ["helpero_direct65536", "fioo_direct65536"], row  # where a budget spends


def test_verdict_band_edges() -> None:
    assert verdict({"mean": 1.0, "ci95": [0.81, 1.24]}) == "holds"
    assert verdict({"mean": 1.0, "ci95": [0.79, 1.1]}) == "undecided"
    assert verdict({"mean": 1.5, "ci95": [1.3, 1.7]}) == "differs"
    assert verdict({"mean": 0.5, "ci95": [0.4, 0.7]}) == "differs"
    assert verdict({"mean": 1.0, "ci95": [None, None]}) == "undecided"
    assert verdict({"mean": 1.0, "ci95": [0.9, None]}) == "undecided"  # no upper end: straddles 1.25
    assert verdict(None) == "undecided"
