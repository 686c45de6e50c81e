"""Secrets never leave: a password holding each of `# ? @ % / : space` never appears in any
output, log, manifest, report, spool line or stored row.

The passwords are made of distinctive 5-character pieces around the special characters, and
every check looks for the password as libpq reads it, as written in a URL (percent-encoded)
and for each piece on its own: a scrubber that stops early at one character (as the old one
did at `#` and `?`) leaves a piece behind and is caught.

* `shown`, `scrub` and `scrub_message` on every URL form (user part, `?password=`,
  `sslpassword`, encoded and raw), and URLs libpq cannot parse (its own message quotes them);
* the real thing: the server's password role given such a password, a real study run with the
  URL on the command line (its recorded command line reaches the store and the reports), the
  server made read-only mid-run so writes go through the spool, then `runs`, `report` in every
  format, `history`, `compare`, `doctor`, `push` both ways, and the error paths (a wrong
  password, a socket that is not there, a URL libpq cannot parse); then every output, every
  file under the data directory, every report file and every row of every iolab table grepped.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from psycopg import sql

from tests.core.helpers import LOOP_TARGET, drive, fio_workload, make_lab, needs_fio, needs_root, study_table

from .pgserver import PASSWORD, PASSWORD_ROLE, PgServer, set_read_only
from .pgstudy import table

SPECIALS = "#?@%/: "
ALL = "Kx7Jw#Qm2Fz?Wp9Lq@Rt4Hd%Yb6Ns/Hn3Gk:Lc8Pv Vd5Tm"  # every special character at once
ONE_EACH = [f"Ab{i}Cd{c}Ef{i}Gh" for i, c in enumerate(SPECIALS)]  # one at a time (e.g. 'Ab0Cd#Ef0Gh')


def forms(password: str) -> set[str]:
    """Every way the password could show: whole, URL-encoded, and each piece between specials."""
    pieces = {p for p in re.split(r"[#?@%/: ]", password) if len(p) >= 4}
    return {password, quote(password, safe=""), quote(password), *pieces}


def leaks(text: str, password: str) -> list[str]:
    return sorted(f for f in forms(password) if f in text)


def urls(password: str) -> list[str]:
    """A password in every place a libpq URL takes one, written as a user would (encoded, and raw
    where libpq reads it raw too)."""
    enc = quote(password, safe="")
    return [f"postgresql://alice:{enc}@db.example.org:5432/iolab?sslmode=require",
            f"postgres://alice@db.example.org/iolab?password={enc}",
            f"postgresql://alice@/iolab?host=/run/postgresql&password={enc}&application_name=x",
            f"postgresql://alice@db.example.org/iolab?sslcert=/c.pem&sslpassword={enc}",
            f"postgresql://alice:{password}@db.example.org/iolab",  # raw: '@', '/', '%' make it unparsable
            f"postgresql://alice@db.example.org/iolab?password={password}"]


@pytest.mark.parametrize("password", [ALL, *ONE_EACH], ids=["all", *[f"char{i}" for i in range(len(SPECIALS))]])
def test_no_url_form_of_a_password_is_shown_or_recorded(password: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from iolab.runner.manifest import environment
    from iolab.store.urls import scrub, shown

    for url in urls(password):
        for text in (shown(url), scrub(url), scrub(f"--db={url}"), scrub(f"--to={url}")):
            assert not leaks(text, password), (url, text)
        monkeypatch.setattr(sys, "argv", ["iolab", "run", "x.toml", "--db", url, f"--to={url}"])
        recorded = environment()["command"]
        assert not leaks(repr(recorded), password), recorded
        assert recorded[:4] == ["iolab", "run", "x.toml", "--db"]


@pytest.mark.parametrize("password", [ALL, *ONE_EACH], ids=["all", *[f"char{i}" for i in range(len(SPECIALS))]])
def test_libpq_reads_the_password_and_driver_messages_are_scrubbed_of_it(password: str) -> None:
    from iolab.store.urls import UnparsableURL, parse, scrub_message, shown

    for url in urls(password):
        message = scrub_message(f"connection to {url} failed: password {password!r} rejected", url)
        assert not leaks(message, password), message
        try:
            params = parse(url)
        except UnparsableURL as exc:
            assert not leaks(exc.reason, password), exc.reason
        else:
            assert params.get("password", params.get("sslpassword")) == password, "libpq reads the password"
            assert "db.example.org" in shown(url) or "/run/postgresql" in shown(url), "the rest is still shown"


def test_the_commands_never_show_it(tmp_path: Path) -> None:
    """The read commands, push and doctor, with the password in every URL form, pointing at a
    socket directory that is not there (each fails to connect, as after a typo)."""
    lab = make_lab(tmp_path / "lab")
    nowhere = f"host={tmp_path}/nowhere&port=1"
    cases: list[tuple[str, list[str]]] = []
    for password in (ALL, *ONE_EACH):
        enc = quote(password, safe="")
        for url in (f"postgresql://alice:{enc}@/iolab?{nowhere}", f"postgres://alice@/iolab?{nowhere}&password={enc}",
                    f"postgresql://alice:{password}@/iolab?{nowhere}", f"postgresql://alice@/iolab?{nowhere}&password={password}"):
            cases += [(password, ["runs", "--db", url]), (password, ["report", "latest", "--db", url]),
                      (password, ["push", "--spool", "--to", url]), (password, ["push", "r", "--to", url])]
    cases.append((ALL, ["doctor", "--json", "--db", f"postgresql://alice:{quote(ALL, safe='')}@/iolab?{nowhere}"]))
    try:
        results = drive(lab, [argv for _, argv in cases])
    finally:
        lab.force_cleanup()
    for (password, argv), r in zip(cases, results, strict=True):
        assert r["traceback"] is None and not r["hang"], (argv, r)
        assert r["exit"] in (1, 2), (argv, r)
        assert not leaks(r["stdout"] + r["stderr"], password), (argv, r["stdout"] + r["stderr"])


def test_libpq_messages_that_quote_the_url_are_never_passed_on() -> None:
    from iolab.store.urls import UnparsableURL, parse, shown

    for url, why in ((f"postgresql://alice:{quote(ALL, safe='')}@[::1/iolab", "matching"),
                     (f"postgresql://alice:{quote(ALL, safe='')}@h/iolab?sslmod=x", "invalid URI query parameter"),
                     ("postgresql://alice:Kx7Jw%zzQm2Fz@h/iolab", "invalid percent-encoded token")):
        with pytest.raises(UnparsableURL) as e:
            parse(url)
        assert why in e.value.reason and not leaks(e.value.reason, ALL) and "Qm2Fz" not in e.value.reason
        assert not leaks(shown(url), ALL) and "Qm2Fz" not in shown(url)


@pytest.fixture
def secret_role(pg_server: PgServer) -> Iterator[str]:
    """The server's password role (scram) with the password ALL for the test, its own again after."""
    with pg_server.admin() as conn:
        conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(sql.Identifier(PASSWORD_ROLE), sql.Literal(ALL)))
    try:
        yield pg_server.fresh_url(user=PASSWORD_ROLE)
    finally:
        with pg_server.admin() as conn:
            conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(sql.Identifier(PASSWORD_ROLE),
                                                                     sql.Literal(PASSWORD)))


@needs_root
@needs_fio
def test_a_password_with_every_special_character_leaves_no_trace(pg_server: PgServer, secret_role: str,
                                                                 tmp_path: Path) -> None:
    base = secret_role  # postgresql://pw@/t_x?host=...&port=...
    enc = quote(ALL, safe="")
    url = base.replace(f"{PASSWORD_ROLE}@", f"{PASSWORD_ROLE}:{enc}@")
    url_param = f"{base}&password={enc}"
    wrong = "Zz9Yy#Xx8Ww?Vv7Uu@Tt6Ss%Rr5Qq/Pp4Oo:Nn3Mm Ll2Kk"
    lab = make_lab(tmp_path / "lab")
    lab.env["IOLAB_DB"] = url_param  # in every child's environment too (fio, helpers)
    lab.env.pop("PGPASSWORD", None)
    lab.env["IOLAB_DB_RETRY_S"] = "1"
    said: list[str] = []
    spool_seen: list[str] = []
    try:
        spec = lab.spec(study_table("secrets", repetitions=2, max_repetitions=2) + LOOP_TARGET
                        + fio_workload(bs=["4k", "8k"]))
        proc = lab.popen("run", spec, "--db", url, "-o", tmp_path / "run.html")  # the URL in argv
        try:
            lab.wait_until(lambda: _stored(base), 120, "a stored trial", proc)
            set_read_only(pg_server, True)  # the rest goes through the spool
            spool = lab.data / "spool"
            lab.wait_until(lambda: any(f.stat().st_size for f in spool.glob("*.jsonl")) if spool.exists() else False,
                           120, "a write kept in the spool", proc)
            time.sleep(1)
            spool_seen += [f.read_text() for f in spool.glob("*.jsonl")]
            set_read_only(pg_server, False)
            out, err = proc.communicate(timeout=240)
        finally:
            set_read_only(pg_server, False)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 0, err
        said += [out, err]
        again = lab.iolab("run", spec, "--db", url, timeout=300)  # a second run: compare needs two
        assert again.returncode == 0, again.stderr
        said += [again.stdout, again.stderr]
        runs = lab.iolab("runs", "--json", "--db", url_param)
        assert runs.returncode == 0, runs.stderr
        run_id, first = re.findall(r'"id": "([^"]+)"', runs.stdout)[:2]
        copy = tmp_path / "copy.sqlite"
        commands = [["runs", "--db", url], ["runs", "--json", "--db", url_param],
                    ["report", run_id, "--db", url, "--format", "html", "-o", tmp_path / "r.html"],
                    ["report", run_id, "--db", url, "--format", "json", "-o", tmp_path / "r.json"],
                    ["report", run_id, "--db", url, "--format", "md", "-o", tmp_path / "r.md"],
                    ["report", run_id, "--db", url, "--format", "csv", "-o", tmp_path / "r.csv"],
                    ["report", run_id, "--db", url, "--format", "json"],
                    ["history", "secrets", "--db", url, "--json", "--html", tmp_path / "h.html"],
                    ["compare", first, run_id, "--db", url, "--json"],
                    ["doctor", "--json", "--db", url],
                    ["push", run_id, "--db", url, "--to", copy],
                    ["push", run_id, "--db", copy, "--to", url],
                    ["push", "--spool", "--to", url],
                    ["migrate", "--db", url]]
        failing = [["runs", "--db", url.replace(enc, quote(wrong, safe=""))],
                   ["run", spec, "--db", url.replace(enc, quote(wrong, safe=""))],
                   ["runs", "--db", f"postgresql://{PASSWORD_ROLE}:{enc}@/db?host={tmp_path}/nowhere&port=1"],
                   ["runs", "--db", url.replace(enc, ALL)],  # raw: libpq cannot parse it
                   ["runs", "--db", url.replace(enc, ALL) + "&sslmod=x"],
                   ["push", run_id, "--db", copy, "--to", url.replace(enc, ALL)],
                   ["doctor", "--db", url.replace(enc, quote(wrong, safe=""))]]
        for argv in commands + failing:
            r = lab.iolab(*argv, timeout=300)
            said += [r.stdout, r.stderr]
            assert "Traceback" not in r.stderr, (argv, r.stderr)
            if argv in commands:
                assert r.returncode == 0 or argv[0] == "doctor", (argv, r.stderr)
            else:
                assert r.returncode in (1, 2), (argv, r.stdout, r.stderr)
        lab.assert_nothing_left()
    finally:
        lab.force_cleanup()

    files = [p for p in [*lab.data.rglob("*"), *tmp_path.glob("*.*")] if p.is_file()]
    assert any(p.suffix == ".html" for p in files) and copy in files and spool_seen
    stored = _every_row(base)
    assert run_id in stored and "--db" in stored, "the recorded command line is in the store"
    for what, text in [*(("output", t) for t in said), *(("spool", t) for t in spool_seen),
                       *((str(p), p.read_bytes().decode("utf-8", "replace")) for p in files),
                       ("the store's rows", stored)]:
        for secret in (ALL, wrong):
            assert not leaks(text, secret), (what, leaks(text, secret))


def _conn(url: str) -> psycopg.Connection:
    return psycopg.connect(url.replace(f"{PASSWORD_ROLE}@", f"{PASSWORD_ROLE}:{quote(ALL, safe='')}@"),
                           autocommit=True)


def _stored(url: str) -> bool:
    with _conn(url) as conn:
        trials = table(conn, "trials")
        return trials is not None and conn.execute(f"SELECT count(*) FROM {trials}").fetchone() != (0,)


def _every_row(url: str) -> str:
    """Every row of every table iolab keeps in the database, as text."""
    with _conn(url) as conn:
        schema = (table(conn, "runs") or "").split(".")[0]
        tables = [t[0] for t in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname=%s",
                                             (schema,)).fetchall()]
        assert {"runs", "trials", "meta"} <= set(tables)
        return "\n".join(str(row[0]) for t in tables for row in conn.execute(
            sql.SQL("SELECT x::text FROM {}.{} x").format(sql.Identifier(schema), sql.Identifier(t))).fetchall())


def test_the_environment_is_not_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A password given the recommended way (PGPASSWORD, IOLAB_DB) is not in the manifest either."""
    from iolab.runner.manifest import environment

    monkeypatch.setenv("PGPASSWORD", ALL)
    monkeypatch.setenv("IOLAB_DB", f"postgresql://u:{quote(ALL, safe='')}@h/db")
    monkeypatch.setattr(sys, "argv", ["iolab", "run", "x.toml"])
    assert not leaks(repr(environment()), ALL)
