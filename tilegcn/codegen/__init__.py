"""Tile IR -> machine instructions, the parts both sides meet in: the kernel ABI (argument layout, buffer
resources, initial registers: abi.py) and global-memory access code (addresses, masks, widths: memory.py).
Above amdgcn/ (the machine layer, which never imports the IR) and below passes/ (the statement lowerings)."""
