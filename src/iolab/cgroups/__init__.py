"""cgroup I/O control: detection, one backend per controller, scheduler control, cleanup,
and a sampler of per-group kernel counters. Studies use CgroupSession."""
