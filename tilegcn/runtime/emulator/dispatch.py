"""What a HIP runtime sets up for one dispatch, built for the emulated device: the kernarg segment with
its hidden arguments, the AQL dispatch packet, a queue, and the values of the user SGPRs the kernel
descriptor enables.

References: AMDGPUUsage ("Code Object V5 Metadata" hidden arguments, "Initial Kernel Execution State"
user SGPR order, "Amdhsa Compute Pgm Rsrc"), the HSA runtime's `hsa_kernel_dispatch_packet_t` (64
bytes) and ROCm's `amd_queue_t` (whose LDS/scratch aperture words LLVM reads at 0x40/0x44 through the
queue pointer on code objects without hidden aperture arguments).

Every segment lives at the address of a host allocation of its own, so no tensor can share it; all are
read-only to the kernel.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

import torch

from ..kernargs import fill_hidden, hidden_values
# the apertures src_shared_base / src_private_base report; the hidden arguments and the queue say the same
from .decode import PRIVATE_APERTURE, SHARED_APERTURE

DISPATCH_PACKET_BYTES = 64
# hsa_kernel_dispatch_packet_t.grid_size_{x,y,z} count work-items in uint32s: no launch has more per dimension
MAX_GRID_WORK_ITEMS = 2**32 - 1
QUEUE_BYTES = 256
QUEUE_SHARED_APERTURE_HI = 0x40  # amd_queue_t.group_segment_aperture_base_hi
QUEUE_PRIVATE_APERTURE_HI = 0x44  # amd_queue_t.private_segment_aperture_base_hi
HSA_PACKET_TYPE_KERNEL_DISPATCH = 2
_ALIGN = 64


class Segment:
    """A read-only block of device memory at the (64-byte aligned) address of its own host allocation."""

    def __init__(self, name: str, size: int):
        self.name = name
        self.size = max(size, 4)
        self._holder = torch.zeros(self.size + _ALIGN, dtype=torch.uint8)
        self.address = (self._holder.data_ptr() + _ALIGN - 1) & ~(_ALIGN - 1)
        self.data = bytes(self.size)


@dataclass
class Dispatch:
    """Everything the machine needs besides the program: segments to map and initial user SGPRs."""

    kernarg: bytes
    lds_size: int
    segments: list = field(default_factory=list)  # [Segment]
    user_sgprs: dict = field(default_factory=dict)  # user SGPR name -> list of 32-bit values


def _dispatch_packet(grid, block, kd, lds_size, kernel_object, kernarg_address) -> bytes:
    """hsa_kernel_dispatch_packet_t: header, setup (dimensions), workgroup size, grid size in work-items,
    segment sizes, kernel object, kernarg address, completion signal (none)."""
    header = HSA_PACKET_TYPE_KERNEL_DISPATCH
    grid_items = [g * b for g, b in zip(grid, block)]
    return struct.pack("<HHHHHHIIIIIQQQQ", header, 3, *block, 0, *grid_items,
                       kd.private_segment_fixed_size, lds_size, kernel_object, kernarg_address, 0, 0)


def _queue() -> bytes:
    q = bytearray(QUEUE_BYTES)
    struct.pack_into("<II", q, QUEUE_SHARED_APERTURE_HI, SHARED_APERTURE >> 32, PRIVATE_APERTURE >> 32)
    return bytes(q)


def _words(value: int, count: int) -> list:
    return [(value >> (32 * i)) & 0xFFFFFFFF for i in range(count)]


def prepare(kernel, grid, block, kernarg: bytes, shared_mem: int, dispatch_id: int) -> Dispatch:
    """The dispatch of `kernel` (a codeobject.KernelInfo): `kernarg` holds the explicit arguments (hidden
    ones zero); the hidden arguments and user SGPRs are filled as a HIP runtime fills them."""
    kd, meta = kernel.descriptor, kernel.metadata
    lds_size = kd.group_segment_fixed_size + shared_mem
    size = max(len(kernarg), meta.get(".kernarg_segment_size", 0), kd.kernarg_size)
    kernarg_seg = Segment("kernarg segment", size)
    packet = Segment("dispatch packet", DISPATCH_PACKET_BYTES)
    queue = Segment("queue", QUEUE_BYTES)
    descriptor = Segment("kernel descriptor", 64)
    pointers = {"hidden_shared_base": SHARED_APERTURE >> 32, "hidden_private_base": PRIVATE_APERTURE >> 32,
                "hidden_queue_ptr": queue.address}
    kernarg = fill_hidden(meta.get(".args", []), kernarg + bytes(size - len(kernarg)),
                          hidden_values(grid, block, shared_mem, pointers))
    kernarg_seg.data = kernarg
    packet.data = _dispatch_packet(grid, block, kd, lds_size, descriptor.address, kernarg_seg.address)
    queue.data = _queue()
    descriptor.data = kernel.descriptor_bytes or bytes(64)
    user = {
        "kernarg_segment_ptr": _words(kernarg_seg.address, 2),
        "dispatch_ptr": _words(packet.address, 2),
        "queue_ptr": _words(queue.address, 2),
        "dispatch_id": _words(dispatch_id, 2),
        "private_segment_size": [kd.private_segment_fixed_size],
        # private_segment_buffer and flat_scratch_init stay 0: gfx94x/gfx950 use architected flat scratch
        # (scratch_* address the private segment directly, ops_flat.py); no buffer V# reaches scratch here
    }
    return Dispatch(kernarg=kernarg, lds_size=lds_size, segments=[kernarg_seg, packet, queue, descriptor],
                    user_sgprs=user)
