"""The instruction table (tilegcn/amdgcn/isa_table.py) against two outside judges: llvm-mc must assemble every row
on each of its arches (one batch kernel per arch), and the emulator's decoder, binding the assembled instruction,
must read and write exactly the registers the row's operand roles and implicit operands say, and queue it where the
row's wait counter retires it."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch

from tilegcn.amdgcn import isa, isa_table
from tilegcn.amdgcn.builder import KernelBuilder
from tilegcn.amdgcn.arch import get_arch
from tilegcn.errors import InternalError
from tilegcn.runtime import emulator
from tilegcn.runtime.emulator import valu_hazards
from tilegcn.toolchain import assemble

sys.path.insert(0, str(Path(__file__).parent))
from asm.emukit import kernel_asm, srd  # noqa: E402

VGPRS, ACCUM = 128, 64  # unified VGPRs of the batch kernel; AGPRs start at ACCUM
SGPRS = 96
# The emulator's scalar slots of the named registers (decode.SPECIAL_SGPRS); SCC is no slot: the emulator's
# binder does not record it, so the SCC roles are checked by running the rows (test_scalar_rows_..._scc_...).
SLOTS = {"vcc": (106, 107), "exec": (126, 127), "m0": (124,)}
# The emulator's in-flight queue of an instruction (Handler.queue) -> the wait counter that retires it
QUEUE_COUNTER = {"vm": "vm", "ds": "lgkm", "smem": "lgkm", None: ""}
# Rows llvm-mc checks but the emulator does not model yet (no kernel emits them today; the hazard passes' TRANS class
# lists them): a row leaves this set when the emulator learns it.
NOT_EMULATED = {"v_sin_f32", "v_cos_f32", *(f"v_{f}_f16" for f in ("exp", "log", "rcp", "rsq", "sqrt", "sin", "cos"))}


def _modifiers(row) -> str:
    """What the assembler needs after the operands of a sample of `row` (not a fact the passes use)."""
    if row.name.endswith("+lds"):
        return " offen lds"
    if row.name.endswith("+rtn"):
        return " offen sc0"
    if row.name.startswith("buffer_"):
        return " offen"
    if row.name == "ds_swizzle_b32":
        return " offset:swizzle(SWAP,1)"
    if row.name.endswith("_sdwa") and row.operands[0].reads:  # writes half its destination, keeps the other
        return " dst_sel:WORD_1 dst_unused:UNUSED_PRESERVE src0_sel:DWORD"
    if row.name.endswith("_sdwa"):
        return " src0_sel:BYTE_1"
    if row.name.endswith("_dpp"):
        return " row_shr:1 bound_ctrl:0"  # invalid source lanes read 0: every lane is written (the row says D)
    return ""


class _Sample:
    """One instruction of a row with a fresh, aligned register for every register slot, and the emulator's register
    numbers of what the row says it reads and writes."""

    def __init__(self, row):
        self.row = row
        self.next = {"v": 0, "a": 0, "s": 0}
        self.reads: dict = {"v": set(), "s": set()}
        self.writes: dict = {"v": set(), "s": set()}
        texts = [self._operand(slot) for slot in row.operands]
        for reg in row.implicit_uses:
            self.reads["s"].update(SLOTS.get(reg.file, ()))
        for reg in row.implicit_defs:
            self.writes["s"].update(SLOTS.get(reg.file, ()))
        op = row.name.partition("+")[0]
        self.text = f"{op} {', '.join(texts)}{_modifiers(row)}" if texts else op

    def _operand(self, slot) -> str:
        file = slot.files[0]
        if file == "k":
            return "0"
        if file == "l":
            return "end"
        if file == "i":
            return "1"
        if file == "h":
            return "hwreg(HW_REG_MODE, 23, 1)"
        align = min(slot.dwords, 4) if file == "s" else min(slot.dwords, 2)  # as the assembler demands (gfx90a+)
        first = -(-self.next[file] // align) * align
        self.next[file] = first + slot.dwords
        numbers = range(first, first + slot.dwords)
        unified = [n + ACCUM for n in numbers] if file == "a" else list(numbers)
        space = "s" if file == "s" else "v"
        if slot.reads:
            self.reads[space].update(unified)
        if slot.writes:
            self.writes[space].update(unified)
        return f"{file}{first}" if slot.dwords == 1 else f"{file}[{first}:{first + slot.dwords - 1}]"


def _bound(arch: str):
    """(samples, the emulator's handler of each) for every row of `arch`, assembled as one kernel."""
    samples = [_Sample(row) for row in isa_table.TABLE.values() if arch in row.arches]
    body = "\n".join([s.text for s in samples] + ["end:", "s_endpgm"])
    module = emulator.load(assemble(kernel_asm(body, arch, vgprs=VGPRS, accum=ACCUM, sgprs=SGPRS, args=()), arch))
    program = module.program("k", torch.device("cpu"))
    return samples, program.handlers[:len(samples)], program.unsupported


@pytest.mark.parametrize("arch", isa_table.ARCHES)
def test_every_row_assembles_and_the_emulator_binds_the_same_registers(arch):
    samples, handlers, unsupported = _bound(arch)
    wrong = []
    for n, (sample, h) in enumerate(zip(samples, handlers)):
        if (n in unsupported) != (sample.row.name in NOT_EMULATED):
            wrong.append(f"{sample.text}: the emulator " + (f"cannot bind it: {unsupported[n]}" if n in unsupported
                                                            else "models it: take it off NOT_EMULATED"))
        if n in unsupported:
            continue
        assert h.mnemonic.startswith(sample.text.split()[0].removesuffix("_dpp")), (h.text, sample.text)
        got = {"v": (h.vr, h.vw | h.vdef), "s": (h.sr, h.sw | h.sdef)}
        for space in "vs":
            if got[space] != (sample.reads[space], sample.writes[space]):
                wrong.append(f"{sample.text}: table reads/writes {space} {sorted(sample.reads[space])} / "
                             f"{sorted(sample.writes[space])}, emulator {sorted(got[space][0])} / "
                             f"{sorted(got[space][1])}")
        base, _, suffix = re.fullmatch(r"(.*?)(_(e32|e64|sdwa|dpp))?", h.mnemonic).group(1, 2, 3)
        if valu_hazards.table_roles(base, suffix or "") != sample.row.hazard:  # (an LDS DMA: the load's, the same)
            wrong.append(f"{sample.text}: the emulator's hazard check does not find its row ({h.mnemonic})")
        counted = isa_table.KINDS[sample.row.kind].counter
        if counted != QUEUE_COUNTER[h.queue]:
            wrong.append(f"{sample.text}: the table counts it in {counted or 'no counter'}, the emulator queues it in "
                         f"{h.queue}")
        retired = h.vdef | h.sdef
        if counted and retired != sample.writes["v"] | sample.writes["s"]:
            wrong.append(f"{sample.text}: counts in {counted}, so its writes land when it retires; the emulator "
                         f"writes {sorted(retired)} then")
    assert not wrong, "\n".join(wrong)


def test_an_opcode_the_table_lacks_is_an_internal_error_naming_it():
    b = KernelBuilder(get_arch("gfx942"), "k")
    with pytest.raises(InternalError, match="v_frobnicate_b32.*isa_table.py"):
        b.emit("v_frobnicate_b32", b.v.alloc(1), b.v.alloc(1))


def test_the_hazard_pass_refuses_an_opcode_the_table_lacks():
    """The hazard pass reads which part an opcode plays (transcendental, DPP, lane operands...) from its row: an
    opcode with no row is an InternalError naming it, not an instruction silently given no hazard."""
    from tilegcn.amdgcn.hazards import insert_hazard_nops

    d, a = isa.Reg("v", 0, 1), isa.Reg("v", 1, 1)
    for kind in (isa.VALU, isa.VMEM_STORE):
        with pytest.raises(InternalError, match="v_exp_legacy_f32.*isa_table.py"):
            insert_hazard_nops([isa.Inst("v_exp_legacy_f32", (d, a), (d,), (a,), kind),
                                isa.Inst("s_endpgm", (), kind=isa.SOPP)], get_arch("gfx942"))


def test_an_opcode_missing_on_the_arch_is_refused_there():
    b = KernelBuilder(get_arch("gfx942"), "k")
    with pytest.raises(InternalError, match="v_permlane32_swap_b32.*does not exist on gfx942"):
        b.emit("v_permlane32_swap_b32", b.v.alloc(1), b.v.alloc(1))
    with pytest.raises(InternalError, match="v_cvt_pk_bf16_f32.*does not exist on gfx942"):
        b.valu("v_cvt_pk_bf16_f32", b.v.alloc(1), b.v.alloc(1), b.v.alloc(1))
    with pytest.raises(InternalError, match="v_div_fmas_f32 is not a plain VALU"):  # it reads VCC unnamed
        b.valu("v_div_fmas_f32", b.v.alloc(1), b.v.alloc(1), b.v.alloc(1), b.v.alloc(1))
    on_950 = KernelBuilder(get_arch("gfx950"), "k")
    x, y = on_950.v.alloc(1), on_950.v.alloc(1)
    swap = on_950.emit("v_permlane32_swap_b32", x, y)
    assert swap.defs == (x, y) and swap.uses == (x, y)  # both outputs of the swap (prefixes said: writes x only)


def test_roles_the_prefixes_got_wrong():
    b = KernelBuilder(get_arch("gfx942"), "k")
    d, addr, data = b.v.alloc(1), b.v.alloc(1), b.v.alloc(1)
    permute = b.emit("ds_bpermute_b32", d, addr, data)  # was "unknown instruction"
    assert (permute.kind, permute.defs, permute.uses) == (isa.DS_LANE, (d,), (addr, data))
    carry = b.emit("s_addc_u32", b.s.alloc(1), b.s.alloc(1), 0)
    assert isa.SCC in carry.uses and isa.SCC in carry.defs
    assert isa_table.lookup("ds_bpermute_b32").kind == isa.DS_LANE
    assert isa_table.lookup("ds_swizzle_b32").counter == "lgkm"
    assert isa_table.lookup("buffer_load_dword", "offen lds").implicit_uses == (isa.M0,)
    assert isa_table.lookup("v_exp_f32").latency == "trans" and isa_table.lookup("v_mul_f32").latency == "valu"


@pytest.mark.parametrize("arch", isa_table.ARCHES)
def test_every_instruction_of_compiled_kernels_has_a_row_on_its_arch(arch):
    """The passes also build instructions without emit() (the GEMM's reads and MFMAs, waits, nops): every line of
    the GEMM (both pipelines, both B layouts, an epilogue) and of an elementwise kernel is a row of the table."""
    from kernels import axpb_relu, gemm, gemm_bias_relu

    from tilegcn import compiler
    from tilegcn.language import trace

    bf16 = torch.bfloat16
    cases = [(axpb_relu, [torch.empty(256, 256), torch.empty(256, 256)], {})]
    for transpose_B in (False, True):
        cases.append((gemm, [torch.empty(128, 128, dtype=bf16)] * 3,
                      dict(num_stages=2, transpose_B=transpose_B)))
    cases.append((gemm_bias_relu, [torch.empty(128, 128, dtype=bf16)] * 2 + [torch.empty(128, dtype=bf16),
                                                                            torch.empty(128, 128, dtype=bf16)], {}))
    seen = set()
    for fn, args, constants in cases:
        _, trace_args = fn._signature(args)
        asm = compiler.lower(trace(fn.fn, trace_args, fn._constants(constants), arch), arch).asm
        body = asm[asm.index(":\n", asm.index(".type")) + 2:asm.index(".size")]
        for line in body.splitlines():
            text = line.split("//")[0].strip()
            if text and not text.endswith(":") and not text.startswith("."):
                op, _, rest = text.partition(" ")
                seen.add(isa_table.lookup(op, rest).name)
                assert arch in isa_table.lookup(op, rest).arches, text
    assert {"s_waitcnt", "s_barrier", "s_cbranch_scc1", "buffer_store_dwordx2", "v_accvgpr_read_b32"} <= seen
    assert any(row.startswith("v_mfma") for row in seen)
    assert any(row.endswith("+lds") for row in seen) == (arch == "gfx950")  # gfx942 stages the GEMM in registers


def _scc_probe(row, init: int, first_out: int) -> tuple:
    """Lines that set SCC to `init`, give each read operand of `row` a distinct small value, run the row's
    instruction and copy its written registers and then SCC to s[first_out...]; and the number of dwords copied."""
    lines = ["s_mov_b64 s[90:91], exec", f"s_cmp_eq_u32 1, {1 if init else 0}"]  # SCC = init
    operands, value, nxt = [], 3, {"U": 40, "D": 60}
    copies = []
    for slot in row.operands:
        if slot.files[0] in "hi":  # a hwreg(...) field, an immediate: no register
            operands.append("hwreg(HW_REG_MODE, 23, 1)" if slot.files[0] == "h" else "1")
            continue
        access = "D" if slot.writes else "U"
        first = -(-nxt[access] // min(slot.dwords, 2)) * min(slot.dwords, 2)
        nxt[access] = first + slot.dwords
        for n in range(first, first + slot.dwords):
            if slot.reads:  # (the SCC write of s_mov_b32 is none: the table says so, and the test checks it)
                lines.insert(1, f"s_mov_b32 s{n}, {value}")
                value += 2
            else:
                copies.append(n)
        operands.append(f"s{first}" if slot.dwords == 1 else f"s[{first}:{first + slot.dwords - 1}]")
    lines.append(f"{row.name} {', '.join(operands)}")
    lines.append("s_cselect_b32 s70, 1, 0")
    lines.append("s_mov_b64 exec, s[90:91]")  # (s_and_saveexec_b64 wrote it)
    for j, n in enumerate(copies + [70]):
        lines += [f"v_mov_b32 v2, s{n}", f"buffer_store_dword v2, off, s[8:11], 0 offset:{4 * (first_out + j)}"]
    return lines, len(copies) + 1


@pytest.mark.parametrize("arch", isa_table.ARCHES)
def test_scalar_rows_read_and_write_scc_as_the_emulator_runs_them(arch):
    """SCC is no register the emulator's binder records, so its roles are checked by running each SALU row twice,
    with SCC 0 and 1 before it: a row that writes SCC leaves the same SCC after both runs (its inputs are the same),
    one that does not leaves it as it found it; a row that reads SCC writes different values in the two runs."""
    rows = [row for row in isa_table.TABLE.values() if row.kind == isa.SALU and arch in row.arches]
    body = ["s_load_dwordx2 s[6:7], s[0:1], 0x0", "s_waitcnt lgkmcnt(0)", *srd(8, 6, 4096).splitlines(),
            "v_mov_b32 v1, 0"]
    where, out = [], 0
    for row in rows:
        runs = []
        for init in (0, 1):
            lines, count = _scc_probe(row, init, out)
            body += lines
            runs.append((out, count))
            out += count
        where.append(runs)
    text = kernel_asm("\n".join(body + ["s_endpgm"]), arch=arch, args=("ptr",), sgprs=102, vgprs=8)
    result = torch.zeros(1024, dtype=torch.int32)
    emulator.load(assemble(text, arch)).launch("k", (1, 1, 1), (64, 1, 1), [result])
    wrong = []
    for row, ((at0, n), (at1, _)) in zip(rows, where):
        dst0, scc0 = result[at0:at0 + n - 1].tolist(), int(result[at0 + n - 1])
        dst1, scc1 = result[at1:at1 + n - 1].tolist(), int(result[at1 + n - 1])
        writes, reads = isa.SCC in row.implicit_defs, isa.SCC in row.implicit_uses
        if writes != ((scc0, scc1) != (0, 1)):
            wrong.append(f"{row.name}: the table says it {'writes' if writes else 'does not write'} SCC; SCC 0 / 1 "
                         f"before, {scc0} / {scc1} after")
        if dst0 and reads != (dst0 != dst1):
            wrong.append(f"{row.name}: the table says it {'reads' if reads else 'does not read'} SCC; with SCC "
                         f"0 / 1 it wrote {dst0} / {dst1}")
    assert len(rows) > 30 and not wrong, "\n".join(wrong)
