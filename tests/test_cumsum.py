"""T.cumsum on the emulated device against torch: fragments of fp32 / fp16 / bf16 along dim 0 and 1, forwards and
reversed; fewer lines than threads, more (several rounds, a ragged last one), several waves; a float32 shared
buffer in place and into another; a dst of another dtype rounded once; the sums are fp32 in element order, so
they equal a sequential fp32 running sum bit for bit (and torch.cumsum to fp32 rounding); bad calls refused with
the user's line."""
import pytest
import torch

import tilegcn
from tilegcn import language as T
from tilegcn.errors import CompileError

ARCHES = ("gfx942", "gfx950")


@pytest.fixture(autouse=True)
def _emulator(monkeypatch):
    monkeypatch.setenv("TILEGCN_DEVICE", "emulator")


def running_sum(x: torch.Tensor, dim: int, reverse: bool) -> torch.Tensor:
    """The inclusive sum along `dim` in fp32, one element after the other (backwards for `reverse`)."""
    x = x.float().movedim(dim, -1)
    out, acc = torch.empty_like(x), torch.zeros_like(x[..., 0])
    order = range(x.shape[-1] - 1, -1, -1) if reverse else range(x.shape[-1])
    for j in order:
        acc = acc + x[..., j]
        out[..., j] = acc
    return out.movedim(-1, dim)


def torch_cumsum(x: torch.Tensor, dim: int, reverse: bool) -> torch.Tensor:
    return x.flip(dim).cumsum(dim).flip(dim) if reverse else x.cumsum(dim)


@tilegcn.jit
def cumsum_tiles(X, Y, *, block_M=4, block_N=64, threads=64, dim=1, reverse=False, out_dtype=None):
    """Y = cumsum of each [block_M, block_N] tile of X along dim."""
    M, N = X.shape
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        x = T.alloc_fragment((block_M, block_N), X.dtype)
        T.copy(X[by * block_M, bx * block_N], x)
        if out_dtype is None:
            T.cumsum(x, dim=dim, reverse=reverse)
            T.copy(x, Y[by * block_M, bx * block_N])
        else:
            y = T.alloc_fragment((block_M, block_N), out_dtype)
            T.cumsum(src=x, dst=y, dim=dim, reverse=reverse)
            T.copy(y, Y[by * block_M, bx * block_N])


def _randn(*shape, dtype, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _tiles(x, block_M, block_N, dim, reverse):
    """running_sum of each tile."""
    out = torch.empty_like(x, dtype=torch.float32)
    for i in range(0, x.shape[0], block_M):
        for j in range(0, x.shape[1], block_N):
            out[i:i + block_M, j:j + block_N] = running_sum(x[i:i + block_M, j:j + block_N], dim, reverse)
    return out


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("dim,reverse", [(0, False), (1, True)])
def test_fragment_cumsum_matches_torch(arch, dtype, dim, reverse):
    x = _randn(8, 128, dtype=dtype)
    y = torch.empty_like(x)
    cumsum_tiles(x, y, block_M=4, block_N=64, dim=dim, reverse=reverse, arch=arch)
    assert torch.equal(y, _tiles(x, 4, 64, dim, reverse).to(dtype))
    tiles = x.float().split(4, 0) if dim == 0 else x.float().split(64, 1)
    expected = torch.cat([torch_cumsum(t, dim, reverse) for t in tiles], dim)
    torch.testing.assert_close(y.float(), expected.to(dtype).float(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("block_M,block_N,threads,dim", [
    (128, 16, 64, 1),   # 128 lines over 64 threads: two rounds
    (96, 8, 64, 1),     # a ragged second round of 32 lines
    (16, 256, 256, 0),  # 256 lines over four waves
    (64, 1, 64, 1),     # lines of one element
])
def test_lines_and_threads(arch, block_M, block_N, threads, dim):
    x = _randn(block_M, block_N, dtype=torch.float32, seed=1)
    y = torch.empty_like(x)
    cumsum_tiles(x, y, block_M=block_M, block_N=block_N, threads=threads, dim=dim, arch=arch)
    assert torch.equal(y, running_sum(x, dim, False))
    torch.testing.assert_close(y, x.cumsum(dim), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("arch", ARCHES)
def test_dst_of_another_dtype_is_rounded_once(arch):
    x = _randn(4, 64, dtype=torch.float32, seed=2) * 100
    y = torch.empty(4, 64, dtype=torch.float16)
    cumsum_tiles(x, y, out_dtype="float16", arch=arch)
    assert torch.equal(y, running_sum(x, 1, False).half())


@tilegcn.jit
def shared_cumsum(X, Y, *, block=128, reverse=False, out_of_place=False):
    """A 1-d float32 shared buffer scanned in place (or into a second shared buffer) by 64 threads."""
    with T.Kernel(T.ceildiv(X.shape[0], block), threads=64) as bx:
        a = T.alloc_shared((block,), "float32")
        T.copy(X[bx * block], a)
        if out_of_place:
            b = T.alloc_shared((block,), "float32")
            T.cumsum(src=a, dst=b, dim=0, reverse=reverse)
            T.copy(b, Y[bx * block])
        else:
            T.cumsum(src=a, dim=0, reverse=reverse)
            T.copy(a, Y[bx * block])


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("reverse,out_of_place", [(False, False), (True, True)])
def test_shared_cumsum(arch, reverse, out_of_place):
    x = _randn(256, dtype=torch.float32, seed=3)
    y = torch.empty_like(x)
    shared_cumsum(x, y, reverse=reverse, out_of_place=out_of_place, arch=arch)
    expected = torch.cat([running_sum(t, 0, reverse) for t in x.split(128)])
    assert torch.equal(y, expected)


@tilegcn.jit
def misuse(X, *, case="dim"):
    with T.Kernel(1, threads=64):
        x = T.alloc_fragment((4, 64), "float32")
        T.copy(X[0, 0], x)
        if case == "dim":
            T.cumsum(x, dim=2)
        elif case == "shape":
            T.cumsum(x, T.alloc_fragment((64, 4), "float32"))
        elif case == "shared16":
            s = T.alloc_shared((4, 64), "float16")
            T.cumsum(s, dim=1)
        elif case == "global":
            T.cumsum(X, dim=1)
        elif case == "mixed":
            T.cumsum(x, T.alloc_shared((4, 64), "float32"))
        elif case == "region":
            T.cumsum(x[0:2, 0:64], dim=1)
        elif case == "parallel":
            for i, j in T.Parallel(4, 64):
                T.cumsum(x)


@pytest.mark.parametrize("case,words", [
    ("dim", "dim=2 is not a dimension"), ("shape", "must have the shape"), ("shared16", "float32 ones"),
    ("global", "is a global tensor; T.copy its tile"),
    ("region", "a region of x is not supported yet"), ("mixed", "one memory space"), ("parallel", "inside T.Parallel"),
])
def test_bad_calls_are_refused_at_the_users_line(case, words):
    with pytest.raises(CompileError, match=words) as e:
        misuse(torch.zeros(4, 64), case=case, arch="gfx942")
    assert "test_cumsum.py" in str(e.value)


@tilegcn.jit
def read_then_scan(X, Y, Z):
    """S is read into a fragment, then scanned in place: the scan's writes must wait until every wave has read S."""
    with T.Kernel(1, threads=256):
        s = T.alloc_shared((64, 64), "float32")
        x = T.alloc_fragment((64, 64), "float32")
        T.copy(X[0, 0], s)
        T.copy(s, x)
        T.cumsum(s, dim=1)
        T.copy(s, Y[0, 0])
        T.copy(x, Z[0, 0])


@pytest.mark.parametrize("arch", ARCHES)
def test_scan_in_place_after_other_waves_read(arch):
    x = _randn(64, 64, dtype=torch.float32, seed=4)
    y, z = torch.empty_like(x), torch.empty_like(x)
    read_then_scan(x, y, z, arch=arch)
    assert torch.equal(y, running_sum(x, 1, False))
    assert torch.equal(z, x)


def test_staging_shows_in_the_ir_and_counts_in_lds():
    """A fragment scanned along its last dimension goes through a float32 shared buffer a word wider a row."""
    k = cumsum_tiles.compile(torch.zeros(4, 64, dtype=torch.float16), torch.zeros(4, 64, dtype=torch.float16),
                             arch="gfx942")
    assert "alloc shared x_scan: float32[4, 65]" in k.ir
    assert "cumsum x_scan[0:4, 0:64] dim=1 -> x_scan[0:4, 0:64]" in k.ir
    assert k.metadata["lds_bytes"] >= 4 * 4 * 65
