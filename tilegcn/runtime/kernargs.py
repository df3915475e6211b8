"""Kernel-argument packing: the one place argument values become kernarg bytes, for every device.

The layout comes from the code object's metadata (`.args`: offset, size, value_kind, optional
type_name), so any code object can be launched, not only ours. A launch gives its explicit arguments
either as values (`args`: tensors become their data pointers, ints and floats are packed by size,
bytes-like values are by-value structs of any size) or as the explicit-argument bytes themselves
(`kernarg`, what HIP_LAUNCH_PARAM_BUFFER_POINTER carries). The hidden arguments after them
(code object v5, AMDGPUUsage "Code Object V5 Metadata") are left zero here; a HIP runtime writes them
at dispatch, and the emulator does the same with `fill_hidden`.
"""
from __future__ import annotations

import ctypes
import struct

import torch

from ..errors import ArgumentError

_FLOAT_TYPES = ("float", "double", "half", "f32", "f64", "f16")
_INT_FORMATS = {1: "<b", 2: "<h", 4: "<i", 8: "<q"}
_FLOAT_FORMATS = {2: "<e", 4: "<f", 8: "<d"}
_SIGNED_TYPES = ("int", "int32_t", "long", "int64_t")


def is_hidden(arg_meta: dict) -> bool:
    return arg_meta.get(".value_kind", "").startswith("hidden_")


def explicit_args(args_meta: list) -> list:
    return [a for a in args_meta if not is_hidden(a)]


def _label(arg_meta: dict, index: int) -> str:
    return f"{index} ({arg_meta['.name']})" if arg_meta.get(".name") else str(index)


def _struct_bytes(value):
    """Raw bytes of a by-value struct given as bytes, bytearray, memoryview or a ctypes object; else None."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, (ctypes.Structure, ctypes.Union, ctypes.Array)):
        return bytes(value)
    return None


def _pack_value(arg_meta: dict, value, index: int) -> bytes:
    kind, size = arg_meta.get(".value_kind", "by_value"), arg_meta[".size"]
    label = _label(arg_meta, index)
    if kind in ("global_buffer", "dynamic_shared_pointer"):
        if isinstance(value, torch.Tensor):
            return struct.pack("<Q", value.data_ptr())
        if isinstance(value, int) and not isinstance(value, bool):
            return struct.pack("<Q", value & (2**64 - 1))
        if value is None:
            return bytes(8)
        raise ArgumentError(f"tilegcn: kernel argument {label} must be a tensor (pointer), got {type(value).__name__}")
    if isinstance(value, torch.Tensor):
        raise ArgumentError(f"tilegcn: kernel argument {label} is passed by value, got a tensor")
    raw = _struct_bytes(value)
    if raw is not None:
        if len(raw) != size:
            raise ArgumentError(f"tilegcn: kernel argument {label} is a {size}-byte by-value argument, "
                                f"got {len(raw)} bytes")
        return raw
    if not isinstance(value, (int, float)):
        raise ArgumentError(f"tilegcn: kernel argument {label} must be an int, a float or the bytes of a "
                            f"{size}-byte struct, got {type(value).__name__}")
    is_float = isinstance(value, float) or any(t in str(arg_meta.get(".type_name", "")) for t in _FLOAT_TYPES)
    fmt = (_FLOAT_FORMATS if is_float else _INT_FORMATS).get(size)
    if fmt is None:
        raise ArgumentError(f"tilegcn: kernel argument {label} is a {size}-byte by-value argument; pass its bytes "
                            f"(bytes or a ctypes.Structure), not a Python {type(value).__name__}")
    if not is_float:
        value = _integer_bits(arg_meta, value, size, index)
    try:
        return struct.pack(fmt, value)
    except OverflowError:  # a float beyond float32's range
        raise ArgumentError(f"tilegcn: argument {arg_meta.get('.name', index)} = {value} is outside the "
                            f"range of a {8 * size}-bit float") from None


def _integer_bits(arg_meta: dict, value, size: int, index: int) -> int:
    """A signed `int` argument (tilegcn's int scalars are int32) must lie in its range; an argument of
    another integer type may also take the unsigned range (written as the same bits). Anything else
    is an ArgumentError, never a wrapped value."""
    bits = 8 * size
    signed = arg_meta.get(".type_name") in _SIGNED_TYPES
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) if signed else (1 << bits)
    if not low <= value < high:
        name = arg_meta.get(".name", index)
        raise ArgumentError(f"tilegcn: integer argument {name} = {value} is outside the {bits}-bit "
                            f"{'signed ' if signed else ''}range [{low}, {high - 1}]")
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def pack(args_meta: list, values: list, kernarg_size: int) -> bytes:
    """Pack `values` (in metadata order, hidden args excluded) into kernarg bytes of `kernarg_size`
    (hidden arguments zero)."""
    explicit = explicit_args(args_meta)
    if len(values) != len(explicit):
        raise ArgumentError(f"tilegcn: kernel takes {len(explicit)} arguments, got {len(values)}")
    buf = bytearray(max(kernarg_size, 1))
    for index, (meta, value) in enumerate(zip(explicit, values)):
        data = _pack_value(meta, value, index)
        off = meta[".offset"]
        buf[off : off + len(data)] = data
    return bytes(buf)


def explicit_bytes(args_meta: list) -> int:
    """Bytes the explicit arguments span (the end of the last one)."""
    return max((a[".offset"] + a[".size"] for a in explicit_args(args_meta)), default=0)


def place(args_meta: list, kernarg, kernarg_size: int) -> bytes:
    """A pre-packed explicit-argument buffer, checked against the metadata and padded to `kernarg_size`."""
    data = _struct_bytes(kernarg)
    if data is None:
        raise ArgumentError(f"tilegcn: kernarg= must be bytes (the packed explicit arguments), got "
                            f"{type(kernarg).__name__}")
    need = explicit_bytes(args_meta)
    if len(data) < need:
        raise ArgumentError(f"tilegcn: kernarg= holds {len(data)} bytes; the kernel's explicit arguments "
                            f"span {need}")
    if len(data) > max(kernarg_size, need):
        raise ArgumentError(f"tilegcn: kernarg= holds {len(data)} bytes; the kernel's kernarg segment is "
                            f"{kernarg_size} bytes")
    return data + bytes(max(kernarg_size, 1) - len(data))


def build(metadata: dict, args=(), kernarg=None, kernarg_size=None) -> bytes:
    """Kernarg bytes (hidden arguments zero) from either `args` or `kernarg`, never both."""
    args_meta = metadata.get(".args", [])
    size = metadata.get(".kernarg_segment_size", 0) if kernarg_size is None else kernarg_size
    if kernarg is not None:
        if len(args):
            raise ArgumentError("tilegcn: pass the kernel arguments either as args= or as kernarg= bytes, not both")
        return place(args_meta, kernarg, size)
    return pack(args_meta, list(args), size)


def hidden_values(grid, block, shared_mem: int, pointers: dict | None = None) -> dict:
    """The value of each hidden argument kind as hipModuleLaunchKernel fills it (AMDGPUUsage, code
    object v5). HIP's grid is whole workgroups, so the remainders are 0; its module launch builds a
    3-dimensional NDRange, so hidden_grid_dims is 3. Kinds not listed (printf/hostcall buffers, heap,
    multigrid sync, default queue, completion action, global offsets) are 0: nothing to point at."""
    values = {"hidden_grid_dims": 3, "hidden_dynamic_lds_size": shared_mem}
    for axis, g, b in zip("xyz", grid, block):
        values[f"hidden_block_count_{axis}"] = g
        values[f"hidden_group_size_{axis}"] = b
        values[f"hidden_remainder_{axis}"] = 0
        values[f"hidden_global_offset_{axis}"] = 0
    values.update(pointers or {})
    return values


def fill_hidden(args_meta: list, kernarg: bytes, values: dict) -> bytes:
    """`kernarg` with every hidden argument the metadata lists set from `values` (kind -> int; unknown
    kinds are 0), little-endian in the argument's `.size` bytes."""
    buf = bytearray(kernarg)
    for a in args_meta:
        if not is_hidden(a):
            continue
        off, size = a[".offset"], a[".size"]
        if off + size > len(buf):
            buf.extend(bytes(off + size - len(buf)))
        value = values.get(a[".value_kind"], 0) & ((1 << (8 * size)) - 1)
        buf[off:off + size] = value.to_bytes(size, "little")
    return bytes(buf)
