"""Other compilers' code objects on the emulated device (tests/corpus/): Triton 3.9's AMD backend output
for gfx942 and gfx950, built by bench/corpus/make_corpus.py, run here with hazard checks on against
torch, with no Triton installed. Triton's matmuls and attention are an implementation of the MFMA operand
layouts independent of tilegcn's; its kernels take their LDS as dynamic shared memory and read
tl.num_programs from the hidden kernel arguments."""
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


@pytest.mark.parametrize("path", ENTRIES, ids=[os.path.basename(p)[:-5] for p in ENTRIES])
def test_corpus_kernel_matches_torch(path):
    meta = load_entry(path)
    missing = coverage.unsupported(emulator.load(os.path.join(CORPUS, meta["hsaco"])))
    assert not any(missing.values()), f"not modelled: {missing}"  # the coverage report prints nothing here
    named, expected = run_entry(meta)
    outputs = [s["name"] for s in meta["args"] if s.get("output")]
    assert sorted(outputs) == sorted(expected)
    for name in outputs:
        torch.testing.assert_close(named[name], expected[name], atol=meta["atol"], rtol=meta["rtol"],
                                   msg=lambda m: f"{meta['name']} ({meta['arch']}) output {name}: {m}")


def test_corpus_covers_both_arches_and_the_kernel_families():
    metas = [load_entry(p) for p in ENTRIES]
    names = {m["name"] for m in metas}
    for arch in ("gfx942", "gfx950"):
        assert {m["name"] for m in metas if m["arch"] == arch} == names
    for family in ("softmax", "layernorm", "rmsnorm", "matmul", "flash_attn", "atomics", "convert", "int_math"):
        assert any(n.startswith(family) for n in names), family
