"""One code object holding the kernels of a program with several `T.Kernel` blocks.

Each block is lowered on its own (the whole pass list, compiler.py); their assembly texts, each a complete
single-kernel file (emit.render), are joined here into one file: the `.amdgcn_target` line once, each kernel's
text and `.amdhsa_kernel` descriptor in launch order, and ONE `.amdgpu_metadata` document listing every kernel (the
code object format has one metadata note; llvm-mc refuses a second document). Local labels (`.L...`) are file
scope for the assembler, so the second and later kernels' labels get a `_k<index>` suffix.
"""
from __future__ import annotations

import re

_LOCAL_LABEL = re.compile(r"(\.L[A-Za-z_][A-Za-z0-9_]*)")
_METADATA_START, _METADATA_END = ".amdgpu_metadata", ".end_amdgpu_metadata"
_KERNEL_LIST = "amdhsa.kernels:"
_DOCUMENT_END = "..."


def _split(asm: str) -> tuple:
    """(the text before the metadata block, the metadata document's lines before the kernel list, the kernel
    list's entries) of one single-kernel assembly file."""
    start, end = asm.index(_METADATA_START), asm.index(_METADATA_END)
    code = asm[:start]
    lines = asm[start + len(_METADATA_START):end].strip("\n").splitlines()
    at = lines.index(_KERNEL_LIST)
    stop = lines.index(_DOCUMENT_END)
    return code, lines[:at + 1], lines[at + 1:stop]


def merge_kernel_asm(asms: list) -> str:
    """One assembly file with every kernel of `asms` (single-kernel files for one target, in launch order)."""
    codes, entries, head = [], [], None
    for index, asm in enumerate(asms):
        if index:
            asm = _LOCAL_LABEL.sub(rf"\1_k{index}", asm)
        code, document_head, kernels = _split(asm)
        if head is None:
            head = document_head
        else:  # the target directive once, at the top of the file
            code = "\n".join(line for line in code.splitlines() if not line.startswith(".amdgcn_target")) + "\n"
        codes.append(code)
        entries += kernels
    metadata = "\n".join([_METADATA_START, *head, *entries, _DOCUMENT_END, _METADATA_END])
    return "".join(codes) + metadata + "\n"
