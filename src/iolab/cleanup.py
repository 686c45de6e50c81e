"""`iolab clean`: undo what crashed or killed iolab processes left behind, never what a live one uses.

`iolab clean` undoes the ledgers of dead owners in this data dir, exactly: the processes
each started first (so nothing holds its devices), then its entries in dependency order.

`iolab clean --all` also sweeps by name, machine-wide, for resources whose ledger is out of
reach (another `$IOLAB_DATA`, a wiped state dir). Every name iolab creates carries its
owner's tag `iolab-o<pid>.<start>-...` (core.owner), so the sweep removes a thing only when
its owner is dead, whatever data dir that owner used. Each resource kind sweeps its own, in
the kinds' order (core/resources.py ResourceKind): tagged processes (fio, fio servers, QEMU,
mkfs, ... found by IOLAB_OWNER in their environment), QEMU by -name, cgroups, scheduler
claims (cgroups.queue_claims), mounts, loop devices (by backing file name), and tagged files
and dirs in the scratch dir and the temp dir; a target's own kind in its place among them.

Untagged `iolab-*` names (iolab before 0.2) say nothing about their owner: the sweep takes
them only inside this data dir's scratch dir (files, mounts, loop devices backed there, an
orphaned QEMU whose image is there, load generators in an untagged work dir there), and
only when no live ledger of this data dir names them; untagged cgroups never. It never
touches anything else: not outside the scratch dir and the temp dir, and no loop device,
mount, cgroup or process that does not carry iolab's names or tags.
"""

from __future__ import annotations

from iolab.core import resources


def clean_everything(sweep: bool = False) -> tuple[list[str], list[str]]:
    cleaned, errors = resources.clean_orphans()
    if sweep:
        c2, e2 = sweep_tagged()
        cleaned += c2
        errors += e2
        if not e2:  # every dead owner's tagged things are gone: an unreadable ledger has nothing left to say
            for f in resources.ledger_files():
                if resources.unreadable_ledger(f) is not None and not resources.owner_alive(f):
                    f.unlink(missing_ok=True)
                    cleaned.append(f"the unreadable ledger {f} (its owner's things were found by their tag)")
                    errors = [e for e in errors if str(f) not in e]
    return cleaned, errors


def sweep_tagged() -> tuple[list[str], list[str]]:
    """Everything carrying a dead owner's tag, machine-wide; old untagged names in this scratch
    dir. Each resource kind sweeps its own (ResourceKind.sweep), in the kinds' order."""
    resources.load_all_kinds()
    scope = resources.SweepScope.here()
    cleaned: list[str] = []
    errors: list[str] = []
    for kind in resources.kinds():
        if kind.sweep is None:
            continue
        try:
            c, e = kind.sweep(scope)
        except Exception as exc:  # one stuck kind must not stop the others
            c, e = [], [f"sweep of {kind.name}: {exc}"]
        cleaned += c
        errors += e
    return cleaned, errors
