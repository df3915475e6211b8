"""Cross-lane and cross-wave reduction primitives: fp32 values in VGPRs combined over the threads whose ids differ
in given bits (a butterfly: afterwards every thread of a group holds the group's result, bit for bit the same:
every step combines the same two values on both lanes of a pair, and op(a, b) == op(b, a)).

Across lanes, one step per thread-id bit k (partner lane = lane ^ 2^k), in increasing k, by the cheapest route
the arch has for that distance (docs/isa-notes.md, "Cross-lane reductions"):
  - k = 0, 1: DPP quad_perm ([1,0,3,2], [2,3,0,1]): the exchange rides on the VALU op itself;
  - k = 2, 3 once the lower bits are reduced: DPP row_half_mirror / row_mirror (lane 7-i of its 8, 15-i of its 16:
    another lane of the partner group, which holds the same value as the partner itself);
  - k = 2..4 otherwise: ds_swizzle_b32 in bit-mask mode (xor within 32 lanes), through the LDS unit, no LDS memory;
  - k = 4, 5 on gfx950: v_permlane16_swap / v_permlane32_swap on a copy (the two registers then hold x and
    x[lane ^ 2^k] in every lane, in the same order on both sides of the pair);
  - k = 4 and 5 together on gfx942 where the group is the whole wave: DPP row_bcast:15 / row_bcast:31 into lane 63
    (LLVM's wave reduction), v_readlane to an SGPR and back to every lane;
  - k = 5 on gfx942 otherwise: ds_bpermute_b32 with address (lane ^ 32) * 4.
A DPP form reading a VGPR that a VALU just wrote needs wait states on gfx9: that is the hazard pass's business
(amdgcn/hazards.py), never an ordering chosen here.

Across waves: every thread writes its values to LDS scratch (slot s of thread t at 4 * (s * entries + (t >> k)),
where the lanes of a group, the low k lane bits, share one entry: they hold the same value), an s_barrier, then
every thread reads the partials of the waves of its group, in wave order (so that all holders combine in the same
order), and combines them.

Combining follows torch: sum is v_add_f32; max / min propagate NaN (torch.amax / amin): v_maximum3 / v_minimum3
on gfx950, elsewhere v_max / v_min (IEEE maxNum, which drops a NaN) with a v_cmp_u select of NaN.
"""
from __future__ import annotations

from ..amdgcn.abi import WORKITEM_ID
from ..amdgcn.isa import DS_READ, VALU, VCC, Reg

QUIET_NAN = 0x7FC00000
ABS_MASK = 0x7FFFFFFF
ALL_ROWS = "row_mask:0xf bank_mask:0xf"
_DPP_QUAD = {0: "quad_perm:[1,0,3,2]", 1: "quad_perm:[2,3,0,1]"}
_DPP_MIRROR = {2: "row_half_mirror", 3: "row_mirror"}  # valid once the bits below k are reduced
_VOP2 = {"sum": "v_add_f32", "max": "v_max_f32", "min": "v_min_f32"}


def combine_op(op: str) -> str:
    """The pairwise op of a reduction: absmax combines by max, abssum by sum (abs applied to the inputs)."""
    return {"absmax": "max", "abssum": "sum"}.get(op, op)


def lane_route(k: int, reduced_below: bool, arch, whole_wave: bool = False) -> str:
    """How the step for thread-id bit k (0..5) exchanges values: 'dpp', 'swizzle', 'permlane', 'bpermute', or
    'bcast' (bits 4 and 5 in one go, for a group of the whole wave). `reduced_below`: every bit below k is reduced
    already (the mirror DPP controls need it)."""
    if k in _DPP_QUAD or (k in _DPP_MIRROR and reduced_below):
        return "dpp"
    if k >= 4 and arch.has_permlane_swap:
        return "permlane"
    if k == 4 and whole_wave:
        return "bcast"
    if k <= 4:
        return "swizzle"
    return "bpermute"


def swizzle_xor_offset(distance: int) -> int:
    """ds_swizzle_b32 offset, bit-mask mode (offset[15] = 0): lane i reads ((i & 0x1f) | 0) ^ distance within its
    32 lanes (and_mask 0x1f in bits 4:0, or_mask 0 in 9:5, xor_mask in 14:10)."""
    assert 0 < distance < 32
    return 0x1F | (distance << 10)


def compaction_shift(lane_bits: int) -> int:
    """k where `lane_bits` (the lane-id bits a cross-lane step reduced) are the low k bits: the 2^k lanes of a group
    then share one LDS entry of the cross-wave scratch (entry = thread id >> k); else 0, one entry per thread."""
    k = lane_bits.bit_length()
    return k if lane_bits == (1 << k) - 1 else 0


def scratch_bytes(threads: int, slots: int, lane_bits: int) -> int:
    """LDS bytes of Reducer.across_waves's partials: one fp32 per slot and entry."""
    return 4 * slots * (threads >> compaction_shift(lane_bits))


class Abs:
    """A VOP3 source with the abs modifier (`|v3|`): absmax / abssum read their inputs through it."""

    def __init__(self, reg: Reg):
        self.reg = reg

    def __str__(self):
        return f"|{self.reg}|"


def _reg(x) -> Reg:
    return x.reg if isinstance(x, Abs) else x


_INT_VOP2 = {"sum": "v_add_u32", "max": "v_max_i32", "min": "v_min_i32"}


class Reducer:
    """Emits the combining of fp32 VGPR values (32-bit ints with `integer`: an int fragment's) for one reduction op
    ('sum', 'max', 'min') into builder `b`."""

    def __init__(self, b, op: str, integer: bool = False):
        self.b, self.arch, self.op, self.integer = b, b.arch, combine_op(op), integer
        self._bpermute_address = None
        self._nan_lanes = None  # combine3's lane mask of NaNs met, on arches without v_maximum3
        self._add_dpp = "v_add_u32_dpp" if integer else "v_add_f32_dpp"

    # -- one pair -------------------------------------------------------------------------------
    def combine(self, dst: Reg, a, c):
        """dst = op(a, c), NaN as torch; a and c are VGPRs or Abs(VGPR); dst may be either. Commutative bit for bit:
        op(a, c) == op(c, a)."""
        b = self.b
        ra, rc = _reg(a), _reg(c)
        if self.integer:  # two's complement: wraps as torch's int32 sum, no NaN
            b.emit(_INT_VOP2[self.op], dst, a, c, defs=(dst,), uses=(ra, rc))
            return
        vop3 = "_e64" if isinstance(a, Abs) or isinstance(c, Abs) else ""  # |x| is a VOP3 source modifier
        if self.op == "sum":
            b.emit(f"v_add_f32{vop3}", dst, a, c, defs=(dst,), uses=(ra, rc))
        elif self.arch.has_ieee_maximum3:
            b.emit(f"v_{self.op}imum3_f32", dst, a, c, c, defs=(dst,), uses=(ra, rc))
        else:
            b.emit("v_cmp_u_f32", VCC, ra, rc, defs=(VCC,), uses=(ra, rc), comment="either NaN?")
            b.emit(f"{_VOP2[self.op]}{vop3}", dst, a, c, defs=(dst,), uses=(ra, rc))
            b.emit("v_cndmask_b32", dst, dst, b.vgpr_constant(QUIET_NAN), VCC, comment="then NaN")

    def takes_three(self) -> bool:
        """Whether `combine3` folds two new values a step: max / min of fp32 values (exact, so the order in which
        elements meet does not matter)."""
        return not self.integer and self.op in ("max", "min")

    def combine3(self, dst: Reg, a: Reg, c: Reg, d: Reg):
        """dst = op(a, c, d) (`takes_three`; a is dst or a new value, c and d new ones), NaN as torch once
        `end_threes(dst)` has run: one NaN-propagating v_maximum3_f32 / v_minimum3_f32 where the arch has it; else
        v_max3_f32 / v_min3_f32 (IEEE maxNum: NaN dropped) with the new values' NaN test (v_cmp_u_f32: either is
        NaN) ORed into a lane mask, which `end_threes` turns into a quiet NaN: two VALU instructions and a scalar
        one for two values, where pairwise combining takes six (a compare, the op, a select, each)."""
        b = self.b
        if self.arch.has_ieee_maximum3:
            b.emit(f"v_{self.op}imum3_f32", dst, a, c, d, defs=(dst,), uses=(a, c, d))
            return
        b.emit(f"v_{self.op}3_f32", dst, a, c, d, defs=(dst,), uses=(a, c, d))
        pairs = [(c, d)] if a == dst else [(a, c), (d, d)]
        for x, y in pairs:
            if self._nan_lanes is None:
                self._nan_lanes = b.s.alloc(2, align=2, what="lanes that met a NaN")
                b.emit("v_cmp_u_f32", self._nan_lanes, x, y, comment="either NaN?")
            else:
                b.emit("v_cmp_u_f32", VCC, x, y, defs=(VCC,), comment="either NaN?")
                b.emit("s_or_b64", self._nan_lanes, self._nan_lanes, VCC)

    def end_threes(self, dst: Reg):
        """After the last `combine3` into `dst`: dst = NaN in the lanes whose values held one."""
        if self._nan_lanes is None:
            return
        nan = self.b.vgpr_constant(QUIET_NAN)
        self.b.emit("v_cndmask_b32", dst, dst, nan, self._nan_lanes, comment="then NaN")
        self.b.s.free(self._nan_lanes)
        self._nan_lanes = None

    # -- across lanes ---------------------------------------------------------------------------
    def across_lanes(self, values: list, bits: int, twins: dict | None = None):
        """Each of `values` (fp32 VGPRs) becomes op over the lanes whose ids differ from this lane's in the set
        bits of `bits` (a mask of lane-id bits 0..5), in every one of those lanes. Step by step over all values:
        the steps of one value depend on each other, those of different values do not (work for the scheduler;
        the hazard pass pads whatever wait states a DPP step still needs). `twins`: {value: another VGPR holding
        the same value}, which a first step by v_permlane*_swap takes instead of copying the value."""
        twins = dict(twins or {})
        for k, route in self._routes(bits):
            if route == "bcast":
                for x in values:
                    self._bcast(x)
                return
            step = getattr(self, f"_{route}")
            for x in values:
                if route == "permlane":
                    self._permlane(x, k, twins.pop(x, None))
                else:
                    step(x, k)
            twins.clear()  # (after the first step a value is no longer its twin's)

    def _routes(self, bits: int) -> list:
        """(k, route) of every step of `across_lanes` over `bits`, in order."""
        whole_wave = self.arch.wave_size - 1
        out = []
        for k in range(self.arch.wave_size.bit_length() - 1):
            if bits >> k & 1:
                below = (1 << k) - 1
                out.append((k, lane_route(k, (bits & below) == below, self.arch,
                                          whole_wave=(bits & whole_wave) == whole_wave)))
        return out

    def first_step_swaps(self, bits: int) -> bool:
        """Whether the first step of `across_lanes` over `bits` is a v_permlane*_swap (which wants the value in two
        registers: `twins`)."""
        routes = self._routes(bits)
        return bool(routes) and routes[0][1] == "permlane"

    def _dpp(self, x: Reg, k: int):
        control = f"{_DPP_QUAD.get(k) or _DPP_MIRROR[k]} {ALL_ROWS}"
        if self.op == "sum":  # the exchange rides on the add: x = x[partner] + x
            self.b.emit(self._add_dpp, x, x, x, suffix=control, defs=(x,), uses=(x,),
                        comment=f"+ lane ^ {1 << k}")
            return
        t = self.b.v.alloc(what="partner value")
        self.b.emit("v_mov_b32_dpp", t, x, suffix=control, defs=(t,), uses=(x,), comment=f"lane ^ {1 << k}")
        self.combine(x, t, x)
        self.b.v.free(t)

    def _bcast(self, x: Reg):
        """Bits 4 and 5 of a whole-wave group (bits 0..3 reduced: each row of 16 lanes holds one value), as LLVM
        reduces a wave on gfx9: row_bcast:15 adds row 0's value into row 1 and row 2's into row 3 (row_mask 0xa),
        row_bcast:31 lane 31's into rows 2 and 3 (row_mask 0xc), so lane 63 holds (r0 + r1) + (r2 + r3), which
        v_readlane puts in an SGPR and a v_mov gives back to every lane. No LDS round trip, where ds_swizzle and
        ds_bpermute take two."""
        b = self.b
        for control in ("row_bcast:15 row_mask:0xa bank_mask:0xf", "row_bcast:31 row_mask:0xc bank_mask:0xf"):
            if self.op == "sum":
                b.emit(self._add_dpp, x, x, x, suffix=control, defs=(x,), uses=(x,), comment="+ an earlier row")
                continue
            t = b.v.alloc(what="an earlier row's value")
            # the rows row_mask leaves out keep t's old bits: what they combine is never read (only lane 63 is)
            b.emit("v_mov_b32_dpp", t, x, suffix=control, defs=(t,), uses=(x,), comment="an earlier row")
            self.combine(x, t, x)
            b.v.free(t)
        total = b.s.alloc(what="wave total")
        b.emit("v_readlane_b32", total, x, 63, defs=(total,), uses=(x,), comment="lane 63: the whole wave")
        b.valu("v_mov_b32", x, total)
        b.s.free(total)

    def _swizzle(self, x: Reg, k: int):
        t = self.b.v.alloc(what="partner value")
        self.b.emit("ds_swizzle_b32", t, x, suffix=f"offset:{swizzle_xor_offset(1 << k):#x}", defs=(t,),
                    uses=(x,), kind=DS_READ, comment=f"lane ^ {1 << k}")
        self.combine(x, t, x)
        self.b.v.free(t)

    def _permlane(self, x: Reg, k: int, twin: Reg | None = None):
        t = twin
        if t is None:
            t = self.b.v.alloc(what="partner value")
            self.b.valu("v_mov_b32", t, x)
        # odd rows of t trade with even rows of x: t = x[l & ~2^k], x = x[l | 2^k] in every lane l
        self.b.emit(f"v_permlane{1 << k}_swap_b32", t, x, defs=(t, x), uses=(t, x), kind=VALU,
                    comment=f"rows of {1 << k} traded")
        self.combine(x, t, x)
        self.b.v.free(t)

    def _bpermute(self, x: Reg, k: int):
        b = self.b
        if self._bpermute_address is None:
            self._bpermute_address = self._partner_address(k)
        t = b.v.alloc(what="partner value")
        b.emit("ds_bpermute_b32", t, self._bpermute_address, x, defs=(t,), uses=(self._bpermute_address, x),
               kind=DS_READ, comment=f"lane ^ {1 << k}")
        self.combine(x, t, x)
        b.v.free(t)

    def _partner_address(self, k: int) -> Reg:
        """(lane ^ 2^k) * 4, ds_bpermute's address of the partner lane: computed once for the kernel, before any loop
        (the builder's outermost frame and CSE: every reduction of a loop body, flash attention's row max and row
        sum on gfx942 every trip, reads the same register instead of two VALU instructions each)."""
        b = self.b
        key = ("ds_bpermute partner", k)
        addr = b.cse_get("v", key)
        if addr is None:
            addr = b.alloc_in_frame("v", 0, what=f"lane ^ {1 << k}, in bytes")
            b.valu("v_lshlrev_b32", addr, 2, WORKITEM_ID, frame=0)
            b.valu("v_xor_b32", addr, 4 << k, addr, frame=0)
            b.cse_put("v", key, addr, 0)
        return addr

    def free(self):
        if self._bpermute_address is not None:
            self.b.v.free(self._bpermute_address)
            self._bpermute_address = None

    # -- across waves ---------------------------------------------------------------------------
    def across_waves(self, values: list, lane_bits: int, wave_bits: int, threads: int, lds_base: int, barrier):
        """Every value of `values` (slot s: one fp32 VGPR per thread, already reduced across the lanes of `lane_bits`)
        becomes op over the waves whose ids differ in the set bits of `wave_bits`. Uses LDS bytes
        [lds_base, lds_base + scratch_bytes(...)); `barrier(access)` places the s_barriers ('write' before the
        writes, 'read' before the reads)."""
        b, wave = self.b, self.arch.wave_size
        shift = compaction_shift(lane_bits)
        entries, wave_entries = threads >> shift, wave >> shift  # entries per slot, between two waves
        own, group = b.v.alloc(what="scratch entry"), b.v.alloc(what="first wave of my group")
        if shift:  # the lanes of one group hold one value: they share an entry (writing the same bits)
            b.valu("v_lshrrev_b32", own, shift, WORKITEM_ID)
            b.valu("v_lshlrev_b32", own, 2, own)
        else:
            b.valu("v_lshlrev_b32", own, 2, WORKITEM_ID)
        b.valu("v_and_b32", group, _u32(~(wave_bits * wave_entries * 4)), own)
        # scratch behind large buffers (gfx950's LDS): its offsets would not fit the DS offset field
        if lds_base + 4 * entries * len(values) > self.arch.ds_max_imm_offset + 1:
            base = b.sgpr_constant(lds_base)
            b.valu("v_add_u32", own, base, own)
            b.valu("v_add_u32", group, base, group)
            lds_base = 0
        barrier("write")
        for s, x in enumerate(values):
            vaddr, imm = self._ds_address(own, lds_base + 4 * entries * s)
            b.emit("ds_write_b32", vaddr, x, suffix=imm, defs=(), uses=(vaddr, x), comment=f"partial of slot {s}")
            self._free_address(vaddr, own)
        barrier("read")
        waves = [m for m in range(wave_bits + 1) if m & ~wave_bits == 0]  # the group's waves, in wave order
        for s, x in enumerate(values):
            parts = []
            for m in waves:
                part = b.v.alloc(what="wave partial")
                vaddr, imm = self._ds_address(group, lds_base + 4 * (entries * s + m * wave_entries))
                b.emit("ds_read_b32", part, vaddr, suffix=imm, defs=(part,), uses=(vaddr,))
                self._free_address(vaddr, group)
                parts.append(part)
            self.combine(x, parts[0], parts[1])
            for part in parts[2:]:
                self.combine(x, x, part)
            for part in parts:
                b.v.free(part)
        b.v.free(group)
        b.v.free(own)

    def _ds_address(self, base: Reg, offset: int) -> tuple:
        """(VGPR, 'offset:N') for LDS byte address base + offset; an offset past the 16-bit field is added into a
        temporary VGPR (freed by _free_address)."""
        if offset <= self.arch.ds_max_imm_offset:
            return base, f"offset:{offset}"
        t = self.b.v.alloc(what="LDS address")
        self.b.emit("v_add_u32", t, self.b.sgpr_constant(offset), base)
        return t, "offset:0"

    def _free_address(self, vaddr: Reg, base: Reg):
        if vaddr != base:
            self.b.v.free(vaddr)


def _u32(x: int) -> int:
    return x & 0xFFFFFFFF
