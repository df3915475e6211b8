"""Tracing and lowering: tile programs become assembly that LLVM accepts, and bad programs fail clearly."""
import inspect

import pytest
import torch

from tilegcn import language as T
from tilegcn.errors import CompileError, ResourceError, UnsupportedArchError
from tilegcn.ir import TensorSpec, print_kernel
from tilegcn.compiler import lower
from tilegcn.toolchain import assemble

from kernels import axpb_relu, copy2d

ARCHES = ["gfx942", "gfx950"]
DTYPES = [torch.bfloat16, torch.float16, torch.float32]


def spec(shape, dtype=torch.bfloat16):
    return TensorSpec.of(torch.empty(shape, dtype=dtype))


def compile_asm(fn, args, arch, **constants):
    kernel = T.trace(getattr(fn, "fn", fn), args, constants, arch)
    return kernel, lower(kernel, arch)


def _defaults(jitfn):
    fn = getattr(jitfn, "fn", jitfn)
    return {k: v.default for k, v in inspect.signature(fn).parameters.items() if v.kind == v.KEYWORD_ONLY}


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1000, 3000), (256, 256), (1, 77)])
def test_elementwise_and_copy_assemble(arch, dtype, shape):
    for fn in (copy2d, axpb_relu):
        consts = _defaults(fn)
        _, lowered = compile_asm(fn, [spec(shape, dtype), spec(shape, dtype)], arch, **consts)
        hsaco = assemble(lowered.asm, arch)
        assert hsaco[:4] == b"\x7fELF"
        assert f'amdgcn-amd-amdhsa--{arch}' in lowered.asm


def test_ragged_columns_are_masked_and_full_tiles_are_not():
    consts = _defaults(axpb_relu)
    _, ragged = compile_asm(axpb_relu, [spec((1000, 3000)), spec((1000, 3000))], "gfx942", **consts)
    _, exact = compile_asm(axpb_relu, [spec((1024, 1024)), spec((1024, 1024))], "gfx942", **consts)
    masking = "outside: an offset past NUM_RECORDS"  # the comment on the masking v_cndmask_b32
    assert masking in ragged.asm
    assert masking not in exact.asm


def test_16_byte_accesses_where_alignment_allows_and_narrower_where_not():
    consts = _defaults(copy2d)
    _, wide = compile_asm(copy2d, [spec((512, 512)), spec((512, 512))], "gfx950", **consts)
    assert "buffer_load_dwordx4" in wide.asm and "buffer_store_dwordx4" in wide.asm
    _, narrow = compile_asm(copy2d, [spec((512, 510)), spec((512, 510))], "gfx950", **consts)
    assert "buffer_load_dwordx4" not in narrow.asm and "buffer_load_dword " in narrow.asm


def test_ir_text_is_stable_and_names_user_buffers():
    consts = _defaults(axpb_relu)
    args = [spec((1000, 3000)), spec((1000, 3000))]
    k1 = T.trace(axpb_relu.fn, args, consts, "gfx942")
    k2 = T.trace(axpb_relu.fn, args, consts, "gfx942")
    assert print_kernel(k1) == print_kernel(k2)
    text = print_kernel(k1)
    assert "alloc fragment x: float32[256, 128]" in text
    assert "copy X[256*by, 128*bx; 256x128] -> x" in text


def test_ir_text_prints_tile_origins_as_sympy_does():
    """kernel.ir prints each copy's origin; the printer's fast path for sums of symbols must give SymPy's text."""
    import random

    import sympy

    from tilegcn.ir import nodes as N
    from tilegcn.ir.printer import _region

    names = ["by", "bx", "k", "k2_phase_", "ko_", "B", "a"]
    symbols = [sympy.Symbol(n, integer=True, nonnegative=True) for n in names]
    buf = T.trace(copy2d.fn, [spec((256, 256)), spec((256, 256))], {}, "gfx942").buffers[0]
    rng = random.Random(0)
    starts = [sympy.Integer(0), sympy.Integer(96), symbols[0], 2 * symbols[1] - 1, 96 - 32 * symbols[2],
              sympy.floor(symbols[2] / 2) * 64, symbols[2] * symbols[3]]
    for _ in range(300):
        chosen = rng.sample(symbols, rng.randint(1, 4))
        starts.append(sum(rng.choice([1, 2, 32, 96, 256]) * x for x in chosen) + rng.choice([0, 1, 32, 480]))
    for start in starts:
        text = _region(N.Region(buf, (start,), (1,)), {})
        assert text == f"{buf.name}[{start}; 1]"


def _line_of(fn, needle):
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, l in enumerate(lines) if needle in l)


def bad_threads(X):
    with T.Kernel(4, threads=96):
        pass


def too_much_lds(X, *, size=48 * 1024):
    with T.Kernel(1, threads=64):
        a = T.alloc_shared((size,), "float32")
        b = T.alloc_fragment((64,), "float32")
        T.clear(b)


def too_many_registers(X):
    with T.Kernel(1, threads=64):
        acc = T.alloc_fragment((128, 128), "float32")  # 256 VGPRs a thread each: either alone may fit, not both
        acc2 = T.alloc_fragment((128, 128), "float32")
        T.clear(acc)
        T.clear(acc2)
        T.copy(acc, X[0, 0])
        T.copy(acc2, X[0, 128])


def mismatched_copy(X):
    with T.Kernel(1, threads=64):
        f = T.alloc_fragment((64, 64), "float32")
        T.copy(X[0:32, 0:64], f)


def test_threads_must_be_a_multiple_of_64_with_user_line():
    with pytest.raises(CompileError, match="multiple of 64") as e:
        T.trace(bad_threads, [spec((64,))], {}, "gfx942")
    assert e.value.location == f"{__file__}:{_line_of(bad_threads, 'T.Kernel')}"


def test_threads_above_1024_rejected():
    def k(X):
        with T.Kernel(1, threads=2048):
            pass
    with pytest.raises(CompileError, match="between 64 and 1024"):
        T.trace(k, [spec((64,))], {}, "gfx942")


def test_lds_over_budget_names_needed_and_available():
    kernel = T.trace(too_much_lds, [spec((64,))], {"size": 24 * 1024}, "gfx942")
    with pytest.raises(ResourceError, match=r"needs 98304 bytes.*gfx942 has 65536"):
        lower(kernel, "gfx942")
    lower(kernel, "gfx950")  # 160 KiB of LDS there


def test_register_budget_names_needed_and_available():
    kernel = T.trace(too_many_registers, [spec((128, 256), torch.float32)], {}, "gfx942")
    with pytest.raises(ResourceError, match=r"needs \d+ VGPRs, gfx942 has 256"):
        lower(kernel, "gfx942")


def test_copy_extent_mismatch_points_at_user_line():
    with pytest.raises(CompileError, match="does not match") as e:
        T.trace(mismatched_copy, [spec((64, 64))], {}, "gfx942")
    assert e.value.location.endswith(f":{_line_of(mismatched_copy, 'T.copy')}")


def test_unknown_arch_lists_supported():
    kernel = T.trace(bad_threads.__wrapped__ if hasattr(bad_threads, "__wrapped__") else copy2d.fn,
                     [spec((64, 128)), spec((64, 128))], _defaults(copy2d), "gfx942")
    with pytest.raises(UnsupportedArchError, match="gfx942, gfx950"):
        lower(kernel, "gfx90a")


def test_elementwise_outside_parallel_is_an_error():
    def k(X):
        with T.Kernel(1, threads=64):
            f = T.alloc_fragment((64,), "float32")
            f[0] = 1.0
    with pytest.raises(CompileError, match="outside T.Parallel"):
        T.trace(k, [spec((64,))], {}, "gfx942")


def annotated(A: T.Tensor(("M", "K"), "bfloat16"), B: T.Tensor(("K", "N"), "bfloat16")):
    with T.Kernel(1, threads=64):
        pass


def test_annotations_catch_mismatched_shapes_and_wrong_dtype():
    from tilegcn.errors import ArgumentError

    T.trace(annotated, [spec((64, 32)), spec((32, 16))], {}, "gfx942")
    with pytest.raises(ArgumentError, match=r"mismatched shapes: B.shape\[0\] = 48 but K = 32 from argument A"):
        T.trace(annotated, [spec((64, 32)), spec((48, 16))], {}, "gfx942")
    with pytest.raises(ArgumentError, match="B has dtype float16, the kernel declares bfloat16"):
        T.trace(annotated, [spec((64, 32)), spec((32, 16), torch.float16)], {}, "gfx942")
