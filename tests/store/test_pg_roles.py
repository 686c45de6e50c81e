"""Whose run it is, enforced by the database: a team store set up exactly as docs/store.md
says (its two SQL blocks run as written, `iolab migrate` as the admin role), then the harm
done for real against a canary run of writer A:

* writer B pushes a crafted local store holding A's run id, with and without --force: refused
  (exit 2), A's rows unchanged to the byte;
* writer B in plain SQL through psycopg: UPDATE, DELETE, INSERT into A's run, forging A as
  owner, writing history or meta, turning row-level security off: refused or no row touched;
* the tables' owner replaces A's run with --force: done, and the history tables keep A's run
  and trials; the same role from another host needs --force too;
* a reader runs `runs`, `report`, `compare`, `history` and `doctor` (no migration, no write)
  and is refused, without a traceback, when it pushes.

Real studies (fio on a loop device) are run by writer A through the real runner, so every
write the runner makes (run, claim, trials, run-level data, status, release) is checked
against the policies too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from iolab.core.model import TrialResult
from iolab.store.sqlite import SqliteStore
from tests.core.helpers import LOOP_TARGET, drive, fio_workload, make_lab, needs_fio, needs_root, study_table

from .pgserver import PgServer

pytestmark = [needs_root, needs_fio]

REPO = Path(__file__).resolve().parents[2]
ROLES = ("iolab_admin", "iolab_writers", "iolab_readers", "alice", "bob", "dashboards")


def docs_sql(step: str) -> list[str]:
    """The statements of docs/store.md's SQL block `-- iolab roles, <step>`, as written there."""
    blocks = re.findall(r"```sql\n(.*?)```", (REPO / "docs" / "store.md").read_text(), re.S)
    (block,) = [b for b in blocks if b.startswith(f"-- iolab roles, {step}")]
    text = "\n".join(line.split("--", 1)[0] for line in block.splitlines())
    return [s.strip() for s in text.split(";") if s.strip()]


@dataclass
class Team:
    server: PgServer
    db: str
    tag: str
    data: Path
    runs: list[str]  # writer A's two real runs of study `roles`

    def role(self, name: str) -> str:
        return f"{name}_{self.tag}"

    def url(self, name: str) -> str:
        return self.server.url(self.db, self.role(name))

    def iolab(self, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        full = {**os.environ, "IOLAB_DATA": str(self.data), **(env or {})}
        full.pop("IOLAB_DB", None)
        return subprocess.run([sys.executable, "-m", "iolab.cli", *argv], capture_output=True, text=True, env=full,
                              timeout=300, cwd=self.data)

    def rows(self, run_id: str) -> tuple[list[tuple], list[tuple]]:
        """Writer A's run and trials as stored, every column (as the superuser: RLS does not hide them)."""
        with psycopg.connect(self.server.url(self.db), autocommit=True) as conn:
            run = conn.execute("SELECT r::text FROM iolab.runs r WHERE id=%s", (run_id,)).fetchall()
            trials = conn.execute("SELECT t::text FROM iolab.trials t WHERE run_id=%s ORDER BY seq",
                                  (run_id,)).fetchall()
        return run, trials


@pytest.fixture(scope="module")
def team(pg_server: PgServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    tag = uuid.uuid4().hex[:6]
    db = f"team_{tag}"
    data = tmp_path_factory.mktemp("team")

    def named(sql: str) -> str:  # the docs' database and roles, named for this test
        sql = re.sub(r"\bDATABASE iolab\b", f"DATABASE {db}", sql)
        return re.sub(r"\b(" + "|".join(ROLES) + r")\b", rf"\1_{tag}", sql)

    with pg_server.admin() as conn:
        conn.execute(f"CREATE DATABASE {db}")
        for statement in docs_sql("step 1"):
            conn.execute(named(statement))
    t = Team(pg_server, db, tag, data, [])
    r = t.iolab("migrate", "--db", t.url("iolab_admin"))
    assert r.returncode == 0, r.stderr
    with psycopg.connect(t.url("iolab_admin"), autocommit=True) as conn:
        for statement in docs_sql("step 2"):
            conn.execute(named(statement))
    # writer A runs two real studies straight into the team store
    lab = make_lab(data / "lab")
    try:
        spec = lab.spec(study_table("roles", repetitions=2, max_repetitions=2) + LOOP_TARGET
                        + fio_workload(bs=["4k", "8k"]))
        for _ in range(2):
            r = lab.iolab("run", spec, "--db", t.url("alice"), timeout=300)
            assert r.returncode == 0, r.stderr
            t.runs.append(re.findall(r"run (\S+) \(roles\)", r.stderr)[0])
        lab.assert_nothing_left()
    finally:
        lab.force_cleanup()
    yield t


def test_the_writer_owns_its_runs_and_every_runner_write_passed_the_policies(team: Team) -> None:
    with psycopg.connect(team.server.url(team.db), autocommit=True) as conn:
        owners = conn.execute("SELECT id, owner_role, status, claimed_by FROM iolab.runs ORDER BY created").fetchall()
        counts = conn.execute("SELECT run_id, count(*) FROM iolab.trials GROUP BY run_id").fetchall()
    assert [(o[0], o[1], o[2], o[3]) for o in owners] == [(r, team.role("alice"), "complete", None) for r in team.runs]
    assert dict(counts) == {r: 4 for r in team.runs}
    listed = team.iolab("runs", "--json", "--db", team.url("alice"))
    assert listed.returncode == 0, listed.stderr
    assert {(i["owner_role"], i["owner_host"]) for i in json.loads(listed.stdout)} == \
        {(team.role("alice"), os.uname().nodename)}


def _canary(team: Team, tmp: Path, role: str = "alice") -> str:
    """A run of writer A's (or `role`'s) in the team store, pushed from a local store: what the attacks aim at."""
    run_id = f"20260101-000000-roles-{uuid.uuid4().hex[:8]}"
    db = tmp / "alice.sqlite"
    s = SqliteStore.open(str(db), "--db")
    try:
        s.create_run(run_id, "roles", "builtin:roles", {"study": {"name": "roles"}}, {}, {"hostname": "a"})
        for i in range(2):
            s.save_trial(run_id, TrialResult(f"t{i}", "c", i, {}, "ok", None, {"iops": 100.0}, {}, {}), {"raw": i})
        s.set_status(run_id, "complete")
    finally:
        s.close()
    r = team.iolab("push", run_id, "--db", str(db), "--to", team.url(role))
    assert r.returncode == 0, r.stderr
    return run_id


def _crafted(tmp: Path, run_id: str, host: str | None = None) -> Path:
    """A local SQLite store holding a run with writer A's id and other numbers (the attack)."""
    db = tmp / f"crafted-{uuid.uuid4().hex[:6]}.sqlite"
    s = SqliteStore.open(str(db), "--db")
    try:
        s.create_run(run_id, "roles", "builtin:roles", {}, {}, {"hostname": "evil"})
        s.save_trial(run_id, TrialResult("evil-t", "c", 0, {}, "ok", None, {"iops": 5.0}, {}, {}), None)
        if host is not None:
            s.db.execute("UPDATE runs SET owner_host=?", (host,))
    finally:
        s.close()
    return db


def test_another_writer_cannot_replace_the_run_through_iolab_even_forced(team: Team, tmp_path: Path) -> None:
    victim = _canary(team, tmp_path)
    before = team.rows(victim)
    crafted = _crafted(tmp_path, victim)
    r = team.iolab("push", victim, "--db", str(crafted), "--to", team.url("bob"))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"holds run {victim} from {team.role('alice')}@" in " ".join(r.stderr.split())
    r = team.iolab("push", victim, "--db", str(crafted), "--to", team.url("bob"), "--force")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "may write only its own runs" in " ".join(r.stderr.split()), r.stderr
    assert team.rows(victim) == before, "writer A's run was changed"


def test_another_writer_cannot_change_the_run_in_plain_sql(team: Team, tmp_path: Path) -> None:
    victim = _canary(team, tmp_path)
    before = team.rows(victim)
    mine = f"bob-own-{team.tag}"
    with psycopg.connect(team.url("bob"), autocommit=True) as conn:
        # what row-level security filters out: no error, no row
        for statement in ("UPDATE iolab.runs SET status='running' WHERE id=%(v)s",
                          "UPDATE iolab.runs SET owner_role=current_user WHERE id=%(v)s",
                          "UPDATE iolab.trials SET metrics_json='{\"iops\": 5}' WHERE run_id=%(v)s"):
            assert conn.execute(statement, {"v": victim}).rowcount == 0, statement
        # what is refused outright
        for statement in ("DELETE FROM iolab.runs WHERE id=%(v)s",
                          "DELETE FROM iolab.trials WHERE run_id=%(v)s",
                          "INSERT INTO iolab.trials (run_id, trial_id, config_id, repetition, params_json, status,"
                          " metrics_json, probes_json, flags_json, manifest_json, started, ended, seq) VALUES"
                          " (%(v)s, 'evil', 'c', 9, '{}', 'ok', '{}', '{}', '[]', '{}', 0, 0, 99)",
                          "INSERT INTO iolab.runs (id, study, source, spec_json, options_json, status, created,"
                          " updated, environment_json, owner_role) VALUES ('forged', 's', 's', '{}', '{}', 'complete',"
                          " 0, 0, '{}', %(a)s)",
                          "INSERT INTO iolab.run_history VALUES (%(v)s, 'replaced', 0, 'x', '{}')",
                          "DELETE FROM iolab.run_history",
                          "UPDATE iolab.meta SET value='1'",
                          "ALTER TABLE iolab.runs DISABLE ROW LEVEL SECURITY",
                          "DROP POLICY runs_change_own ON iolab.runs"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement, {"v": victim, "a": team.role("alice")})
        # and what B may do: its own run, recorded as B's whatever B says
        conn.execute("INSERT INTO iolab.runs (id, study, source, spec_json, options_json, status, created, updated,"
                     " environment_json) VALUES (%s, 's', 's', '{}', '{}', 'running', 0, 0, '{}')", (mine,))
        assert conn.execute("UPDATE iolab.runs SET status='complete' WHERE id=%s", (mine,)).rowcount == 1
        owner = conn.execute("SELECT owner_role FROM iolab.runs WHERE id=%s", (mine,)).fetchone()
    assert owner == (team.role("bob"),)
    assert team.rows(victim) == before, "writer A's run was changed"


def test_the_tables_owner_replaces_a_run_only_forced_and_the_history_keeps_it(team: Team, tmp_path: Path) -> None:
    victim = _canary(team, tmp_path)
    crafted = _crafted(tmp_path, victim)
    r = team.iolab("push", victim, "--db", str(crafted), "--to", team.url("iolab_admin"))
    assert r.returncode == 2 and "--force" in r.stderr, r.stderr
    r = team.iolab("push", victim, "--db", str(crafted), "--to", team.url("iolab_admin"), "--force")
    assert r.returncode == 0, r.stderr
    assert f"replaced the run of {team.role('alice')}@" in " ".join(r.stdout.split())
    with psycopg.connect(team.server.url(team.db), autocommit=True) as conn:
        now = conn.execute("SELECT owner_role, status FROM iolab.runs WHERE id=%s", (victim,)).fetchone()
        trials = conn.execute("SELECT trial_id FROM iolab.trials WHERE run_id=%s", (victim,)).fetchall()
        history = conn.execute("SELECT change, changed_by, old_row FROM iolab.run_history WHERE run_id=%s",
                               (victim,)).fetchall()
        kept = conn.execute("SELECT change, old_row FROM iolab.trial_history WHERE run_id=%s", (victim,)).fetchall()
    assert now == (team.role("iolab_admin"), "running") and trials == [("evil-t",)]
    (change, by, row), = history
    assert change == "replaced" and by == team.role("iolab_admin")
    assert json.loads(row)["owner_role"] == team.role("alice") and json.loads(row)["status"] == "complete"
    assert sorted(json.loads(k[1])["trial_id"] for k in kept) == ["t0", "t1"], "the replaced trials are kept"
    assert {k[0] for k in kept} == {"deleted"}


def test_the_same_role_from_another_host_needs_force(team: Team, tmp_path: Path) -> None:
    """One role shared by every machine (here the tables' owner): the database cannot tell the
    machines apart, iolab's check does, and a forced replacement keeps the history."""
    victim = _canary(team, tmp_path, role="iolab_admin")
    before = team.rows(victim)
    crafted = _crafted(tmp_path, victim, host="laptop-b")
    r = team.iolab("push", victim, "--db", str(crafted), "--to", team.url("iolab_admin"))
    assert r.returncode == 2 and f"from {team.role('iolab_admin')}@{os.uname().nodename}" in r.stderr, r.stderr
    assert team.rows(victim) == before
    r = team.iolab("push", victim, "--db", str(crafted), "--to", team.url("iolab_admin"), "--force")
    assert r.returncode == 0, r.stderr
    with psycopg.connect(team.server.url(team.db), autocommit=True) as conn:
        host = conn.execute("SELECT owner_host FROM iolab.runs WHERE id=%s", (victim,)).fetchone()
        history = conn.execute("SELECT changed_by, old_row FROM iolab.run_history WHERE run_id=%s",
                               (victim,)).fetchall()
    assert host == ("laptop-b",)
    assert [(h[0], json.loads(h[1])["owner_host"]) for h in history] == [(team.role("iolab_admin"),
                                                                           os.uname().nodename)]


def test_a_writer_cannot_replace_even_its_own_run_from_another_host(team: Team, tmp_path: Path) -> None:
    """Replacing removes trials: only the tables' owner does that (no policy, no grant allows DELETE)."""
    victim = _canary(team, tmp_path)
    before = team.rows(victim)
    r = team.iolab("push", victim, "--db", str(_crafted(tmp_path, victim, host="laptop-b")), "--to",
                   team.url("alice"), "--force")
    assert r.returncode == 2 and "only the tables' owner" in " ".join(r.stderr.split()), r.stderr
    assert team.rows(victim) == before


def test_a_reader_reads_everything_and_writes_nothing(team: Team, tmp_path: Path) -> None:
    reader = team.url("dashboards")
    a, b = team.runs
    with psycopg.connect(team.server.url(team.db), autocommit=True) as conn:
        before = conn.execute("SELECT (SELECT count(*) FROM iolab.run_history), (SELECT string_agg(r::text, '|' "
                              "ORDER BY id) FROM iolab.runs r), (SELECT string_agg(m::text, '|' ORDER BY key) "
                              "FROM iolab.meta m)").fetchone()
    outputs = {}
    for argv in (["runs", "--json"], ["report", b, "--format", "json"], ["compare", a, b, "--json"],
                 ["history", "roles", "--json"], ["doctor", "--json"]):
        r = team.iolab(*argv, "--db", reader)
        assert "Traceback" not in r.stderr, (argv, r.stderr)
        assert r.returncode == 0 or argv[0] == "doctor", (argv, r.stderr)
        outputs[argv[0]] = r.stdout
    assert {i["id"] for i in json.loads(outputs["runs"])} >= {a, b}
    assert json.loads(outputs["report"])["run_id"] == b
    assert json.loads(outputs["history"])
    (store,) = [c for c in json.loads(outputs["doctor"])["checks"] if c["name"] == "store"]
    assert store["state"] == "warn" and "not writable" in store["detail"], store
    r = team.iolab("push", a, "--db", reader, "--to", str(tmp_path / "copy.sqlite"))
    assert r.returncode == 0, r.stderr  # reading for a copy elsewhere is reading
    r = team.iolab("push", a, "--db", str(tmp_path / "copy.sqlite"), "--to", reader)
    assert r.returncode == 2 and "may not write" in " ".join(r.stderr.split()) and "Traceback" not in r.stderr
    with psycopg.connect(team.server.url(team.db), autocommit=True) as conn:
        after = conn.execute("SELECT (SELECT count(*) FROM iolab.run_history), (SELECT string_agg(r::text, '|' "
                             "ORDER BY id) FROM iolab.runs r), (SELECT string_agg(m::text, '|' ORDER BY key) "
                             "FROM iolab.meta m)").fetchone()
    assert after == before, "a reader changed the store"


# a colleague's writer role writing its own runs in plain SQL (row-level security allows it) in
# forms iolab never writes: (what, run columns, trial columns), each over one good run of bob's
CRAFTED = (
    ("metrics not JSON", {}, {"metrics_json": "not json"}),
    ("metrics a list", {}, {"metrics_json": "[1, 2]"}),
    ("a metric a string", {}, {"metrics_json": '{"read_iops": "fast"}'}),
    ("environment not JSON", {"environment_json": "{"}, {}),
    ("environment a string", {"environment_json": '"x"'}, {}),
    ("created not a number", {"created": float("nan")}, {}),
    ("spec.study a number", {"spec_json": '{"study": 5}'}, {}),
)


def test_a_colleagues_malformed_runs_break_no_one_elses_reads(team: Team, tmp_path: Path) -> None:
    """Bob's own runs, malformed in plain SQL, among alice's: `runs`, `history` and `compare` of
    alice's runs go on (exit 0, no traceback) and name each of bob's runs they left out; `report`
    of one of bob's runs is exit 2 naming the run and the key."""
    a1, a2 = team.runs
    with psycopg.connect(team.url("alice"), autocommit=True) as conn:
        created, env = conn.execute("SELECT created, environment_json FROM iolab.runs WHERE id=%s", (a1,)).fetchone()
    good_run = {"study": "roles", "source": "builtin:roles", "spec_json": '{"study": {"name": "roles"}}',
                "options_json": "{}", "status": "complete", "updated": created, "environment_json": env}
    good_trial = {"trial_id": "t0", "config_id": "c", "repetition": 0, "params_json": '{"bs": 4096}', "status": "ok",
                  "metrics_json": '{"read_iops": 100.0}', "probes_json": "{}", "flags_json": "[]",
                  "manifest_json": "{}", "started": 0, "ended": 1, "seq": 0}
    bobs = {}
    try:
        with psycopg.connect(team.url("bob"), autocommit=True) as conn:
            for k, (what, run_over, trial_over) in enumerate(CRAFTED):
                run_id = f"{a1[:15]}-roles-crafted{k}-{team.tag}"
                run = {**good_run, "id": run_id, "created": created + 0.001 * (k + 1), **run_over}
                trial = {**good_trial, "run_id": run_id, **trial_over}
                for table, row in (("runs", run), ("trials", trial)):
                    marks = ", ".join(["%s"] * len(row))
                    conn.execute(f"INSERT INTO iolab.{table} ({', '.join(row)}) VALUES ({marks})", list(row.values()))
                bobs[run_id] = what
        lab = make_lab(tmp_path / "lab")
        try:
            reads = drive(lab, [["runs", "--json", "-n", "100", "--db", team.url("dashboards")],
                                ["history", "roles", "--json", "--db", team.url("dashboards")],
                                ["compare", a1, a2, "--json", "--db", team.url("dashboards")],
                                *[["report", b, "--format", "json", "--db", team.url("dashboards")] for b in bobs]])
        finally:
            lab.force_cleanup()
    finally:
        with psycopg.connect(team.server.url(team.db), autocommit=True) as conn:  # the tables' owner cleans up
            conn.execute("DELETE FROM iolab.trials WHERE run_id = ANY(%s)", (list(bobs),))
            conn.execute("DELETE FROM iolab.runs WHERE id = ANY(%s)", (list(bobs),))
    listed, history, compared, *reports = reads
    for r in (listed, history, compared, *reports):
        assert not r["traceback"] and not r["hang"], r["traceback"]
    assert listed["exit"] == 0, listed["stderr"]
    ids = {i["id"]: i for i in json.loads(listed["stdout"])}
    assert {a1, a2} <= set(ids), "alice's runs are listed"
    unreadable_json = [b for b, what in bobs.items() if "not JSON" in what]
    for b in unreadable_json:
        assert b in " ".join(listed["stderr"].split()), f"`runs` names {b} it could not read"
    assert history["exit"] == 0, history["stderr"]
    set_aside = " ".join(json.loads(history["stdout"])["set_aside"])
    assert all(b in set_aside for b in bobs), set_aside
    assert {p["run_id"] for s in json.loads(history["stdout"])["series"] for p in s["points"]} == {a1, a2}
    assert compared["exit"] == 0, compared["stderr"]
    assert all(b in " ".join(compared["stderr"].split()) for b in bobs), "compare names the runs it left out"
    for b, r in zip(bobs, reports, strict=True):
        assert r["exit"] == 2 and b in " ".join(r["stderr"].split()), (bobs[b], r)


def _usage(team: Team, role: str) -> int:
    with psycopg.connect(team.server.url(team.db), autocommit=True) as conn:
        row = conn.execute("SELECT bytes FROM iolab.role_usage WHERE role=%s", (team.role(role),)).fetchone()
    return int(row[0]) if row else 0


def _set_quota(team: Team, role: str, max_bytes: int | None) -> None:
    """As the tables' owner (iolab_admin): the way docs/store.md says to raise or set a quota."""
    with psycopg.connect(team.url("iolab_admin"), autocommit=True) as conn:
        if max_bytes is None:
            conn.execute("DELETE FROM iolab.role_quota WHERE role=%s", (team.role(role),))
        else:
            conn.execute("INSERT INTO iolab.role_quota VALUES (%s, %s) ON CONFLICT (role) DO UPDATE"
                         " SET max_bytes = excluded.max_bytes", (team.role(role), max_bytes))


def test_a_colleague_cannot_fill_the_team_store(team: Team, tmp_path: Path) -> None:
    """Row-level security limits whose rows a writer changes, not how much it writes: before, bob
    could write a trial of any size, or rewrite his own trial again and again (each old version
    kept in the history), until the server's disk was full for everyone. Now the database
    charges every byte a login role makes it keep against that role's quota (schema version 4),
    whatever bob does in plain SQL, and only the tables' owner changes a quota."""
    bob_run = f"quota-bob-{team.tag}"
    base = _usage(team, "bob")
    _set_quota(team, "bob", base + 200_000)
    try:
        with psycopg.connect(team.url("bob"), autocommit=True) as conn:
            conn.execute("INSERT INTO iolab.runs (id, study, source, spec_json, options_json, status, created, updated,"
                         " environment_json) VALUES (%s, 'quota', 'builtin:quota', '{}', '{}', 'running', 0, 0, '{}')",
                         (bob_run,))
            trial = ("INSERT INTO iolab.trials (run_id, trial_id, config_id, repetition, params_json, status,"
                     " metrics_json, probes_json, flags_json, manifest_json, raw_json, started, ended, seq)"
                     " VALUES (%s, %s, 'c', 0, '{}', 'ok', '{}', '{}', '[]', '{}', %s, 0, 1, 0)")
            # one huge row: refused whole, nothing of it stored
            with pytest.raises(psycopg.Error) as huge:
                conn.execute(trial, (bob_run, "huge", json.dumps("x" * 1_000_000)))
            assert huge.value.sqlstate == "53400" and team.role("bob") in str(huge.value), huge.value
            # many rewrites of one small row: each old version is kept in trial_history, so each counts
            conn.execute(trial, (bob_run, "t0", json.dumps("0" * 40_000)))
            with pytest.raises(psycopg.Error) as rewrites:
                for k in range(1, 50):
                    conn.execute("UPDATE iolab.trials SET raw_json=%s WHERE run_id=%s AND trial_id='t0'",
                                 (json.dumps(str(k % 10) * 40_000), bob_run))
            assert rewrites.value.sqlstate == "53400", rewrites.value
            assert k < 6, f"{k} rewrites of 40 kB passed a quota of 200 kB"
            # SET ROLE to the group does not move the charge
            conn.execute(f"SET ROLE {team.role('iolab_writers')}")
            with pytest.raises(psycopg.Error) as as_group:
                conn.execute("INSERT INTO iolab.runs (id, study, source, spec_json, options_json, status, created,"
                             " updated, environment_json, owner_role) VALUES (%s, 'quota', 'q', %s, '{}', 'running',"
                             " 0, 0, '{}', current_user)", (bob_run + "-group", json.dumps("y" * 300_000)))
            assert as_group.value.sqlstate == "53400", as_group.value
            conn.execute("RESET ROLE")
            # the quota is not bob's to change
            for sql in ("UPDATE iolab.role_quota SET max_bytes = 1e15", "DELETE FROM iolab.role_quota",
                        "UPDATE iolab.role_usage SET bytes = 0", "DELETE FROM iolab.role_usage",
                        f"INSERT INTO iolab.role_quota VALUES ('{team.role('bob')}x', 1)",
                        "DROP TRIGGER charge_trial ON iolab.trials", "ALTER TABLE iolab.trials DISABLE TRIGGER ALL"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(sql)
        assert _usage(team, "bob") <= base + 200_000, "what was refused is not charged"
        with psycopg.connect(team.server.url(team.db), autocommit=True) as conn:
            kept = conn.execute("SELECT count(*) FROM iolab.trial_history WHERE run_id=%s", (bob_run,)).fetchone()[0]
            assert kept < 6, kept
        # alice is charged for her own writes only: bob's full quota does not stop her
        with psycopg.connect(team.url("alice"), autocommit=True) as conn:
            conn.execute("INSERT INTO iolab.runs (id, study, source, spec_json, options_json, status, created, updated,"
                         " environment_json) VALUES (%s, 'quota', 'q', '{}', '{}', 'running', 0, 0, '{}')",
                         (f"quota-alice-{team.tag}",))
    finally:
        _set_quota(team, "bob", None)
        with psycopg.connect(team.server.url(team.db), autocommit=True) as conn:
            conn.execute("DELETE FROM iolab.trials WHERE run_id LIKE 'quota-%'")
            conn.execute("DELETE FROM iolab.runs WHERE id LIKE 'quota-%'")


def test_a_run_over_its_quota_loses_nothing_and_push_spool_completes_it_once_raised(team: Team) -> None:
    """A real study by bob whose quota fills mid-run (the tables' owner lowers it after the first
    trial): the writes the database refuses (53400) are kept in the local spool, the run ends
    saying so (exit 1); bob's next run does not start (exit 2, nothing created) and doctor says
    why; once the quota is raised, `iolab push --spool` writes them: the run complete, every
    trial once."""
    lab = make_lab(team.data / "quota-lab")
    lab.env["IOLAB_DB_RETRY_S"] = "0.5"
    try:
        spec = lab.spec(study_table("quota", repetitions=2, max_repetitions=2) + LOOP_TARGET
                        + fio_workload(bs=["4k", "8k"]))
        doctor = lab.iolab("doctor", "--db", team.url("bob"))  # the default quota, and what bob used of it
        said = " ".join(doctor.stdout.split())
        assert f"role {team.role('bob')} has used " in said and "of its 20GB quota" in said, said
        proc = lab.popen("run", spec, "--db", team.url("bob"))
        try:
            def stored() -> int:
                with psycopg.connect(team.server.url(team.db), autocommit=True) as conn:
                    return int(conn.execute("SELECT count(*) FROM iolab.trials t JOIN iolab.runs r ON r.id = t.run_id"
                                            " WHERE r.study = 'quota'").fetchone()[0])
            lab.wait_until(lambda: stored() >= 1, 120, "bob's first stored trial", proc)
            _set_quota(team, "bob", _usage(team, "bob"))  # full from now on
            _, err = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        said = " ".join(err.split())
        assert proc.returncode == 1 and "Traceback" not in err, err
        assert "has used its quota" in said and "wait in the local spool" in said and "CONTEXT" not in said, said
        run_id = re.findall(r"run (\S+) \(quota\)", err)[0]
        # over its quota, bob's next run does not start: exit 2, nothing created, the spool kept
        doctor = lab.iolab("doctor", "--db", team.url("bob"))
        assert "has used its quota" in " ".join(doctor.stdout.split()), doctor.stdout
        again = lab.iolab("run", spec, "--db", team.url("bob"), timeout=300)
        assert again.returncode == 2 and "has used its quota" in " ".join(again.stderr.split()), again.stderr
        with psycopg.connect(team.server.url(team.db), autocommit=True) as conn:
            assert conn.execute("SELECT count(*) FROM iolab.runs WHERE study='quota'").fetchone() == (1,)
        _set_quota(team, "bob", None)  # back to the default for every role
        pushed = lab.iolab("push", "--spool", "--to", team.url("bob"))
        assert pushed.returncode == 0, pushed.stderr
        with psycopg.connect(team.server.url(team.db), autocommit=True) as conn:
            status, = conn.execute("SELECT status FROM iolab.runs WHERE id=%s", (run_id,)).fetchone()
            ids = [t for t, in conn.execute("SELECT trial_id FROM iolab.trials WHERE run_id=%s", (run_id,))]
        assert status == "complete" and len(ids) == 4 == len(set(ids)), (status, ids)
        lab.assert_nothing_left()
    finally:
        _set_quota(team, "bob", None)
        lab.force_cleanup()
