"""Tile-IR passes and statement lowerings; the ordered pass list that runs them is `tilegcn/compiler.py`."""
