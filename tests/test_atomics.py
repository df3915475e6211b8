"""T.atomic_add / atomic_max / atomic_min on the emulated device, against torch: every update of every thread and
workgroup applies once (colliding updates included), return_prev hands each thread a distinct old value, 16-bit and
shared forms, ragged edges, and the refusals. Small kernels (64-128 threads, a few workgroups)."""
import pytest
import torch

import tilegcn
from tilegcn import language as T
from tilegcn.errors import CompileError

ARCHES = ["gfx942", "gfx950"]


@tilegcn.jit
def column_extreme(X, Out, *, op="max", block=64):
    """Out[j] = op(Out[j], X[i, j]) over every row: all workgroups and threads update the same 16 elements."""
    with T.Kernel(X.shape[0] // block, threads=64) as bx:
        x = T.alloc_fragment((block, X.shape[1]), "float32")
        T.copy(X[bx * block, 0], x)
        for i, j in T.Parallel(block, X.shape[1]):
            if op == "max":
                T.atomic_max(Out[j], x[i, j])
            else:
                T.atomic_min(Out[j], x[i, j])


@pytest.mark.parametrize("arch,op", [("gfx942", "max"), ("gfx950", "min")])  # one code path: each op, each arch
def test_fp32_max_min_of_colliding_updates_equal_torch(arch, op):
    X = torch.randn(128, 16, generator=torch.Generator().manual_seed(0))
    X[:, 3] = -X[:, 3].abs()  # a column of negatives only: max must come from the sign-set path
    X[:, 4] = X[:, 4].abs()  # and one of positives only
    X[:, 5] = torch.tensor([0.0, -0.0] * 64)  # signed zeros
    out = torch.full((16,), float("-inf") if op == "max" else float("inf"))
    column_extreme(X, out, op=op, arch=arch)
    want = X.amax(0) if op == "max" else X.amin(0)
    assert torch.equal(out, want)
    assert torch.equal(out[5].signbit(), torch.tensor(op == "min"))  # max(+0, -0) = +0, min = -0, as torch


@tilegcn.jit
def tickets(Counter, Prev, *, scope="global", block=128):
    """Every thread adds 1.0 to one counter (of Counter's dtype) and keeps the value it replaced."""
    with T.Kernel(Prev.shape[0] // block, threads=128) as bx:
        p = T.alloc_fragment((block,), "float32")
        if scope == "global":
            for i in T.Parallel(block):
                p[i] = T.atomic_add(Counter[0], 1.0, return_prev=True)
        else:
            c = T.alloc_shared((1,), Counter.dtype)
            for i in T.Parallel(1):
                c[i] = 0.0
            for i in T.Parallel(block):
                p[i] = T.atomic_add(c[0], 1.0, return_prev=True)
        T.copy(p, Prev[bx * block])


# fp32 (buffer_atomic_add_f32 / ds_add_rtn_f32), f16 (buffer_atomic_pk_add_f16 on a lone element), bf16 (gfx942's
# cmpswap loop; ds_pk_add_rtn_bf16): the counts stay exact integers in every dtype (bf16 up to 256)
TICKETS = [("gfx942", "global", torch.float32), ("gfx950", "shared", torch.float32),
           ("gfx942", "global", torch.float16), ("gfx942", "global", torch.bfloat16),
           ("gfx950", "shared", torch.bfloat16)]


@pytest.mark.parametrize("arch,scope,dtype", TICKETS)
def test_return_prev_gives_each_thread_a_distinct_ticket(arch, scope, dtype):
    counter, prev = torch.zeros(2, dtype=dtype), torch.full((256,), -1.0)  # 16-bit: a whole dword (see below)
    tickets(counter, prev, scope=scope, arch=arch)
    if scope == "global":  # one counter for both workgroups: 0..255 handed out once each
        assert counter[0].item() == 256 and sorted(prev.tolist()) == list(range(256)) and counter[1].item() == 0
    else:  # one counter per workgroup's LDS, two waves sharing it
        assert sorted(prev[:128].tolist()) == sorted(prev[128:].tolist()) == list(range(128))


@tilegcn.jit
def count_elements(Y):
    """16 elements over 64 threads (each held by 4 of them): every workgroup adds 1 to each element once."""
    with T.Kernel(3, threads=64):
        for i in T.Parallel(16):
            T.atomic_add(Y[i], 1.0)


def test_a_tile_smaller_than_the_workgroup_is_applied_once_per_element():
    y = torch.zeros(16)
    count_elements(y, arch="gfx942")
    assert torch.equal(y, torch.full((16,), 3.0))


@tilegcn.jit
def fold_columns(X, Out, *, block=32):
    """Out[i, j] += X[i, bx * W + j] for every column tile bx of X (W = Out's width): the tile form, several
    workgroups adding into each element, the last tiles ragged (columns past X's end add nothing, rows past Out's
    end are not updated)."""
    W = Out.shape[1]
    with T.Kernel(T.ceildiv(X.shape[1], W), T.ceildiv(X.shape[0], block), threads=64) as (bx, by):
        x = T.alloc_fragment((block, W), "float32")
        T.copy(X[by * block, bx * W], x)
        T.atomic_add(Out[by * block, 0], x)


@tilegcn.jit
def fold_rows(X, Out, *, block=64):
    """Out[i] += X[bx * block + i]: one element per thread, so a 16-bit element is alone in its dword."""
    with T.Kernel(X.shape[0] // block, threads=64) as bx:
        x = T.alloc_fragment((block,), "float32")
        T.copy(X[bx * block], x)
        for i in T.Parallel(block):
            T.atomic_add(Out[i], x[i])


# gfx942's bf16 add has no instruction: a compare-and-swap loop; the others are buffer_atomic_pk_add_*
CASES_16 = [("gfx942", torch.float16), ("gfx942", torch.bfloat16), ("gfx950", torch.bfloat16)]


@pytest.mark.parametrize("arch,dtype", CASES_16)
def test_16bit_add_in_pairs_and_alone(arch, dtype):
    gen = torch.Generator().manual_seed(1)
    X, out = torch.randn(60, 90, generator=gen), torch.randn(60, 32, generator=gen).to(dtype)  # ragged both ways
    want = out.float() + X[:, :32] + X[:, 32:64] + torch.nn.functional.pad(X[:, 64:], (0, 6))
    k = fold_columns.compile(X, out, arch=arch)
    native = f"buffer_atomic_pk_add_{str(dtype)[6:].replace('float', 'f')}"
    assert (native in k.asm) != (arch == "gfx942" and dtype == torch.bfloat16)
    fold_columns(X, out, arch=arch)
    tol = 3 * 2.0 ** -7 if dtype == torch.bfloat16 else 3 * 2.0 ** -10  # a rounding per add, values up to ~8
    torch.testing.assert_close(out.float(), want, rtol=tol, atol=tol * 8)
    X, out = torch.randn(256, generator=gen), torch.zeros(64, dtype=dtype)
    fold_rows(X, out, arch=arch)
    torch.testing.assert_close(out.float(), X.view(4, 64).sum(0), rtol=tol, atol=tol * 8)


@pytest.mark.parametrize("arch,dtype", [("gfx942", torch.float16), ("gfx950", torch.bfloat16)])
def test_16bit_max_min_by_compare_and_swap_equal_torch(arch, dtype):
    X = torch.randn(128, 16, generator=torch.Generator().manual_seed(3))
    for op in ["max", "min"]:
        out = torch.full((16,), float("-inf") if op == "max" else float("inf"), dtype=dtype)
        column_extreme(X, out, op=op, arch=arch)
        assert torch.equal(out, (X.amax(0) if op == "max" else X.amin(0)).to(dtype))


@tilegcn.jit
def histogram(W, Out, *, block=128):
    """Shared bins: bins[i % 16] += w[i] by every thread (two waves), then the bins added into Out as a tile."""
    with T.Kernel(W.shape[0] // block, threads=128) as bx:
        bins = T.alloc_shared((16,), Out.dtype)
        for i in T.Parallel(16):
            bins[i] = 0.0
        w = T.alloc_fragment((block,), "float32")
        T.copy(W[bx * block], w)
        for i in T.Parallel(block):
            T.atomic_add(bins[i % 16], w[i])
        T.atomic_add(Out[0], bins)


@pytest.mark.parametrize("arch,dtype", [("gfx942", torch.float32), ("gfx950", torch.float16)])
def test_shared_bins_then_global_tile(arch, dtype):
    W = torch.randn(512, generator=torch.Generator().manual_seed(2))
    out = torch.zeros(16, dtype=dtype)
    k = histogram.compile(W, out, arch=arch)
    assert ("ds_add_f32" if dtype == torch.float32 else "ds_pk_add_f16") in k.asm
    histogram(W, out, arch=arch)
    tol = 1e-5 if dtype == torch.float32 else 2e-2  # f16: a rounding per add into the bins
    torch.testing.assert_close(out.float(), W.view(-1, 16).sum(0), rtol=tol, atol=tol)


@tilegcn.jit
def shared_column_max(W, Out):
    """16-bit shared bins: bins[i % 16] = max(bins[i % 16], w[i]) by 128 threads (a compare-and-swap loop in LDS)."""
    with T.Kernel(1, threads=128):
        bins = T.alloc_shared((16,), Out.dtype)
        for i in T.Parallel(16):
            bins[i] = -T.infinity("float32")
        w = T.alloc_fragment((128,), "float32")
        T.copy(W[0], w)
        for i in T.Parallel(128):
            T.atomic_max(bins[i % 16], w[i])
        T.copy(bins, Out[0])


@pytest.mark.parametrize("arch,dtype", [("gfx942", torch.bfloat16), ("gfx950", torch.float16)])
def test_16bit_shared_max_by_compare_and_swap_equals_torch(arch, dtype):
    W, out = torch.randn(128, generator=torch.Generator().manual_seed(5)), torch.zeros(16, dtype=dtype)
    k = shared_column_max.compile(W, out, arch=arch)
    assert "ds_cmpst_rtn_b32" in k.asm
    shared_column_max(W, out, arch=arch)
    assert torch.equal(out, W.view(8, 16).amax(0).to(dtype))  # max, then rounding: rounding is monotonic


@tilegcn.jit
def misuse(X, Y, *, case=""):
    with T.Kernel(1, threads=64):
        x = T.alloc_fragment((64,), "float32")
        T.copy(X[0], x)
        if case == "memory_order":
            for i in T.Parallel(64):
                T.atomic_add(Y[i], x[i], memory_order="acquire")
        elif case == "tile_return_prev":
            T.atomic_add(Y[0], x, return_prev=True)
        elif case == "odd_16bit":  # Y of 63 elements: the last one's dword would pass the tensor's end
            for i in T.Parallel(64):
                T.atomic_add(Y[i], x[i])
        elif case == "replicated_return_prev":  # 16 elements over 64 threads: each held by 4 of them
            p = T.alloc_fragment((16,), "float32")
            for i in T.Parallel(16):
                p[i] = T.atomic_add(Y[i], 1.0, return_prev=True)
            T.copy(p, Y[16])
        elif case == "fragment":
            for i in T.Parallel(64):
                T.atomic_max(x[i], 1.0)


@pytest.mark.parametrize("case,dtype,message", [
    ("memory_order", torch.float32, "atomics are relaxed"),
    ("tile_return_prev", torch.float32, "returned by the element form only"),
    ("fragment", torch.float32, "belongs to one thread"),
    ("replicated_return_prev", torch.float32, "held by several threads"),
    ("odd_16bit", torch.float16, "passes the end of its 126 bytes"),
])
def test_refusals_name_the_line_and_the_way_around(case, dtype, message):
    with pytest.raises(CompileError, match=message) as e:
        misuse(torch.zeros(64), torch.zeros(63 if case == "odd_16bit" else 64, dtype=dtype), case=case, arch="gfx942")
    assert e.value.location.startswith(__file__)


@tilegcn.jit
def int_updates(W, Count, Out, Prev, *, op="add", block=128):
    """Count[i % 10] += 1 by every thread (a counter per bin), Out[i % 10] op= W[t]; Prev[t]: the count before."""
    with T.Kernel(W.shape[0] // block, threads=128) as bx:
        w = T.alloc_fragment((block,), "int32")
        p = T.alloc_fragment((block,), "int32")
        T.copy(W[bx * block], w)
        for i in T.Parallel(block):
            p[i] = T.atomic_add(Count[i % 10], 1, return_prev=True)
            if op == "add":
                T.atomic_add(Out[i % 10], w[i])
            elif op == "max":
                T.atomic_max(Out[i % 10], w[i])
            else:
                T.atomic_min(Out[i % 10], w[i])
        T.copy(p, Prev[bx * block])


@pytest.mark.parametrize("arch,op", [("gfx942", "add"), ("gfx950", "max"), ("gfx942", "min")])
def test_int32_counters_and_updates_equal_torch(arch, op):
    w = torch.randint(-(1 << 30), 1 << 30, (256,), dtype=torch.int32, generator=torch.Generator().manual_seed(4))
    count, prev = torch.zeros(10, dtype=torch.int32), torch.full((256,), -1, dtype=torch.int32)
    out = torch.zeros(10, dtype=torch.int32)
    int_updates(w, count, out, prev, op=op, arch=arch)
    bins = torch.arange(256) % 128 % 10
    assert torch.equal(count, torch.bincount(bins, minlength=10).int())
    for b in range(10):  # each thread's ticket is distinct: 0 .. count - 1
        assert sorted(prev[bins == b].tolist()) == list(range(int(count[b])))
    reduce = {"add": "sum", "max": "amax", "min": "amin"}[op]  # values past fp32's 2^24: int math throughout
    want = torch.zeros(10, dtype=torch.int64).scatter_reduce(0, bins, w.long(), reduce)
    assert torch.equal(out.long(), (want + (1 << 31)) % (1 << 32) - (1 << 31))  # int32 adds wrap
