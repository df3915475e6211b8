"""T.if_then_else with constants and index-comparison masks, as TileLang's attention writes them
(`T.if_then_else(bx * block_M + i >= k * block_N + j, 0, -T.infinity(acc_s.dtype))`), against torch on the emulated
device: inline constants (0, 1.0, small ints) and others (-inf, 2.5, 1000) in either branch, masks whose two sides
differ by constants past the inline range (a literal in the compare), in float and int32 fragments; and the timing
model runs the VOP3 selects. (What the causal mask costs in flash attention: tests/test_attention_speed.py.) About
2 s for both arches."""
import pytest
import torch

import tilegcn
from tilegcn import language as T

ARCHES = ["gfx942", "gfx950"]
BLOCK = 32


@pytest.fixture(autouse=True)
def _emulator(monkeypatch):
    monkeypatch.setenv("TILEGCN_DEVICE", "emulator")


@tilegcn.jit
def causal_mask(Y, *, block=BLOCK, threads=64):
    """Y's tile (by, bx) = 0 on and below the diagonal, -inf above: the mask alone, as flash attention sets its
    scores before QK^T accumulates onto them."""
    M, N = Y.shape
    with T.Kernel(N // block, M // block, threads=threads) as (bx, by):
        s = T.alloc_fragment((block, block), "float32")
        for i, j in T.Parallel(block, block):
            s[i, j] = T.if_then_else(by * block + i >= bx * block + j, 0, -T.infinity("float32"))
        T.copy(s, Y[by * block, bx * block])


@tilegcn.jit
def selects(X, Y, Z, *, block=BLOCK):
    """Selects of constants and elements under index masks whose sides differ by constants inside and outside the
    inline range, in a float and an int32 fragment."""
    M, N = X.shape
    with T.Kernel(N // block, M // block, threads=64) as (bx, by):
        x = T.alloc_fragment((block, block), "float32")
        z = T.alloc_fragment((block, block), "int32")
        T.copy(X[by * block, bx * block], x)
        for i, j in T.Parallel(block, block):
            x[i, j] = T.if_then_else(i - j > 3, 1.0, 2.5) + T.if_then_else(j + 100 <= i * 4, -T.infinity("float32"),
                                                                          x[i, j]) \
                + T.if_then_else(by * block + i + 70 < bx * block + 2 * j, x[i, j] * 2.0, 0.0)
            z[i, j] = T.if_then_else(i != j + 5, 7, 1000) + T.if_then_else(i == j, -16, 0)
        T.copy(x, Y[by * block, bx * block])
        T.copy(z, Z[by * block, bx * block])


@pytest.mark.parametrize("arch", ARCHES)
def test_selects_of_constants_under_index_masks_match_torch(arch):
    x = torch.randn(64, 64)
    y, z = torch.empty_like(x), torch.empty(64, 64, dtype=torch.int32)
    selects(x, y, z, arch=arch)
    rows, cols = torch.arange(64)[:, None], torch.arange(64)[None, :]
    i, j = rows % BLOCK, cols % BLOCK
    inf = torch.tensor(float("inf"))
    want = torch.where(i - j > 3, 1.0, 2.5) + torch.where(j + 100 <= i * 4, -inf, x) + \
        torch.where(rows + 70 < (cols // BLOCK) * BLOCK + 2 * j, x * 2.0, 0.0)
    assert torch.equal(y, want)
    assert torch.equal(z, (torch.where(i != j + 5, 7, 1000) + torch.where(i == j, -16, 0)).int())


def test_the_timing_model_runs_the_mask():
    """The selects of inline constants are VOP3 `v_cndmask_b32_e64 v, v, 0, vcc`, decoded from the code object by the
    timing model as by the emulator."""
    y = torch.empty(64, 64)
    estimate = causal_mask.compile(y, arch="gfx950").estimate()
    assert 0 < estimate.seconds < 1e-3
