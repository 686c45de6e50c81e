"""Every duration setting that must be longer than 0 s is checked by one validator
(core/units.py positive_duration): the same refusal, naming its own key, everywhere."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from iolab.core.units import positive_duration
from iolab.spec.study import StudySettings
from iolab.workloads.fio_jobfile import FioJobFileParams
from iolab.workloads.varmail import VarmailParams


def test_positive_duration() -> None:
    assert positive_duration(None, "x") is None
    assert positive_duration("2m", "x") == 120.0
    assert positive_duration(0.5, "x") == 0.5
    for zero in ("0s", 0, "0ms"):
        with pytest.raises(ValueError, match=r"^x must be longer than 0 s, got "):
            positive_duration(zero, "x")
    with pytest.raises(ValueError, match="expected a duration"):
        positive_duration("soon", "x")


@pytest.mark.parametrize(("model", "table", "key"), [
    (StudySettings, {"name": "s"}, "trial_timeout"),
    (StudySettings, {"name": "s"}, "budget"),
    (VarmailParams, {}, "duration"),
    (FioJobFileParams, {"job_text": "[j]\nrw=read\nsize=1m\n"}, "max_runtime"),
])
def test_each_duration_setting_refuses_zero_by_its_name(model: type, table: dict, key: str) -> None:
    with pytest.raises(ValidationError, match=f"{key} must be longer than 0 s, got '0s'"):
        model(**table, **{key: "0s"})
