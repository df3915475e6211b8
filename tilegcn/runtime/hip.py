"""The real-GPU device: AMD GPUs through the HIP runtime (libamdhip64), called with ctypes.

    if hip.available():                         # library loads and hipGetDeviceCount() > 0; never raises
        module = HipDevice().load(hsaco_bytes)  # hipModuleLoadData
        module.launch("kernel", grid, block, [x, y, n])   # hipModuleLaunchKernel on torch's current stream

Kernel arguments are packed by `tilegcn.runtime.kernargs` from the code object's own metadata (or given
pre-packed as `kernarg=` bytes) and handed to HIP as one buffer (HIP_LAUNCH_PARAM_BUFFER_POINTER / _SIZE /
_END); `shared_mem=` is hipModuleLaunchKernel's sharedMemBytes. Tensors must already be on
the GPU (ROCm builds of torch call it the "cuda" device).
"""
from __future__ import annotations

import ctypes
import functools
import os
import re

from ..amdgcn.arch import get_arch
from ..errors import ArgumentError, DeviceError
from . import kernargs

_LIB_NAMES = ("libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5")
# `extra` keys of hipModuleLaunchKernel (hip_runtime_api.h: ((void*)0x01) .. ((void*)0x03))
HIP_LAUNCH_PARAM_BUFFER_POINTER, HIP_LAUNCH_PARAM_BUFFER_SIZE, HIP_LAUNCH_PARAM_END = 1, 2, 3
_NO_DEVICE_HINT = (
    "set TILEGCN_DEVICE=emulator to run on tilegcn's emulated device (TILEGCN_DEVICE=auto, the default, "
    "picks it whenever no AMD GPU is visible)"
)

_vp, _int, _uint = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint
_PROTOTYPES = {  # name: (restype, argtypes); every HIP call returns hipError_t (int, 0 = hipSuccess)
    "hipGetDeviceCount": (_int, [ctypes.POINTER(_int)]),
    "hipGetErrorString": (ctypes.c_char_p, [_int]),
    "hipModuleLoadData": (_int, [ctypes.POINTER(_vp), _vp]),
    "hipModuleGetFunction": (_int, [ctypes.POINTER(_vp), _vp, ctypes.c_char_p]),
    "hipModuleLaunchKernel": (_int, [_vp] + [_uint] * 6 + [_uint, _vp, ctypes.POINTER(_vp), ctypes.POINTER(_vp)]),
    "hipModuleUnload": (_int, [_vp]),
}


@functools.lru_cache(maxsize=None)
def _library():
    """(the loaded libamdhip64, None) or (None, why not). Looks in $ROCM_PATH/lib, /opt/rocm/lib, then the
    dynamic linker's usual search path."""
    dirs = [os.path.join(os.environ["ROCM_PATH"], "lib")] if os.environ.get("ROCM_PATH") else []
    tried = []
    for d in dirs + ["/opt/rocm/lib", ""]:
        for name in _LIB_NAMES:
            path = os.path.join(d, name) if d else name
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            try:
                for fn, (restype, argtypes) in _PROTOTYPES.items():
                    getattr(lib, fn).restype = restype
                    getattr(lib, fn).argtypes = argtypes
            except AttributeError as e:
                tried.append(f"{path} ({e})")
                continue
            return lib, None
    where = ", ".join(dirs + ["/opt/rocm/lib", "the library search path"])
    return None, "libamdhip64 (the HIP runtime) was not found in " + where + (
        "; unusable: " + ", ".join(tried) if tried else "")


def _check(lib, rc: int, call: str) -> None:
    if rc != 0:
        text = lib.hipGetErrorString(rc)
        raise DeviceError(f"tilegcn: HIP {call} failed: {text.decode() if text else 'unknown error'} (hipError_t {rc})")


def _device_count() -> int:
    lib, _ = _library()
    if lib is None:
        return 0
    count = _int(0)
    return count.value if lib.hipGetDeviceCount(ctypes.byref(count)) == 0 else 0


def available() -> bool:
    """True when the HIP runtime loads and sees at least one GPU. Never raises."""
    try:
        return _device_count() > 0
    except Exception:  # a broken runtime counts as no runtime
        return False


def gpu_arch() -> str | None:
    """Base arch of the first GPU ("gfx942" of "gfx942:sramecc+:xnack-"); None when there is none."""
    try:
        if not available():
            return None
        name = _arch_name_from_torch() or _arch_name_from_hip()
    except Exception:
        return None
    return _base_arch(name)


def _arch_name_from_torch() -> str | None:
    import torch

    if getattr(torch.version, "hip", None) and torch.cuda.is_available():
        return torch.cuda.get_device_properties(0).gcnArchName
    return None


def _arch_name_from_hip() -> str | None:
    """gcnArchName from hipGetDeviceProperties without mirroring hipDeviceProp_t, whose layout changed
    between HIP 5 and 6: the arch name is the one NUL-terminated "gfx..." string in the struct."""
    lib, _ = _library()
    fn = getattr(lib, "hipGetDevicePropertiesR0600", None) or lib.hipGetDeviceProperties
    buf = ctypes.create_string_buffer(1 << 14)  # larger than any version of the struct
    if fn(buf, _int(0)) != 0:
        return None
    m = re.search(rb"(gfx[0-9a-f]+(?::[A-Za-z0-9+:-]*)?)\x00", buf.raw)
    return m.group(1).decode() if m else None


def _base_arch(name) -> str | None:
    m = re.search(r"gfx[0-9a-f]+", str(name or ""))
    return m.group(0) if m else None


def _current_stream():
    """torch's current stream under a ROCm build of torch, else HIP's null stream."""
    try:
        import torch

        if getattr(torch.version, "hip", None) and torch.cuda.is_available():
            return _vp(torch.cuda.current_stream().cuda_stream)
    except Exception:
        pass
    return None


def _dim3(value, what: str) -> tuple:
    dims = (value,) if isinstance(value, int) else tuple(value)
    if not 1 <= len(dims) <= 3 or any(not isinstance(d, int) or d < 1 for d in dims):
        raise ArgumentError(f"tilegcn: {what} must be 1 to 3 positive ints, got {value!r}")
    return dims + (1,) * (3 - len(dims))


def _require_gpu_tensor(value, what: str) -> None:
    import torch

    if isinstance(value, torch.Tensor) and value.device.type != "cuda":
        raise ArgumentError(
            f"tilegcn: {what} is a tensor on {value.device}, but the HIP device needs "
            "GPU tensors: move it with .to('cuda'), or run on the emulator (TILEGCN_DEVICE=emulator)")


def pack_args(metadata: dict, args=(), kernarg=None, buffers=()) -> bytes:
    """Kernarg bytes for one launch (hidden arguments zero: the HIP runtime writes them at dispatch);
    every tensor must live on the GPU."""
    import torch

    explicit = kernargs.explicit_args(metadata.get(".args", []))
    for index, (meta, value) in enumerate(zip(explicit, args)):
        label = f"{index} ({meta['.name']})" if meta.get(".name") else str(index)
        _require_gpu_tensor(value, f"kernel argument {label}")
    for index, value in enumerate(buffers):
        if not isinstance(value, torch.Tensor):
            raise ArgumentError(f"tilegcn: buffers[{index}] must be a tensor, got {type(value).__name__}")
        _require_gpu_tensor(value, f"buffers[{index}]")
    return kernargs.build(metadata, args, kernarg)


class HipModule:
    """One loaded code object; launch its kernels by name."""

    def __init__(self, lib, hsaco: bytes):
        from . import codeobject

        self._lib = lib
        self._image = bytes(hsaco)  # kept alive as long as the module
        self._code = codeobject.parse(self._image)
        want, have = _base_arch(self._code.arch), gpu_arch()
        if want and have and want != have:
            raise DeviceError(f"tilegcn: the code object is for {want} but the GPU is {have}; compile it for {have}")
        self._functions = {}
        handle = _vp()
        _check(lib, lib.hipModuleLoadData(ctypes.byref(handle), self._image), "hipModuleLoadData")
        self._handle = handle

    @property
    def kernels(self) -> tuple:
        return tuple(self._code.kernels)

    def _function(self, name: str):
        if name not in self._functions:
            fn = _vp()
            _check(self._lib, self._lib.hipModuleGetFunction(ctypes.byref(fn), self._handle, name.encode()),
                   f"hipModuleGetFunction({name!r})")
            self._functions[name] = fn
        return self._functions[name]

    def launch(self, kernel_name: str, grid, block, args=(), shared_mem=0, kernarg=None, buffers=(),
               check=True) -> None:
        """Launch `kernel_name` on grid (workgroups) x block (threads), asynchronously on torch's current
        stream. Same parameters as the emulator's launch: `kernarg` = the packed explicit arguments
        (then `args` is empty), `buffers` = tensors reached through pointers inside them (they only need
        to be on the GPU), `shared_mem` = dynamic LDS bytes (sharedMemBytes). `check` is accepted for the
        same signature; a GPU has no hazard checker."""
        info = self._code.kernels.get(kernel_name)
        if info is None:
            raise DeviceError(f"tilegcn: no kernel {kernel_name!r} in the code object; it has "
                              f"{', '.join(self._code.kernels) or 'none'}")
        gx, gy, gz = _dim3(grid, "grid")
        bx, by, bz = _dim3(block, "block")
        if isinstance(shared_mem, bool) or not isinstance(shared_mem, int) or shared_mem < 0:
            raise ArgumentError(f"tilegcn: shared_mem must be a byte count >= 0, got {shared_mem!r}")
        lds = info.descriptor.group_segment_fixed_size + shared_mem
        limit = get_arch(self._code.arch).lds_bytes
        if lds > limit:
            raise ArgumentError(f"tilegcn: kernel {kernel_name!r} needs {lds} bytes of LDS "
                                f"({info.descriptor.group_segment_fixed_size} fixed + {shared_mem} shared_mem); "
                                f"{self._code.arch} has {limit} per workgroup")
        data = pack_args(info.metadata, args, kernarg, buffers)
        buf = ctypes.create_string_buffer(data, len(data))
        size = ctypes.c_size_t(len(data))
        extra = (_vp * 5)(HIP_LAUNCH_PARAM_BUFFER_POINTER, ctypes.cast(buf, _vp),
                          HIP_LAUNCH_PARAM_BUFFER_SIZE, ctypes.cast(ctypes.byref(size), _vp),
                          HIP_LAUNCH_PARAM_END)
        rc = self._lib.hipModuleLaunchKernel(self._function(kernel_name), gx, gy, gz, bx, by, bz,
                                             shared_mem, _current_stream(), None, extra)
        _check(self._lib, rc, f"hipModuleLaunchKernel({kernel_name!r})")

    def __del__(self):
        handle = getattr(self, "_handle", None)
        if handle:
            try:
                self._lib.hipModuleUnload(handle)
            except Exception:
                pass


class HipDevice:
    """The HIP runtime as a tilegcn device. Constructing it without a runtime or a GPU is a DeviceError."""

    name = "hip"

    def __init__(self):
        lib, why = _library()
        needs = "tilegcn: the HIP device (TILEGCN_DEVICE=hip) needs the HIP runtime and an AMD GPU, but "
        if lib is None:
            raise DeviceError(f"{needs}{why}; {_NO_DEVICE_HINT}")
        if not available():
            raise DeviceError(f"{needs}the HIP runtime sees no GPU (hipGetDeviceCount is 0); {_NO_DEVICE_HINT}")
        self._lib = lib

    @property
    def arch(self) -> str | None:
        return gpu_arch()

    def load(self, hsaco: bytes) -> HipModule:
        return HipModule(self._lib, hsaco)
