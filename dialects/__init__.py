"""xDSL definitions of fuserc's dialects: `fusion` (what users write) and
`hir` (the host programs every rank runs)."""
