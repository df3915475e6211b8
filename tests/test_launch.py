"""Launching like the HIP runtime: hidden kernel arguments, the dispatch packet, dynamic LDS, pre-packed
kernarg buffers and by-value structs whose pointers reach extra buffers.

The kernels are LLVM IR compiled by llc (tests/ir/*.ll), so the hidden-argument layout and the user SGPRs
they read are LLVM's, not tilegcn's: the emulator has to fill what LLVM's code expects.
"""
from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import pytest
import torch

from tilegcn.errors import ArgumentError, EmulatorError
from tilegcn.runtime import emulator, kernargs

sys.path.insert(0, str(Path(__file__).parent))
from asm.llvmir import compile_ir  # noqa: E402


@pytest.fixture(scope="module", params=("gfx942", "gfx950"))
def launch_module(request):
    return emulator.load(compile_ir("launch", request.param))


def _expected_hidden(kind, grid, block, shared_mem):
    if kind.startswith("hidden_block_count_"):
        return grid["xyz".index(kind[-1])]
    if kind.startswith("hidden_group_size_"):
        return block["xyz".index(kind[-1])]
    if kind == "hidden_grid_dims":
        return 3  # hipModuleLaunchKernel always dispatches a 3-D NDRange
    if kind == "hidden_dynamic_lds_size":
        return shared_mem
    return 0  # remainders (HIP grids are whole workgroups), global offsets, printf/hostcall/heap buffers


@pytest.mark.parametrize("grid,block", [((3, 1, 1), (64, 1, 1)), ((2, 5, 7), (64, 2, 3))])
def test_hidden_arguments_as_llvm_code_reads_them(grid, block):
    mod = emulator.load(compile_ir("hidden", "gfx942"))
    meta = mod.kernels["hidden"].metadata
    out = torch.full((64,), -1, dtype=torch.int32)
    mod.launch("hidden", grid, block, [out])  # thread x dumps dword x of the hidden-argument area
    dump = out.numpy().tobytes()
    base = kernargs.explicit_bytes(meta[".args"])
    hidden = [a for a in meta[".args"] if kernargs.is_hidden(a) and a[".offset"] - base + a[".size"] <= len(dump)]
    assert {"hidden_block_count_z", "hidden_group_size_y", "hidden_grid_dims"} <= {a[".value_kind"] for a in hidden}
    for a in hidden:
        off = a[".offset"] - base
        got = int.from_bytes(dump[off:off + a[".size"]], "little")
        if a[".value_kind"] == "hidden_queue_ptr":
            assert got != 0  # the queue's address
        else:
            assert got == _expected_hidden(a[".value_kind"], grid, block, 0), a[".value_kind"]


def test_dispatch_packet_and_dispatch_id(launch_module):
    out = torch.zeros(4, dtype=torch.int32)
    launch_module.launch("dispatch_info", (5, 1, 1), (128, 1, 1), [out])
    first_id = int(out[2])
    assert out[:2].tolist() == [128, 5 * 128]  # AQL packet: workgroup_size_x, grid_size_x in work-items
    launch_module.launch("dispatch_info", (2, 1, 1), (64, 1, 1), [out])
    assert out[:2].tolist() == [64, 2 * 64] and int(out[2]) == first_id + 1  # ids number the dispatches


def test_dynamic_lds_comes_from_shared_mem(launch_module):
    out = torch.zeros(256, dtype=torch.int32)
    with pytest.raises(EmulatorError, match="outside the kernel's 0 bytes of LDS"):
        launch_module.launch("dynamic_lds", 1, 256, [out, 256])  # no dynamic LDS asked for
    launch_module.launch("dynamic_lds", 1, 256, [out, 256], shared_mem=1024)
    assert torch.equal(out, torch.arange(255, -1, -1, dtype=torch.int32) * 3)
    # LLVM lists hidden_dynamic_lds_size for a kernel with dynamic LDS: the launch's shared_mem goes there
    (lds_arg,) = [a for a in launch_module.kernels["dynamic_lds"].metadata[".args"]
                  if a[".value_kind"] == "hidden_dynamic_lds_size"]
    kernarg = launch_module.prepare("dynamic_lds", 1, 256, [out, 256], shared_mem=1024).dispatch.kernarg
    assert int.from_bytes(kernarg[lds_arg[".offset"]:lds_arg[".offset"] + 4], "little") == 1024
    limit = launch_module.arch.lds_bytes
    with pytest.raises(EmulatorError, match=f"{limit + 4} bytes of LDS .0 fixed \\+ {limit + 4} dynamic"):
        launch_module.launch("dynamic_lds", 1, 256, [out, 256], shared_mem=limit + 4)
    with pytest.raises(ArgumentError, match="shared_mem"):
        launch_module.launch("dynamic_lds", 1, 256, [out, 256], shared_mem=-1)


class Args(ctypes.Structure):  # %struct.Args of tests/ir/launch.ll
    _fields_ = [("x", ctypes.c_uint64), ("y", ctypes.c_uint64), ("n", ctypes.c_int32), ("scale", ctypes.c_float),
                ("extra", ctypes.c_int64 * 3)]


def test_struct_by_value_with_pointers_to_buffers(launch_module):
    x, y = torch.randn(100), torch.zeros(100)
    s = Args(x.data_ptr(), y.data_ptr(), 90, 2.5, (1, 2, -7))
    launch_module.launch("struct_arg", 1, 128, [s], buffers=[x, y])
    expect = torch.cat([x[:90] * 2.5 - 7, torch.zeros(10)])
    torch.testing.assert_close(y, expect)
    y.zero_()
    launch_module.launch("struct_arg", 1, 128, [bytes(s)], buffers=[x, y])  # the struct's bytes work too
    torch.testing.assert_close(y, expect)
    with pytest.raises(EmulatorError, match="outside every tensor argument"):
        launch_module.launch("struct_arg", 1, 128, [s], buffers=[x])  # y unreachable: a fault, not a write
    with pytest.raises(ArgumentError, match="48-byte by-value argument, got 47 bytes"):
        launch_module.launch("struct_arg", 1, 128, [bytes(s)[:47]], buffers=[x, y])
    with pytest.raises(ArgumentError, match="48-byte by-value argument; pass its bytes"):
        launch_module.launch("struct_arg", 1, 128, [3], buffers=[x, y])


def test_prepacked_kernarg_buffer(launch_module):
    x, y = torch.randn(64), torch.zeros(64)
    s = Args(x.data_ptr(), y.data_ptr(), 64, -1.0, (0, 0, 3))
    launch_module.launch("struct_arg", 1, 64, kernarg=bytes(s), buffers=[x, y])
    torch.testing.assert_close(y, 3 - x)
    with pytest.raises(ArgumentError, match="either as args= or as kernarg="):
        launch_module.launch("struct_arg", 1, 64, [s], kernarg=bytes(s), buffers=[x, y])
    with pytest.raises(ArgumentError, match="holds 40 bytes; the kernel's explicit arguments span 48"):
        launch_module.launch("struct_arg", 1, 64, kernarg=bytes(s)[:40], buffers=[x, y])
    with pytest.raises(ArgumentError, match="buffers\\[0\\] must be a tensor"):
        launch_module.launch("struct_arg", 1, 64, kernarg=bytes(s), buffers=[1])


def test_small_by_value_integers_and_halves():
    meta = [{".offset": 0, ".size": 1, ".value_kind": "by_value"},
            {".offset": 2, ".size": 2, ".value_kind": "by_value", ".type_name": "half"},
            {".offset": 4, ".size": 2, ".value_kind": "by_value"}]
    data = kernargs.pack(meta, [-2, 1.5, 0xFFFF], 8)
    assert data == bytes([0xFE, 0]) + torch.tensor([1.5], dtype=torch.float16).numpy().tobytes() + b"\xff\xff" + bytes(2)
    with pytest.raises(ArgumentError, match="outside the 16-bit range"):
        kernargs.pack(meta, [0, 0.0, 1 << 16], 8)


def test_queue_apertures_match_the_aperture_registers(launch_module):
    out = torch.zeros(3, dtype=torch.int32)
    launch_module.launch("apertures", 1, 64, [out])
    shared_hi = int(out[0])
    assert shared_hi != 0 and int(out[1]) == shared_hi  # the queue's LDS aperture = src_shared_base
    assert int(out[2]) not in (0, shared_hi)  # a private aperture of its own


def test_threads_launching_on_parts_of_one_storage_keep_every_write():
    """Launches from several Python threads on disjoint parts of one tensor: column halves (whose byte spans
    interleave row by row) and every other row. Each launch writes back only the bytes its kernel stored, so
    no launch undoes another's (copying whole spans back lost half of them)."""
    import threading

    from kernels import axpb_relu

    x = torch.randn(128, 128)
    ref = torch.relu(2 * x + 1)
    tile = dict(block_M=64, block_N=64, threads=64)
    threads_before = torch.get_num_threads()
    axpb_relu(x[:, :64], torch.empty(128, 64), **tile)  # compiled before the threads start: they only launch
    cols, rows = torch.zeros(128, 128), torch.zeros(128, 128)
    parts = [(x[:, :64], cols[:, :64]), (x[:, 64:], cols[:, 64:]), (x[0::2], rows[0::2]), (x[1::2], rows[1::2])]
    errors = []

    def launch(src, dst):
        try:
            axpb_relu(src, dst, **tile)
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)
    workers = [threading.Thread(target=launch, args=part) for part in parts]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors, errors
    assert torch.equal(cols, ref) and torch.equal(rows, ref)
    assert torch.get_num_threads() == threads_before  # each launch's thread setting was undone
