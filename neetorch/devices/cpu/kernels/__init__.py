"""CPU kernels for non-elementwise ops; every module here is imported by the CPU backend."""
