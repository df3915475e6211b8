"""`python -m tilegcn estimate KEY`: the estimate of a cache entry's kernel, launched as its meta.json
says (grid, block) on zero tensors of the shapes its kernel.ir records (scalars = 1)."""
from __future__ import annotations

import re

import torch

from ..amdgcn.arch import TIMING
from ..errors import ArgumentError
from ..ir.types import DTYPES
from ..runtime.emulator import load
from .grid import estimate
from .sequence import SequenceEstimate

_PARAM = re.compile(r"^\s*param (\w+): (?:tensor<(\w+)> shape=\(([^)]*)\) strides=\(([^)]*)\)|scalar<(\w+)>)", re.M)


def _ints(text):
    return tuple(int(x) for x in text.replace(" ", "").split(",") if x)


def entry_args(entry) -> list:
    """Placeholder arguments in the order of the code object's kernel arguments."""
    params = {}
    for name, dtype, shape, strides, scalar in _PARAM.findall(entry.path.joinpath("kernel.ir").read_text()):
        if dtype:
            shape, strides = _ints(shape), _ints(strides)
            size = 1 + sum((n - 1) * s for n, s in zip(shape, strides)) if all(shape) else 0
            dt = DTYPES[dtype]  # zero bytes viewed as the dtype: torch cannot fill a float4_e2m1fn_x2 tensor
            zeros = torch.zeros(size * dt.bytes, dtype=torch.uint8).view(getattr(torch, dt.name))
            params[name] = zeros.as_strided(shape, strides)
        else:
            params[name] = 1.0 if scalar.startswith("f") else 1
    return [params[a["name"]] for a in entry.meta.get("args", [])]


def estimate_entry(entry, device=None, **options):
    meta = entry.meta
    if any(isinstance(g, str) for g in meta.get("grid", ())):  # a grid of T.dynamic sizes: no shape to estimate at
        raise ArgumentError(f"kernel {meta.get('name')} has dynamic sizes (T.dynamic; grid {meta['grid']}), so its "
                            "entry records no shape to estimate it at: estimate it from Python with "
                            "CompiledKernel.estimate(args=...) on tensors of the sizes you want", location="")
    module = load(entry.hsaco_path, arch=meta["arch"])
    device = device or TIMING[meta["arch"]].device
    if "kernels" in meta:  # a program of several T.Kernel blocks: its launches in order, summed
        args = dict(zip((a["name"] for a in meta["args"]), entry_args(entry)))
        return SequenceEstimate([estimate(module, k["name"], tuple(k["grid"]), tuple(k["block"]),
                                          [args[a["name"]] for a in k["args"]], device=device, **options)
                                 for k in meta["kernels"]])
    return estimate(module, meta["name"], tuple(meta["grid"]), tuple(meta["block"]), entry_args(entry),
                    device=device, **options)
