"""Reads of other threads' elements at computed indices inside T.Parallel (through LDS), a fragment copied into a
T.gemm operand tile, and the TIR names TileLang's dequantize helpers use (T.reinterpret, .astype, T.shift_left,
T.const(value, dtype), T.macro, T.get_block_binding, T.annotate_layout), each against torch."""
import pytest
import torch

import tilegcn
from tilegcn import language as T


@tilegcn.jit(out_idx=[1, 2])
def _unpack_nibbles(N, K):
    @T.prim_func
    def main(B: T.Tensor((N, K // 2), T.uint8), Y: T.Tensor((N, K), T.int32), Z: T.Tensor((K, N), T.int32)):
        with T.Kernel(1, threads=64) as bx:
            packed = T.alloc_fragment((N, K // 2), T.uint8)
            y = T.alloc_fragment((N, K), T.int32)
            z = T.alloc_fragment((K, N), T.int32)
            T.copy(B, packed)
            for i, j in T.Parallel(N, K):
                y[i, j] = (packed[i, j // 2] >> ((j % 2) * 4)) & 15  # another thread's byte
            T.copy(y, Y)
            for j, i in T.Parallel(K, N):
                z[j, i] = y[i, j]  # a transpose
            T.copy(z, Z)

    return main


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_fragment_read_at_computed_indices(arch, monkeypatch):
    monkeypatch.setenv("TILEGCN_ARCH", arch)
    monkeypatch.setattr(_unpack_nibbles, "_kernels", {})
    b = torch.randint(0, 256, (16, 16), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    want = torch.stack((b & 15, b >> 4), dim=-1).reshape(16, 32).int()
    y, z = _unpack_nibbles(16, 32)(b)
    assert torch.equal(y, want)
    assert torch.equal(z, want.T)


def test_gathered_index_outside_the_buffer_is_refused():
    @tilegcn.jit
    def shifted(X, Y):
        with T.Kernel(1, threads=64):
            x = T.alloc_fragment((64,), "float32")
            T.copy(X, x)
            for i in T.Parallel(64):
                x[i] = x[i] + x[i + 1]
            T.copy(x, Y)

    with pytest.raises(tilegcn.CompileError, match=r"x\[64\] read at \[i \+ 1\].*index on dim 0 is 64"):
        shifted(torch.zeros(64), torch.zeros(64))


@tilegcn.jit(out_idx=[-1])
def _scaled_b_gemm(M, N, K, transpose_B):
    B_shape = (N, K) if transpose_B else (K, N)

    @T.macro
    def scale_into(B_shared, B_scaled):  # a macro seeing the block index through T.get_block_binding
        by = T.get_block_binding(1)
        b = T.alloc_fragment(B_shape, T.float32)
        T.copy(B_shared, b)
        for i, j in T.Parallel(*B_shape):
            b[i, j] = b[i, j] * T.cast(T.shift_left(1, by + 1), T.float32)
        T.copy(b, B_scaled)

    @T.prim_func
    def main(A: T.Tensor((M, K), T.float16), B: T.Tensor(B_shape, T.float16), C: T.Tensor((M, N), T.float32)):
        with T.Kernel(1, T.ceildiv(M, 32), threads=64) as (bx, by):
            A_shared = T.alloc_shared((32, K), T.float16)
            B_shared = T.alloc_shared(B_shape, T.float16)
            B_scaled = T.alloc_shared(B_shape, T.float16)
            c = T.alloc_fragment((32, N), T.float32)
            T.annotate_layout({B_shared: tilegcn.layout.make_swizzled_layout(B_shared)})
            T.clear(c)
            T.copy(A[by * 32, 0], A_shared)
            T.copy(B, B_shared)
            scale_into(B_shared, B_scaled)
            T.gemm(A_shared, B_scaled, c, transpose_B=transpose_B)
            T.copy(c, C[by * 32, 0])

    return main


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("transpose_B", [True, False], ids=["NK", "KN"])
def test_fragment_copied_into_a_gemm_operand(arch, transpose_B, monkeypatch):
    """B scaled in a fragment, copied into the gemm's B tile (K-major, or as stored and read transposed on gfx950 /
    transposed by the copy on gfx942), scaled by 2 ** (block row + 1)."""
    monkeypatch.setenv("TILEGCN_ARCH", arch)
    monkeypatch.setattr(_scaled_b_gemm, "_kernels", {})
    gen = torch.Generator().manual_seed(1)
    a = torch.randn(64, 64, generator=gen).half()
    b = torch.randn(32, 64, generator=gen).half()  # (N, K)
    c = _scaled_b_gemm(64, 32, 64, transpose_B)(a, b if transpose_B else b.T.contiguous())
    want = a.float() @ b.float().T * torch.tensor([2.0] * 32 + [4.0] * 32)[:, None]
    torch.testing.assert_close(c, want, rtol=1e-3, atol=1e-3)


def test_reinterpret_bits_as_16_bit_floats():
    @tilegcn.jit(out_idx=[-1])
    def bits_to_floats(N):
        @T.prim_func
        def main(X: T.Tensor((N,), T.int32), Y: T.Tensor((N, 3), T.float32)):
            with T.Kernel(1, threads=64):
                x = T.alloc_fragment((N,), T.int32)
                y = T.alloc_fragment((N, 3), T.float32)
                T.copy(X, x)
                for i, k in T.Parallel(N, 3):
                    y[i, k] = T.if_then_else(
                        k == 0, T.reinterpret(T.bfloat16, (x[i] & T.const(0xFFFF, T.uint16)).astype(T.uint16)),
                        T.if_then_else(k == 1, T.reinterpret(T.float16, x[i].astype(T.uint16)),
                                       T.reinterpret(T.float32, x[i])))
                T.copy(y, Y)

        return main

    gen = torch.Generator().manual_seed(2)
    # finite bit patterns of both 16-bit formats (exponent field not all ones), with junk in the high half
    low = torch.randint(0, 0x7800, (64,), generator=gen) | (torch.randint(0, 2, (64,), generator=gen) << 15)
    x = (low | (torch.randint(0, 0x3000, (64,), generator=gen) << 16)).int()
    y = bits_to_floats(64)(x)
    u16 = (x & 0xFFFF).to(torch.int32).to(torch.uint16)
    assert torch.equal(y[:, 0], u16.view(torch.bfloat16).float())
    assert torch.equal(y[:, 1], u16.view(torch.float16).float())
    assert torch.equal(y[:, 2], x.view(torch.float32))


def test_annotate_layout_of_a_fragment_is_refused():
    @tilegcn.jit
    def annotated(X, Y):
        with T.Kernel(1, threads=64):
            x = T.alloc_fragment((64,), "float32")
            T.annotate_layout({x: tilegcn.layout.make_swizzled_layout(x)})
            T.copy(X, x)
            T.copy(x, Y)

    with pytest.raises(tilegcn.CompileError, match="make_swizzled_layout applies to shared buffers"):
        annotated(torch.zeros(64), torch.zeros(64))


def test_uint16_tensor_through_shared_memory():
    @tilegcn.jit(out_idx=[-1])
    def widen(N):
        @T.prim_func
        def main(X: T.Tensor((N, N), T.uint16), Y: T.Tensor((N, N), T.int32)):
            with T.Kernel(1, threads=64):
                s = T.alloc_shared((N, N), T.uint16)
                x = T.alloc_fragment((N, N), T.int32)
                T.copy(X, s)
                T.copy(s, x)
                for i, j in T.Parallel(N, N):
                    x[i, j] = x[i, j] + 1
                T.copy(x, Y)

        return main

    x = torch.randint(0, 65536, (32, 32), generator=torch.Generator().manual_seed(3)).to(torch.uint16)
    assert torch.equal(widen(32)(x), x.int() + 1)  # zero-extended: values past 32767 stay positive
