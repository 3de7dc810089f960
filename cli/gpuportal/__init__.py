"""gpuportal: a command-line client for GPU Portal, built on its public REST API only."""

__version__ = "0.1.0"
