"""fio's language: job text (rendering a job, reading and sandboxing an imported job file) and
its JSON output (metrics per job). The fio workloads, the fleet and the fleet target all speak
it, so it sits below them (docs/architecture.md, "Import graph and layers")."""
