"""No printer of a ratio's interval shows a positive end as 0 or a huge one in seven-digit decimals.

The reproduce page printed R2's block size as "17.7 [0.0, 14133067.2]×" (a lower end far below
its one decimal); `iolab ab`, `iolab compare` and the sync-amplification cost table printed their
intervals in fixed decimals the same way. Each goes through report.format.fmt_end now; each is
given here the interval that showed the fault and must print a positive lower end.
"""

from __future__ import annotations

import re

import pytest

from iolab.analysis import ab, compare
from iolab.analysis.stats import Estimate
from iolab.publish.ab import ratio_text
from iolab.report.format import fmt_end
from iolab.studies.sync_amplification.cost import verdict as cost_verdict

LO, HI = 1.3e-6, 14_133_067.2  # a ratio's ends far below the decimals and far above them


def _ends(text: str) -> tuple[float, float]:
    """The two ends of the first interval printed in `text` ("[lo, hi]" or "lo..hi")."""
    m = re.search(r"\[([^,\]]+), ([^\]]+)\]", text) or re.search(r"(\S+)\.\.(\S+?)(?::|$| )", text)
    assert m, text
    return tuple(float(x.replace(",", "")) for x in m.groups())  # type: ignore[return-value]


@pytest.mark.parametrize(("x", "decimals", "shown"), [
    (1.2345, 3, "1.234"), (0.0004, 3, "0.00040"), (1.3e-6, 2, "1.3e-06"), (14_133_067.2, 2, "14,000,000"),
    (0.0, 2, "0.00"), (-0.0001, 2, "-0.00010"), (999_999.0, 1, "999999.0"),
])
def test_fmt_end_keeps_the_decimals_except_where_they_would_mislead(x: float, decimals: int, shown: str) -> None:
    assert fmt_end(x, decimals) == shown


def test_every_ratio_printer_shows_a_positive_lower_end() -> None:
    row = ab.Row(config="c", metric="iops", unit="IO/s", direction="higher", d=[0.1, 0.2], ratio=18.0, lo=LO, hi=HI)
    printed = {
        "iolab ab table": ratio_text(row),
        "sync-amplification cost": cost_verdict(Estimate(mean=18.0, lo=LO, hi=HI, n=3, sd=1.0), "small", False)[1],
        "iolab compare": compare._verdict({"ratio_ci95": [LO, HI], "p_holm": 0.5, "p_no_change": 0.5,
                                           "direction": "higher", "ratio": 18.0}, 0.05, 0.5)[1],
    }
    for where, text in printed.items():
        lo, hi = _ends(text)
        assert lo > 0 and hi > 1e6, f"{where}: {text}"
