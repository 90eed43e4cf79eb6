"""The job: launchers (mpiexec, torchrun), start-up, the watchdog that ends a job when one rank fails, peers' identities, and reading inputs and writing outputs."""
