"""@tilegcn.jit: argument checks, arch choice, specialisation, the memo and the disk cache, end to end."""
import importlib
import json
import os
import textwrap

import pytest
import torch

import kernels
import tilegcn
from tilegcn import language as T
from tilegcn.cache import Cache, CacheWarning
from tilegcn.errors import ArgumentError, ToolchainError, UnsupportedArchError

jitmod = importlib.import_module("tilegcn.jit")  # `tilegcn.jit` is the decorator


def fresh(jit_fn):
    """A new JITFunction of the same tile program: no in-memory memo, zeroed counters."""
    return tilegcn.jit(jit_fn.fn)


def xy(M=300, N=200, dtype=torch.float32):
    x = torch.randn(M, N, dtype=dtype)
    return x, torch.empty_like(x)


@pytest.fixture
def no_gpu(monkeypatch):
    """Arch resolution as on a machine without an AMD GPU and without TILEGCN_ARCH."""
    monkeypatch.delenv("TILEGCN_ARCH", raising=False)
    monkeypatch.setattr(jitmod, "_visible_gpu_arch", lambda: None)


# -- argument checks (all before any tracing) --------------------------------------------------------------
def test_unknown_keyword_is_named_and_valid_ones_listed():
    f = fresh(kernels.axpb_relu)
    with pytest.raises(ArgumentError) as err:
        f.compile(*xy(), blockM=64)
    msg = str(err.value)
    assert "'blockM'" in msg
    for valid in ("a", "b", "block_M", "block_N", "threads", "arch"):
        assert valid in msg
    with pytest.raises(ArgumentError, match="'blockM'"):
        f(*xy(), blockM=64)
    assert f.cache_stats.traces == 0


def test_unsupported_dtype_names_the_argument_and_dtype():
    f = fresh(kernels.axpb_relu)
    x, y = xy()
    with pytest.raises(ArgumentError, match=r"tensor Y has dtype torch\.float64"):
        f(x, y.to(torch.float64))
    assert f.cache_stats.traces == 0


def test_non_unit_last_stride_asks_for_contiguous():
    f = fresh(kernels.axpb_relu)
    x, y = xy(200, 300)
    with pytest.raises(ArgumentError) as err:
        f(x.t(), y.t().contiguous())
    msg = str(err.value)
    assert "tensor X" in msg and "unsupported strides" in msg and ".contiguous()" in msg


def test_tensors_on_different_devices():
    f = fresh(kernels.axpb_relu)
    x, _ = xy()
    with pytest.raises(ArgumentError, match="different devices: X on cpu, Y on meta"):
        f(x, torch.empty(x.shape, device="meta"))


def test_wrong_argument_count_and_type():
    f = fresh(kernels.axpb_relu)
    x, y = xy()
    with pytest.raises(ArgumentError, match=r"takes 2 positional argument\(s\) \(X, Y\), got 1"):
        f(x)
    with pytest.raises(ArgumentError, match="argument Y of axpb_relu.. must be a torch tensor .* got str"):
        f(x, "y")


def test_decoration_rejects_what_cannot_be_specialised():
    def var_args(*tensors):
        pass

    with pytest.raises(ArgumentError, match=r"\*args"):
        tilegcn.jit(var_args)


# -- target arch ------------------------------------------------------------------------------------------
def test_arch_resolution_order(monkeypatch, no_gpu):
    assert jitmod.resolve_arch() == "gfx950"  # the default
    monkeypatch.setattr(jitmod, "_visible_gpu_arch", lambda: "gfx942")
    assert jitmod.resolve_arch() == "gfx942"  # the visible GPU
    monkeypatch.setattr(jitmod, "_visible_gpu_arch", lambda: "gfx950")
    monkeypatch.setenv("TILEGCN_ARCH", "gfx942")
    assert jitmod.resolve_arch() == "gfx942"  # the environment beats the GPU
    assert jitmod.resolve_arch("gfx950") == "gfx950"  # arch= beats everything
    monkeypatch.setenv("TILEGCN_ARCH", "gfx90a")
    with pytest.raises(UnsupportedArchError, match="TILEGCN_ARCH=gfx90a") as err:
        jitmod.resolve_arch()
    assert "gfx942" in str(err.value) and "gfx950" in str(err.value)


def test_unknown_arch_lists_supported_ones(no_gpu):
    f = fresh(kernels.axpb_relu)
    for call in (lambda: f(*xy(), arch="gfx90a"), lambda: f.compile(*xy(), arch="gfx1100")):
        with pytest.raises(UnsupportedArchError) as err:
            call()
        assert "gfx942, gfx950" in str(err.value)
    with pytest.raises(UnsupportedArchError, match="gfx942, gfx950"):
        tilegcn.jit(arch="sm_90")(kernels.axpb_relu.fn)


# -- the warm-path key ------------------------------------------------------------------------------------
def test_warm_key_specialises_on_dtype_shape_strides_alignment_and_scalar_type():
    keyfn = jitmod._make_keyfn(2)
    x, y = xy(64, 64)
    base = keyfn(x, y)
    assert keyfn(torch.randn(64, 64), torch.randn(64, 64)) == base  # another pair of the same kind
    flat = torch.randn(64 * 64 + 1)
    others = [
        keyfn(x.to(torch.bfloat16), y),  # dtype
        keyfn(torch.randn(64, 32), y),  # shape
        keyfn(torch.randn(64, 128)[:, :64], y),  # strides
        keyfn(flat[1:].view(64, 64), y),  # data pointer not 16-byte aligned
        keyfn(x, 3),  # a scalar instead of a tensor
        keyfn(x, torch.empty(64, 64, device="meta")),  # device
    ]
    assert base not in others and len(set(others)) == len(others)
    assert keyfn(x, 3) == keyfn(x, 7) != keyfn(x, 7.0)  # scalars: type, not value
    with pytest.raises(TypeError):
        keyfn(x)


# -- end to end against the real pipeline -------------------------------------------------------------------
def entries(cache_dir):
    return sorted(e.key for e in Cache(cache_dir).entries())


def test_compile_gives_ir_asm_hsaco_and_metadata(cache_dir, no_gpu):
    f = fresh(kernels.axpb_relu)
    k = f.compile(*xy())
    assert k.name == "axpb_relu" and k.arch == "gfx950"
    assert k.ir.startswith("kernel axpb_relu") and "param X" in k.ir
    assert "axpb_relu" in k.asm
    assert open(k.hsaco_path, "rb").read(4) == b"\x7fELF"
    assert os.path.dirname(k.hsaco_path) == str(cache_dir / k.key[:2] / k.key)
    meta = k.metadata
    assert meta["arch"] == "gfx950" and meta["name"] == "axpb_relu"
    assert tuple(meta["grid"]) == k.grid == (2, 2, 1) and tuple(meta["block"]) == k.block == (256, 1, 1)
    for field in ("lds_bytes", "vgprs", "sgprs", "args", "source", "compile_time", "llvm_version",
                  "hsaco_sha256"):
        assert field in meta, field
    assert meta["source"].endswith("kernels.py:15")
    assert entries(cache_dir) == [k.key]
    assert f.compile(*xy()) is k  # same specialisation: the same CompiledKernel, no new trace
    assert (f.cache_stats.traces, f.cache_stats.compiles) == (1, 1)


def test_key_changes_with_constant_dtype_and_arch(no_gpu):
    f = fresh(kernels.axpb_relu)
    base = f.compile(*xy()).key
    assert fresh(kernels.axpb_relu).compile(*xy()).key == base  # same program, same key
    keys = {
        f.compile(*xy(), a=3.0).key,
        f.compile(*xy(dtype=torch.bfloat16)).key,
        f.compile(*xy(), arch="gfx942").key,
        f.compile(*xy(600, 200)).key,
    }
    assert base not in keys and len(keys) == 4


def test_new_process_hits_the_disk_cache_with_the_same_key(run_python, no_gpu):
    tilegcn.cache.compiler_hash.cache_clear()  # hash the sources as they are now, as the child will
    key = fresh(kernels.axpb_relu).compile(*xy()).key
    code = textwrap.dedent("""
        import dataclasses, json, torch, kernels
        x = torch.randn(300, 200); y = torch.empty_like(x)
        k = kernels.axpb_relu.compile(x, y)
        print(json.dumps({"key": k.key, **dataclasses.asdict(kernels.axpb_relu.cache_stats)}))
    """)
    out = json.loads(run_python(code, env={"TILEGCN_DEVICE": "emulator"}).stdout.strip().splitlines()[-1])
    assert out["key"] == key
    assert out["compiles"] == 0 and out["disk_hits"] == 1


def test_tilegcn_arch_is_honoured(monkeypatch, cache_dir, no_gpu):
    f = fresh(kernels.axpb_relu)
    monkeypatch.setenv("TILEGCN_ARCH", "gfx942")
    k = f.compile(*xy())
    assert k.arch == "gfx942" and k.metadata["arch"] == "gfx942"
    assert "gfx942" in k.asm and "gfx950" not in k.asm
    monkeypatch.setenv("TILEGCN_ARCH", "gfx950")
    assert f.compile(*xy()).arch == "gfx950"
    assert f.compile(*xy(), arch="gfx942") is k


def test_corrupted_or_missing_hsaco_is_rebuilt_with_a_warning(cache_dir, no_gpu):
    k = fresh(kernels.axpb_relu).compile(*xy())
    good = open(k.hsaco_path, "rb").read()
    with open(k.hsaco_path, "r+b") as fh:
        fh.seek(len(good) // 2)
        fh.write(b"\xff\xff\xff\xff")
    f = fresh(kernels.axpb_relu)
    with pytest.warns(CacheWarning, match="does not match the sha256"):
        k2 = f.compile(*xy())
    assert f.cache_stats.compiles == 1 and open(k2.hsaco_path, "rb").read() == good
    os.remove(k2.hsaco_path)
    f = fresh(kernels.axpb_relu)
    with pytest.warns(CacheWarning, match="kernel.hsaco is missing"):
        f.compile(*xy())
    assert f.cache_stats.compiles == 1 and open(k2.hsaco_path, "rb").read() == good


def test_failed_assemble_leaves_no_entry_and_the_next_compile_works(cache_dir, monkeypatch, no_gpu):
    def broken(asm, arch):
        raise ToolchainError("tilegcn: llvm-mc crashed (test)")

    f = fresh(kernels.axpb_relu)
    with monkeypatch.context() as m:
        m.setattr(tilegcn.toolchain, "assemble", broken)
        with pytest.raises(ToolchainError, match="crashed"):
            f.compile(*xy())
    shard_contents = [p for d in cache_dir.iterdir() for p in os.listdir(d) if not p.endswith(".lock")]
    assert shard_contents == []  # no entry, no half-written temp dir
    k = f.compile(*xy())
    assert f.cache_stats.compiles == 1 and entries(cache_dir) == [k.key]


def test_missing_llvm_fails_the_compile_with_the_install_command(tmp_path, monkeypatch, no_gpu):
    monkeypatch.setenv("TILEGCN_LLVM_DIR", str(tmp_path))
    tilegcn.toolchain.find_llvm.cache_clear()
    try:
        with pytest.raises(ToolchainError, match="apt-get install -y llvm-22 lld-22"):
            fresh(kernels.axpb_relu).compile(*xy())
    finally:
        tilegcn.toolchain.find_llvm.cache_clear()


# -- calls: launch on the emulated device ----------------------------------------------------------------
@pytest.fixture
def emulator(monkeypatch, no_gpu):
    monkeypatch.setenv("TILEGCN_DEVICE", "emulator")


def test_call_runs_and_a_warm_call_does_not_retrace_or_recompile(emulator):
    f = fresh(kernels.axpb_relu)
    x, y = xy(100, 70)  # one 256x128 tile, partly out of range
    f(x, y)
    assert torch.equal(y, torch.relu(2 * x + 1))
    x2, y2 = xy(100, 70)  # other tensors, same specialisation
    f(x2, y2)
    assert torch.equal(y2, torch.relu(2 * x2 + 1))
    s = f.cache_stats
    assert (s.traces, s.compiles, s.memo_misses) == (1, 1, 1)
    f(x, y, a=-1.0)  # a new constant: a new specialisation
    assert torch.equal(y, torch.relu(1 - x))
    f(x2, y2, a=-1.0)
    assert (s.traces, s.compiles, s.memo_misses) == (2, 2, 2)
    assert len(f.launchers()) == 2


def test_environment_changes_take_effect_between_warm_calls(emulator, monkeypatch):
    f = fresh(kernels.axpb_relu)
    x, y = xy(100, 70)
    monkeypatch.setenv("TILEGCN_ARCH", "gfx942")
    f(x, y)
    monkeypatch.setenv("TILEGCN_ARCH", "gfx950")
    f(x, y)
    assert sorted(launcher.kernel.arch for launcher in f.launchers()) == ["gfx942", "gfx950"]
    assert torch.equal(y, torch.relu(2 * x + 1))
    monkeypatch.setenv("TILEGCN_ARCH", "gfx90a")
    with pytest.raises(UnsupportedArchError, match="TILEGCN_ARCH=gfx90a"):
        f(x, y)


def test_compiled_kernel_call_checks_the_specialisation(emulator):
    f = fresh(kernels.axpb_relu)
    x, y = xy(100, 70)
    k = f.compile(x, y, b=0.5)
    k(x, y)
    assert torch.equal(y, torch.relu(2 * x + 0.5))
    with pytest.raises(ArgumentError, match=r"compiled for X: float32 \[100, 70\].*called with X: float32 \[70, 100\]"):
        k(*xy(70, 100))


@tilegcn.jit
def scale(X, Y, s, *, block_M=256, block_N=128, threads=256):
    M, N = X.shape
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        x = T.alloc_fragment((block_M, block_N), "float32")
        T.copy(X[by * block_M, bx * block_N], x)
        for i, j in T.Parallel(block_M, block_N):
            x[i, j] = x[i, j] * s
        T.copy(x, Y[by * block_M, bx * block_N])


def test_runtime_scalar_is_passed_by_value_and_specialised_on_its_type(emulator):
    f = fresh(scale)
    x, y = xy(100, 70)
    f(x, y, 3.0)
    assert torch.allclose(y, 3 * x)
    f(x, y, -0.5)  # another value: the same kernel
    assert torch.allclose(y, -0.5 * x)
    assert (f.cache_stats.traces, f.cache_stats.compiles) == (1, 1)
    assert f.compile(x, y, 2).key != f.compile(x, y, 2.0).key  # int and float scalars differ
