"""T.print: a fragment's values per workgroup, printed on the host after the launch (and kept in `.printed`)."""
import inspect
import re

import pytest
import torch

import tilegcn
import tilegcn.aot
from tilegcn import language as T
from tilegcn.errors import CompileError, ExportError

_NUMBER = re.compile(r"-?\d+\.\d*(?:e[+-]?\d+)?")


@tilegcn.jit
def axpb(X, Y, *, a=2.0, b=1.0, block=64, msg=""):
    with T.Kernel(T.ceildiv(X.shape[0], block), threads=64) as bx:
        x = T.alloc_fragment((block,), "float32")
        T.copy(X[bx * block], x)
        for i in T.Parallel(block):
            x[i] = x[i] * a + b
        T.print(x, msg=msg)
        T.copy(x, Y[bx * block])


def _printed_numbers(text: str) -> list:
    """The numbers of each `tensor(...)` printed, in order."""
    return [[float(v) for v in _NUMBER.findall(t)] for t in re.findall(r"tensor\(([^)]*)\)", text)]


def test_print_shows_each_blocks_values_as_torch_computes_them(capsys):
    x = torch.randn(128)
    y = torch.empty_like(x)
    axpb(x, y, msg="after axpb")
    out = capsys.readouterr().out
    headers = re.findall(r"^T\.print: .*?: ", out, flags=re.M)
    assert headers == ["T.print: after axpb x block 0: ", "T.print: after axpb x block 1: "]
    expected = x * 2.0 + 1.0
    shown = _printed_numbers(out)
    assert len(shown) == 2
    for block, numbers in enumerate(shown):  # torch prints 4 decimals
        torch.testing.assert_close(torch.tensor(numbers), expected[block * 64:(block + 1) * 64], atol=1e-4, rtol=0)
    assert [(p.msg, p.name, p.block) for p in axpb.printed] == [("after axpb", "x", (0,)), ("after axpb", "x", (1,))]
    torch.testing.assert_close(torch.cat([p.values for p in axpb.printed]), expected)
    torch.testing.assert_close(y, expected)  # printing does not change what the kernel computes


def test_without_msg_the_line_starts_with_the_tile_name(capsys):
    x = torch.randn(64)
    axpb(x, torch.empty_like(x))
    assert capsys.readouterr().out.startswith("T.print: x block 0: tensor(")


def test_each_launch_prints_its_own_values(capsys):
    x = torch.randn(64)
    axpb(x, torch.empty_like(x))
    axpb(x + 10.0, torch.empty_like(x))  # the warm path: same launcher
    torch.testing.assert_close(axpb.printed[0].values, (x + 10.0) * 2.0 + 1.0)
    assert len(re.findall(r"^T\.print:", capsys.readouterr().out, flags=re.M)) == 2


@tilegcn.jit
def relu_2d(X, Y, *, bm=16, bn=16):
    M, N = X.shape
    with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=64) as (bx, by):
        x = T.alloc_fragment((bm, bn), "bfloat16")
        T.copy(X[by * bm, bx * bn], x)
        for i, j in T.Parallel(bm, bn):
            x[i, j] = T.max(x[i, j], 0.0)
        T.print(x, "relu")
        T.copy(x, Y[by * bm, bx * bn])


def test_a_2d_grid_prints_every_block_in_dispatch_order(capsys):
    x = torch.randn(32, 32, dtype=torch.bfloat16)  # grid (2, 2)
    relu_2d(x, torch.empty_like(x))
    out = capsys.readouterr().out
    blocks = re.findall(r"^T\.print: relu x block \((\d+), (\d+)\): tensor", out, flags=re.M)
    assert blocks == [("0", "0"), ("1", "0"), ("0", "1"), ("1", "1")]  # bx fastest
    for p in relu_2d.printed:
        bx, by = p.block
        torch.testing.assert_close(p.values, torch.relu(x[by * 16:(by + 1) * 16, bx * 16:(bx + 1) * 16]).float())


@tilegcn.jit
def matmul(A, B, C, *, bm=32, bn=32, bk=16):
    M, K = A.shape
    N = B.shape[1]
    with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=64) as (bx, by):
        A_s = T.alloc_shared((bm, bk), "bfloat16")
        B_s = T.alloc_shared((bk, bn), "bfloat16")
        acc = T.alloc_fragment((bm, bn), "float32")
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
            T.copy(A[by * bm, k * bk], A_s)
            T.copy(B[k * bk, bx * bn], B_s)
            T.gemm(A_s, B_s, acc)
        T.print(acc, "after the K loop")
        T.copy(acc, C[by * bm, bx * bn])


def test_a_gemm_accumulator_prints_after_the_pipelined_loop():
    a, b = torch.randn(32, 32, dtype=torch.bfloat16), torch.randn(32, 32, dtype=torch.bfloat16)
    matmul(a, b, torch.empty(32, 32, dtype=torch.bfloat16))
    (p,) = matmul.printed
    torch.testing.assert_close(p.values, a.float() @ b.float(), atol=1e-3, rtol=1e-3)


@tilegcn.jit
def maybe_print(X, Y, *, show=False, block=64):
    with T.Kernel(T.ceildiv(X.shape[0], block), threads=64) as bx:
        x = T.alloc_fragment((block,), "float32")
        T.copy(X[bx * block], x)
        if show:
            T.print(x)
        T.copy(x, Y[bx * block])


def test_print_is_part_of_the_cache_key_and_absent_prints_nothing(capsys):
    x = torch.randn(64)
    y = torch.empty_like(x)
    assert maybe_print.compile(x, y).key != maybe_print.compile(x, y, show=True).key
    maybe_print(x, y)
    assert capsys.readouterr().out == ""
    maybe_print(x, y, show=True)
    assert capsys.readouterr().out.startswith("T.print: x block 0:")


# -- what T.print refuses, at the user's line ------------------------------------------------------------------
@tilegcn.jit
def bad_print(X, Y, *, what="global", block=64):
    with T.Kernel(T.ceildiv(X.shape[0], block), threads=64) as bx:
        s = T.alloc_shared((block,), "float32")
        x = T.alloc_fragment((block,), "float32")
        T.copy(X[bx * block], x)
        if what == "global":
            T.print(X)
        elif what == "region":
            T.print(X[bx * block])
        elif what == "shared":
            T.print(s)
        elif what == "block id":
            T.print(bx)
        elif what == "number":
            T.print(1.5)
        elif what == "msg":
            T.print(x, msg=3)
        elif what == "parallel":
            for i in T.Parallel(block):
                T.print(x)
        elif what == "loop":
            for k in T.Pipelined(2):
                T.print(x)
        T.copy(x, Y[bx * block])


def _print_line(what: str) -> int:
    """The line of bad_print's T.print in the `what` branch."""
    lines, first = inspect.getsourcelines(bad_print.fn)
    branch = next(i for i, line in enumerate(lines) if f'what == "{what}"' in line)
    return first + next(i for i in range(branch, len(lines)) if "T.print(" in lines[i])


@pytest.mark.parametrize("what, pattern", [
    ("global", r"T\.print prints a fragment \(from T\.alloc_fragment\), got a global tensor"),
    ("region", r"T\.print prints a fragment .* got a global tensor"),
    ("shared", r"T\.print of shared buffer s is not supported.*print a fragment instead"),
    ("block id", r"T\.print prints a fragment .* got .*; copy the values into a fragment"),
    ("number", r"T\.print prints a fragment .* got 1\.5 \(float\)"),
    ("msg", r"T\.print msg must be a string, got 3 \(int\)"),
    ("parallel", r"T\.print is not allowed inside T\.Parallel: print the whole tile after the loop"),
    ("loop", r"T\.print is not supported inside a T\.Pipelined loop: print the tile after the loop"),
])
def test_unsupported_prints_are_refused_at_the_users_line(what, pattern):
    x = torch.randn(64)
    with pytest.raises(CompileError, match=pattern) as err:
        bad_print(x, torch.empty_like(x), what=what)
    assert err.value.location == f"{__file__}:{_print_line(what)}"


def test_export_refuses_a_kernel_that_prints(tmp_path):
    x = torch.randn(64)
    with pytest.raises(ExportError, match=r"axpb calls T\.print .*remove the T\.print calls"):
        tilegcn.aot.export(axpb, [(x, torch.empty_like(x))], ["gfx942"], tmp_path / "out")


def test_do_bench_on_the_emulated_device_estimates_a_printing_kernel_and_prints_nothing(capsys):
    import warnings

    import tilegcn.testing

    x = torch.randn(64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tilegcn.testing.EstimateWarning)
        ms = tilegcn.testing.do_bench(lambda: axpb(x, torch.empty_like(x)))
    assert ms.estimated and ms > 0
    assert capsys.readouterr().out == ""  # the launch was only recorded: no values to show
    assert axpb.compile(x, x).estimate().cycles > 0  # estimate() supplies the hidden output itself
