"""fuserc's passes, one module per pass; `fuserc.pipeline` registers them."""
