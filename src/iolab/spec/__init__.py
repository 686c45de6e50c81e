"""A study spec: the [study] settings table and the target × workload matrix, read and
checked against what the targets offer, the workloads need and the probes exist. Below
analysis, which reads the settings a run document carries, and below the studies and the
runner, which build and run the matrix (docs/architecture.md, "Import graph and layers")."""
