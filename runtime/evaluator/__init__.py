"""The evaluator: the host-IR interpreter and its op handlers, programs, the reference evaluator, the allocation cache and memory pool, captured graphs, traces."""
