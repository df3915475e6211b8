"""Kernel-argument packing: the one place argument values become kernarg bytes, for every device.

The layout comes from the code object's metadata (`.args`: offset, size, value_kind, optional
type_name), so any code object can be launched, not only ours.
"""
from __future__ import annotations

import struct

import torch

from ..errors import ArgumentError

_FLOAT_TYPES = ("float", "double", "half", "f32", "f64")
_SIGNED_TYPES = ("int", "int32_t", "long", "int64_t")


def _pack_value(arg_meta: dict, value, index: int) -> bytes:
    kind, size = arg_meta.get(".value_kind", "by_value"), arg_meta[".size"]
    if kind == "global_buffer":
        if isinstance(value, torch.Tensor):
            return struct.pack("<Q", value.data_ptr())
        if isinstance(value, int):
            return struct.pack("<Q", value)
        raise ArgumentError(f"tilegcn: kernel argument {index} must be a tensor (pointer), got {type(value).__name__}")
    if kind.startswith("hidden_"):
        return bytes(size)
    if isinstance(value, torch.Tensor):
        raise ArgumentError(f"tilegcn: kernel argument {index} is passed by value, got a tensor")
    is_float = isinstance(value, float) or any(t in str(arg_meta.get(".type_name", "")) for t in _FLOAT_TYPES)
    fmt = {(4, False): "<i", (8, False): "<q", (4, True): "<f", (8, True): "<d"}.get((size, is_float))
    if fmt is None:
        raise ArgumentError(f"tilegcn: kernel argument {index} has unsupported by-value size {size}")
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
    """Pack `values` (in metadata order, hidden args excluded) into kernarg bytes of `kernarg_size`."""
    explicit = [a for a in args_meta if not a.get(".value_kind", "").startswith("hidden_")]
    if len(values) != len(explicit):
        raise ArgumentError(f"tilegcn: kernel takes {len(explicit)} arguments, got {len(values)}")
    buf = bytearray(max(kernarg_size, 1))
    for index, (meta, value) in enumerate(zip(explicit, values)):
        data = _pack_value(meta, value, index)
        off = meta[".offset"]
        buf[off : off + len(data)] = data
    return bytes(buf)
