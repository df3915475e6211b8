"""The HIP device on a machine without a HIP runtime or GPU, plus its launch plumbing against a fake runtime.

The fake stands in for libamdhip64 (Python callables in place of the C functions): it records what
hipModuleLaunchKernel receives, so the kernarg buffer, grid, block and error paths are checked without a GPU.
"""
from __future__ import annotations

import ctypes
import struct

import pytest
import torch

import tilegcn.runtime as runtime
from tilegcn.errors import ArgumentError, DeviceError
from tilegcn.runtime import hip


def _runtime_present() -> bool:
    return hip._library()[0] is not None


@pytest.fixture
def no_device_env(monkeypatch):
    monkeypatch.delenv("TILEGCN_DEVICE", raising=False)
    runtime._device.cache_clear()
    yield monkeypatch
    runtime._device.cache_clear()


class FakeHip:
    """Just enough of libamdhip64 for HipDevice/HipModule; records launches."""

    def __init__(self, count=1, arch=b"gfx942:sramecc+:xnack-", launch_rc=0):
        self.count, self.arch, self.launch_rc = count, arch, launch_rc
        self.launches, self.unloaded = [], []

    def hipGetDeviceCount(self, ref):
        ref._obj.value = self.count
        return 0 if self.count else 100  # hipErrorNoDevice

    def hipGetErrorString(self, rc):
        return f"fake error {rc}".encode()

    def hipGetDevicePropertiesR0600(self, buf, device):
        ctypes.memmove(buf, b"AMD Instinct MI300X\0", 20)  # name, then (somewhere) gcnArchName
        ctypes.memmove(ctypes.addressof(buf) + 1160, self.arch + b"\0", len(self.arch) + 1)
        return 0

    def hipModuleLoadData(self, ref, image):
        ref._obj.value = 0x1000
        self.image = image
        return 0

    def hipModuleGetFunction(self, ref, module, name):
        ref._obj.value = 0x2000
        self.function_name = name
        return 0

    def hipModuleLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        assert extra[0] == hip.HIP_LAUNCH_PARAM_BUFFER_POINTER and extra[2] == hip.HIP_LAUNCH_PARAM_BUFFER_SIZE
        assert extra[4] == hip.HIP_LAUNCH_PARAM_END and params is None
        size = ctypes.c_size_t.from_address(extra[3]).value
        self.launches.append(dict(fn=fn, grid=(gx, gy, gz), block=(bx, by, bz), shared=shared,
                                  stream=stream, kernargs=ctypes.string_at(extra[1], size)))
        return self.launch_rc

    def hipModuleUnload(self, module):
        self.unloaded.append(module)
        return 0


# --------------------------------------------------------------------------------------------------
# this machine: no HIP runtime, no GPU
# --------------------------------------------------------------------------------------------------

def test_available_is_false_here_without_raising():
    if _runtime_present():
        pytest.skip("a HIP runtime is installed on this machine")
    assert hip.available() is False
    assert hip.gpu_arch() is None


def test_available_never_raises(monkeypatch):
    def broken():
        raise OSError("libamdhip64.so: cannot open shared object file")

    monkeypatch.setattr(hip, "_library", broken)
    assert hip.available() is False
    assert hip.gpu_arch() is None
    monkeypatch.setattr(hip, "_library", lambda: (FakeHip(count=0), None))
    assert hip.available() is False


def test_tilegcn_device_hip_without_runtime_is_a_clear_error(no_device_env):
    if _runtime_present():
        pytest.skip("a HIP runtime is installed on this machine")
    no_device_env.setenv("TILEGCN_DEVICE", "hip")
    assert runtime.device_name() == "hip"
    with pytest.raises(DeviceError) as err:
        runtime.get_device()
    msg = str(err.value)
    assert "HIP runtime" in msg and "libamdhip64" in msg and "TILEGCN_DEVICE=emulator" in msg


def test_tilegcn_device_hip_without_gpu_is_a_clear_error(no_device_env):
    no_device_env.setattr(hip, "_library", lambda: (FakeHip(count=0), None))
    no_device_env.setenv("TILEGCN_DEVICE", "hip")
    with pytest.raises(DeviceError, match=r"no GPU.*TILEGCN_DEVICE=emulator"):
        runtime.get_device()


def test_auto_resolves_to_the_emulator(no_device_env):
    if _runtime_present():
        pytest.skip("a HIP runtime is installed on this machine")
    assert runtime.device_name() == "emulator"  # TILEGCN_DEVICE unset
    no_device_env.setenv("TILEGCN_DEVICE", "auto")
    assert runtime.device_name() == "emulator"
    assert runtime.device_name("AUTO") == "emulator"
    # and to HIP where a GPU is visible
    no_device_env.setattr(hip, "available", lambda: True)
    assert runtime.device_name() == "hip"


def test_unknown_device_lists_the_choices(no_device_env):
    with pytest.raises(DeviceError) as err:
        runtime.device_name("bogus")
    for choice in ("emulator", "hip", "auto"):
        assert choice in str(err.value)
    no_device_env.setenv("TILEGCN_DEVICE", "bogus")
    with pytest.raises(DeviceError, match="bogus"):
        runtime.get_device()


# --------------------------------------------------------------------------------------------------
# argument checks and the launch path, against the fake runtime
# --------------------------------------------------------------------------------------------------

META = {
    ".kernarg_segment_size": 24,
    ".args": [
        {".name": "x", ".offset": 0, ".size": 8, ".value_kind": "global_buffer", ".address_space": "global"},
        {".name": "n", ".offset": 8, ".size": 4, ".value_kind": "by_value"},
        {".offset": 16, ".size": 8, ".value_kind": "hidden_block_count_x"},
    ],
}


def test_cpu_tensor_is_an_argument_error_naming_the_argument():
    with pytest.raises(ArgumentError, match=r"argument 0 \(x\).*cpu.*GPU"):
        hip.pack_args(META, [torch.zeros(4), 7])


def test_pack_args_uses_the_one_kernarg_packer():
    data = hip.pack_args(META, [0x1234_5678_9ABC, -3])
    assert len(data) == 24
    assert struct.unpack_from("<Qi", data) == (0x1234_5678_9ABC, -3)
    with pytest.raises(ArgumentError, match="takes 2 arguments"):
        hip.pack_args(META, [0])


def test_gpu_arch_from_device_properties(monkeypatch):
    monkeypatch.setattr(hip, "_library", lambda: (FakeHip(arch=b"gfx950:sramecc+:xnack-"), None))
    assert hip.available() is True
    assert hip.gpu_arch() == "gfx950"


KERNEL = """.amdgcn_target "amdgcn-amd-amdhsa--{arch}"
.text
.globl k
.p2align 8
.type k,@function
k:
  s_endpgm
.size k, .-k
.rodata
.p2align 6
.amdhsa_kernel k
  .amdhsa_user_sgpr_kernarg_segment_ptr 1
  .amdhsa_next_free_vgpr 4
  .amdhsa_next_free_sgpr 8
  .amdhsa_accum_offset 4
.end_amdhsa_kernel
.amdgpu_metadata
---
amdhsa.version: [ 1, 2 ]
amdhsa.target: amdgcn-amd-amdhsa--{arch}
amdhsa.kernels:
  - .name: k
    .symbol: k.kd
    .kernarg_segment_size: 24
    .kernarg_segment_align: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .wavefront_size: 64
    .sgpr_count: 8
    .vgpr_count: 4
    .max_flat_workgroup_size: 256
    .args:
      - {{ .name: x, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global }}
      - {{ .name: n, .offset: 8, .size: 4, .value_kind: by_value }}
      - {{ .offset: 16, .size: 8, .value_kind: hidden_block_count_x }}
...
.end_amdgpu_metadata
"""


def _hsaco(arch):
    pytest.importorskip("tilegcn.runtime.codeobject", reason="codeobject.py (emulator engineer) not there yet")
    from tilegcn.toolchain import assemble

    return assemble(KERNEL.format(arch=arch), arch)


def test_launch_packs_kernargs_and_dims(monkeypatch):
    hsaco = _hsaco("gfx942")
    fake = FakeHip()
    monkeypatch.setattr(hip, "_library", lambda: (fake, None))
    module = hip.HipDevice().load(hsaco)
    assert fake.image == hsaco
    module.launch("k", (3, 2), 256, [0xDEAD_BEEF_0000, 42])
    (launch,) = fake.launches
    assert launch["grid"] == (3, 2, 1) and launch["block"] == (256, 1, 1) and launch["shared"] == 0
    assert launch["kernargs"] == struct.pack("<QiI", 0xDEAD_BEEF_0000, 42, 0) + bytes(8)
    assert fake.function_name == b"k"
    with pytest.raises(DeviceError, match="no kernel 'nope'.*k"):
        module.launch("nope", 1, 64, [0, 1])
    with pytest.raises(ArgumentError, match=r"argument 0 \(x\)"):
        module.launch("k", 1, 64, [torch.zeros(1), 1])
    fake.launch_rc = 98
    with pytest.raises(DeviceError, match="hipModuleLaunchKernel.*fake error 98"):
        module.launch("k", 1, 64, [0, 1])
    del module
    assert fake.unloaded


def test_load_refuses_a_code_object_for_another_arch(monkeypatch):
    hsaco = _hsaco("gfx950")
    monkeypatch.setattr(hip, "_library", lambda: (FakeHip(arch=b"gfx942:sramecc+:xnack-"), None))
    with pytest.raises(DeviceError, match="for gfx950 but the GPU is gfx942"):
        hip.HipDevice().load(hsaco)


def test_launch_takes_the_emulators_parameters(monkeypatch):
    """shared_mem -> sharedMemBytes, kernarg= bytes handed over as the buffer, buffers= need GPU tensors."""
    hsaco = _hsaco("gfx942")
    fake = FakeHip()
    monkeypatch.setattr(hip, "_library", lambda: (fake, None))
    module = hip.HipDevice().load(hsaco)
    packed = struct.pack("<Qi", 0xABC0_0000, 9)
    module.launch("k", 2, 64, kernarg=packed, shared_mem=4096, check=False)
    (launch,) = fake.launches
    assert launch["shared"] == 4096 and launch["kernargs"] == packed + bytes(24 - len(packed))
    with pytest.raises(ArgumentError, match="65540 bytes of LDS .0 fixed \\+ 65540 shared_mem.*65536"):
        module.launch("k", 2, 64, [0, 1], shared_mem=65540)
    with pytest.raises(ArgumentError, match=r"buffers\[0\] is a tensor on cpu"):
        module.launch("k", 2, 64, kernarg=packed, buffers=[torch.zeros(2)])
    with pytest.raises(ArgumentError, match="either as args= or as kernarg="):
        module.launch("k", 2, 64, [0, 1], kernarg=packed)
