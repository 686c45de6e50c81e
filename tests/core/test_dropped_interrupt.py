"""A stop signal whose KeyboardInterrupt Python drops (raised inside a finalizer or a weakref
callback: "Exception ignored in ...") still stops the run, after the trial it landed in, and
says nothing about the dropped exception (core/signals.py)."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console
from tests.core import dropping_workload

from iolab.core import registry, signals
from iolab.core.errors import Interrupted
from iolab.runner.runner import Runner
from iolab.spec.study import from_dict
from iolab.store.registry import open_store


@pytest.fixture
def stop_handlers() -> Iterator[None]:
    """Default stop handlers for the test to install the command's over (cli.main does; pytest
    sets its own unraisable hook around the test's body, so the test installs them there), and
    everything restored after."""
    old = {s: signal.getsignal(s) for s in signals.STOP_SIGNALS}
    old_hook = sys.unraisablehook
    for s in signals.STOP_SIGNALS:
        signal.signal(s, signal.SIG_DFL)
    try:
        yield
    finally:
        signals.stop_acted_on()
        sys.unraisablehook = old_hook
        for s, h in old.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)


def test_a_stop_signal_dropped_inside_a_finalizer_still_stops_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str],
        stop_handlers: None) -> None:
    monkeypatch.setitem(registry.WORKLOADS, dropping_workload.KIND, dropping_workload.REF)
    monkeypatch.setenv("IOLAB_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("IOLAB_SCRATCH", str(tmp_path / "scratch"))
    spec = from_dict({"study": {"name": "dropping", "repetitions": 3, "max_repetitions": 3},
                      "target": {"kind": "host"}, "workloads": [{"name": "a", "kind": "dropping"}]}, "test.toml")
    signals.interrupt_on_stop_signals()
    store = open_store(tmp_path / "data" / "results.sqlite")
    try:
        runner = Runner(spec, store, Console(file=open("/dev/null", "w")))
        runner.instantiate()
        run_id = runner.start()
        with pytest.raises(Interrupted, match="--resume"):
            runner.run()
        trials = store.trials(run_id)
        assert [t.status for t in trials] == ["ok"], \
            "the run should stop after the trial the signal landed in, keeping it"
        assert store.resolve(run_id).status == "partial"
    finally:
        store.close()
    assert signals.stop_pending() is None, "the runner acted on the stop: it is no longer pending"
    err = capfd.readouterr().err
    assert "Exception ignored" not in err and "Traceback" not in err, err
    assert list((tmp_path / "data" / "ledger").glob("*.json")) == []
