"""`llvm-objdump -d --mcpu=<arch>` text -> instruction records, parsed once so execution does no string work.

One line of objdump output looks like

    v_add_f32_e64 v3, -v3, |v4| clamp mul:2                    // 000000001564: D1018203 28020903

and becomes an `Instr`: its address (from the comment), its size (4 bytes per encoding word), the
mnemonic as printed (`v_add_f32_e64`), the base name without the encoding suffix (`v_add_f32`),
operands (`Reg`, `Const`, `Off`) and modifiers (`{'clamp': True, 'omod': 2.0}`).

Constants are resolved to their 32-bit patterns here; how an inline float constant widens for 16- or
64-bit operands is a property of the instruction, so `Const` keeps the printed text's kind as well.
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field


# Hardware SGPR encodings of the named scalar registers; the emulator's scalar file uses the same slots.
VCC_LO, VCC_HI, M0, EXEC_LO, EXEC_HI = 106, 107, 124, 126, 127
SPECIAL_SGPRS = {
    "vcc": (VCC_LO, 2), "vcc_lo": (VCC_LO, 1), "vcc_hi": (VCC_HI, 1),
    "exec": (EXEC_LO, 2), "exec_lo": (EXEC_LO, 1), "exec_hi": (EXEC_HI, 1),
    "m0": (M0, 1),
}
# The MODE hardware register lives in a scalar slot no SGPR encoding names (125 is reserved on gfx9), so that it
# follows each wave through the group splits and merges as the SGPRs do (ops_mode.py reads and writes it)
MODE_SLOT = 125
# s_setreg / s_getreg register ids (AMDGPU SIDefines Hwreg::ID_*): only MODE is modelled
HWREG_IDS = {"HW_REG_MODE": 1}
# Inline float constants: printed text -> (f32 bits, f16 bits, f64 bits)
INLINE_FLOATS = {
    "0.5": (0x3F000000, 0x3800, 0x3FE0000000000000),
    "-0.5": (0xBF000000, 0xB800, 0xBFE0000000000000),
    "1.0": (0x3F800000, 0x3C00, 0x3FF0000000000000),
    "-1.0": (0xBF800000, 0xBC00, 0xBFF0000000000000),
    "2.0": (0x40000000, 0x4000, 0x4000000000000000),
    "-2.0": (0xC0000000, 0xC000, 0xC000000000000000),
    "4.0": (0x40800000, 0x4400, 0x4010000000000000),
    "-4.0": (0xC0800000, 0xC400, 0xC010000000000000),
    "0.15915494": (0x3E22F983, 0x3118, 0x3FC45F306DC9C882),  # 1/(2*pi)
}
# Flat-address apertures the emulated device reports (src_shared_base, src_private_base): the values ROCm uses
# on gfx9 (high dword 0x10000 / 0x20000), above any host address, so a generic address in
# [base, base + 2^32) is unambiguously LDS / private. A 32-bit read gives the high dword, a 64-bit read the
# whole base (LLVM builds generic LDS pointers from the high dword).
SHARED_APERTURE = 0x1_0000_0000_0000
PRIVATE_APERTURE = 0x2_0000_0000_0000
APERTURES = {"src_shared_base": SHARED_APERTURE, "src_shared_limit": SHARED_APERTURE | 0xFFFFFFFF,
             "src_private_base": PRIVATE_APERTURE, "src_private_limit": PRIVATE_APERTURE | 0xFFFFFFFF}
# Modifiers that only steer caches / coherence; they do not change what the emulator computes.
CACHE_POLICY = {"sc0", "sc1", "nt", "glc", "slc", "dlc", "scc"}


@dataclass(frozen=True)
class Reg:
    """A register operand: kind 'v' (VGPR), 'a' (AGPR), 's' (SGPR slot incl. vcc/exec/m0), with source modifiers."""

    kind: str
    index: int
    count: int = 1
    neg: bool = False
    abs: bool = False
    text: str = ""
    sext: bool = False  # SDWA sext(): the selected field is sign-extended


@dataclass(frozen=True)
class Const:
    """An inline constant or a 32-bit literal. `bits` is the 32-bit pattern for 32-bit operands."""

    bits: int
    kind: str  # 'int' (inline integer), 'float' (inline float), 'literal', 'aperture'
    text: str
    value: int = 0  # the integer value for 'int' / 'literal' (signed for inline ints)
    neg: bool = False
    abs: bool = False

    def bits16(self) -> int:
        """The constant as a 16-bit operand sees it (inline floats use their f16 encodings)."""
        if self.kind == "float":
            return INLINE_FLOATS[self.text][1]
        return self.bits & 0xFFFF

    def bits64(self) -> int:
        """The constant as a 64-bit operand sees it: inline ints sign-extend, inline floats are f64
        encodings, 32-bit literals zero-extend, apertures are their 64-bit base."""
        if self.kind == "aperture":
            return self.value
        if self.kind == "float":
            return INLINE_FLOATS[self.text][2]
        if self.kind == "int":
            return self.value & 0xFFFFFFFFFFFFFFFF
        return self.bits


@dataclass(frozen=True)
class Special:
    """A special source operand that reads machine state (src_scc, src_vccz, src_execz)."""

    name: str
    text: str = ""


@dataclass(frozen=True)
class HwReg:
    """An s_setreg / s_getreg field: hwreg(NAME[, offset, size]) (the whole 32 bits when offset/size are left out)."""

    name: str
    offset: int = 0
    size: int = 32
    text: str = ""


@dataclass(frozen=True)
class Off:
    """The `off` operand (no address register / no saddr)."""

    text: str = "off"


@dataclass
class Instr:
    addr: int
    size: int
    text: str
    mnemonic: str  # as printed, e.g. v_add_f32_e64
    base: str  # without _e32/_e64/_sdwa/_dpp
    suffix: str  # '', 'e32', 'e64', 'sdwa', 'dpp'
    operands: list
    mods: dict = field(default_factory=dict)
    raw_operands: str = ""
    words: tuple = ()  # the encoding's 32-bit words (fields objdump prints symbolically, e.g. swizzle offsets)


_LINE = re.compile(r"^\s+(?P<asm>\S.*?)\s*//\s*(?P<addr>[0-9A-Fa-f]+):\s*(?P<words>(?:[0-9A-Fa-f]{8}\s*)+)")
_REG = re.compile(r"^(?P<kind>[vsa])(?:(?P<one>\d+)|\[(?P<lo>\d+):(?P<hi>\d+)\])$")
_TTMP = re.compile(r"^ttmp(\d+|\[\d+:\d+\])$")
_SUFFIX = re.compile(r"_(e32|e64|sdwa|dpp)$")


def _split_top(text: str, sep: str = ",") -> list:
    """Split on `sep` outside brackets and parentheses."""
    out, depth, cur = [], 0, []
    for ch in text:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == sep and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    tail = "".join(cur).strip()
    if tail:
        out.append(tail)
    return out


def _parse_int(tok: str) -> int:
    return int(tok, 16) if tok.lower().startswith(("0x", "-0x")) else int(tok)


def parse_operand(tok: str):
    """One operand token -> Reg / Const / Special / Off; raises ValueError when it is not one."""
    neg = ab = sext = False
    t = tok
    if t.startswith("sext(") and t.endswith(")"):
        sext, t = True, t[5:-1]
    if t.startswith("neg(") and t.endswith(")"):
        neg, t = True, t[4:-1]
    if t.startswith("-") and (t[1:2] in ("|", "v", "s", "a") or t[1:].startswith(("vcc", "exec", "m0", "abs("))):
        neg, t = True, t[1:]
    if t.startswith("|") and t.endswith("|"):
        ab, t = True, t[1:-1]
    elif t.startswith("abs(") and t.endswith(")"):
        ab, t = True, t[4:-1]
    m = _REG.match(t)
    if m:
        lo = int(m.group("one") if m.group("one") is not None else m.group("lo"))
        hi = int(m.group("one") if m.group("one") is not None else m.group("hi"))
        kind = m.group("kind")
        return Reg(kind, lo, hi - lo + 1, neg, ab, tok, sext)
    if t in SPECIAL_SGPRS:
        slot, count = SPECIAL_SGPRS[t]
        return Reg("s", slot, count, neg, ab, tok, sext)
    if t == "off":
        return Off(tok)
    hw = re.fullmatch(r"hwreg\((\w+)(?:,\s*(\d+),\s*(\d+))?\)", t)
    if hw:
        return HwReg(hw.group(1), int(hw.group(2) or 0), int(hw.group(3) or 32), tok)
    if t in APERTURES:
        return Const(APERTURES[t] >> 32, "aperture", t, APERTURES[t])
    if t in ("src_scc", "src_vccz", "src_execz"):
        return Special(t, tok)
    if t in INLINE_FLOATS:
        return Const(INLINE_FLOATS[t][0], "float", t, 0, neg, ab)
    if re.fullmatch(r"-?(0x[0-9a-fA-F]+|\d+)", t):
        v = _parse_int(t)
        if t.lower().startswith(("0x", "-0x")):
            return Const(v & 0xFFFFFFFF, "literal", t, v, neg, ab)
        if -16 <= v <= 64:
            return Const(v & 0xFFFFFFFF, "int", t, v, neg, ab)
        return Const(v & 0xFFFFFFFF, "literal", t, v, neg, ab)
    raise ValueError(f"unsupported operand {tok!r}")


def _parse_modifier(tok: str, mods: dict):
    if tok in CACHE_POLICY:
        return
    if tok in ("offen", "idxen", "lds", "clamp", "gds", "tfe", "lwe", "addr64", "d16", "row_mirror", "row_half_mirror"):
        mods[tok] = True
        return
    if tok.startswith("gpr_idx(") and tok.endswith(")"):  # s_set_gpr_idx_on's mode (ops_gpridx.py)
        mods["gpr_idx"] = tok[8:-1]
        return
    if ":" in tok:
        key, val = tok.split(":", 1)
        if key in ("mul", "div"):
            mods["omod"] = float(val) if key == "mul" else 1.0 / float(val)
        elif val.startswith("["):
            mods[key] = tuple(int(x) for x in val[1:-1].split(","))
        else:
            try:
                mods[key] = _parse_int(val)
            except ValueError:
                mods[key] = val
        return
    raise ValueError(f"unsupported modifier {tok!r}")


def parse_asm(asm: str):
    """(mnemonic, operands, mods, operand text) of one instruction's assembly text."""
    parts = asm.split(None, 1)
    mnemonic = parts[0]
    rest = parts[1] if len(parts) > 1 else ""
    if mnemonic == "s_waitcnt":
        return mnemonic, [], _parse_waitcnt(rest), rest
    if mnemonic.startswith("."):  # `.long 0x...`: bytes objdump could not decode for this arch
        raise ValueError(f"objdump could not decode these bytes for this arch ({asm.strip()})")
    pieces = _split_top(rest)
    mods: dict = {}
    operands = []
    for i, piece in enumerate(pieces):
        if i < len(pieces) - 1:
            operands.append(parse_operand(piece))
            continue
        # the last piece: its operand (if the instruction has one), then space-separated modifiers;
        # an operand itself never contains a space, but for hwreg(NAME, offset, size) (s_getreg_b32's source)
        if piece.startswith("hwreg(") and ")" in piece:
            end = piece.index(")") + 1
            operands.append(parse_operand(piece[:end]))
            for tok in piece[end:].split():
                _parse_modifier(tok, mods)
            continue
        toks = piece.split()
        try:
            operands.append(parse_operand(toks[0]))
            toks = toks[1:]
        except ValueError:
            pass
        for tok in toks:
            _parse_modifier(tok, mods)
    return mnemonic, operands, mods, rest


def _parse_branch(asm: str, words: tuple):
    """A SOPP branch (s_branch, s_cbranch_*) with its offset taken from the encoding: objdump prints the
    target as a number, a symbol (`s_branch skip` when the label is not a `.L` local), or `sym+0x10`, and
    only the word's SIMM16 (bits [15:0], in dwords from the next instruction) is unambiguous. None when `asm`
    is not a branch."""
    parts = asm.split(None, 1)
    if not parts or not (parts[0] == "s_branch" or parts[0].startswith("s_cbranch_")) or len(words) != 1:
        return None
    simm = words[0] & 0xFFFF
    value = simm - 0x10000 if simm & 0x8000 else simm
    rest = parts[1].strip() if len(parts) > 1 else ""
    return parts[0], [Const(simm, "int", rest or str(value), value)], {}, rest


def _parse_waitcnt(rest: str) -> dict:
    counts = {}
    rest = rest.strip()
    if re.fullmatch(r"(0x[0-9a-fA-F]+|\d+)", rest):
        simm = _parse_int(rest)
        return {"vmcnt": (simm & 0xF) | ((simm >> 14) & 0x3) << 4, "expcnt": (simm >> 4) & 7,
                "lgkmcnt": (simm >> 8) & 0xF}
    for name, val in re.findall(r"(vmcnt|expcnt|lgkmcnt)\((\d+)\)", rest):
        counts[name] = int(val)
    return counts


def parse_objdump(text: str) -> list:
    """All instructions of an objdump listing, in address order. Lines that fail to parse become
    records with mnemonic '<unparsed>' so that the error surfaces only if that address executes."""
    instrs = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        asm = m.group("asm").strip()
        addr = int(m.group("addr"), 16)
        size = 4 * len(m.group("words").split())
        words = tuple(int(w, 16) for w in m.group("words").split())
        try:
            mnemonic, operands, mods, rest = _parse_branch(asm, words) or parse_asm(asm)
        except ValueError as exc:
            instrs.append(Instr(addr, size, asm, "<unparsed>", "<unparsed>", "", [], {"error": str(exc)}, ""))
            continue
        sm = _SUFFIX.search(mnemonic)
        base = mnemonic[: sm.start()] if sm else mnemonic
        instrs.append(Instr(addr, size, asm, mnemonic, base, sm.group(1) if sm else "", operands, mods, rest, words))
    instrs.sort(key=lambda i: i.addr)
    return instrs


def f32_of_bits(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]


def signed32(bits: int) -> int:
    bits &= 0xFFFFFFFF
    return bits - (1 << 32) if bits & 0x80000000 else bits

