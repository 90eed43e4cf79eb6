"""Backends: the interface every evaluator call goes through, and its cpu (MPI/gloo) and cuda (CuPy, NCCL, CUDA IPC) implementations with their communication layers."""
