"""Read an AMDGPU code object (HSACO): ELF64 sections and symbols, the NT_AMDGPU_METADATA note and the
64-byte kernel descriptors, the way a runtime does before it launches a kernel.

    co = parse(hsaco_bytes)
    co.arch                        # 'gfx942' / 'gfx950' (amdhsa.target, else the ELF e_flags)
    k = co.kernels["gemm"]
    k.metadata[".args"]            # the per-kernel map of amdhsa.kernels
    k.descriptor.user_sgpr_count   # decoded kernel descriptor fields
    k.entry_address                # virtual address of the first instruction

Layouts follow LLVM's AMDGPUUsage ("Code Object Metadata", "Kernel Descriptor"). The metadata note is
MessagePack; a small decoder lives here so that no third-party package is needed.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

from ..amdgcn.arch import ARCHES
from ..errors import DeviceError

EM_AMDGPU = 224
SHT_SYMTAB, SHT_NOTE, SHT_NOBITS, SHT_DYNSYM = 2, 7, 8, 11
NT_AMDGPU_METADATA = 32
KERNEL_DESCRIPTOR_BYTES = 64
# A bound on a kernel's kernarg segment, far above what compilers emit (HIP allows 4 KiB), so that a damaged
# size in the metadata or the descriptor is refused instead of allocated
MAX_KERNARG_BYTES = 1 << 20

# EF_AMDGPU_MACH values (e_flags bits [7:0]) for the arches tilegcn knows.
_MACH_TO_ARCH = {0x4C: "gfx942", 0x4F: "gfx950"}


# ------------------------------------------------------------------------------------------------
# MessagePack (the subset any msgpack encoder can produce; ext types are kept as (type, bytes))
# ------------------------------------------------------------------------------------------------

MSGPACK_MAX_DEPTH = 64  # AMDGPU metadata nests 4 deep; a deeper value is damage, not metadata


class _Malformed(Exception):
    """Raised inside the decoders; parse() turns it into a DeviceError naming the code object part."""


def msgpack_decode(data: bytes):
    """Decode one MessagePack value from `data` (the whole buffer must be that one value). Damaged or hostile
    input (a length or count past the end of the data, nesting deeper than MSGPACK_MAX_DEPTH) is a DeviceError,
    found before anything that size is built."""
    try:
        value, end = _mp_value(bytes(data), 0, 0)
    except _Malformed as e:
        raise DeviceError(f"tilegcn: code object metadata is not valid msgpack: {e}") from None
    if end != len(data):
        raise DeviceError(f"tilegcn: code object metadata has {len(data) - end} trailing bytes after the msgpack map")
    return value


def _take(b: bytes, i: int, n: int, what: str) -> int:
    """The end of `n` bytes of `what` starting at `i`, checked against the data."""
    if n > len(b) - i:
        raise _Malformed(f"{what} at byte {i} needs {n} bytes, only {len(b) - i} remain")
    return i + n


def _unpack(fmt: str, b: bytes, i: int, what: str):
    end = _take(b, i, struct.calcsize(fmt), what)
    return struct.unpack_from(fmt, b, i)[0], end


def _text(raw: bytes, i: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _Malformed(f"string at byte {i} is not UTF-8") from None


def _mp_value(b: bytes, i: int, depth: int):
    _take(b, i, 1, "a value")
    t = b[i]
    i += 1
    if t <= 0x7F:
        return t, i
    if t >= 0xE0:
        return t - 0x100, i
    if 0x80 <= t <= 0x8F:
        return _mp_map(b, i, t & 0x0F, depth)
    if 0x90 <= t <= 0x9F:
        return _mp_array(b, i, t & 0x0F, depth)
    if 0xA0 <= t <= 0xBF:
        end = _take(b, i, t & 0x1F, "a string")
        return _text(b[i:end], i), end
    fixed = {0xC0: None, 0xC2: False, 0xC3: True}
    if t in fixed:
        return fixed[t], i
    ints = {0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q", 0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q",
            0xCA: ">f", 0xCB: ">d"}
    if t in ints:
        return _unpack(ints[t], b, i, "a number")
    lengths = {0xC4: ">B", 0xC5: ">H", 0xC6: ">I", 0xD9: ">B", 0xDA: ">H", 0xDB: ">I"}
    if t in lengths:
        n, i = _unpack(lengths[t], b, i, "a length")
        end = _take(b, i, n, "a string" if t >= 0xD9 else "binary data")
        raw = b[i:end]
        return (_text(raw, i) if t >= 0xD9 else bytes(raw)), end
    if t in (0xDC, 0xDD):
        n, i = _unpack(">H" if t == 0xDC else ">I", b, i, "an array length")
        return _mp_array(b, i, n, depth)
    if t in (0xDE, 0xDF):
        n, i = _unpack(">H" if t == 0xDE else ">I", b, i, "a map length")
        return _mp_map(b, i, n, depth)
    if 0xD4 <= t <= 0xD8:  # fixext 1..16
        n = 1 << (t - 0xD4)
        end = _take(b, i, 1 + n, "an ext value")
        return (struct.unpack_from(">b", b, i)[0], bytes(b[i + 1:end])), end
    if t in (0xC7, 0xC8, 0xC9):
        n, i = _unpack({0xC7: ">B", 0xC8: ">H", 0xC9: ">I"}[t], b, i, "an ext length")
        end = _take(b, i, 1 + n, "an ext value")
        return (struct.unpack_from(">b", b, i)[0], bytes(b[i + 1:end])), end
    raise _Malformed(f"invalid type byte 0x{t:02x} at byte {i - 1}")


def _mp_items(b, i, n, per_item, depth, what):
    """Check a container of n items (each at least `per_item` bytes) fits the data before decoding it."""
    if depth >= MSGPACK_MAX_DEPTH:
        raise _Malformed(f"values nest deeper than {MSGPACK_MAX_DEPTH} levels at byte {i}")
    if n * per_item > len(b) - i:
        raise _Malformed(f"{what} at byte {i} claims {n} items, more than the {len(b) - i} bytes that remain")


def _mp_array(b, i, n, depth):
    _mp_items(b, i, n, 1, depth, "an array")
    out = []
    for _ in range(n):
        v, i = _mp_value(b, i, depth + 1)
        out.append(v)
    return out, i


def _mp_map(b, i, n, depth):
    _mp_items(b, i, n, 2, depth, "a map")
    out = {}
    for _ in range(n):
        at = i
        k, i = _mp_value(b, i, depth + 1)
        v, i = _mp_value(b, i, depth + 1)
        if isinstance(k, (list, dict)):
            raise _Malformed(f"a map key at byte {at} is a {type(k).__name__}")
        out[k] = v
    return out, i


# ------------------------------------------------------------------------------------------------
# Kernel descriptor
# ------------------------------------------------------------------------------------------------

def _bits(value: int, lo: int, width: int) -> int:
    return (value >> lo) & ((1 << width) - 1)


@dataclass
class KernelDescriptor:
    """The 64-byte kernel descriptor (AMDGPUUsage "Kernel Descriptor", code object v3+), decoded."""

    group_segment_fixed_size: int
    private_segment_fixed_size: int
    kernarg_size: int
    entry_offset: int  # kernel_code_entry_byte_offset, relative to the descriptor's own address
    rsrc1: int
    rsrc2: int
    rsrc3: int
    kernel_code_properties: int
    kernarg_preload: int = 0
    # decoded fields
    vgpr_granules: int = 0  # COMPUTE_PGM_RSRC1.GRANULATED_WORKITEM_VGPR_COUNT (unified VGPR+AGPR, granule 8)
    sgpr_granules: int = 0  # COMPUTE_PGM_RSRC1.GRANULATED_WAVEFRONT_SGPR_COUNT (granule 8)
    float_round_mode_32: int = 0
    float_round_mode_16_64: int = 0
    float_denorm_mode_32: int = 0
    float_denorm_mode_16_64: int = 0
    dx10_clamp: bool = False
    ieee_mode: bool = False
    fp16_overflow: bool = False  # COMPUTE_PGM_RSRC1.FP16_OVFL (gfx9+): MODE.FP16_OVFL at wave start
    enable_private_segment: bool = False
    user_sgpr_count: int = 0
    enable_workgroup_id: tuple = (False, False, False)
    enable_workgroup_info: bool = False
    workitem_id_mode: int = 0  # COMPUTE_PGM_RSRC2.ENABLE_VGPR_WORKITEM_ID: 0 X, 1 XY, 2 XYZ
    accum_offset: int = 0  # first AGPR's index in the unified file (gfx90a+: (ACCUM_OFFSET + 1) * 4)
    enable_sgpr_private_segment_buffer: bool = False
    enable_sgpr_dispatch_ptr: bool = False
    enable_sgpr_queue_ptr: bool = False
    enable_sgpr_kernarg_segment_ptr: bool = False
    enable_sgpr_dispatch_id: bool = False
    enable_sgpr_flat_scratch_init: bool = False
    enable_sgpr_private_segment_size: bool = False
    wavefront_size32: bool = False

    @property
    def enable_workgroup_id_x(self) -> bool:
        return self.enable_workgroup_id[0]

    @property
    def enable_workgroup_id_y(self) -> bool:
        return self.enable_workgroup_id[1]

    @property
    def enable_workgroup_id_z(self) -> bool:
        return self.enable_workgroup_id[2]

    @property
    def vgpr_count(self) -> int:
        """Unified VGPR+AGPR registers allocated per lane."""
        return (self.vgpr_granules + 1) * 8

    @property
    def sgpr_count(self) -> int:
        """SGPRs allocated per wave (this count includes the VCC/flat-scratch/XNACK extras)."""
        return (self.sgpr_granules + 1) * 8

    @property
    def arch_vgpr_count(self) -> int:
        """v0..v[n-1]: the arch VGPRs lie below accum_offset in the unified file."""
        return min(self.accum_offset, self.vgpr_count)

    @property
    def agpr_count(self) -> int:
        return max(0, self.vgpr_count - self.accum_offset)

    def user_sgpr_layout(self) -> list:
        """[(name, first_sgpr, count)] of the enabled user SGPRs, in the ABI's fixed order."""
        order = [
            ("private_segment_buffer", self.enable_sgpr_private_segment_buffer, 4),
            ("dispatch_ptr", self.enable_sgpr_dispatch_ptr, 2),
            ("queue_ptr", self.enable_sgpr_queue_ptr, 2),
            ("kernarg_segment_ptr", self.enable_sgpr_kernarg_segment_ptr, 2),
            ("dispatch_id", self.enable_sgpr_dispatch_id, 2),
            ("flat_scratch_init", self.enable_sgpr_flat_scratch_init, 2),
            ("private_segment_size", self.enable_sgpr_private_segment_size, 1),
        ]
        layout, next_sgpr = [], 0
        for name, enabled, count in order:
            if enabled:
                layout.append((name, next_sgpr, count))
                next_sgpr += count
        return layout

    def system_sgpr_layout(self) -> list:
        """[(name, sgpr)] of the enabled system SGPRs; they start right after USER_SGPR_COUNT user SGPRs."""
        layout, next_sgpr = [], self.user_sgpr_count
        for axis, enabled in zip("xyz", self.enable_workgroup_id):
            if enabled:
                layout.append((f"workgroup_id_{axis}", next_sgpr))
                next_sgpr += 1
        if self.enable_workgroup_info:
            layout.append(("workgroup_info", next_sgpr))
            next_sgpr += 1
        if self.enable_private_segment:
            layout.append(("private_segment_wave_offset", next_sgpr))
        return layout


def parse_kernel_descriptor(raw: bytes) -> KernelDescriptor:
    if len(raw) < KERNEL_DESCRIPTOR_BYTES:
        raise DeviceError(f"tilegcn: kernel descriptor is {len(raw)} bytes, expected {KERNEL_DESCRIPTOR_BYTES}")
    group, private, kernarg = struct.unpack_from("<III", raw, 0)
    (entry,) = struct.unpack_from("<q", raw, 16)
    rsrc3, rsrc1, rsrc2 = struct.unpack_from("<III", raw, 44)
    props, preload = struct.unpack_from("<HH", raw, 56)
    return KernelDescriptor(
        group_segment_fixed_size=group,
        private_segment_fixed_size=private,
        kernarg_size=kernarg,
        entry_offset=entry,
        rsrc1=rsrc1,
        rsrc2=rsrc2,
        rsrc3=rsrc3,
        kernel_code_properties=props,
        kernarg_preload=preload,
        vgpr_granules=_bits(rsrc1, 0, 6),
        sgpr_granules=_bits(rsrc1, 6, 4),
        float_round_mode_32=_bits(rsrc1, 12, 2),
        float_round_mode_16_64=_bits(rsrc1, 14, 2),
        float_denorm_mode_32=_bits(rsrc1, 16, 2),
        float_denorm_mode_16_64=_bits(rsrc1, 18, 2),
        dx10_clamp=bool(_bits(rsrc1, 21, 1)),
        ieee_mode=bool(_bits(rsrc1, 23, 1)),
        fp16_overflow=bool(_bits(rsrc1, 26, 1)),
        enable_private_segment=bool(_bits(rsrc2, 0, 1)),
        user_sgpr_count=_bits(rsrc2, 1, 5),
        enable_workgroup_id=(bool(_bits(rsrc2, 7, 1)), bool(_bits(rsrc2, 8, 1)), bool(_bits(rsrc2, 9, 1))),
        enable_workgroup_info=bool(_bits(rsrc2, 10, 1)),
        workitem_id_mode=_bits(rsrc2, 11, 2),
        accum_offset=(_bits(rsrc3, 0, 6) + 1) * 4,
        enable_sgpr_private_segment_buffer=bool(_bits(props, 0, 1)),
        enable_sgpr_dispatch_ptr=bool(_bits(props, 1, 1)),
        enable_sgpr_queue_ptr=bool(_bits(props, 2, 1)),
        enable_sgpr_kernarg_segment_ptr=bool(_bits(props, 3, 1)),
        enable_sgpr_dispatch_id=bool(_bits(props, 4, 1)),
        enable_sgpr_flat_scratch_init=bool(_bits(props, 5, 1)),
        enable_sgpr_private_segment_size=bool(_bits(props, 6, 1)),
        wavefront_size32=bool(_bits(props, 10, 1)),
    )


# ------------------------------------------------------------------------------------------------
# ELF
# ------------------------------------------------------------------------------------------------

@dataclass
class Section:
    name: str
    type: int
    addr: int
    offset: int
    size: int


@dataclass
class Symbol:
    name: str
    value: int
    size: int
    section_index: int


@dataclass
class KernelInfo:
    name: str
    metadata: dict  # this kernel's map from amdhsa.kernels ('.args', '.kernarg_segment_size', ...)
    descriptor: KernelDescriptor
    entry_address: int  # virtual address of the first instruction
    descriptor_address: int = 0
    descriptor_bytes: bytes = b""  # the raw 64 bytes (a dispatch packet's kernel object points at them)


@dataclass
class CodeObject:
    arch: str
    metadata: dict
    kernels: dict
    data: bytes
    sections: dict = field(default_factory=dict)
    symbols: dict = field(default_factory=dict)

    def read(self, vaddr: int, size: int) -> bytes:
        """Bytes of the loaded image at virtual address `vaddr` (from the section that holds it)."""
        for s in self.sections.values():
            if s.addr <= vaddr and vaddr + size <= s.addr + s.size and s.type != SHT_NOBITS:
                start = s.offset + vaddr - s.addr
                return self.data[start:start + size]
        raise DeviceError(f"tilegcn: code object has no section holding [0x{vaddr:x}, 0x{vaddr + size:x})")


def _cstr(table: bytes, offset: int) -> str:
    end = table.find(b"\0", offset)
    if offset >= len(table) or end < 0:
        raise _Malformed(f"a name at offset {offset} runs past its string table ({len(table)} bytes)")
    return table[offset:end].decode("utf-8", "replace")


def _span(data: bytes, offset: int, size: int, what: str) -> bytes:
    """data[offset:offset + size], which must lie inside the file."""
    if offset < 0 or size < 0 or offset + size > len(data):
        raise _Malformed(f"{what} [{offset}, {offset + size}) lies past the end of the file ({len(data)} bytes)")
    return data[offset:offset + size]


def _elf_sections(data: bytes) -> list:
    if data[:4] != b"\x7fELF" or len(data) < 6 or data[4] != 2 or data[5] != 1:
        raise DeviceError("tilegcn: not a little-endian ELF64 code object")
    header = _span(data, 0, 64, "the ELF header")
    e_machine = struct.unpack_from("<H", header, 18)[0]
    if e_machine != EM_AMDGPU:
        raise DeviceError(f"tilegcn: ELF machine {e_machine} is not AMDGPU ({EM_AMDGPU})")
    e_shoff = struct.unpack_from("<Q", header, 0x28)[0]
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", header, 0x3A)
    if e_shentsize < 64 or e_shstrndx >= e_shnum:
        raise _Malformed(f"section header table: entry size {e_shentsize}, {e_shnum} entries, names in "
                         f"entry {e_shstrndx}")
    table = _span(data, e_shoff, e_shnum * e_shentsize, "the section header table")
    raw = []
    for i in range(e_shnum):
        name, typ, _flags, addr, off, size, link, _info, _align, _entsize = struct.unpack_from(
            "<IIQQQQIIQQ", table, i * e_shentsize)
        if typ != SHT_NOBITS:
            _span(data, off, size, f"section {i}")
        raw.append((name, typ, addr, off, size, link))
    shstr = raw[e_shstrndx]
    shstrtab = data[shstr[3]:shstr[3] + shstr[4]]
    return [(Section(_cstr(shstrtab, n), t, a, o, s), link) for n, t, a, o, s, link in raw]


def _elf_symbols(data: bytes, sections: list) -> dict:
    symbols = {}
    for sec, link in sections:
        if sec.type not in (SHT_SYMTAB, SHT_DYNSYM):
            continue
        if link >= len(sections):
            raise _Malformed(f"symbol table {sec.name!r} links to section {link} of {len(sections)}")
        strsec = sections[link][0]
        strtab = data[strsec.offset:strsec.offset + strsec.size]
        for off in range(sec.offset, sec.offset + sec.size - 23, 24):
            name, _info, _other, shndx, value, size = struct.unpack_from("<IBBHQQ", data, off)
            if name:
                symbols.setdefault(_cstr(strtab, name), Symbol(_cstr(strtab, name), value, size, shndx))
    return symbols


def _metadata_note(data: bytes, sections: list) -> dict | None:
    for sec, _ in sections:
        if sec.type != SHT_NOTE:
            continue
        pos, end = sec.offset, sec.offset + sec.size
        while pos + 12 <= end:
            namesz, descsz, ntype = struct.unpack_from("<III", data, pos)
            desc_at = pos + 12 + ((namesz + 3) & ~3)
            if desc_at + descsz > end:
                raise _Malformed(f"a note of section {sec.name!r} claims {descsz} bytes past the section's end")
            name = data[pos + 12:pos + 12 + namesz].rstrip(b"\0")
            if ntype == NT_AMDGPU_METADATA and name == b"AMDGPU":
                return msgpack_decode(data[desc_at:desc_at + descsz])
            pos = desc_at + ((descsz + 3) & ~3)
    return None


def _check_metadata(metadata):
    """The shapes the loader and the launch rely on: a map, a list of kernel maps with a name, a list of
    argument maps, whole numbers for sizes."""
    if not isinstance(metadata, dict):
        raise _Malformed(f"the metadata note holds a {type(metadata).__name__}, not a map")
    kernels = metadata.get("amdhsa.kernels", [])
    if not isinstance(kernels, list) or not all(isinstance(k, dict) for k in kernels):
        raise _Malformed("amdhsa.kernels is not a list of kernel maps")
    for k in kernels:
        if not isinstance(k.get(".name"), str) or not isinstance(k.get(".symbol", ""), str):
            raise _Malformed(f"a kernel's .name or .symbol is not a string: {k.get('.name')!r}")
        args = k.get(".args", [])
        if not isinstance(args, list) or not all(isinstance(a, dict) for a in args):
            raise _Malformed(f"kernel {k['.name']!r}: .args is not a list of argument maps")
        for field_ in (".kernarg_segment_size", ".group_segment_fixed_size", ".max_flat_workgroup_size"):
            if field_ in k and not _is_size(k[field_]):
                raise _Malformed(f"kernel {k['.name']!r}: {field_} is {k[field_]!r}, not a size")
        for i, a in enumerate(args):
            if not (_is_size(a.get(".offset")) and _is_size(a.get(".size")) and
                    isinstance(a.get(".value_kind", ""), str)):
                raise _Malformed(f"kernel {k['.name']!r}: argument {i} has no valid .offset/.size/.value_kind")
        if _kernarg_end(k) > MAX_KERNARG_BYTES:
            raise _Malformed(f"kernel {k['.name']!r}: its arguments span {_kernarg_end(k)} bytes, more than any "
                             f"kernarg segment ({MAX_KERNARG_BYTES})")


def _is_size(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v


def _kernarg_end(kernel: dict) -> int:
    args = kernel.get(".args", [])
    return max([kernel.get(".kernarg_segment_size", 0)] + [a[".offset"] + a[".size"] for a in args])


def _arch_of(metadata: dict, e_flags: int) -> str:
    target = metadata.get("amdhsa.target")
    if isinstance(target, str):
        for part in target.replace(":", "-").split("-"):
            if part in ARCHES:
                return part
    mach = e_flags & 0xFF
    if mach in _MACH_TO_ARCH:
        return _MACH_TO_ARCH[mach]
    raise DeviceError(f"tilegcn: code object is for an arch tilegcn does not know (target {target!r}, "
                      f"EF_AMDGPU_MACH 0x{mach:x}); supported: {', '.join(ARCHES)}")


def parse(data: bytes) -> CodeObject:
    """Parse HSACO bytes into a CodeObject (sections, metadata, kernels with decoded descriptors). A damaged
    or truncated file is a DeviceError saying which part is wrong."""
    data = bytes(data)
    try:
        return _parse(data)
    except _Malformed as e:
        raise DeviceError(f"tilegcn: damaged code object ({len(data)} bytes): {e}; rebuild it (a truncated "
                          f"or altered HSACO file?)") from None
    except (struct.error, IndexError, ValueError, KeyError, TypeError, AttributeError) as e:
        # a safety net under the explicit checks: never a raw error from a file's bytes
        raise DeviceError(f"tilegcn: damaged code object ({len(data)} bytes): {type(e).__name__}: {e}; "
                          f"rebuild it (a truncated or altered HSACO file?)") from None


def _parse(data: bytes) -> CodeObject:
    sections = _elf_sections(data)
    symbols = _elf_symbols(data, sections)
    metadata = _metadata_note(data, sections)
    if metadata is None:
        raise DeviceError("tilegcn: code object has no NT_AMDGPU_METADATA note (code object v3+ required)")
    _check_metadata(metadata)
    e_flags = struct.unpack_from("<I", data, 0x30)[0]
    co = CodeObject(arch=_arch_of(metadata, e_flags), metadata=metadata, kernels={}, data=data,
                    sections={s.name: s for s, _ in sections}, symbols=symbols)
    for kmeta in metadata.get("amdhsa.kernels", []):
        name = kmeta.get(".name")
        symbol = kmeta.get(".symbol", f"{name}.kd")
        if symbol not in symbols:
            raise DeviceError(f"tilegcn: kernel {name!r}: descriptor symbol {symbol!r} not in the code object")
        kd_addr = symbols[symbol].value
        raw = co.read(kd_addr, KERNEL_DESCRIPTOR_BYTES)
        kd = parse_kernel_descriptor(raw)
        if kd.kernarg_size > MAX_KERNARG_BYTES:
            raise _Malformed(f"kernel {name!r}: the descriptor's KERNARG_SIZE {kd.kernarg_size} is beyond any "
                             f"kernarg segment ({MAX_KERNARG_BYTES})")
        co.kernels[name] = KernelInfo(name=name, metadata=kmeta, descriptor=kd, entry_address=kd_addr + kd.entry_offset,
                                      descriptor_address=kd_addr, descriptor_bytes=bytes(raw))
    return co
