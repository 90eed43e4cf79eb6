"""Running programs: the reference evaluator, the host-IR evaluator and its
backends (cpu, cuda), the allocation cache."""
