"""sync-amplification's hook: write each overwrite region once, before any probe runs, so no
trial counts the prefill (workloads/sync_writes.py: a trial that finds its region unprepared
prepares it itself and is flagged `prefill_in_trial`)."""

from __future__ import annotations

from iolab.studies.hooks import GroupContext, GroupDecision
from iolab.workloads.sync_writes import SyncWritesParams, prepare_overwrite


def before_group(ctx: GroupContext) -> GroupDecision | None:
    """Prefill the overwrite region of every (bs, count) about to run on this target; skips nothing."""
    done = set()
    for c in ctx.configs:
        if c.workload.get("kind") != "sync-writes":
            continue
        p = SyncWritesParams(**c.workload)
        if p.overwrites and (p.bs, p.count) not in done:
            prepare_overwrite(ctx.placement, p)
            done.add((p.bs, p.count))
    return None
