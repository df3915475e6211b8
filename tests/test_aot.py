"""Ahead-of-time export (tilegcn/aot.py, `python -m tilegcn export`): code objects per arch + a manifest, loaded
with `tilegcn.load` and run with no LLVM and no tracing."""
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import torch

import tilegcn
from tilegcn.autotune import Autotuner

REPO_EXAMPLE_GEMM = "examples/gemm/gemm.py:gemm"
GEMM_SHAPES = ("A=64x96:bfloat16,B=96x64:bfloat16,C=64x64:bfloat16,block_M=32,block_N=32,block_K=32,threads=64;"
               "A=32x32:float16,B=32x32:float16,C=32x32:float16,block_M=32,block_N=32,block_K=32,threads=64")


def _cli_all(commands, env, cwd) -> list:
    """Run several `python -m tilegcn export` commands at once; their CompletedProcess-like results, in order."""
    procs = [subprocess.Popen([sys.executable, "-m", "tilegcn", "export", *args], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env, cwd=cwd) for args in commands]
    results = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=300)
        results.append(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr))
    return results


@pytest.fixture(scope="module")
def exported_once(tmp_path_factory):
    """The elementwise kernel (--example) and the GEMM example (--shapes) exported for gfx942 and gfx950, once for
    this file (in a cache of its own); tests that alter them take a copy (`exported`)."""
    from conftest import REPO, TESTS

    root = tmp_path_factory.mktemp("aot")
    subprocess_env = {**os.environ, "TILEGCN_CACHE_DIR": str(root / "cache"),
                      "PYTHONPATH": os.pathsep.join([str(REPO), str(TESTS)])}
    out = {"elementwise": root / "elementwise", "gemm": root / "gemm"}
    runs = _cli_all([
        [f"{TESTS}/kernels.py:axpb_relu", "--arch", "gfx942,gfx950",
         "--example", f"{TESTS}/aot_examples.py:elementwise_calls", "-o", str(out["elementwise"])],
        [REPO_EXAMPLE_GEMM, "--arch", "gfx942,gfx950", "--shapes", GEMM_SHAPES, "-o", str(out["gemm"])],
    ], subprocess_env, REPO)
    for proc in runs:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "exported axpb_relu: 4 entries" in runs[0].stdout
    assert "exported gemm: 4 entries" in runs[1].stdout
    manifest = json.loads((out["gemm"] / "manifest.json").read_text())
    assert [e["arch"] for e in manifest["entries"]] == ["gfx942", "gfx942", "gfx950", "gfx950"]
    assert manifest["entries"][0]["metadata"]["vgprs"] > 0  # the build's meta.json travels with the entry
    return out


@pytest.fixture
def exported(exported_once, tmp_path):
    copies = {}
    for name, folder in exported_once.items():
        copies[name] = tmp_path / name
        shutil.copytree(folder, copies[name])
    return copies


# Runs in a child whose PATH holds no LLVM and whose TILEGCN_LLVM_DIR is an empty folder: the toolchain cannot be
# found, so whatever runs here ran from the export alone.
_LOAD_AND_RUN = r"""
import json, sys, torch, tilegcn
from tilegcn import toolchain
try:
    toolchain.find_llvm("gfx942")
    raise SystemExit("LLVM is still reachable")
except tilegcn.ToolchainError:
    pass
paths = json.loads(sys.argv[1])
results = {}
torch.manual_seed(0)
for arch in ("gfx942", "gfx950"):
    ew = tilegcn.load(paths["elementwise"], arch=arch)
    for dtype, shape in ((torch.float32, (64, 128)), (torch.bfloat16, (32, 64))):
        x = torch.randn(shape).to(dtype)
        y = torch.full(shape, float("nan")).to(dtype)
        ew(x, y)
        # one rounding (the kernel's x * a + b is one FMA): float64 holds this product and sum exactly
        ref = torch.relu((x.double() * 3.0 + 1.0).float()).to(dtype)
        results[f"ew {arch} {dtype}"] = (y.float() - ref.float()).abs().max().item()
    gemm = tilegcn.load(paths["gemm"], arch=arch)
    for dtype, (m, n, k) in ((torch.bfloat16, (64, 64, 96)), (torch.float16, (32, 32, 32))):
        a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
        c = torch.full((m, n), float("nan")).to(dtype)
        gemm(a, b, c)
        ref = a.float() @ b.float()
        results[f"gemm {arch} {dtype}"] = ((c.float() - ref).abs().max() / ref.abs().max()).item()
try:
    ew(torch.zeros(16, 16), torch.zeros(16, 16))
    results["unexported"] = "no error"
except tilegcn.ArgumentError as e:
    results["unexported"] = str(e)
results["traced"] = sorted(m for m in sys.modules
                           if m.startswith(("tilegcn.language", "tilegcn.passes", "tilegcn.compiler")))
print(json.dumps(results))
"""


def test_export_runs_on_the_emulator_without_llvm(exported, subprocess_env, tmp_path):
    no_llvm = tmp_path / "no-llvm"
    no_llvm.mkdir()
    env = {**subprocess_env, "PATH": str(no_llvm), "TILEGCN_LLVM_DIR": str(no_llvm), "TILEGCN_DEVICE": "emulator",
           "TILEGCN_CACHE_DIR": str(tmp_path / "fresh-cache")}
    env.pop("TILEGCN_ARCH", None)
    paths = json.dumps({k: str(v) for k, v in exported.items()})
    proc = subprocess.run([sys.executable, "-c", _LOAD_AND_RUN, paths], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    for arch in ("gfx942", "gfx950"):
        assert results[f"ew {arch} torch.float32"] == 0.0
        assert results[f"ew {arch} torch.bfloat16"] == 0.0
        assert results[f"gemm {arch} torch.bfloat16"] < 2e-2
        assert results[f"gemm {arch} torch.float16"] < 2e-3
    assert results["traced"] == []  # nothing was traced or lowered
    message = results["unexported"]
    assert "no exported entry of axpb_relu" in message and "X: float32 [16, 16]" in message
    assert "X: float32 [64, 128]" in message and "X: bfloat16 [32, 64]" in message  # what was exported
    assert "python -m tilegcn export" in message  # the way around it


def test_tampered_code_object_is_refused(exported):
    victim = exported["gemm"] / "1.gfx942.hsaco"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01
    victim.write_bytes(bytes(data))
    with pytest.raises(tilegcn.ExportError, match=r"1\.gfx942\.hsaco does not match the manifest.*export again"):
        tilegcn.load(exported["gemm"])


def test_tampered_listing_and_missing_manifest_are_refused(exported, tmp_path):
    listing = exported["elementwise"] / "0.gfx942.objdump.txt"
    listing.write_text(listing.read_text().replace("s_endpgm", "s_nop 0", 1))
    with pytest.raises(tilegcn.ExportError, match=r"0\.gfx942\.objdump\.txt does not match the manifest"):
        tilegcn.load(exported["elementwise"])
    with pytest.raises(tilegcn.ExportError, match="is not a tilegcn export"):
        tilegcn.load(tmp_path)


def test_autotuned_export_ships_each_shapes_winner(tmp_path):
    """An @tilegcn.autotune function exports the tuned config per shape: the manifest is the dispatch table."""
    import autotune_kernels as K

    ranker = K.ShapeRanker(K.small_tiles_for_small_inputs)
    tuner = Autotuner(K.scale.fn, tilegcn.Space(block_M=[16, 32], block_N=[64], threads=[256]), ranker=ranker,
                      workers=1, verify=False, progress=False, verbose=False)
    small, big = (torch.zeros(16, 64), torch.zeros(16, 64)), (torch.zeros(64, 64), torch.zeros(64, 64))
    out = tilegcn.aot.export(tuner, [small, big], ["gfx942"], tmp_path / "scale")
    tuned = [e["tuned"] for e in json.loads((out / "manifest.json").read_text())["entries"]]
    assert tuned == [{"block_M": 16, "block_N": 64, "threads": 256}, {"block_M": 32, "block_N": 64, "threads": 256}]
    fn = tilegcn.load(out, arch="gfx942")
    for rows, block_M in ((16, 16), (64, 32)):
        x = torch.randn(rows, 64)
        y = torch.empty_like(x)
        fn(x, y)
        assert torch.equal(y, x * 2.0)
        assert fn.entry_for((x, y)).constants["block_M"] == block_M


def test_shapes_text_errors_name_the_fix(tmp_path, capsys):
    from conftest import REPO
    from tilegcn.__main__ import main

    status = main(["export", f"{REPO}/{REPO_EXAMPLE_GEMM}", "--arch", "gfx942", "--shapes",
                   "A=64x96:bfloat16,B=96x64:bfloat16", "-o", str(tmp_path / "x")])
    assert status == 1
    assert "--shapes call 0 lacks ['C'] (positional: A, B, C)" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_export_never_replaces_a_folder_it_did_not_write(tmp_path, capsys):
    from conftest import TESTS
    from tilegcn.__main__ import main

    theirs = tmp_path / "notes"
    theirs.mkdir()
    (theirs / "todo.txt").write_text("mine")
    status = main(["export", f"{TESTS}/kernels.py:copy2d", "--arch", "gfx942", "--shapes",
                   "X=64x64:float32,Y=64x64:float32", "-o", str(theirs)])
    assert status == 1
    assert "exists and is not an earlier tilegcn export; choose a new folder" in capsys.readouterr().err
    assert (theirs / "todo.txt").read_text() == "mine"


DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "export.md"
DOC_BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


@pytest.mark.parametrize("index", range(len(DOC_BLOCKS)))
def test_docs_example_runs(index, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the example writes its export folder in the current directory
    path = tmp_path / f"export_doc_{index}.py"
    path.write_text(DOC_BLOCKS[index])
    namespace = {"__name__": f"export_doc_{index}"}
    exec(compile(DOC_BLOCKS[index], str(path), "exec"), namespace)
    if "calls" in namespace and callable(namespace["calls"]):  # the --example file: its calls are well formed
        assert all(len(call) == 3 for call in namespace["calls"]())
    if index == 0:
        assert "no exported entry of scale" in capsys.readouterr().out


def test_loaded_calls_get_the_jit_checks(exported_once, monkeypatch):
    """The per-call checks of a jit call hold for an exported entry: arity, a written tensor overlapping another
    argument, a written leaf that requires grad."""
    monkeypatch.setenv("TILEGCN_DEVICE", "emulator")
    fn = tilegcn.load(exported_once["elementwise"], arch="gfx942")
    with pytest.raises(tilegcn.ArgumentError, match=r"takes 2 positional argument\(s\) \(X, Y\), got 1"):
        fn(torch.zeros(64, 128))
    storage = torch.randn(65 * 128)
    x, y = storage[:64 * 128].view(64, 128), storage[128:].view(64, 128)  # y starts one row into x
    with pytest.raises(tilegcn.ArgumentError, match="Y is written by the kernel and overlaps tensor X"):
        fn(x, y)
    with pytest.raises(tilegcn.ArgumentError, match="Y is written by the kernel but is a leaf that requires grad"):
        fn(torch.zeros(64, 128), torch.zeros(64, 128, requires_grad=True))
    x = torch.randn(64, 128)
    expected = torch.relu((x.double() * 3.0 + 1.0).float())  # exported with a=3.0, b=1.0: one FMA, one rounding
    fn(x, x)  # in place: the same view, as a jit call allows
    assert torch.equal(x, expected)
