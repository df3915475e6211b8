"""tilegcn: a Python tile language lowered straight to AMDGCN assembly for AMD Instinct GPUs."""
__version__ = "0.1.0"
