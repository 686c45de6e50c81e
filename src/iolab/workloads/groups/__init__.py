"""The parts of workload `fio-groups` (workloads/fio_groups.py), one concept per module.

params   what a trial asks for, and the shuffled assignment of weights to groups
gate     the start gate: every load process joins its group, then all start at once
cpu      CPU accounting beside the counters (/proc: machine and generator busy)
steady   steady-state statistics of one trial: the window, class shares, sharing metrics (pure)
flags    the confounders one trial can show (CPU-bound, not steady, tag pressure, ...) (pure)
run      orchestration of one trial: groups, gated fio processes, sampling, metrics
tenant   a real application in its own weighted group, alone or beside the groups: the table
         of operations each application fills in (TenantApp) and how a trial runs one

The applications themselves are workloads/db_bench.py and workloads/ycsb_tenant.py (each an
`APP`); workloads/fio_groups.py names them (TENANT_APPS), and nothing here imports them.
"""
