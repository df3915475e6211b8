"""Copy lowering: T.copy between global tensors and fragments, and between fragments.

Input: a Copy statement whose fragment side has a FragmentLayout. Output: buffer loads/stores of the
widest legal width (abi/memory.access_width), all issued before any conversion so they overlap
(the wait pass then waits once, at the first conversion). Shared-memory copies belong to the gemm pass.
Invariant kept: fragments hold fp32 values one per VGPR, 16-bit values two per VGPR (low half first).
"""
from __future__ import annotations

from ..amdgcn.isa import SCC, VCC
from ..amdgcn.memory import access_width, masked_dims, pack_f32_pair, unpack_16bit_to_f32
from ..errors import CompileError
from ..ir import nodes as N
from ..ir.ops import TileOp
from ..ir.types import float32
from . import dtype_convert
from .context import Context, LaneMask


def _nontrivial(extents):
    return [d for d, e in enumerate(extents) if e != 1]


def global_index(region: N.Region, frag_shape, frag_index) -> tuple:
    """Global element index of a fragment element: region start + the fragment coords, dims matched
    in order after dropping extent-1 dims on both sides (a gather region maps the coords through its index)."""
    if isinstance(region, N.GatherRegion):
        return region.element(frag_index)
    index = list(region.starts)
    for gd, fd in zip(_nontrivial(region.extents), _nontrivial(frag_shape)):
        index[gd] = region.starts[gd] + frag_index[fd]
    return tuple(index)


def global_shift(region: N.Region, frag_shape, frag_offsets) -> tuple:
    """global_index's integer counterpart: the fragment offsets placed on the global dims they map to."""
    shift = [0] * len(region.starts)
    for gd, fd in zip(_nontrivial(region.extents), _nontrivial(frag_shape)):
        shift[gd] = frag_offsets[fd]
    return tuple(shift)


def _pieces(ctx: Context, region: N.Region, frag: N.Buffer):
    """(first element r, elements per access, width bytes) of every access of this thread."""
    lay = ctx.layouts[frag]
    g = region.buffer
    if g.spec.strides[-1] != 1 and region.extents[-1] > 1:
        raise CompileError(f"{g.name} has strides {g.spec.strides}: tilegcn needs the last dimension "
                           "contiguous (stride 1); call .contiguous()")
    mask = masked_dims(g, region.starts, region.extents)
    run = lay.run
    width = access_width(g, run, g.spec and (len(g.shape) - 1) in mask)
    per = width // g.dtype.bytes
    pieces = [(r, per, width) for r in range(0, lay.elems, per)]
    return pieces, mask


TEMP_BATCH = 16  # loads in flight before their conversion, when they go through temporaries


def _load_mode(frag: N.Buffer, g: N.Buffer, lay, per: int) -> str:
    """direct: load into the fragment's registers as is; inplace: load 16-bit values into the upper
    half of an fp32 run and widen them downwards; temp: load into temporaries and convert."""
    if lay.regs.file != "v":
        return "temp"
    if frag.dtype == g.dtype and (g.dtype.bytes == 4 or lay.packed and per % 2 == 0):
        return "direct"
    if frag.dtype == float32 and g.dtype.is_16bit and per % 2 == 0:
        return "inplace"
    return "temp"


def lower_copy_global_to_fragment(ctx: Context, s: TileOp):
    frag, region = s.dst.buffer, s.src
    g = region.buffer
    lay = ctx.layouts[frag]
    pieces, mask = _pieces(ctx, region, frag)
    mode = _load_mode(frag, g, lay, pieces[0][1])
    if mode == "temp" and len(pieces) > TEMP_BATCH:
        for start in range(0, len(pieces), TEMP_BATCH):
            _load_pieces(ctx, region, frag, lay, pieces[start:start + TEMP_BATCH], mask, mode)
        return
    _load_pieces(ctx, region, frag, lay, pieces, mask, mode)


def _load_pieces(ctx, region, frag, lay, pieces, mask, mode):
    b, g = ctx.b, region.buffer
    loaded = []
    for r, per, width in pieces:
        index = global_index(region, frag.shape, lay.coords(r, ctx.threads))
        dwords = max(width // 4, 1)
        if mode == "direct":
            first = r // 2 if lay.packed else r
            dst = lay.regs[first:first + dwords]
        elif mode == "inplace":
            dst = lay.regs[r + per - dwords:r + per]
        else:
            dst = b.v.alloc(dwords, align=2 if dwords > 1 else 1)
        ctx.access.load(dst, width, g, index, mask, comment=f"{g.name} -> {frag.name}[{r}:{r + per}]",
                        op=dtype_convert.load_opcode(g.dtype, width))
        loaded.append((r, per, dst))
    if mode == "direct":
        return
    for r, per, dst in loaded:
        if mode == "inplace":
            _widen_in_place(b, lay.regs, r, per, g.dtype)
            continue
        if _is_wide_float(g.dtype) and _is_wide_float(frag.dtype):
            values = []  # (as it always was: fp32 values of 32- and 16-bit floats)
            for e in range(per):
                word = dst[e * g.dtype.bytes // 4]
                if g.dtype.is_16bit:
                    tmp = b.v.alloc()
                    unpack_16bit_to_f32(b, tmp, word, e % 2 == 1, g.dtype)
                    values.append(tmp)
                else:
                    values.append(word)
            _store_elements(ctx, frag, r, values)
            for v in values:
                if v.index < dst.index or v.index >= dst.index + dst.count:
                    b.v.free(v)
        else:
            with _Temps(b) as alloc:
                values = [_converted(b, alloc, dtype_convert.extract(b, alloc, dst, e, g.dtype), g.dtype, frag.dtype)
                          for e in range(per)]
                _store_elements(ctx, frag, r, values)
        b.v.free(dst)


def _is_wide_float(dtype) -> bool:
    """float32, float16 or bfloat16: the dtypes this file converted before the int and fp8 ones came."""
    return dtype == float32 or dtype.is_16bit


class _Temps:
    """VGPR temporaries for a conversion, freed together at the end of the `with` block."""

    def __init__(self, b):
        self.b, self.regs = b, []

    def __enter__(self):
        return self

    def __call__(self):
        reg = self.b.v.alloc()
        self.regs.append(reg)
        return reg

    def __exit__(self, *exc):
        for reg in self.regs:
            self.b.v.free(reg)


def _converted(b, alloc, value, src, dst):
    """The held value of `src` converted to `dst` (T.cast's rules; 16-bit floats are rounded where packed)."""
    return dtype_convert.convert(b, alloc, value, dtype_convert.kind_of(src), dst, pack16=False, src_dtype=src)


def _widen_in_place(b, regs, r: int, per: int, dtype):
    """16-bit pairs loaded into regs[r+per/2 : r+per] become fp32 in regs[r : r+per].

    Word w feeds elements 2w and 2w+1; every register it overwrites holds a word already consumed
    (or, for the last high half, the word itself), so no temporaries are needed.
    """
    half = per // 2
    for w in range(half):
        src = regs[r + half + w]
        unpack_16bit_to_f32(b, regs[r + 2 * w], src, False, dtype)
        unpack_16bit_to_f32(b, regs[r + 2 * w + 1], src, True, dtype)


def _store_elements(ctx: Context, frag: N.Buffer, r: int, values: list):
    """Write consecutive fp32 values to fragment elements r, r+1, ... (16-bit fragments: by pairs)."""
    if ctx.layouts[frag].packed and r % 2 == 0 and len(values) % 2 == 0:
        for e in range(0, len(values), 2):
            ctx.write_f32(frag, r + e, values[e], values[e + 1])
        return
    for e, v in enumerate(values):
        _store_element(ctx, frag, r + e, v)


def _store_element(ctx: Context, frag: N.Buffer, r: int, value):
    """Write an fp32 value to fragment element r (packed fragments: read-modify-write of the pair)."""
    lay = ctx.layouts[frag]
    if not lay.packed:
        ctx.write_f32(frag, r, value)
        return
    other_r = r ^ 1
    other, temp = ctx.read_f32(frag, other_r)
    lo, hi = (value, other) if r % 2 == 0 else (other, value)
    ctx.write_f32(frag, r & ~1, lo, hi)
    if temp:
        ctx.b.v.free(other)


def lower_copy_fragment_to_global(ctx: Context, s: TileOp):
    """Each run is converted into temporaries and stored at once, so temporaries stay few. Where the fragment's
    layout replicates (a row statistic, a small vector), only the one writer thread of each element stores it
    (the other lanes are switched off by EXEC), so every element is written once."""
    b, frag, region = ctx.b, s.src.buffer, s.dst
    g = region.buffer
    lay = ctx.layouts[frag]
    pieces, mask = _pieces(ctx, region, frag)
    direct = frag.dtype == g.dtype and lay.regs.file == "v" and (g.dtype.bytes == 4 or lay.packed
                                                                and pieces[0][1] % 2 == 0)
    indices: dict = {}  # fragment origin -> its global index (accumulator runs share one origin)
    for writer, group in _by_writer(lay, pieces):
        with WriterMask(ctx, writer):
            for r, per, width in group:
                dwords = max(width // 4, 1)
                if direct:
                    first = r // 2 if lay.packed else r
                    src = lay.regs[first:first + dwords]
                else:
                    src = b.v.alloc(dwords, align=2 if dwords > 1 else 1)
                    _convert_run(ctx, frag, r, per, src, g.dtype)
                if lay.acc_split is None:
                    index, shift = global_index(region, frag.shape, lay.coords(r, ctx.threads)), None
                else:
                    origin, offsets = lay.acc_split(r)
                    if origin not in indices:
                        indices[origin] = global_index(region, frag.shape, origin)
                    index, shift = indices[origin], global_shift(region, frag.shape, offsets)
                ctx.access.store(src, width, g, index, mask, comment=f"{frag.name}[{r}:{r + per}] -> {g.name}",
                                 shift=shift)
                if not direct:
                    b.v.free(src)


def _by_writer(lay, pieces) -> list:
    """Consecutive pieces grouped by the writer condition of their elements (None: every thread writes)."""
    groups: list = []
    for piece in pieces:
        writer = lay.writer(piece[0])
        if groups and groups[-1][0] == writer:
            groups[-1][1].append(piece)
        else:
            groups.append((writer, [piece]))
    return groups


class WriterMask(LaneMask):
    """EXEC limited to the threads where one of `terms` (SymPy in TID, ir/layout.py's Layout.writer) is 0."""

    def __init__(self, ctx: Context, terms):
        super().__init__(ctx)
        self.terms = terms

    def needed(self) -> bool:
        return bool(self.terms)

    def set_vcc(self, b):
        for k, term in enumerate(self.terms):
            dst = VCC if k == 0 else b.s.alloc(2, align=2)
            b.emit("v_cmp_eq_u32", dst, 0, self.ctx.lower.vgpr(term), defs=(dst,), comment="the writer thread?")
            if k:
                b.emit("s_or_b64", VCC, VCC, dst, defs=(VCC, SCC), uses=(VCC, dst))
                b.s.free(dst)


def _convert_run(ctx: Context, frag: N.Buffer, r: int, per: int, dst, dtype):
    """Elements r..r+per of a fragment, as `dtype`, packed into the registers `dst`."""
    b = ctx.b
    if not (_is_wide_float(dtype) and _is_wide_float(frag.dtype)):
        with _Temps(b) as alloc:
            values = []
            for e in range(per):
                value, temp = ctx.read_f32(frag, r + e)
                if temp:
                    alloc.regs.append(value)
                values.append(_converted(b, alloc, value, frag.dtype, dtype))
            dtype_convert.pack(b, alloc, dst, values, dtype, src_dtype=frag.dtype)
        return
    step = 2 if dtype.is_16bit else 1
    for e in range(0, per, step):
        lo, lo_tmp = ctx.read_f32(frag, r + e)
        if dtype.is_16bit:
            hi, hi_tmp = ctx.read_f32(frag, r + e + 1) if per > 1 else (None, False)
            pack_f32_pair(b, dst[e // 2], lo, hi, dtype)
            if hi_tmp:
                b.v.free(hi)
        else:
            b.emit("v_mov_b32", dst[e], lo)
        if lo_tmp:
            b.v.free(lo)


def lower_copy_fragment_to_fragment(ctx: Context, s: TileOp):
    """Element by element; between dtypes, each converted as T.cast converts it (`T.copy(frag_f32, frag_fp8)`)."""
    src, dst = s.src.buffer, s.dst.buffer
    same_domain = src.dtype.is_float and dst.dtype.is_float and not dst.dtype.is_fp8
    for r in range(ctx.layouts[dst].elems):
        value, temp = ctx.read_f32(src, r)
        if same_domain or src.dtype == dst.dtype:
            _store_element(ctx, dst, r, value)
        else:
            with _Temps(ctx.b) as alloc:
                _store_element(ctx, dst, r, _converted(ctx.b, alloc, value, src.dtype, dst.dtype))
        if temp:
            ctx.b.v.free(value)


def lower_copy(ctx: Context, s: TileOp):
    scopes = (s.src.buffer.scope, s.dst.buffer.scope)
    if scopes == (N.GLOBAL, N.FRAGMENT):
        return lower_copy_global_to_fragment(ctx, s)
    if scopes == (N.FRAGMENT, N.GLOBAL):
        return lower_copy_fragment_to_global(ctx, s)
    if scopes == (N.FRAGMENT, N.FRAGMENT):
        return lower_copy_fragment_to_fragment(ctx, s)
    if scopes in ((N.SHARED, N.FRAGMENT), (N.FRAGMENT, N.SHARED)):
        from .lds_elements import lower_fragment_to_shared, lower_shared_to_fragment

        return (lower_shared_to_fragment if scopes[0] == N.SHARED else lower_fragment_to_shared)(ctx, s)
    from .gemm import lower_shared_copy

    return lower_shared_copy(ctx, s)
