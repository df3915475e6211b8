"""One table per target arch: every ISA fact the compiler and the emulator rely on.

Sources: docs/isa-notes.md (checked against LLVM 22), LLVM AMDGPUUsage, the CDNA3 ISA guide,
and AMD's matrix instruction calculator. Nothing outside this file should hard-code an arch fact.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field, replace

from ..errors import UnsupportedArchError
from . import isa_table


# hsa_kernel_dispatch_packet_t.grid_size_{x,y,z} count work-items in 32 bits (HSA runtime spec, AMDGPUUsage).
HSA_MAX_GRID_WORKITEMS = 2**32 - 1


@dataclass(frozen=True)
class MfmaShape:
    """One MFMA instruction with fp32 accumulation.

    Operand layout (lane l in 0..63, per docs/isa-notes.md / calculator data):
      A[i][k]: lane = M * (k // kgroup) + i, register = (k % kgroup) // 2, half = k % 2
      B[k][j]: lane = N * (k // kgroup) + j, same register/half rule
      D[i][j]: see `tilegcn.amdgcn.mfma_layout` (blocks of 4 rows per lane group)
    where kgroup = K * M / 64 elements of k held by one lane (4 for 16x16x16 and 32x32x8,
    8 for 16x16x32 and 32x32x16).
    """

    name_template: str  # e.g. "v_mfma_f32_32x32x8_{dtype}"
    M: int
    N: int
    K: int
    passes: int  # issue passes on the XDL pipe (4 per 16x16 and 8 per 32x32 CDNA3 shape)
    # D (and C) layout: each lane holds `d_row_block` consecutive rows of one column in consecutive
    # registers (calculator data: 4 for every CDNA3 fp32-accumulating shape; the same for gfx950's).
    d_row_block: int = 4
    elem_bytes: int = 2  # operand element width: 2 (bf16 / f16) or 1 (fp8 / bf8 / i8: issue 22)
    acc: str = "f32"  # accumulator type: "f32", or "i32" for the i8 MFMAs
    # operand register blocks: gfx950's f8f6f4 MFMAs on 8-bit elements read 8 VGPRs per operand as two blocks of 4,
    # block b holding k in [b * K / 2, (b + 1) * K / 2) (mfma_layout.element_location); 1 for every other MFMA
    blocks: int = 1
    modifiers: str = ""  # assembler modifiers of the instruction (f8f6f4: cbsz / blgp name the operand formats)

    def name(self, dtype: str) -> str:
        return self.name_template.format(dtype=dtype)

    def mixed_form(self, src_a: str, src_b: str) -> tuple:
        """(mnemonic, modifiers) of this 8-bit MFMA on srcA in format `src_a` and srcB in `src_b` ("fp8" / "bf8"):
        f8f6f4 names them in cbsz (srcA) / blgp (srcB), the older MFMAs in the mnemonic's last two words
        (`v_mfma_f32_32x32x16_fp8_bf8`: A fp8, B bf8)."""
        if self.blocks > 1:  # f8f6f4
            codes = {fmt: code for code, (fmt, _) in F8F6F4_FORMATS.items()}
            mods = [f"{field}:{codes[fmt]}" for field, fmt in (("cbsz", src_a), ("blgp", src_b)) if codes[fmt]]
            return self.name_template, " ".join(mods)
        return f"{self.name_template.rsplit('_', 2)[0]}_{src_a}_{src_b}", self.modifiers

    @property
    def k_per_lane(self) -> int:
        """Consecutive k elements one lane holds for one row (A) / column (B)."""
        return self.K * self.M // 64

    @property
    def a_regs(self) -> int:
        """VGPRs per lane for A (and B): k_per_lane elements packed from bit 0 up (two 16-bit or four 8-bit per
        register)."""
        return self.k_per_lane * self.elem_bytes // 4

    @property
    def d_regs(self) -> int:
        """fp32 accumulator registers per lane."""
        return self.M * self.N // 64


@dataclass(frozen=True)
class LowpMfma:
    """An MFMA the emulated device runs for other compilers' code (issue 22), outside the bf16/f16 shapes tilegcn
    emits: 8-bit integer, fp8/bf8, fp32 / xf32 and gfx950's f8f6f4 operands.

    Operand layout (the one of MfmaShape, generalised to any element width): kpl = K * M / 64 consecutive k of
    one row of A (column of B) in one lane, packed from bit 0 of the first register up, lane M * (k // kpl) + i.
    The f8f6f4 forms take their element format from cbsz (A) / blgp (B): 0 fp8, 1 bf8, 2 fp6, 3 bf6, 4 fp4;
    their register count follows the width (8 / 6 / 4 VGPRs), and so do their passes (LLVM's hazard recognizer,
    llc 22: double when either operand is 8-bit)."""

    M: int
    N: int
    K: int
    a_type: str  # "i8", "fp8", "bf8", "f32", "xf32" or "f8f6f4"
    b_type: str
    acc: str  # "f32" | "i32"
    passes: int  # for f8f6f4: with two 6/4-bit operands; doubled when either is 8-bit
    # the f32 MFMAs run on the non-XDL pipe (LLVM isXDL false): their hazard rows are keyed ("smfma", passes)
    xdl: bool = True
    scaled: bool = False  # v_mfma_scale_*: E8M0 scales of A and B in two more operands, op_sel picks the byte


# element widths of the f8f6f4 formats cbsz / blgp select (CDNA4 ISA guide, MFMA F8F6F4)
F8F6F4_FORMATS = {0: ("fp8", 8), 1: ("bf8", 8), 2: ("fp6", 6), 3: ("bf6", 6), 4: ("fp4", 4)}


def f8f6f4_passes(mfma: LowpMfma, cbsz: int, blgp: int) -> int:
    """Passes of an f8f6f4 MFMA for its operand formats: the table's, doubled when either operand is 8-bit."""
    eight_bit = F8F6F4_FORMATS[cbsz][1] == 8 or F8F6F4_FORMATS[blgp][1] == 8
    return mfma.passes * (2 if eight_bit else 1)


def _lowp_mfmas(gfx950: bool) -> dict:
    """mnemonic -> LowpMfma; passes from llvm-mca's scheduling model (RThroughput on the XDL pipe) and llc's
    hazard recognizer (f8f6f4)."""
    table = {
        "v_mfma_f32_32x32x2_f32": LowpMfma(32, 32, 2, "f32", "f32", "f32", 16, xdl=False),
        "v_mfma_f32_16x16x4_f32": LowpMfma(16, 16, 4, "f32", "f32", "f32", 8, xdl=False),
        "v_mfma_i32_32x32x16_i8": LowpMfma(32, 32, 16, "i8", "i8", "i32", 8),
        "v_mfma_i32_16x16x32_i8": LowpMfma(16, 16, 32, "i8", "i8", "i32", 4),
    }
    for a in ("fp8", "bf8"):
        for b in ("fp8", "bf8"):
            table[f"v_mfma_f32_32x32x16_{a}_{b}"] = LowpMfma(32, 32, 16, a, b, "f32", 8)
            table[f"v_mfma_f32_16x16x32_{a}_{b}"] = LowpMfma(16, 16, 32, a, b, "f32", 4)
    if not gfx950:  # gfx950 dropped xf32
        table["v_mfma_f32_32x32x4_xf32"] = LowpMfma(32, 32, 4, "xf32", "xf32", "f32", 8)
        table["v_mfma_f32_16x16x8_xf32"] = LowpMfma(16, 16, 8, "xf32", "xf32", "f32", 4)
        return table
    table["v_mfma_i32_32x32x32_i8"] = LowpMfma(32, 32, 32, "i8", "i8", "i32", 8)
    table["v_mfma_i32_16x16x64_i8"] = LowpMfma(16, 16, 64, "i8", "i8", "i32", 4)
    for prefix, scaled in (("v_mfma_f32", False), ("v_mfma_scale_f32", True)):
        table[f"{prefix}_32x32x64_f8f6f4"] = LowpMfma(32, 32, 64, "f8f6f4", "f8f6f4", "f32", 8, scaled=scaled)
        table[f"{prefix}_16x16x128_f8f6f4"] = LowpMfma(16, 16, 128, "f8f6f4", "f8f6f4", "f32", 4, scaled=scaled)
    return table


@dataclass(frozen=True)
class MfmaHazards:
    """Wait states (s_nop N gives N+1) after an MFMA, keyed by the MFMA's pass count."""

    vdst_to_read: dict  # vdst -> VALU read, VMEM/DS read, v_accvgpr_read, MFMA srcA/B
    vdst_to_srcc_overlap: dict  # vdst -> srcC of partially overlapping registers
    valu_write_to_mfma_src: int  # VALU or v_accvgpr_write -> MFMA src
    vdst_to_valu_write: dict  # vdst -> a VALU (v_accvgpr_write too) overwriting it (write after write)
    srcc_to_valu_write: dict  # srcC read -> a VALU (v_accvgpr_write too) overwriting it (write after read)


# VALU instructions of the transcendental unit (LLVM's SIInstrInfo::isTRANS): on gfx940+ their result reaches a
# non-TRANS VALU reader one wait state late (ValuHazards.trans_to_valu_read). tests/test_hazards_llvm.py checks
# each against llc, and that the other VALU instructions tilegcn emits are not TRANS.
TRANS_OPS = isa_table.trans_ops()  # the instruction table's latency class trans

# What an MFMA holds off on its SIMD's VALU, in 4-clk issue slots from its issue (S33, docs/timing-sources.md: LLVM's
# rules fitted to ATT thread traces of MI308X and MI350X): an MFMA whose inputs are f32 / f64 every VALU op until
# passes + 2; any other one a VALU op until 1 + (its widest A / B source, bytes a lane) / 16, and a packed-f32 op
# (v_pk_add / fma / mul_f32, v_pk_mov_b32) or a dot product until passes + 2, one more with a 16-byte A source. The
# timing model (perfmodel/ops.py) times it; the list scheduler (schedule.py) keeps packed-f32 ops out of the hold.
PACKED_F32_VALU = re.compile(r"^v_(pk_(add|fma|mul)_f32|pk_mov_b32|dot)")


def mfma_valu_holds(passes: int, widest_src_bytes: int, a_src_bytes: int, coexecutes: bool = True) -> tuple:
    """(slots any VALU op waits, slots a packed-f32 op waits) after the issue of an MFMA of `passes` (S33)."""
    if not coexecutes:
        return passes + 2, passes + 2
    return 1 + widest_src_bytes // 16, passes + 2 + (a_src_bytes >= 16)

# Which opcodes the other VALU-side rules single out (DPP, lane reads / selects, permlane swaps, v_div_fmas, wide
# stores) is the instruction table's too: isa_table.HazardRoles.


@dataclass(frozen=True)
class ValuHazards:
    """Wait states between a VALU-side producer and a later instruction, outside the MFMA rules (LLVM's
    GCNHazardRecognizer; docs/hazards.md is the sweep of its classes for gfx942/gfx950, and says which tilegcn can
    reach). An "SGPR" here is an s register or VCC; every number is checked against llc by
    tests/test_hazards_llvm.py."""

    trans_to_valu_read: int  # TRANS_OPS result -> a non-TRANS VALU reading it (TransForwardingHazard)
    valu_sgpr_to_valu_read: int  # VALU write of an SGPR / VCC -> VALU reading it (VDecCoExecHazard)
    valu_sgpr_to_vmem_read: int  # VALU write of an SGPR -> VMEM reading it (checkVMEMHazards)
    valu_vcc_to_div_fmas: int  # VALU write of VCC -> v_div_fmas (checkDivFMasHazards)
    valu_to_readlane_src: int  # VALU write of a VGPR -> v_readfirstlane / v_readlane reading it (VDecCoExecHazard)
    wide_store_to_valu_write: int  # store of > 8 bytes (a MUBUF one with soffset not an SGPR) -> VALU overwriting
    # its data registers (12DWordStoreHazard, 2 on gfx940+)
    vgpr_write_to_dpp_read: int  # any instruction's VGPR write (a load's too) -> a DPP instruction reading it, its
    # old value (the destination) included (checkDPPHazards)
    valu_exec_to_dpp: int  # VALU write of EXEC (v_cmpx) -> a DPP instruction (checkDPPHazards)
    valu_sgpr_to_lane_select: int  # VALU write of an SGPR / VCC -> v_readlane / v_writelane lane select
    # (checkRWLaneHazards)
    valu_exec_to_lane_op: int  # VALU write of EXEC -> v_readlane / v_readfirstlane / v_writelane (VDecCoExecHazard)
    valu_to_permlane_swap: int  # VALU write of a VGPR -> a v_permlane*_swap reading it (checkPermlaneHazards;
    # 0 where the arch has no permlane swaps)
    valu_exec_to_permlane_swap: int  # VALU write of EXEC (v_cmpx) -> a v_permlane*_swap (checkPermlaneHazards)
    valu_exec_to_mfma: int  # VALU write of EXEC (v_cmpx) -> an MFMA (checkMAIHazards90A)
    dst_sel_to_valu_read: int  # SDWA write of part of a VGPR (dst_sel not DWORD) -> a VALU reading it
    # (DstSelForwardingHazard; an MFMA reader takes the longer VALU -> MFMA source row)


@dataclass(frozen=True)
class Arch:
    name: str
    family: str  # marketing name of the arch generation
    min_llvm_major: int  # oldest LLVM whose assembler knows this arch
    wave_size: int
    max_workgroup_threads: int
    lds_bytes: int  # per workgroup
    lds_banks: int
    lds_bank_bytes: int
    arch_vgprs: int  # v0..v255
    agprs: int  # a0..a255 (unified file of arch_vgprs + agprs per wave)
    vgpr_alloc_granule: int  # unified VGPR+AGPR allocation granule
    accum_offset_granule: int  # accum_offset is a multiple of this
    addressable_sgprs: int  # s0..s101; vcc, m0, exec are separate
    sgpr_alloc_granule: int
    vector_tuple_align: int  # a VGPR/AGPR tuple starts at a multiple of this (gfx90a+; llvm-mc rejects v[1:4])
    sgpr_tuple_align: dict  # SGPRs in a tuple -> its start's alignment (s[3:4] and s[6:9] are rejected)
    mfma_shapes: dict  # dtype ("bf16"/"f16"/"fp8"/"bf8"/"i8") -> tuple of MfmaShape, preferred first
    mfma_hazards: MfmaHazards
    valu_hazards: ValuHazards
    lds_dma_bytes: tuple  # legal per-lane widths of `buffer_load_* ... lds`
    mubuf_max_imm_offset: int  # MUBUF offset field is 12 bits; llvm-mc truncates silently
    ds_max_imm_offset: int  # DS offset field is 16 bits unsigned
    max_vmcnt: int
    max_lgkmcnt: int
    m0_write_to_lds_dma_nops: int  # SALU write of M0 directly before an LDS DMA needs s_nop N
    # the LDS DMA opcodes (prefixes) that the ISA guide says need those wait states after a SALU write of M0; the
    # emulated device refuses only these, the compiler places them before every LDS DMA as LLVM does (docs/hazards.md)
    m0_write_hazard_lds_dma: tuple
    max_nop: int  # s_nop takes 0..max_nop (max_nop + 1 wait states)
    raw_buffer_word3: int  # V# word 3 of a raw buffer (DATA_FORMAT 32, no swizzle)
    num_xcds: int
    cus_per_xcd: int
    has_cvt_pk_bf16_f32: bool  # v_cvt_pk_bf16_f32 (round to nearest even) exists
    has_ieee_maximum3: bool  # v_maximum3_f32 / v_minimum3_f32 (NaN-propagating, IEEE 754-2019) exist
    peak_bf16_tflops: float
    hbm_tbps: float
    # the MFMAs only the emulated device runs (issue 22; tilegcn does not emit them), mnemonic -> LowpMfma
    lowp_mfmas: dict = field(default_factory=dict)
    # their hazard rows not in mfma_hazards: XDL passes tilegcn's MFMAs do not have, and ("smfma", passes) of the
    # non-XDL f32 MFMAs (llc 22: NumPasses + 2 to a read on both arches, no gfx950 extra)
    lowp_mfma_hazards: MfmaHazards | None = None
    has_ds_read_tr_b16: bool = False  # ds_read_b64_tr_b16: the transposing LDS read (16-bit elements)
    has_ds_read_tr_b8: bool = False  # ds_read_b64_tr_b8: the same for 8-bit elements (8 rows of a 16-lane group)
    # LDS reads whose lanes are served in measured phases rather than in runs of consecutive lanes: bytes per lane ->
    # the phase of each of the 64 lanes. One fact for every judge: `lds_phases` hands it to the emulator's bank
    # model (launch statistics and the timing model's trace) and to the compiler's layout checks (passes/gemm_plan.py)
    lds_read_phases: dict = field(default_factory=dict)
    # v_cvt_pk_f16_f32 (two f32 -> packed f16, round to nearest even: llc-22 selects it for IEEE `fptrunc <2 x float>
    # to <2 x half>` on gfx950, and v_cvt_f16_f32 twice + v_pack_b32_f16 on gfx942)
    has_cvt_pk_f16_f32: bool = False
    # v_permlane16_swap_b32 / v_permlane32_swap_b32 (CDNA4 ISA guide): trade rows of 16 / 32 lanes between two VGPRs
    has_permlane_swap: bool = False
    # a workgroup's waves share one CU and spread over its SIMDs, each SIMD with its own register file (CDNA3 ISA
    # guide, 1.2; CDNA4 the same): a workgroup of W waves puts ceil(W / 4) waves on some SIMD
    simds_per_cu: int = 4
    # the fp8 / bf8 encodings of v_cvt_pk_fp8_f32, v_cvt_f32_fp8, ... (and the fp8 MFMAs): gfx942 reads the bytes as
    # the "fnuz" formats (CDNA3 ISA guide: no inf, no -0, NaN 0x80), gfx950 as the OCP ones (CDNA4 ISA guide)
    fp8_dtypes: tuple = ("float8_e4m3fnuz", "float8_e5m2fnuz")
    # a pipelined GEMM K loop of this many waves runs as a ping-pong by default (passes/pipelining.py: two wave
    # groups half a K phase apart, one's MFMAs beside the other's reads and copies); 0: never unless asked for
    gemm_ping_pong_waves: int = 0
    # the same for a K loop staged through VGPRs at num_stages=2 (no 16-byte LDS DMA: gfx942): two K-phase LDS slots
    gemm_ping_pong_staged_waves: int = 0
    # the s_setprio level of a ping-pong loop's MFMA cluster (0: none emitted)
    gemm_ping_pong_prio: int = 0
    # the s_setprio level of the MFMA runs of a loop that alternates them with vector work (flash attention's KV
    # loop) in a workgroup of 2+ waves a SIMD (amdgcn/priority.py says why; 0: none emitted)
    mixed_loop_mfma_prio: int = 0
    # a thread's fp32 values summed as a tree of v_pk_add_f32 (two adds an instruction: passes/reduce.py
    # _summed_in_pairs) rather than one v_add_f32 each; a packed-f32 op waits out an MFMA's whole hold (S33)
    packed_f32_sums: bool = True
    # a fragment scaled by a per-row factor (flash attention's `acc_o *= scores_scale`) as v_pk_mul_f32 on pairs even
    # in a kernel that runs MFMAs; False: there one v_mul_f32 an element, which issues under an MFMA where a
    # packed-f32 op waits out the MFMA's whole hold (S33; the other wave's MFMAs of a SIMD hold it too). Kernels
    # without MFMAs always take the packed form (half the instructions)
    packed_f32_scales: bool = True
    extra: dict = field(default_factory=dict)

    def acc_fill_mfmas(self) -> tuple:
        """(MFMA name, its shape) that fill a whole accumulator tuple with an inline constant c: D = 0 * 0 + c
        (passes/elementwise.py `lower_fill`). Per tuple size (d_regs) the fewest passes, the arch's preference
        breaking ties; largest tuple first. srcA/srcB are zeros, so any input type does: the first listed."""
        dtype = next(iter(self.mfma_shapes))
        best: dict = {}
        for shape in self.mfma_shapes[dtype]:
            if shape.d_regs not in best or shape.passes < best[shape.d_regs].passes:
                best[shape.d_regs] = shape
        return tuple((s.name(dtype), s) for _, s in sorted(best.items(), reverse=True))

    def lds_phases(self, nbytes: int, read: bool) -> tuple:
        """The phase (0, 1, ...) each of the 64 lanes of a DS access of `nbytes` bytes a lane is served in: the
        measured phases where `lds_read_phases` has this read width, else runs of banks*4/nbytes consecutive lanes
        (all 64 in one phase for accesses of at most 2 bytes on 32 banks). Lanes of one phase that ask one bank for
        distinct dwords conflict; lanes of different phases never do."""
        measured = self.lds_read_phases.get(nbytes) if read else None
        if measured is not None:
            return measured
        per_phase = max(1, self.lds_banks * self.lds_bank_bytes // nbytes)
        return tuple(lane // per_phase for lane in range(self.wave_size))

    @functools.cached_property
    def every_mfma_hazard(self) -> MfmaHazards:
        """mfma_hazards with the rows of lowp_mfma_hazards added: the one table the emulated device (any MFMA it runs)
        and the compiler's hazard pass (the MFMAs T.gemm emits, gfx950's 16-pass f8f6f4 ones included) read."""
        extra = self.lowp_mfma_hazards
        if extra is None:
            return self.mfma_hazards
        hz = self.mfma_hazards
        return MfmaHazards(
            vdst_to_read={**hz.vdst_to_read, **extra.vdst_to_read},
            vdst_to_srcc_overlap={**hz.vdst_to_srcc_overlap, **extra.vdst_to_srcc_overlap},
            valu_write_to_mfma_src=hz.valu_write_to_mfma_src,
            vdst_to_valu_write={**hz.vdst_to_valu_write, **extra.vdst_to_valu_write},
            srcc_to_valu_write={**hz.srcc_to_valu_write, **extra.srcc_to_valu_write},
        )

    def register_alignment(self, file: str, count: int) -> int:
        """The alignment the ISA requires of a `count`-register tuple in register file `file` ("v", "a", "s")."""
        if count == 1:
            return 1
        if file == "s":
            return self.sgpr_tuple_align.get(count, max(self.sgpr_tuple_align.values()))
        return self.vector_tuple_align

    @property
    def total_vgprs(self) -> int:
        return self.arch_vgprs + self.agprs

    def waves_per_simd(self, vgprs_and_agprs: int) -> int:
        """Occupancy from the unified register count (docs/isa-notes.md: min(8, 512 // roundup(n, 8)))."""
        granules = -(-max(vgprs_and_agprs, 1) // self.vgpr_alloc_granule) * self.vgpr_alloc_granule
        return min(8, self.total_vgprs // granules)

    def workgroup_register_budget(self, threads: int) -> int:
        """Unified VGPR+AGPR registers a wave may hold when a workgroup of `threads` must fit on one CU: the
        file divided among the waves that share a SIMD, rounded down to the allocation granule."""
        waves = -(-threads // self.wave_size)
        per_simd = -(-waves // self.simds_per_cu)
        return self.total_vgprs // per_simd // self.vgpr_alloc_granule * self.vgpr_alloc_granule


_CDNA3_MFMA = {
    dtype: (
        MfmaShape("v_mfma_f32_32x32x8_{dtype}", 32, 32, 8, passes=8),
        MfmaShape("v_mfma_f32_16x16x16_{dtype}", 16, 16, 16, passes=4),
    )
    for dtype in ("bf16", "f16")
}


def _eight_bit_shapes(lowp: dict, names: dict) -> dict:
    """The 8-bit MFMAs T.gemm emits (issue 22), dtype short name -> MfmaShapes, preferred first, built from the
    emulator's table `lowp` (mnemonic -> LowpMfma) so the compiler and the emulated device read one set of shapes and
    passes (the compiler's hazard rows are keyed by those passes). `names`: dtype -> mnemonics, preferred first.
    gfx950's f8f6f4 MFMAs come first for fp8 / bf8: twice the rate of the fp8_fp8 ones, their 8 VGPRs per operand
    filled by two 16-byte LDS reads (`blocks`)."""
    out = {}
    for dtype, mnemonics in names.items():
        shapes = []
        for m in mnemonics:
            mfma, blocks, mods, K = lowp[m], 1, "", lowp[m].K
            if mfma.a_type == "f8f6f4":  # both operands in `dtype`'s format: passes and registers of its width
                code = next(c for c, (fmt, _) in F8F6F4_FORMATS.items() if fmt == dtype)
                mods = f"cbsz:{code} blgp:{code}" if code else ""
                if F8F6F4_FORMATS[code][1] == 8:
                    blocks = 2  # 8 VGPRs an operand, two blocks of 4
                else:  # fp4: the plan counts K in bytes of two values (float4_e2m1fn_x2), 4 VGPRs = one 16-byte chunk
                    K = mfma.K * F8F6F4_FORMATS[code][1] // 8
            passes = f8f6f4_passes(mfma, code, code) if mfma.a_type == "f8f6f4" else mfma.passes
            shapes.append(MfmaShape(m, mfma.M, mfma.N, K, passes=passes, elem_bytes=1, acc=mfma.acc,
                                    blocks=blocks, modifiers=mods))
        out[dtype] = tuple(shapes)
    return out


_CDNA3_EIGHT_BIT = {
    "fp8": ("v_mfma_f32_32x32x16_fp8_fp8", "v_mfma_f32_16x16x32_fp8_fp8"),
    "bf8": ("v_mfma_f32_32x32x16_bf8_bf8", "v_mfma_f32_16x16x32_bf8_bf8"),
    "i8": ("v_mfma_i32_32x32x16_i8", "v_mfma_i32_16x16x32_i8"),
}
_F8F6F4 = ("v_mfma_f32_32x32x64_f8f6f4", "v_mfma_f32_16x16x128_f8f6f4")  # twice the fp8_fp8 rate
_CDNA4_EIGHT_BIT = {"fp8": _F8F6F4 + _CDNA3_EIGHT_BIT["fp8"], "bf8": _F8F6F4 + _CDNA3_EIGHT_BIT["bf8"],
                    "i8": ("v_mfma_i32_32x32x32_i8", "v_mfma_i32_16x16x64_i8") + _CDNA3_EIGHT_BIT["i8"],
                    "fp4": _F8F6F4}  # packed fp4 (float4_e2m1fn_x2): the f8f6f4 forms only, cbsz:4 blgp:4

_CDNA4_MFMA = {
    dtype: (
        MfmaShape("v_mfma_f32_32x32x16_{dtype}", 32, 32, 16, passes=8),
        MfmaShape("v_mfma_f32_16x16x32_{dtype}", 16, 16, 32, passes=4),
    )
    + _CDNA3_MFMA[dtype]
    for dtype in ("bf16", "f16")
}

_COMMON = dict(
    wave_size=64,
    max_workgroup_threads=1024,
    lds_banks=32,
    lds_bank_bytes=4,
    arch_vgprs=256,
    agprs=256,
    vgpr_alloc_granule=8,
    accum_offset_granule=4,
    addressable_sgprs=102,
    sgpr_alloc_granule=8,
    vector_tuple_align=2,
    sgpr_tuple_align={2: 2, 4: 4, 8: 4, 16: 4},
    mubuf_max_imm_offset=4095,
    ds_max_imm_offset=65535,
    max_vmcnt=63,
    max_lgkmcnt=15,
    m0_write_to_lds_dma_nops=0,
    # CDNA3 ISA guide 4.5 "Manually inserted wait states": SALU writes M0 -> "LDS add-TID instruction,
    # buffer_store_LDS_dword, scratch or global with LDS = 1": 1. MUBUF loads into LDS (buffer_load_* ... lds)
    # are not in that row, and aiter's hand-written FAv3 code objects issue them right after s_add_u32 m0.
    m0_write_hazard_lds_dma=("global_load_lds_", "scratch_load_lds_", "buffer_store_lds_dword"),
    max_nop=7,
    valu_hazards=ValuHazards(trans_to_valu_read=1, valu_sgpr_to_valu_read=2, valu_sgpr_to_vmem_read=5,
                             valu_vcc_to_div_fmas=4, valu_to_readlane_src=1, wide_store_to_valu_write=2,
                             vgpr_write_to_dpp_read=2, valu_exec_to_dpp=5, valu_sgpr_to_lane_select=4,
                             valu_exec_to_lane_op=4, valu_to_permlane_swap=0, valu_exec_to_permlane_swap=0,
                             valu_exec_to_mfma=4, dst_sel_to_valu_read=1),
    raw_buffer_word3=0x00020000,
    num_xcds=8,
)

GFX942 = Arch(
    name="gfx942",
    family="CDNA3 (MI300X)",
    min_llvm_major=17,
    lds_bytes=65536,
    mfma_shapes={**_CDNA3_MFMA, **_eight_bit_shapes(_lowp_mfmas(gfx950=False), _CDNA3_EIGHT_BIT)},
    # LLVM GCNHazardRecognizer (checked by tests/test_hazards_llvm.py against llc): XDL NumPasses + 3 to a read,
    # NumPasses + 1 to a partially overlapping srcC, 2 after a VALU write; a VALU overwriting the result as a read
    # does, one overwriting a srcC read NumPasses - 1 after it
    mfma_hazards=MfmaHazards(
        vdst_to_read={4: 7, 8: 11},
        vdst_to_srcc_overlap={4: 5, 8: 9},
        valu_write_to_mfma_src=2,
        vdst_to_valu_write={4: 7, 8: 11},
        srcc_to_valu_write={4: 3, 8: 7},
    ),
    lds_dma_bytes=(1, 2, 4),
    cus_per_xcd=38,
    has_cvt_pk_bf16_f32=False,
    has_ieee_maximum3=False,
    peak_bf16_tflops=1307.0,
    hbm_tbps=5.3,
    lowp_mfmas=_lowp_mfmas(gfx950=False),
    lowp_mfma_hazards=MfmaHazards(
        vdst_to_read={("smfma", 8): 10, ("smfma", 16): 18},
        vdst_to_srcc_overlap={("smfma", 8): 8, ("smfma", 16): 16},
        valu_write_to_mfma_src=2,
        vdst_to_valu_write={("smfma", 8): 10, ("smfma", 16): 18},
        srcc_to_valu_write={("smfma", 8): 0, ("smfma", 16): 0},
    ),
    # the model prefers the register-staged ping-pong at 8 waves (bench/gemm_vs_foreign.py --card MI300X:
    # 256x256x64 bf16 at 8192^3, 2.151 M cycles against 2.824 M with both groups in step, 2.730 M at 4 waves) and
    # s_setprio 0 in it (1 around the MFMA cluster: 2.157 M)
    gemm_ping_pong_staged_waves=8,
    # the model: issue 21's GQA attention (d 128, s 16384) at 256 x 64 over 512 threads on MI300X 468 -> 578 TFLOP/s
    mixed_loop_mfma_prio=1,
    # 16-pass f16 MFMAs hold a packed-f32 op 18 slots (S33), and beside another wave's MFMAs at s_setprio 1 the
    # row sum's v_pk_add_f32 tree waits them out: the model, issue 21's GQA attention at 256 x 64 over 512 threads
    # on MI300X, 516 TFLOP/s with the tree against 566 with one v_add_f32 a value (gfx950's 8-pass MFMAs: 1,551
    # with it, 1,536 without)
    packed_f32_sums=False,
    **_COMMON,
)

# ds_read_b128 on gfx950 (64 banks: 16 lanes a phase), the lanes of each phase as HipKittens measured them on an MI355X
# (S21p in docs/timing-sources.md: HazyResearch/HipKittens commit f09e968,
# analysis/paper_experiments/phases/ds_read_b128/phase_results.txt, rocprofv3 SQ_LDS_BANK_CONFLICT for every pair of
# lanes reading one bank; its bank_results.txt: 64 banks). Quads of 4 lanes: within each 32 lanes, quads 0, 3, 5, 6
# form one phase and quads 1, 2, 4, 7 the other (the parity of lane bits 2-4). Not runs of 16 consecutive lanes: the
# Gluon tutorial's padded 256x64 fp16 layout, conflict-free on hardware (its ATT traces: a ds_read_b128 every 16 clk
# with 4 waves), has 2-way conflicts in every phase under that simpler rule. The same study's ds_read_b64 phases are
# the two runs of 32 consecutive lanes, which `Arch.lds_phases` gives without a table.
_B128_PHASE_LANES = ((0, 1, 2, 3, 12, 13, 14, 15, 20, 21, 22, 23, 24, 25, 26, 27),
                     (4, 5, 6, 7, 8, 9, 10, 11, 16, 17, 18, 19, 28, 29, 30, 31))
_GFX950_B128_READ_PHASES = tuple(next(2 * (lane >= 32) + k for k, lanes in enumerate(_B128_PHASE_LANES)
                                      if lane % 32 in lanes) for lane in range(64))

GFX950 = Arch(
    name="gfx950",
    family="CDNA4 (MI355X)",
    min_llvm_major=20,
    lds_bytes=163840,
    mfma_shapes={**_CDNA4_MFMA, **_eight_bit_shapes(_lowp_mfmas(gfx950=True), _CDNA4_EIGHT_BIT)},
    # gfx950 adds one wait state to both MFMA-result rows (LLVM: NumPasses + 3 + (NumPasses != 2 && gfx950))
    mfma_hazards=MfmaHazards(
        vdst_to_read={4: 8, 8: 12},
        vdst_to_srcc_overlap={4: 6, 8: 10},
        valu_write_to_mfma_src=2,
        vdst_to_valu_write={4: 8, 8: 12},
        srcc_to_valu_write={4: 3, 8: 7},  # the write-after-read row has no gfx950 extra
    ),
    lds_dma_bytes=(1, 2, 4, 12, 16),
    cus_per_xcd=32,
    has_cvt_pk_bf16_f32=True,
    has_cvt_pk_f16_f32=True,
    has_ieee_maximum3=True,
    has_permlane_swap=True,
    peak_bf16_tflops=2500.0,
    hbm_tbps=8.0,
    lowp_mfmas=_lowp_mfmas(gfx950=True),
    lowp_mfma_hazards=MfmaHazards(
        vdst_to_read={16: 20, ("smfma", 8): 10, ("smfma", 16): 18},
        vdst_to_srcc_overlap={16: 18, ("smfma", 8): 8, ("smfma", 16): 16},
        valu_write_to_mfma_src=2,
        vdst_to_valu_write={16: 20, ("smfma", 8): 10, ("smfma", 16): 18},
        srcc_to_valu_write={16: 15, ("smfma", 8): 0, ("smfma", 16): 0},
    ),
    has_ds_read_tr_b16=True,
    has_ds_read_tr_b8=True,
    lds_read_phases={16: _GFX950_B128_READ_PHASES},
    fp8_dtypes=("float8_e4m3fn", "float8_e5m2"),
    # the model prefers the ping-pong at 8 waves (bench/gemm_vs_foreign.py: 256x256x64 bf16 at 8192^3 on MI355X,
    # 1.094 M cycles against 1.371 M with both groups in step) and s_setprio 0 in it (1 around the MFMA cluster:
    # 1.101 M; the two groups issue different categories, so the priority only costs its issue slots)
    gemm_ping_pong_waves=8,
    # flash attention, GQA 64/8 d=128 s=16384 on MI355X (bench/attention_loop.py, every trip simulated): 256x64 over
    # 512 threads 1,123 -> 1,270 TFLOP/s with one v_mul_f32 an element, 128x64 over 256 threads 1,134 -> 1,201, its
    # llvm-mca cycles a KV tile 341.1 -> 335.2; MI300X's 256x64 kernel measured 574 -> 564, so gfx942 keeps the pairs
    packed_f32_scales=False,
    # the model: issue 21's GQA attention (d 128, s 16384) at 256 x 64 over 512 threads on MI355X 1,288 -> 1,312
    # TFLOP/s (amdgcn/priority.py; its best before, 128 x 64 over 256 threads, has one wave of a workgroup a SIMD)
    mixed_loop_mfma_prio=1,
    # gfx950 has v_permlane16/32_swap (LLVM checkPermlaneHazards: 2 after a VALU write of an operand, 4 after v_cmpx)
    **{**_COMMON, "lds_banks": 64,
       "valu_hazards": replace(_COMMON["valu_hazards"], valu_to_permlane_swap=2, valu_exec_to_permlane_swap=4)},
)

ARCHES = {a.name: a for a in (GFX942, GFX950)}
SUPPORTED = tuple(ARCHES)
DEFAULT_ARCH = "gfx950"
# global -> LDS copy paths of pipelined GEMM operands (tilegcn.jit(copy=...), passes/gemm.py `dma_lane_bytes`):
# the per-arch default, LDS DMA (buffer_load_* ... lds) where the arch and operand allow it, register staging
COPY_MODES = ("auto", "lds_dma", "registers")


def get_arch(name) -> Arch:
    """The arch table for `name` (an Arch passes through); anything else is an UnsupportedArchError."""
    if isinstance(name, Arch):
        return name
    key = str(name).strip().lower().split(":")[0]  # "gfx942:sramecc+:xnack-" -> "gfx942"
    if key not in ARCHES:
        raise UnsupportedArchError(
            f"tilegcn: unsupported arch {name!r}; supported arches are {', '.join(SUPPORTED)}"
        )
    return ARCHES[key]


# ---- timing model parameters ----------------------------------------------------------------------------
# Used only by the emulated device's timing model (tilegcn/perfmodel). Sources are the tags of
# docs/timing-sources.md (its S tags); "chosen" marks a value no source gives.
@dataclass(frozen=True)
class Timing:
    device: str  # marketing name of the part
    cus: int  # S1
    simds_per_cu: int  # S11
    max_waves_per_simd: int  # S3, S11
    lds_bytes_per_cu: int  # S1
    lds_alloc_granule: int  # S8
    clock_hz: float  # sustained clock under dense GEMM load (timing-sources §1: S22 / derived from S19g, S20)
    peak_clock_hz: float  # S2, S3
    issue_slot_clk: int  # a SIMD gets an issue slot every 4 clk (S11)
    valu_clk: int  # one 64-lane VALU op on a 16-lane SIMD (S11; LLVM 1 qc, S6)
    trans_clk: int  # transcendental: quarter rate (LLVM 4 qc, S6)
    branch_taken_clk: int  # LLVM branch latency 8 qc = 32 clk (S6; instruction-fetch bubble not measured)
    smem_latency_clk: int  # chosen: LLVM's 5 qc is a placeholder (S6); scalar L1 hit ~ sL1D, unmeasured here
    barrier_release_clk: int  # chosen: no source gives s_barrier cost (timing-sources §5); LLVM's 500 qc is "guessed"
    lds_port_read_bytes_per_clk: int  # per SIMD pair (S11 CDNA3: 64 B/clk; S17 gfx950: 128 B/clk)
    lds_port_write_bytes_per_clk: int  # per SIMD pair; stores also carry 4 B of address per lane (S11)
    lds_fifo_entries: int  # per SIMD-pair FIFO (S17, gfx950; assumed the same on gfx942)
    lds_latency_clk: int  # unloaded ds_read latency after service (S17: 50-70 clk, S24: 50-64)
    tcp_clk_per_dword: dict  # TCP cycles per wave instruction by dwords per lane (S18: x1 4, x2 16, x4 16)
    # per CU: bytes a load holds in the TCP from when the TCP takes it until its data is back (S18: 32 KB, the
    # TCP size), and the request queue in front of it, of instructions issued but not yet taken (S18: ~12). S18
    # counts the queue in flight too (44 KB per round trip); the model does not (timing/memory.py says why)
    vmem_inflight_bytes: int
    vmem_queue_entries: int
    l2_hit_latency_clk: int  # loaded L2 hit round trip (chosen per arch, see TIMING)
    hbm_latency_clk: int  # loaded HBM round trip (S24: 500-800 under load; S23: 1212 cold single thread)
    l2_bytes_per_clk_per_xcd: int  # 16 channels x 128 B/clk (S12)
    l2_bytes_per_xcd: int  # 4 MB (S1)
    l1_bytes_per_cu: int  # vector L1 (TCP) cache: 32 KB on MI300X and MI355X (S1); a re-touch within it is no L2 request
    l2_line_bytes: int  # 128 B (S1)
    # L2 refetch by a later sharer of a line, with probability base + per_gap x its distance in the XCD's
    # dispatch order (timing/l2.py): fitted to the row-major and GM1 orders of C10 (S19v9, MI355X) by
    # `bench/model_accuracy.py --fit-l2`; C10's GM4/6/8 are held out. gfx942: assumed the same (no data).
    l2_refetch_base: float
    l2_refetch_per_gap: float
    hbm_bytes_per_s: float  # S13, S10
    launch_overhead_clk: int  # chosen: dispatch / first-wave start not measured (timing-sources §5)
    # The clock follows power: the less the SIMDs work, the faster it runs. clock = clock_hz + clock_slope_hz x
    # (clock_busy_ref - busy share), at most peak_clock_hz (timing-sources §1; slope 0: one clock per card)
    clock_busy_ref: float = 1.0
    clock_slope_hz: float = 0.0

    def clock_at(self, busy: float) -> float:
        """The sustained clock of a kernel whose SIMDs are busy `busy` (0..1) of the time: the timing model passes
        the MFMA pipes' busy share plus the VALU's issue share (perfmodel/grid.py)."""
        return min(self.peak_clock_hz, self.clock_hz + self.clock_slope_hz * (self.clock_busy_ref - busy))


TIMING = {
    "gfx942": Timing(
        device="MI300X", cus=304, simds_per_cu=4, max_waves_per_simd=8, lds_bytes_per_cu=65536,
        lds_alloc_granule=512, clock_hz=1.3e9,  # between the MAF median 1207 MHz (S22) and 1.52 GHz (S19g)
        peak_clock_hz=2.1e9, issue_slot_clk=4, valu_clk=4, trans_clk=16, branch_taken_clk=32,
        smem_latency_clk=200, barrier_release_clk=16,
        lds_port_read_bytes_per_clk=64, lds_port_write_bytes_per_clk=64, lds_fifo_entries=8, lds_latency_clk=56,
        tcp_clk_per_dword={1: 4, 2: 16, 3: 16, 4: 16}, vmem_inflight_bytes=32768, vmem_queue_entries=12,
        # chosen: between S23's 224 (unloaded) and S18's ~1000 clk gfx950 GEMM round trip; S24: HBM 500-800
        l2_hit_latency_clk=500, hbm_latency_clk=800, l2_bytes_per_clk_per_xcd=2048, l2_bytes_per_xcd=4 << 20,
        l1_bytes_per_cu=32768, l2_line_bytes=128, hbm_bytes_per_s=5.3e12,
        l2_refetch_base=0.0231, l2_refetch_per_gap=0.0143, launch_overhead_clk=2000,
    ),
    "gfx950": Timing(
        device="MI355X", cus=256, simds_per_cu=4, max_waves_per_simd=8, lds_bytes_per_cu=163840,
        # sustained clock: S19's MI355X GEMM summary, fp16 1634 TFLOP/s at 98 % MFMA efficiency (1.048576 M
        # FLOP/clk a CU-full device): 1634e12 / (0.98 x 1048576) = 1.59 GHz; its fp8 3383 at 99 % gives 1.63 GHz.
        # Was 1.44 GHz from S20's older 1489 TFLOP/s at 98.75 %: that cannot reach HipKittens' 1610 (S31)
        lds_alloc_granule=1280, clock_hz=1.59e9,
        peak_clock_hz=2.4e9, issue_slot_clk=4, valu_clk=4, trans_clk=16, branch_taken_clk=32,
        smem_latency_clk=200, barrier_release_clk=16,
        lds_port_read_bytes_per_clk=128, lds_port_write_bytes_per_clk=64,  # writes: 32-bank behaviour (S21p, S16)
        lds_fifo_entries=8, lds_latency_clk=56,
        tcp_clk_per_dword={1: 4, 2: 16, 3: 16, 4: 16}, vmem_inflight_bytes=32768, vmem_queue_entries=12,
        # chosen: S18 measured a ~1000 clk round trip under GEMM load at K=8192, the working set largely in L2;
        # these give 975-1000 clk at the 75-80 % L2 hit rates the model finds for 8192^3 GEMMs (unloaded: 224,
        # S23), longer as misses grow (S18: it grows at large K). Was 500/1000 (a ~630 clk round trip)
        l2_hit_latency_clk=900, hbm_latency_clk=1300,
        l2_bytes_per_clk_per_xcd=2048, l2_bytes_per_xcd=4 << 20, l1_bytes_per_cu=32768, l2_line_bytes=128,
        hbm_bytes_per_s=8.0e12,
        l2_refetch_base=0.0231, l2_refetch_per_gap=0.0143,
        launch_overhead_clk=2000,
        # S19's a16w16 table (MI355, 4096x4096x8192 fp16: TFLOP/s and in-loop MFMA efficiency, so clock = TFLOP/s /
        # (efficiency x 1.048576 M FLOP/clk)): least squares over its rows v3, v4, v6, v7 (x3), v8 gives -0.626 GHz
        # per unit of efficiency (v3 42 % at 1.76 GHz ... v8 99 % at 1.55 GHz); v5's rows are left out (v5 is a
        # hold-out kernel of bench/model_accuracy.py). Through clock_hz's own point (1634 TFLOP/s at 98 %).
        clock_busy_ref=0.98, clock_slope_hz=0.626e9,
    ),
}
DEVICES = {"MI300X": "gfx942", "MI355X": "gfx950"}
