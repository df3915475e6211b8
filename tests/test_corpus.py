"""Other compilers' code objects on the emulated device (tests/corpus/): Triton 3.9's AMD backend output
for gfx942 and gfx950, built by bench/corpus/make_corpus.py, run here with hazard checks on against
torch, with no Triton installed. Triton's matmuls and attention are an implementation of the MFMA operand
layouts independent of tilegcn's; its kernels take their LDS as dynamic shared memory and read
tl.num_programs from the hidden kernel arguments. The low-precision kernels (issue 22: int8, fp8, fp32, xf32
matmuls, tl.dot_scaled on MX formats, an fp8 cast) are the oracle of the emulator's low-precision MFMA layouts,
element decodings and block scales: fp8 types from torch, MX scales decoded in numpy (corpus/reference.py)."""
from __future__ import annotations

import glob
import json
import os
import sys
from pathlib import Path

import pytest
import torch

from tilegcn.runtime import emulator
from tilegcn.runtime.emulator import coverage

sys.path.insert(0, str(Path(__file__).parent))
from corpus import reference  # noqa: E402

CORPUS = os.path.join(os.path.dirname(__file__), "corpus")
ENTRIES = sorted(glob.glob(os.path.join(CORPUS, "*.json")))
# kernels of one arch: gfx950 dropped xf32; only gfx950 has the scaled (MX) MFMAs these variants check
ONE_ARCH = {"matmul_xf32": "gfx942", **{f"dot_scaled_{v}": "gfx950" for v in (
    "mxfp8_16", "mxfp4_32", "mxfp8_mxfp4", "mxfp4_mxfp8_16")}}
def _param(path):
    return pytest.param(path, id=os.path.basename(path)[:-5])


def load_entry(path):
    with open(path) as f:
        return json.load(f)


def run_entry(meta, check=True, hsaco=None):
    """Launch one corpus kernel as its JSON says; returns (args by name, expected outputs by name)."""
    gen = torch.Generator().manual_seed(1234)
    named, values = {}, []
    for spec in meta["args"]:
        if spec["kind"] == "tensor":
            value = reference.make_input(spec, gen)
        elif spec["kind"] == "scalar":
            value = spec["value"]
        else:
            value = None  # a null pointer (Triton's scratch pointers)
        named[spec["name"]] = value
        values.append(value)
    expected = getattr(reference, meta["reference"])(**{k: v for k, v in named.items() if v is not None})
    mod = emulator.load(hsaco or os.path.join(CORPUS, meta["hsaco"]))
    mod.launch(meta["kernel"], tuple(meta["grid"]), tuple(meta["block"]), values,
               shared_mem=meta["shared_mem"], check=check)
    return named, expected


def _comparable(t):
    """fp8 tensors compare as their fp32 values (exactly: every fp8 value is one), the others as they are."""
    return t.float() if t.dtype.is_floating_point and t.element_size() == 1 else t


@pytest.mark.parametrize("path", [_param(p) for p in ENTRIES])
def test_corpus_kernel_matches_torch(path):
    meta = load_entry(path)
    missing = coverage.unsupported(emulator.load(os.path.join(CORPUS, meta["hsaco"])))
    assert not any(missing.values()), f"not modelled: {missing}"  # the coverage report prints nothing here
    named, expected = run_entry(meta)
    outputs = [s["name"] for s in meta["args"] if s.get("output")]
    assert sorted(outputs) == sorted(expected)
    for name in outputs:
        assert named[name].dtype == expected[name].dtype, name
        torch.testing.assert_close(_comparable(named[name]), _comparable(expected[name]), atol=meta["atol"],
                                   rtol=meta["rtol"],
                                   msg=lambda m: f"{meta['name']} ({meta['arch']}) output {name}: {m}")


def test_corpus_covers_both_arches_and_the_kernel_families():
    metas = [load_entry(p) for p in ENTRIES]
    names = {m["name"] for m in metas}
    for arch in ("gfx942", "gfx950"):
        want = {n for n in names if ONE_ARCH.get(n, arch) == arch}
        assert {m["name"] for m in metas if m["arch"] == arch} == want
    for family in ("softmax", "layernorm", "rmsnorm", "matmul", "flash_attn", "atomics", "convert", "int_math",
                   "matmul_i8", "matmul_fp8", "matmul_f32", "matmul_xf32", "dot_scaled_mxfp8", "dot_scaled_mxfp4",
                   "dot_scaled_bf16_mxfp8", "dot_scaled_bf16_mxfp4", "fp8_cast"):
        assert any(n.startswith(family) for n in names), family
