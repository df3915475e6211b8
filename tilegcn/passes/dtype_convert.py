"""Device code for element dtypes: what a register holds for each dtype, conversions between them (T.cast's rules),
and the bytes of memory words (loads and stores of 1, 2, 4 and 8-byte elements).

What a register holds for an element ("held value"): float32, the fp8 dtypes: the value as fp32 (an fp8 element
is rounded once, when written); float16 / bfloat16: fp32 too while computed, two per register in fragments
(context.py packs them); int8, uint8, int16, int32: the value as a 32-bit int (sign- or zero-extended); int64: its
value as a 32-bit int (int64 elements hold int32 values: docs/dtypes.md). Element math runs in two domains (ir/
nodes.py value_kind): fp32 and 32-bit ints.

Conversions follow torch's .to(): float -> int truncates toward zero (v_cvt_i32_f32: in range, torch's result; past
int32's range it saturates and NaN gives 0, where torch's result is the host's undefined behaviour) and wraps to the
narrower int's width; int -> float rounds to nearest even; float -> fp8 rounds to nearest even with torch's overflow
rule (ir/elemfn.py FP8_FORMATS): the hardware conversion gives NaN past E4M3FN's largest value where torch
saturates to +-448, so E4M3FN values are clamped first (NaN kept); the others agree with the instruction.
"""
from __future__ import annotations

from ..amdgcn.isa import VCC
from ..amdgcn.memory import pack_f32_pair, unpack_16bit_to_f32
from ..ir.elemfn import FP8_FORMATS, INT_RANGES, convert_constant
from ..ir.nodes import FLOAT, INT

INT_MASK = {1: 0xFF, 2: 0xFFFF}


def kind_of(dtype) -> str:
    """The domain (ir/nodes.py FLOAT / INT) of `dtype`'s held value."""
    return INT if dtype.is_int else FLOAT


def fp8_mnemonic(dtype) -> str:
    """"fp8" (E4M3) or "bf8" (E5M2): the names of the conversion instructions for `dtype`."""
    return "fp8" if "e4m3" in dtype.name else "bf8"


def _is_vgpr(x) -> bool:
    return getattr(x, "file", None) == "v"


def _vgpr(b, alloc, x):
    if _is_vgpr(x):
        return x
    t = alloc()
    b.emit("v_mov_b32", t, x)
    return t


def int_range_within(src, dst) -> bool:
    """Every value of int dtype `src` is one of int dtype `dst` (no wrap needed)."""
    lo, hi = INT_RANGES[src.name]
    dlo, dhi = INT_RANGES[dst.name]
    return dlo <= lo and hi <= dhi


def wrap_int(b, alloc, x, dtype):
    """The 32-bit int `x` wrapped to int dtype `dtype`'s width (torch's narrowing), held sign/zero-extended."""
    if dtype.bytes >= 4:
        return x
    t = alloc()
    if dtype.kind == "uint":
        b.emit("v_and_b32", t, INT_MASK[dtype.bytes], _vgpr(b, alloc, x))
    else:
        b.emit("v_bfe_i32", t, x, 0, 8 * dtype.bytes, comment=f"wrap to {dtype.name}")
    return t


def round_float(b, alloc, x, dtype, pack16: bool = True):
    """fp32 `x` rounded to float dtype `dtype` and held as fp32 again. `pack16` False leaves float16 / bfloat16
    unrounded (a store into a packed fragment rounds)."""
    if dtype.name == "float32" or (dtype.is_16bit and not pack16):
        return x
    out = alloc()
    if dtype.is_16bit:
        packed = alloc()
        pack_f32_pair(b, packed, _vgpr(b, alloc, x), None, dtype)
        unpack_16bit_to_f32(b, out, packed, False, dtype)
        return out
    word = alloc()
    pack_fp8(b, alloc, word, x, x, dtype, high=False)
    b.emit(f"v_cvt_f32_{fp8_mnemonic(dtype)}", out, word)
    return out


def saturate_e4m3fn(b, alloc, x):
    """x clamped to [-448, 448] (torch's E4M3FN saturation, inf included), NaN kept."""
    limit = FP8_FORMATS["float8_e4m3fn"][3]
    x = _vgpr(b, alloc, x)
    t = alloc()
    b.emit("v_max_f32", t, -limit, x)
    b.emit("v_min_f32", t, limit, t)
    b.emit("v_cmp_u_f32", VCC, x, x, defs=(VCC,), comment="NaN stays NaN")
    b.emit("v_cndmask_b32", t, t, x, VCC, comment="E4M3FN saturates as torch")
    return t


def pack_fp8(b, alloc, word, lo, hi, dtype, high: bool, saturated: bool = False):
    """Two fp32 values converted to `dtype` (fp8) into bytes [1:0] (or [3:2] with `high`) of `word`, the other half
    of `word` kept. `saturated`: the values are `dtype`'s already (no E4M3FN clamp needed)."""
    hi = lo if hi is None else hi
    if dtype.name == "float8_e4m3fn" and not saturated:
        same = hi is lo
        lo = saturate_e4m3fn(b, alloc, lo)
        hi = lo if same else saturate_e4m3fn(b, alloc, hi)
    b.emit(f"v_cvt_pk_{fp8_mnemonic(dtype)}_f32", word, lo, hi, suffix="op_sel:[0,0,1]" if high else "")


def convert(b, alloc, x, src_kind: str, dtype, pack16: bool = True, src_dtype=None):
    """The held value of `dtype` for `x`, a value of domain `src_kind` (a constant or a register): T.cast's rules.
    `src_dtype`, where known, skips conversions that change nothing (a narrower int, the same fp8)."""
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        value = convert_constant(dtype.name, x)
        return value if dtype.is_int else float(value)
    if dtype.is_int:
        if src_kind == FLOAT:
            t = alloc()
            b.emit("v_cvt_i32_f32", t, x, comment="toward zero")
            return wrap_int(b, alloc, t, dtype)
        if src_dtype is not None and src_dtype.is_int and int_range_within(src_dtype, dtype):
            return x
        return wrap_int(b, alloc, x, dtype)
    if src_kind == INT:
        t = alloc()
        b.emit("v_cvt_f32_i32", t, x)
        x = t
    elif src_dtype is not None and (src_dtype == dtype or src_dtype.is_fp8 and dtype.bytes >= 2):
        return x  # already a value of dtype (fp8 values are float16 / bfloat16 / float32 values)
    return round_float(b, alloc, x, dtype, pack16)


# ---- memory words ---------------------------------------------------------------------------------------------

def load_opcode(dtype, width: int) -> str | None:
    """The buffer load for a `width`-byte access of `dtype` elements where it is not the plain dword one (None)."""
    if width == 1:
        return "buffer_load_sbyte" if dtype.kind == "int" else "buffer_load_ubyte"
    if width == 2:
        return "buffer_load_sshort" if dtype.name == "int16" else "buffer_load_ushort"
    return None


def extract(b, alloc, words, e: int, dtype):
    """The held value of element e of `dtype` in the loaded registers `words` (element 0 at byte 0 of words[0])."""
    byte = e * dtype.bytes
    word = words[byte // 4]
    bit = 8 * (byte % 4)
    if dtype.bytes >= 4:  # float32, int32; int64: its low word
        return word
    if dtype.is_16bit:
        t = alloc()
        unpack_16bit_to_f32(b, t, word, bit == 16, dtype)
        return t
    t = alloc()
    if dtype.is_fp8:
        name = f"v_cvt_f32_{fp8_mnemonic(dtype)}"
        if bit:
            b.emit(name + "_sdwa", t, word, suffix=f"src0_sel:BYTE_{bit // 8}")
        else:
            b.emit(name, t, word)
        return t
    op = "v_bfe_i32" if dtype.kind == "int" else "v_bfe_u32"
    b.emit(op, t, word, bit, 8 * dtype.bytes)
    return t


def pack(b, alloc, dst, values: list, dtype, src_dtype=None):
    """Held values of `dtype` (one per element, VGPRs or constants) packed as `dtype`'s bytes into the registers
    `dst` (element 0 at byte 0). `src_dtype`: the dtype the values came from (an fp8 fragment's values need no
    E4M3FN clamp)."""
    if dtype.bytes == 8:  # int64: the value and its sign word
        for e, v in enumerate(values):
            v = _vgpr(b, alloc, v)
            b.emit("v_mov_b32", dst[2 * e], v)
            b.emit("v_ashrrev_i32", dst[2 * e + 1], 31, v, comment="int64: the sign word")
        return
    if dtype.bytes == 4:
        for e, v in enumerate(values):
            b.emit("v_mov_b32", dst[e], v)
        return
    if dtype.is_16bit:
        for e in range(0, len(values), 2):
            hi = values[e + 1] if e + 1 < len(values) else None
            pack_f32_pair(b, dst[e // 2], _vgpr(b, alloc, values[e]), hi and _vgpr(b, alloc, hi), dtype)
        return
    if dtype.is_fp8:
        for e in range(0, len(values), 2):
            word = dst[e // 4]
            if e % 4 == 0:
                b.emit("v_mov_b32", word, 0, comment="(its other half is kept)")
            hi = values[e + 1] if e + 1 < len(values) else None
            pack_fp8(b, alloc, word, _vgpr(b, alloc, values[e]), hi and _vgpr(b, alloc, hi), dtype,
                     high=e % 4 == 2, saturated=src_dtype == dtype)
        return
    per_word = 4 // dtype.bytes
    mask = INT_MASK[dtype.bytes]
    for e, v in enumerate(values):
        word, slot = dst[e // per_word], e % per_word
        if slot == 0:
            b.emit("v_and_b32", word, mask, _vgpr(b, alloc, v))
            continue
        t = alloc()
        b.emit("v_lshlrev_b32", t, 8 * dtype.bytes * slot, _vgpr(b, alloc, v))
        b.emit("v_bfi_b32", word, b.sgpr_constant(mask << (8 * dtype.bytes * slot)), t, word,
               comment=f"byte {slot * dtype.bytes}")


# ---- the arch's fp8 formats -----------------------------------------------------------------------------------

def check_arch_dtypes(kernel, arch) -> None:
    """Refuse an fp8 dtype `arch` lacks (a buffer's or a T.cast's), naming the one of the same kind it has: gfx942
    has the FNUZ encodings, gfx950 the OCP ones (arch.Arch.fp8_dtypes); and packed fp4 anywhere but a global or
    shared tile (no conversion or element access reads it)."""
    from ..ir import nodes as N
    from ..errors import CompileError

    def check(dtype, what: str, loc):
        if dtype.is_packed_fp4 and not what.startswith(("global", "shared")):
            raise CompileError(f"{what} is float4_e2m1fn_x2: packed fp4 values (two a byte) are T.gemm operands only, "
                               "in global and shared tiles; to compute on them, read the bytes as uint8 "
                               "(tensor.view(torch.uint8)) and decode them (examples/tilelang/"
                               "dequant_gemm_bf16_mxfp4_cdna4.py)", location=loc)
        if dtype.is_fp8 and dtype.name not in arch.fp8_dtypes:
            instead = arch.fp8_dtypes[0 if "e4m3" in dtype.name else 1]
            raise CompileError(f"{what} is {dtype.name}, an fp8 format {arch.name} does not have (its conversions "
                               f"and matrix cores read fp8 bytes as {' / '.join(arch.fp8_dtypes)}): use "
                               f"T.{instead} (torch.{instead}) on {arch.name}", location=loc)

    for buf in kernel.buffers:
        check(buf.dtype, f"{buf.scope} buffer {buf.name}", buf.loc)
    for s in N.walk(kernel.body):
        value = getattr(s, "value", None)
        if isinstance(value, N.Expr):
            for e in N.walk_expr(value):
                if isinstance(e, N.Cast):
                    check(e.dtype, f"T.cast(..., {e.dtype.name})", s.loc)
