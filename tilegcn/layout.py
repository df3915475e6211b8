"""TileLang's `tilelang.layout` names that tilegcn takes (for T.annotate_layout)."""
from __future__ import annotations

from .language.tir import SwizzledLayout


def make_swizzled_layout(buffer) -> SwizzledLayout:
    """A bank-conflict-free layout of shared `buffer`, for T.annotate_layout (TileLang's spelling): tilegcn lays out
    every shared buffer so already (language/tir.py), so the annotation states what happens anyway.

    Example:

    ```python
    T.annotate_layout({B_shared: tilegcn.layout.make_swizzled_layout(B_shared)})
    ```
    """
    return SwizzledLayout(buffer)
