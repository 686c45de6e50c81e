"""Examples that reach nothing (issue 26 item 7): every host address in the fleet's code, docs and
tests is loopback or in the documentation ranges (RFC 5737: 192.0.2.0/24, 198.51.100.0/24,
203.0.113.0/24; RFC 3849: 2001:db8::/32), which no real network uses; and a dry-run says it will
connect to the hosts before it does."""

from __future__ import annotations

import ipaddress
import re
import subprocess
import tomllib
from pathlib import Path

from tests.core.helpers import IOLAB, REPO, Lab, make_lab, one_line

DOCUMENTATION = [ipaddress.ip_network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24",
                                                    "2001:db8::/32")]
FILES = ["README.md", "docs/fleet.md", "docs/studies/fleet-scan.md", "bench/fleet.py", "src/iolab/targets/fleet.py",
         "src/iolab/fleet", "src/iolab/studies/fleet_scan", "tests/fleet"]
_V4 = re.compile(r"(?<![\w.])(\d{1,3}(?:\.\d{1,3}){3})(?![\w.])")
_V6 = re.compile(r"(?<![\w:}])([0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7})(?![\w:])")


def _allowed(text: str) -> bool | None:
    """None: not an address; else whether it is one an example may use."""
    try:
        a = ipaddress.ip_address(text)
    except ValueError:
        return None
    return a.is_loopback or a.is_unspecified or any(a in n for n in DOCUMENTATION)


def test_every_address_in_the_fleets_code_docs_and_tests_reaches_nothing() -> None:
    paths = []
    for name in FILES:
        p = REPO / name
        paths += sorted(q for q in p.rglob("*") if q.suffix in (".py", ".md", ".toml")) if p.is_dir() else [p]
    bad, seen = [], 0
    for p in paths:
        for n, line in enumerate(p.read_text().splitlines(), 1):
            for m in [*_V4.finditer(line), *_V6.finditer(line)]:
                ok = _allowed(m.group(1))
                if ok is None:
                    continue
                seen += 1
                if not ok:
                    bad.append(f"{p.relative_to(REPO)}:{n}: {m.group(1)}")
    assert seen > 20  # the scan finds the examples that are there
    assert not bad, "addresses outside loopback and the documentation ranges:\n" + "\n".join(bad)


def test_the_printed_fleet_scan_spec_names_documentation_hosts_and_its_dry_run_says_before_it_connects(
        tmp_path: Path) -> None:
    lab: Lab = make_lab(tmp_path / "lab")
    try:
        r = subprocess.run([str(IOLAB), "study", "fleet-scan", "--print-spec"], capture_output=True, text=True,
                           env=lab.env, timeout=60)
        assert r.returncode == 0, r.stderr
        hosts = tomllib.loads(r.stdout)["target"]["hosts"]
        assert hosts and all(_allowed(h["address"]) for h in hosts), hosts
        spec = tmp_path / "printed.toml"
        spec.write_text(r.stdout)
        # as printed: remote devices are refused before anything connects
        r = lab.iolab("run", spec, "--dry-run")
        assert r.returncode == 2 and "cannot be examined from here" in one_line(r.stderr), r.stderr
        assert "connecting" not in r.stderr
        # named: the plan says it connects, then it tries, and reaches nothing
        allow = [a for h in hosts for a in ("--destroy-data", f"{h['name']}:{h['device']}")]
        r = lab.iolab("run", spec, "--dry-run", *allow, timeout=120)
        text = one_line(r.stderr)
        assert r.returncode == 2 and "not reachable" in text, r.stderr
        assert text.index(f"connecting to {len(hosts)} host(s)") < text.index("not reachable")
        assert all(f"{h['name']} {h['address']}:{h['port']}" in text for h in hosts)
        assert not lab.data.exists(), "a dry-run creates nothing"
    finally:
        lab.force_cleanup()
