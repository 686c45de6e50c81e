"""The rule every timing test uses (tests/statcheck.py): inside passes, straddling with the mean
inside passes with a warning, outside fails unless the product flagged a confounder."""

from __future__ import annotations

import pytest

from tests.statcheck import Band, ConfoundedWarning, UndecidedWarning, check

BAND = Band(0.6, 1.6, "a band")


def test_inside_passes_silently(recwarn: pytest.WarningsRecorder) -> None:
    check("x", [1.0, 1.05, 0.95, 1.02], BAND)
    assert not recwarn.list


def test_straddling_an_edge_with_the_mean_inside_is_undecided_not_failed() -> None:
    with pytest.warns(UndecidedWarning, match="straddles"):
        check("x", [1.44, 1.93, 1.39, 1.37, 1.26, 0.98, 1.44, 1.58], BAND)


def test_outside_fails_and_a_mean_outside_fails_even_when_the_ci_overlaps() -> None:
    with pytest.raises(AssertionError, match="no confounder was flagged"):
        check("x", [3.0, 3.2, 2.9], BAND)  # a kernel off by 2x
    with pytest.raises(AssertionError, match="no confounder was flagged"):
        check("x", [1.3, 2.6, 1.9, 2.2], BAND)  # mean 2.0 outside, CI reaching into the band
    with pytest.warns(ConfoundedWarning, match="cpu_contended"):
        check("x", [3.0, 3.2, 2.9], BAND, ["cpu_contended: the generator got 40 % of a CPU"])
