"""nnbench: benchmark and profile the CUDA kernels behind neural-network training."""

__version__ = "0.1.0"
