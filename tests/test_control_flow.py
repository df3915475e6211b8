"""Device control flow written in Python (language/flow.py): `if` / `elif` / `else` and `and` / `or` / `not` /
chained comparisons on block ids, loop variables and runtime scalars are decided by the device, per block and trip,
never while tracing; loops with bounds only the device knows. Run on the emulated device (checks on), both arches,
against what Python computes for each block."""
import pytest
import torch

import tilegcn
from tilegcn import language as T
from tilegcn.errors import CompileError

ARCHES = ["gfx942", "gfx950"]
GRID, TRIPS, LANES = 5, 3, 64

# Each condition as Python computes it for block bx, trip k and runtime scalar n; `decisions` below writes the same
# tests, in the same order, as `if` statements of a kernel.
CONDITIONS = [
    lambda bx, k, n: bx == 0,
    lambda bx, k, n: bx != 1,
    lambda bx, k, n: bx < 2,
    lambda bx, k, n: bx <= 2,
    lambda bx, k, n: bx > 3,
    lambda bx, k, n: bx >= 3,
    lambda bx, k, n: 0 < bx < 3,
    lambda bx, k, n: bx == 1 or bx == 4,
    lambda bx, k, n: not bx == 2,
    lambda bx, k, n: k == 1,
    lambda bx, k, n: bx + k > n,
    lambda bx, k, n: bx < n and k != 2,
    lambda bx, k, n: n <= k * 2,
    lambda bx, k, n: bx == k or not n > 2,
    lambda bx, k, n: bx,  # a device int tested for truth: != 0
]


@tilegcn.jit
def decisions(O, n):
    with T.Kernel(GRID, threads=LANES) as bx:
        o = T.alloc_fragment((LANES,), "float32")
        for k in T.serial(TRIPS):
            T.fill(o, 0.0)
            if bx == 0:
                T.fill(o, 1.0)
            T.copy(o, O[bx, k, 0, 0])
            if bx != 1:
                T.fill(o, 1.0)
            else:
                T.fill(o, 0.0)
            T.copy(o, O[bx, k, 1, 0])
            T.fill(o, 0.0)
            if bx < 2:
                T.fill(o, 1.0)
            T.copy(o, O[bx, k, 2, 0])
            T.fill(o, 0.0)
            if bx <= 2:
                T.fill(o, 1.0)
            T.copy(o, O[bx, k, 3, 0])
            T.fill(o, 0.0)
            if bx > 3:
                T.fill(o, 1.0)
            T.copy(o, O[bx, k, 4, 0])
            T.fill(o, 0.0)
            if bx >= 3:
                T.fill(o, 1.0)
            T.copy(o, O[bx, k, 5, 0])
            T.fill(o, 0.0)
            if 0 < bx < 3:
                T.fill(o, 1.0)
            T.copy(o, O[bx, k, 6, 0])
            T.fill(o, 0.0)
            if bx == 1 or bx == 4:
                T.fill(o, 1.0)
            T.copy(o, O[bx, k, 7, 0])
            T.fill(o, 0.0)
            if not bx == 2:
                T.fill(o, 1.0)
            T.copy(o, O[bx, k, 8, 0])
            if k == 1:
                T.fill(o, 1.0)
            elif bx == 0:
                T.fill(o, 0.0)
            else:
                T.fill(o, 0.0)
            T.copy(o, O[bx, k, 9, 0])
            T.fill(o, 0.0)
            if bx + k > n:
                T.fill(o, 1.0)
            T.copy(o, O[bx, k, 10, 0])
            T.fill(o, 0.0)
            if bx < n and k != 2:
                T.fill(o, 1.0)
            T.copy(o, O[bx, k, 11, 0])
            T.fill(o, 0.0)
            if n <= k * 2:
                T.fill(o, 1.0)
            T.copy(o, O[bx, k, 12, 0])
            T.fill(o, 0.0)
            if bx == k or not n > 2:
                T.fill(o, 1.0)
            T.copy(o, O[bx, k, 13, 0])
            T.fill(o, 0.0)
            if bx:
                T.fill(o, 1.0)
            T.copy(o, O[bx, k, 14, 0])


@pytest.mark.parametrize("arch", ARCHES)
def test_comparisons_are_decided_per_block_and_trip(arch):
    for n in (2, 3):
        out = torch.full((GRID, TRIPS, len(CONDITIONS), LANES), -1.0)
        decisions(out, n, arch=arch)
        want = torch.tensor([[[float(bool(cond(bx, k, n))) for cond in CONDITIONS] for k in range(TRIPS)]
                             for bx in range(GRID)])
        assert torch.equal(out, want[..., None].expand_as(out)), f"n={n}"


@tilegcn.jit
def store_where(C, *, block=64):
    with T.Kernel(4, threads=64) as bx:
        c = T.alloc_fragment((block,), "float32")
        T.fill(c, 1.0)
        if bx == 0:
            T.copy(c, C[0])
        T.fill(c, 2.0)
        if bx != 1:
            T.copy(c, C[1, bx * block])


@pytest.mark.parametrize("arch", ARCHES)
def test_if_on_the_block_id_runs_in_the_blocks_it_names(arch):
    """The issue's examples: `if bx == 0:` ran in no block (SymPy decided bx == 0 False while tracing) and
    `if bx != 1:` in every block."""
    C = torch.zeros(2, 256)
    store_where(C, arch=arch)
    want = torch.zeros(2, 256)
    want[0, :64] = 1.0
    want[1, :] = 2.0
    want[1, 64:128] = 0.0
    assert torch.equal(C, want)


@tilegcn.jit
def tiles_one_and_two(X, Y, *, block=64):
    with T.Kernel(1, threads=64) as bx:
        x = T.alloc_fragment((block,), "float32")
        acc = T.alloc_fragment((block,), "float32")
        T.clear(acc)
        for k in T.Pipelined(1, 3, num_stages=2):
            T.copy(X[k * block], x)
            for i in T.Parallel(block):
                acc[i] = acc[i] + x[i]
        T.copy(acc, Y[bx * block])


def test_pipelined_start_stop_runs_start_to_stop():
    """T.Pipelined(1, 3) runs k = 1, 2 as TileLang reads it (it ran one trip from 0 with num_stages=3)."""
    X = torch.randn(4 * 64)
    Y = torch.empty(64)
    tiles_one_and_two(X, Y, arch="gfx942")
    torch.testing.assert_close(Y, X[64:128] + X[128:192])


@tilegcn.jit
def runtime_trips(X, Y, n, *, block=64):
    with T.Kernel(3, threads=64) as bx:
        x = T.alloc_fragment((block,), "float32")
        acc = T.alloc_fragment((block,), "float32")
        T.clear(acc)
        for k in range(n):  # a runtime bound: a device loop (a Python int bound would unroll)
            T.copy(X[k * block], x)
            for i in T.Parallel(block):
                acc[i] = acc[i] + x[i]
        for k in T.serial(1, T.min(T.ceildiv(n, 2), bx + 1)):
            T.copy(X[k * block], x)
            for i in T.Parallel(block):
                acc[i] = acc[i] + x[i] * 10.0
        for k in T.Pipelined(bx, num_stages=2):  # a device trip count: serial, not pipelined
            T.copy(X[k * block], x)
            for i in T.Parallel(block):
                acc[i] = acc[i] + x[i] * 100.0
        T.copy(acc, Y[bx * block])


@pytest.mark.parametrize("arch", ARCHES)
def test_loops_with_device_bounds_run_the_trips_the_device_computes(arch):
    X = torch.randn(8, 64)
    for n in (0, 5):
        Y = torch.empty(3, 64)
        runtime_trips(X.view(-1), Y.view(-1), n, arch=arch)
        want = torch.stack([X[:n].sum(0) + 10.0 * X[1:min(-(-n // 2), bx + 1)].sum(0) + 100.0 * X[:bx].sum(0)
                            for bx in range(3)])
        torch.testing.assert_close(Y, want)


@tilegcn.jit
def repeat_until(X, Thr, Y, n):
    with T.Kernel(3, threads=128) as bx:
        x = T.alloc_fragment((64,), "float32")
        acc = T.alloc_fragment((64,), "float32")
        t = T.alloc_var("float32")
        v = T.alloc_var("float32", init=0.0)
        T.copy(Thr[bx], t)  # per block: a loaded, data-dependent trip count
        T.clear(acc)
        while v[0] < t[0]:
            T.copy(X[0], x)
            for i in T.Parallel(64):
                acc[i] = acc[i] + x[i]
            v[0] = v[0] + 1.0
        if v[0] > n:
            for i in T.Parallel(64):
                acc[i] = -acc[i]
        elif v[0] == 0 or bx == 1:
            T.fill(acc, 5.0)
        T.copy(acc, Y[bx * 64])


@pytest.mark.parametrize("arch", ARCHES)
def test_while_and_if_on_a_variable_the_device_updates(arch):
    """`while v[0] < t[0]:` with t loaded per block runs 0, 2 and 4 trips; the `if` after it tests what v holds."""
    X, Thr, Y = torch.randn(64), torch.tensor([0.0, 2.0, 3.5]), torch.empty(3 * 64)
    repeat_until(X, Thr, Y, 2, arch=arch)
    want = torch.stack([torch.full((64,), 5.0), torch.full((64,), 5.0), -(X + X + X + X)])
    torch.testing.assert_close(Y.view(3, 64), want)


def _trace_error(program, *args, **kwargs) -> str:
    with pytest.raises(CompileError) as e:
        program.compile(*args, arch="gfx942", **kwargs)
    return str(e.value)


@tilegcn.jit
def rebinds(X, Y):
    with T.Kernel(2, threads=64) as bx:
        x = T.alloc_fragment((64,), "float32")
        if bx == 0:  # the if of rebinds
            start = 0
        else:
            start = 64
        T.copy(X[start], x)
        T.copy(x, Y[bx * 64])


def _line_of(marker: str) -> int:
    with open(__file__) as f:
        return next(n for n, line in enumerate(f, 1) if line.rstrip().endswith(marker))


def test_a_name_rebound_differently_in_the_branches_is_refused():
    message = _trace_error(rebinds, torch.zeros(128), torch.zeros(128))
    assert "`start`" in message and "bx == 0" in message
    assert f"test_control_flow.py:{_line_of('# the if of rebinds')}" in message  # the user's line, exactly


@tilegcn.jit
def closure_style(N, block=64, bad=False):
    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=64) as bx:
            x = T.alloc_fragment((block,), "float32")
            T.copy(X[bx * block], x)
            if bx == 1:
                T.fill(x, 3.0)
            elif bx > 1 and bad:  # a Python False: decided while tracing, the branch never traced
                T.copy(X[block], Y[0], bogus=True)  # an error inside a branch: the user's line # bogus line
            T.copy(x, Y[bx * block])

    return main


def test_closure_style_branches_on_the_device_and_keeps_line_numbers():
    X, Y = torch.randn(128), torch.empty(128)
    closure_style(128)(X, Y, arch="gfx942")
    assert torch.equal(Y[:64], X[:64]) and torch.equal(Y[64:], torch.full((64,), 3.0))
    with pytest.raises(CompileError, match=f"test_control_flow.py:{_line_of('# bogus line')}"):
        closure_style(128, bad=True)(X, Y, arch="gfx942")


@tilegcn.jit
def branch_local(X, Y):
    with T.Kernel(2, threads=64) as bx:
        x = T.alloc_fragment((64,), "float32")
        T.fill(x, 0.0)
        if bx == 1:
            start = bx * 64  # used only inside its branch: fine
            T.copy(X[start], x)
        T.copy(x, Y[bx * 64])


@tilegcn.jit
def loop_names_reused(X, Y):
    with T.Kernel(2, threads=64) as bx:
        x = T.alloc_fragment((64,), "float32")
        T.copy(X[0], x)
        if bx == 1:
            for i in T.Parallel(64):  # `i` is bound here on one path only...
                x[i] = x[i] * 2.0
        for i in T.Parallel(64):  # ...and bound again before this loop reads it: no value crosses the join
            x[i] = x[i] + 1.0
        T.copy(x, Y[bx * 64])


def test_a_name_used_only_inside_its_branch_is_fine():
    X, Y = torch.randn(64), torch.empty(128)
    loop_names_reused(X, Y, arch="gfx942")
    torch.testing.assert_close(Y, torch.cat([X + 1.0, X * 2.0 + 1.0]))

    X, Y = torch.randn(128), torch.empty(128)
    branch_local(X, Y, arch="gfx942")
    assert torch.equal(Y[:64], torch.zeros(64)) and torch.equal(Y[64:], X[64:])


@tilegcn.jit
def device_while(X, Y):
    with T.Kernel(2, threads=64) as bx:
        x = T.alloc_fragment((64,), "float32")
        while bx < 2:
            T.copy(X[0], x)
        T.copy(x, Y[bx * 64])


@tilegcn.jit
def conditional_expression(X, Y):
    with T.Kernel(2, threads=64) as bx:
        x = T.alloc_fragment((64,), "float32")
        T.copy(X[0 if bx == 0 else 64], x)
        T.copy(x, Y[bx * 64])


@tilegcn.jit
def branch_on_a_tile_element(X, Y):
    with T.Kernel(2, threads=64) as bx:
        x = T.alloc_fragment((64,), "float32")
        T.copy(X[0], x)
        if x[3] > 0.0:  # not a variable: element 3 lives in one thread
            T.fill(x, 1.0)
        T.copy(x, Y[bx * 64])


@tilegcn.jit
def global_store_under_if(X, Y):
    with T.Kernel(1, threads=64) as bx:
        x = T.alloc_fragment((64,), "float32")
        T.copy(X[0], x)
        for i in T.Parallel(64):
            if x[i] > 0.0:
                Y[i] = x[i]


@tilegcn.jit
def carries_a_name(X, Y, *, device=True):
    with T.Kernel(1, threads=64) as bx:
        x = T.alloc_fragment((64,), "float32")
        off = 0
        for k in (T.serial(2) if device else range(2)):
            T.copy(X[off], x)
            off = off + 64  # the offset carried to the next trip
        T.copy(x, Y[0])


def test_a_name_carried_across_device_trips_is_refused():
    X, Y = torch.randn(128), torch.empty(64)
    carries_a_name(X, Y, device=False, arch="gfx942")  # a Python loop, unrolled: each trip sees its own value
    assert torch.equal(Y, X[64:])
    message = _trace_error(carries_a_name, X, Y)
    assert "`off` is updated in the body of a device loop" in message and "k * 64" in message
    assert f"test_control_flow.py:{_line_of('# the offset carried to the next trip')}" in message


def test_refusals_name_the_line_and_the_way_around():
    X, Y = torch.zeros(128), torch.zeros(128)
    message = _trace_error(branch_on_a_tile_element, X, Y)
    assert "x[3] outside T.Parallel" in message and "T.alloc_var" in message and "test_control_flow.py" in message
    message = _trace_error(global_store_under_if, X, Y)
    assert "store to global Y under an `if` inside T.Parallel" in message and "T.if_then_else" in message
    X, Y = torch.zeros(128), torch.zeros(128)
    message = _trace_error(device_while, X, Y)
    assert "while bx < 2" in message and "no trip changes" in message and "test_control_flow.py" in message
    message = _trace_error(conditional_expression, X, Y)
    assert "`if` statement" in message and "test_control_flow.py" in message


SM_NUM = 3  # the persistent grid (port's get_num_sms): fewer workgroups than tiles, so each walks several


def _persistent_port():
    import sys

    from conftest import REPO

    sys.path.insert(0, str(REPO / "examples" / "tilelang"))
    import gemm_persistent

    gemm_persistent.NUM_SMS = SM_NUM
    return gemm_persistent


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("primitive", [True, False], ids=["T.Persistent", "if"])
def test_persistent_gemm_port(arch, primitive):
    """Both paths of upstream's matmul_persistent: T.Persistent, and its own tile walk with an `if` around a
    pipelined K loop. 2 x 8 tiles: upstream's own walk covers a grid whose column blocks are a multiple of its group
    size (8); 16 tiles over 3 workgroups take 6 waves, whose last tiles (16, 17) fall outside and run nothing."""
    port = _persistent_port()
    A, B = torch.randn(64, 64).half(), torch.randn(64, 256).half()
    C = port.matmul_persistent(A, B, 32, 32, 32, 64, 2, use_persistent_primitive=primitive, arch=arch)
    torch.testing.assert_close(C, port.ref_program(A.float(), B.float()).half(), rtol=0.01, atol=0.01)


@pytest.mark.parametrize("arch", ARCHES)
def test_non_persistent_gemm_port(arch):
    port = _persistent_port()
    A, B = torch.randn(64, 64).half(), torch.randn(64, 96).half()
    C = port.matmul_non_persistent(A, B, 32, 32, 32, 64, 2, arch=arch)
    torch.testing.assert_close(C, port.ref_program(A.float(), B.float()).half(), rtol=0.01, atol=0.01)


@tilegcn.jit
def same_tile_both_ways(X, Y, n):
    with T.Kernel(3, threads=64) as bx:
        x = T.alloc_fragment((64,), "float32")
        T.fill(x, 0.0)
        for k in T.serial(1):  # k = 0; in the tile starts, so their addresses are computed in this loop, not before
            for j in range(n):  # no trip when n == 0: what its body computes must not be reused after it
                T.copy(X[bx * 64 + 64 + k * 64], x)
            if bx == 0:
                T.copy(X[bx * 64 + 64 + k * 64], x)
                for i in T.Parallel(64):
                    x[i] = x[i] * 2.0
            else:  # the same tile start: its address is computed on this path too, not taken from the other
                T.copy(X[bx * 64 + 64 + k * 64], x)
            T.copy(x, Y[bx * 64])


@pytest.mark.parametrize("n", [0, 1])
def test_values_computed_in_one_path_are_not_reused_on_another(n):
    X, Y = torch.randn(4 * 64), torch.empty(3 * 64)
    same_tile_both_ways(X, Y, n, arch="gfx942")
    want = X[64:].clone()
    want[:64] *= 2.0
    torch.testing.assert_close(Y, want)


@tilegcn.jit
def shared_across_branches(X, Y, n):
    with T.Kernel(2, threads=128) as bx:
        S = T.alloc_shared((128,), "float32")
        x = T.alloc_fragment((128,), "float32")
        acc = T.alloc_fragment((128,), "float32")
        T.copy(X[0], S)
        if bx == 1:
            T.copy(S, x)  # read, then overwrite: the waves must all have read first (a barrier in the branch)
            T.copy(X[128], S)
        T.copy(S, x)  # after the join: written on one path, not on the other
        for i in T.Parallel(128):
            acc[i] = x[i]
        for k in range(n):  # each trip overwrites what the last one read (a barrier across the back edge)
            T.copy(X[k * 128], S)
            T.copy(S, x)
            for i in T.Parallel(128):
                acc[i] = acc[i] + x[i]
        T.copy(acc, Y[bx * 128])


@pytest.mark.parametrize("arch", ARCHES)
def test_shared_memory_barriers_follow_the_branches(arch):
    """Two waves; the emulated device refuses a missing barrier (a race on LDS) with checks on."""
    X = torch.randn(3, 128)
    Y = torch.empty(2, 128)
    shared_across_branches(X.view(-1), Y.view(-1), 3, arch=arch)
    torch.testing.assert_close(Y, torch.stack([X[0], X[1]]) + X[0] + X[1] + X[2])


@tilegcn.jit
def reduce_by_block(X, Y):
    with T.Kernel(2, threads=128) as bx:
        x = T.alloc_fragment((4, 256), "float32")
        r = T.alloc_fragment((4,), "float32")
        T.copy(X[0, 0], x)
        if bx == 1:  # cross-wave reductions (LDS scratch, barriers) in both branches
            T.reduce_sum(x, r, dim=1)
        else:
            T.reduce_max(x, r, dim=1)
        T.copy(r, Y[bx, 0])


@pytest.mark.parametrize("arch", ARCHES)
def test_reductions_in_branches(arch):
    X, Y = torch.randn(4, 256), torch.empty(2, 4)
    reduce_by_block(X, Y, arch=arch)
    torch.testing.assert_close(Y, torch.stack([X.amax(1), X.sum(1)]), rtol=1e-5, atol=1e-4)


@tilegcn.jit
def per_element(X, Y):
    with T.Kernel(1, threads=64) as bx:
        x = T.alloc_fragment((16, 16), "float32")
        y = T.alloc_fragment((16, 16), "float32")
        T.copy(X[0, 0], x)
        T.fill(y, 0.0)
        for i, j in T.Parallel(16, 16):
            if i < j:  # the causal mask, as an `if`
                x[i, j] = 0.0
            elif x[i, j] > 0.5:  # decided before the branch changes x
                x[i, j] = 0.0
                y[i, j] = 1.0
            else:
                y[i, j] = 2.0
        for i, j in T.Parallel(16, 16):
            y[i, j] = y[i, j] + x[i, j]
        T.copy(y, Y[0, 0])


@pytest.mark.parametrize("arch", ARCHES)
def test_if_inside_parallel_is_decided_per_element(arch):
    X, Y = torch.rand(16, 16), torch.empty(16, 16)
    per_element(X, Y, arch=arch)
    upper = torch.ones(16, 16).triu(1).bool()
    want = torch.where(upper, 0.0, torch.where(X > 0.5, 1.0, 2.0 + X))
    torch.testing.assert_close(Y, want)


@tilegcn.jit
def gemm_while(A, B, Trips, C):
    with T.Kernel(2, threads=128) as bx:
        A_s = T.alloc_shared((32, 32), "float16")
        B_s = T.alloc_shared((32, 32), "float16")
        acc = T.alloc_fragment((32, 32), "float32")
        t = T.alloc_var("float32")
        v = T.alloc_var("float32", init=0.0)
        T.copy(Trips[bx], t)
        T.clear(acc)
        while v[0] < t[0]:  # a pipelined K loop (LDS stages, barriers) in a data-dependent while
            for k in T.Pipelined(2, num_stages=2):
                T.copy(A[0, k * 32], A_s)
                T.copy(B[k * 32, 0], B_s)
                T.gemm(A_s, B_s, acc)
            v[0] = v[0] + 1.0
        T.copy(acc, C[bx * 32, 0])


@pytest.mark.parametrize("arch", ARCHES)
def test_gemm_in_a_device_while(arch):
    A, B, C = torch.randn(32, 64).half(), torch.randn(64, 32).half(), torch.empty(64, 32)
    gemm_while(A, B, torch.tensor([1.0, 3.0]), C, arch=arch)
    product = A.float() @ B.float()
    torch.testing.assert_close(C, torch.cat([product, 3 * product]), rtol=1e-3, atol=1e-2)


# == TileLang's variable spellings (language/local.py VarProxy, flow.py assign) ====================================
@tilegcn.jit
def _rows_by_variable(X, Y):
    X: T.Tensor((4, 64), T.float32)
    Y: T.Tensor((4, 64), T.float32)
    with T.Kernel(1, threads=64) as bx:
        row = T.alloc_var(T.int32)
        row = bx  # assigning the variable's name stores into it (a device value: the loop below is a device loop)
        while row < 4:  # its name in a comparison reads it
            cur = row  # a new name bound to it takes its value now (a let)
            row += 1  # ... so moving the variable on (a store, as `row = cur + 1` is) leaves cur as it was
            for j in T.Parallel(64):
                Y[cur, j] = X[cur, j] * 2.0


def test_tilelang_variable_spellings():
    X = torch.randn(4, 64)
    Y = torch.zeros(4, 64)
    _rows_by_variable(X, Y, arch="gfx942")
    torch.testing.assert_close(Y, X * 2.0)
