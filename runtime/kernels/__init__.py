"""Kernels: generated region kernels, GEMMs and attention, their builds, build workers and the on-disk kernel cache."""
