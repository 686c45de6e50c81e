"""The parts of workload `fio-groups` (workloads/fio_groups.py), one concept per module.

params   what a trial asks for, and the shuffled assignment of weights to groups
gate     the start gate: every load process joins its group, then all start at once
cpu      CPU accounting beside the counters (/proc: machine and generator busy)
steady   steady-state statistics of one trial: the window, class shares, sharing metrics (pure)
flags    the confounders one trial can show (CPU-bound, not steady, tag pressure, ...) (pure)
run      orchestration of one trial: groups, gated fio processes, sampling, metrics

The tenant (RocksDB db_bench beside or instead of the groups) is workloads/db_bench.py;
it uses `run` and `params`, and nothing here imports it.
"""
