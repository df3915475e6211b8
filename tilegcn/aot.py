"""Ahead-of-time export: precompiled code objects per arch, a dispatch table, and a loader that runs them with no
LLVM and no tracing (the aiter pattern). From the shell, `python -m tilegcn export kernels.py:gemm --arch
gfx942,gfx950 --example kernels.py:examples -o gemm_aot/` does what `export` does below (docs/export.md).

Example:

```python
tilegcn.aot.export(gemm, calls=[(a, b, c)], archs=["gfx942", "gfx950"], out="gemm_aot/")
fn = tilegcn.load("gemm_aot/")     # verifies every file's sha256; imports no LLVM, traces nothing
fn(a, b, c)                        # the entry for this call's key, on the default device
```

An entry is keyed as a jit call is (`jit.call_signature`: each tensor's dtype, shape, strides and 16-byte
alignment, each scalar's type; then the keyword constants and the arch). For an ``@tilegcn.autotune`` function
the constants of an entry are the tuned winner for that call, so the manifest is the tuned dispatch table.

The folder holds `manifest.json` and, per entry, `<n>.<arch>.hsaco` (what HIP loads) and
`<n>.<arch>.objdump.txt` (llvm-objdump's listing of those very bytes, made at export time: the emulated device
decodes instructions from it, so it needs no LLVM either). The manifest records each file's sha256; a file
that does not match is refused before any byte of it is used.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from . import __version__
from .errors import ArgumentError, ExportError

FORMAT = "tilegcn-export/1"
MANIFEST = "manifest.json"
_FILE_LIMIT = 64 << 20  # a code object or listing larger than this is not one of ours


# -- writing ------------------------------------------------------------------------------------------------------
def export(fn, calls, archs, out) -> Path:
    """Compile `fn` (a ``@tilegcn.jit`` or ``@tilegcn.autotune`` function) for every call in `calls` on every
    arch in `archs` and write the export folder `out` (replaced if it is an earlier export). A call is a tuple
    of positional arguments, or a dict ``{"args": (...), "kwargs": {...}}`` with keyword constants. Returns
    the folder's path."""
    from .amdgcn.arch import get_arch
    from .autotune import Autotuner

    tuner = fn if isinstance(fn, Autotuner) else None
    jitfn = jit_function_of(fn)
    archs = [get_arch(a).name for a in archs]
    calls = [_call_parts(c, i) for i, c in enumerate(calls)]
    if not calls or not archs:
        raise ExportError("tilegcn export: nothing to export: give at least one example call and one arch")
    out = Path(out)
    _check_replaceable(out)
    work = out.with_name(f".{out.name}.tmp-{os.getpid()}")  # built aside, so a failed export leaves `out` as it was
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        manifest = _build(tuner, jitfn, calls, archs, work)
        (work / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        if out.exists():
            shutil.rmtree(out)
        os.replace(work, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def _build(tuner, jitfn, calls, archs, work: Path) -> dict:
    """Compile every (arch, call) into `work`; the manifest."""
    from . import toolchain

    entries, seen = [], set()
    for arch in archs:
        for args, kwargs in calls:
            tuned = tuner.tune(*args, arch=arch, **kwargs) if tuner else None
            constants = {**(tuned or {}), **kwargs}
            kernel = jitfn.compile(*args, arch=arch, **constants)
            if kernel.prints:  # their hidden outputs and host-side printing are the jit's, not tilegcn.load's
                raise ExportError(f"tilegcn export: {jitfn.name} calls T.print ({kernel.prints[0].loc}), a "
                                  "debugging aid that exported kernels do not support; remove the T.print calls")
            if kernel.dynamic:  # its grid and size arguments come from each call's shapes: the jit's launch does that
                raise ExportError(f"tilegcn export: {jitfn.name} has dynamic sizes ({', '.join(kernel.dynamic)}: "
                                  "T.dynamic), which exported kernels do not support yet; drop T.dynamic (each "
                                  "exported example shape is then a kernel of its own)")
            if kernel.launches or kernel.scratch:  # the jit's launch runs the blocks in order and allocates scratch
                raise ExportError(f"tilegcn export: {jitfn.name} has several T.Kernel blocks or T.alloc_global "
                                  "scratch, which exported kernels do not support yet; export each block as a program "
                                  "of its own, the scratch a parameter the caller passes")
            if kernel.outputs:  # allocated and returned by the jit's call, which tilegcn.load's kernels do not have
                raise ExportError(f"tilegcn export: {jitfn.name} returns outputs it allocates "
                                  f"({', '.join(o[0] for o in kernel.outputs)}: out_idx or T.empty), which exported "
                                  "kernels do not support yet; make each output a parameter the caller passes")
            key = _entry_key(kernel.signature, kernel.constants, arch)
            if key in seen:  # two examples of one specialisation
                continue
            seen.add(key)
            stem = f"{len(entries)}.{arch}"
            files = {"hsaco": _write(work / f"{stem}.hsaco", kernel.hsaco),
                     "disassembly": _write(work / f"{stem}.objdump.txt",
                                           toolchain.disassemble(kernel.hsaco, arch).encode())}
            entries.append({
                "arch": arch, "signature": [_spec_json(s) for s in kernel.signature],
                "constants": {k: _constant_json(k, v) for k, v in kernel.constants.items()},
                "tuned": tuned, "kernel": kernel.name, "grid": list(kernel.grid), "block": list(kernel.block),
                "kernel_args": [a["name"] for a in kernel.metadata["args"]], "written": list(kernel.written),
                "cache_key": kernel.key, "metadata": kernel.metadata, "files": files,
            })
    return {"format": FORMAT, "tilegcn_version": __version__, "function": jitfn.name,
            "source": jitfn.source_location, "arg_names": list(jitfn.arg_names), "entries": entries}


def jit_function_of(fn):
    """The JITFunction of a ``@tilegcn.jit`` or ``@tilegcn.autotune`` function; an ExportError for anything else."""
    from .autotune import Autotuner
    from .jit import JITFunction

    jitfn = fn.fn if isinstance(fn, Autotuner) else fn
    if not isinstance(jitfn, JITFunction):
        raise ExportError(f"tilegcn export: {fn!r} is not a @tilegcn.jit or @tilegcn.autotune function")
    return jitfn


def _call_parts(call, index: int):
    """(args tuple, kwargs dict) of one example call."""
    if isinstance(call, dict):
        unknown = set(call) - {"args", "kwargs"}
        if "args" not in call or unknown:
            raise ExportError(f"tilegcn export: example call {index} is a dict with keys {sorted(call)}; use "
                              "{'args': (...), 'kwargs': {...}}")
        return tuple(call["args"]), dict(call.get("kwargs") or {})
    if isinstance(call, (list, tuple)):
        return tuple(call), {}
    raise ExportError(f"tilegcn export: example call {index} is a {type(call).__name__}; give a tuple of the "
                      "function's positional arguments (or {'args': ..., 'kwargs': ...})")


def _check_replaceable(out: Path) -> None:
    """`out` may be written: absent, an empty folder, or an earlier export (its manifest says so)."""
    if not out.exists():
        return
    if out.is_dir() and not any(out.iterdir()):
        return
    try:
        earlier = out.is_dir() and json.loads((out / MANIFEST).read_text()).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        earlier = False
    if not earlier:
        raise ExportError(f"tilegcn export: {out} exists and is not an earlier tilegcn export; choose a new "
                          "folder for -o (an earlier export there would be replaced)")


def _write(path: Path, data: bytes) -> dict:
    path.write_bytes(data)
    return {"name": path.name, "sha256": hashlib.sha256(data).hexdigest()}


def _spec_json(spec):
    from .ir.types import TensorSpec

    if isinstance(spec, TensorSpec):
        return {"dtype": spec.dtype.name, "shape": list(spec.shape), "strides": list(spec.strides),
                "aligned16": spec.aligned16}
    return {"scalar": spec.__name__}


def _constant_json(name: str, value):
    """A constant as JSON, round-tripping to the very value (type included) the entry was compiled with."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, (bool, int, float, str)) for v in value):
        return {"tuple" if isinstance(value, tuple) else "list": list(value)}
    raise ExportError(f"tilegcn export: constant {name}={value!r} cannot be stored in the manifest (JSON): "
                      "use numbers, strings, booleans, or tuples of them")


def _constant_value(value):
    if isinstance(value, dict):
        (kind, items), = value.items()
        return tuple(items) if kind == "tuple" else list(items)
    return value


def _entry_key(signature, constants: dict, arch: str):
    from .jit import _freeze

    return signature, _freeze(dict(constants)), arch


# -- loading ------------------------------------------------------------------------------------------------------
def load(path, arch=None) -> "ExportedFunction":
    """The exported function in folder `path`, every file checked against the manifest's sha256. `arch`: the
    entries to serve (default: as a jit call resolves it: $TILEGCN_ARCH, the visible GPU, else the default).
    A call no exported entry serves is an ArgumentError listing what was exported.

    Example:

    ```python
    fn = tilegcn.load("gemm_aot/")     # made by `python -m tilegcn export` or tilegcn.aot.export
    fn(a, b, c)                        # no LLVM, no tracing: the exported code object for this call's key
    ```
    """
    path = Path(path)
    manifest = _read_manifest(path)
    return ExportedFunction(path, manifest, arch)


def _read_manifest(path: Path) -> dict:
    from .cache import SMALL_FILE_LIMIT, read_limited

    where = path / MANIFEST
    try:
        manifest = json.loads(read_limited(where, SMALL_FILE_LIMIT))
    except FileNotFoundError:
        raise ExportError(f"tilegcn.load: {path} is not a tilegcn export (no {MANIFEST}); make one with "
                          "`python -m tilegcn export`") from None
    except (OSError, ValueError) as e:
        raise ExportError(f"tilegcn.load: cannot read {where}: {e}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise ExportError(f"tilegcn.load: {where} has format {found!r}, this tilegcn ({__version__}) reads "
                          f"{FORMAT!r}: export it again with this version")
    if not isinstance(manifest.get("entries"), list) or not isinstance(manifest.get("arg_names"), list):
        raise ExportError(f"tilegcn.load: {where} lacks its entries or arg_names: export it again")
    return manifest


def _read_verified(folder: Path, record) -> bytes:
    """The bytes of one file the manifest lists, when their sha256 is the recorded one."""
    from .cache import read_limited

    name = record.get("name") if isinstance(record, dict) else None
    if not isinstance(name, str) or not name or os.path.basename(name) != name or name.startswith("."):
        raise ExportError(f"tilegcn.load: {folder / MANIFEST} names a file {name!r} outside the export folder")
    try:
        data = read_limited(folder / name, _FILE_LIMIT)
    except OSError as e:
        raise ExportError(f"tilegcn.load: cannot read {folder / name}: {e}; export again") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != record.get("sha256"):
        raise ExportError(f"tilegcn.load: {folder / name} does not match the manifest (sha256 {digest[:16]}..., "
                          f"recorded {str(record.get('sha256'))[:16]}...): the file was changed or damaged "
                          "after export; export again rather than run it")
    return data


class _Entry:
    """One exported specialisation, its files verified and kept in memory (what runs is what was checked).
    It has what `jit._make_runner` reads of a CompiledKernel (fn.arg_names, signature, written, name)."""

    def __init__(self, folder: Path, owner, record: dict):
        from .ir.types import TensorSpec, as_dtype

        try:
            self.fn = owner
            self.arch = record["arch"]
            self.name = record["kernel"]
            self.grid, self.block = tuple(record["grid"]), tuple(record["block"])
            self.signature = tuple(
                {"int": int, "float": float}[s["scalar"]] if "scalar" in s else
                TensorSpec(as_dtype(s["dtype"]), tuple(s["shape"]), tuple(s["strides"]), bool(s["aligned16"]))
                for s in record["signature"])
            self.constants = {k: _constant_value(v) for k, v in record["constants"].items()}
            kernel_args = list(record["kernel_args"])
            # the kernel's parameters in the order it takes them, as positions of the function's arguments
            self.select = (None if not kernel_args or kernel_args == list(owner.arg_names)
                           else tuple(owner.arg_names.index(n) for n in kernel_args))
            self.written = tuple(record["written"])
            self.hsaco = _read_verified(folder, record["files"]["hsaco"])
            self.disassembly = _read_verified(folder, record["files"]["disassembly"]).decode()
        except (KeyError, TypeError, ValueError, AttributeError, ArgumentError) as e:  # ExportError passes
            raise ExportError(f"tilegcn.load: {folder / MANIFEST} has a malformed entry ({type(e).__name__}: {e}); "
                              "export again") from None
        self._launchers = {}

    def launcher(self, device: str):
        from .jit import _Launcher, _SelectArgs
        from .runtime import get_device

        launcher = self._launchers.get(device)
        if launcher is None:
            if device == "emulator":
                from .runtime.emulator import load as emulator_load

                module = emulator_load(self.hsaco, arch=self.arch, disassembly=self.disassembly)
            else:
                module = get_device(device).load(self.hsaco)
            if self.select is not None:
                module = _SelectArgs(module, self.select)
            launcher = self._launchers[device] = _Launcher(module, self.name, self.grid, self.block, self)
        return launcher

    def describe(self) -> str:
        from .jit import _describe

        constants = ", ".join(f"{k}={v!r}" for k, v in self.constants.items())
        return f"{self.arch}: {_describe(self.fn.arg_names, self.signature)}" + (
            f"; {constants}" if constants else "")


class ExportedFunction:
    """An exported function loaded by `tilegcn.load`: call it as the jit function (positional arguments, and
    keyword constants to choose among entries that differ only in them). `.entries`: what was exported."""

    def __init__(self, folder: Path, manifest: dict, arch=None):
        from .jit import _make_keyfn

        self.folder = folder
        self.name = str(manifest.get("function", "?"))
        self.arg_names = tuple(manifest["arg_names"])
        self.manifest = manifest
        self.arch = arch
        self.entries = [_Entry(folder, self, record) for record in manifest["entries"]]
        self._keyfn = _make_keyfn(len(self.arg_names))
        self._memo = {}  # the jit's warm key (+ keyword constants) -> _Launcher

    def __call__(self, *args, **kwargs):
        try:
            key = self._keyfn(*args)
        except Exception:  # wrong arity, or a tensor the key cannot describe: the slow path names the argument
            return self._launch_unkeyed(args, kwargs)
        if kwargs:
            key = (key, tuple(kwargs.items()), tuple(map(type, kwargs.values())))
        try:
            launcher = self._memo.get(key)
        except TypeError:  # an unhashable constant
            return self._launch_unkeyed(args, kwargs)
        if launcher is None:
            launcher = self._miss(key, args, kwargs)
        return launcher.run(launcher, args)

    def _launch_unkeyed(self, args, kwargs):
        from .runtime import device_name

        launcher = self.entry_for(args, kwargs).launcher(device_name())
        return launcher.run(launcher, args)

    def _miss(self, key, args, kwargs):
        """As a jit call's memo miss: find the entry, remember its launcher under the warm key when the key
        identifies the specialisation (see jit._memoizable)."""
        from .jit import _has_float_zero, _memoizable
        from .runtime import device_name

        launcher = self.entry_for(args, kwargs).launcher(device_name())
        if _memoizable(key, key[0] if kwargs else key, len(self.arg_names)) and not _has_float_zero(kwargs):
            self._memo[key] = launcher
        return launcher

    def entry_for(self, args, kwargs=None) -> _Entry:
        """The entry serving these arguments; an ArgumentError listing what was exported when none does."""
        from .jit import _describe, _freeze, call_signature, resolve_arch

        kwargs = kwargs or {}
        if len(args) != len(self.arg_names):
            raise ArgumentError(f"tilegcn: exported {self.name}() takes {len(self.arg_names)} positional "
                                f"argument(s) ({', '.join(self.arg_names)}), got {len(args)}")
        signature, _ = call_signature(self.name, self.arg_names, args)
        arch = resolve_arch(self.arch)
        found = [e for e in self.entries if e.arch == arch and e.signature == signature
                 and all(k in e.constants and _freeze(e.constants[k]) == _freeze(v) for k, v in kwargs.items())]
        if len(found) == 1:
            return found[0]
        call = _describe(self.arg_names, signature) + "".join(f", {k}={v!r}" for k, v in kwargs.items())
        listing = "\n".join(f"  {e.describe()}" for e in self.entries)
        if not found:
            raise ArgumentError(f"tilegcn: no exported entry of {self.name} in {self.folder} serves this call "
                                f"({arch}: {call}); export one for it (python -m tilegcn export ... with this "
                                f"shape and arch). Exported:\n{listing}")
        raise ArgumentError(f"tilegcn: {len(found)} exported entries of {self.name} serve this call ({arch}: "
                            f"{call}); they differ in keyword constants: pass the one you want. Exported:\n{listing}")

    def __repr__(self):
        return f"<tilegcn export {self.name} from {self.folder}: {len(self.entries)} entries>"


# -- the command line's example calls -----------------------------------------------------------------------------
def import_object(spec: str, what: str):
    """`path/to/module.py:name` or `package.module:name` -> the object (the file's folder goes on sys.path, as
    `python file.py` puts it, so the module's own imports resolve)."""
    import importlib
    import importlib.util
    import sys

    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name:
        raise ExportError(f"tilegcn export: {what} {spec!r} is not MODULE:NAME (e.g. kernels.py:gemm)")
    if target.endswith(".py"):
        path = Path(target).resolve()
        if not path.is_file():
            raise ExportError(f"tilegcn export: {what}: no file {target}")
        module_name = f"_tilegcn_export_{path.stem}_{hashlib.sha256(str(path).encode()).hexdigest()[:8]}"
        module = sys.modules.get(module_name)
        if module is None:
            sys.path.insert(0, str(path.parent))
            module_spec = importlib.util.spec_from_file_location(module_name, path)
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[module_name] = module  # before running it: dataclasses and pickling look it up
            module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    try:
        return getattr(module, name)
    except AttributeError:
        raise ExportError(f"tilegcn export: {what}: {target} has no {name!r}") from None


def parse_shapes(text: str, arg_names) -> list:
    """`--shapes` text -> example calls. Calls are separated by ';', arguments by ','; each is NAME=VALUE with
    VALUE a tensor `DIMxDIM...:dtype` (contiguous, zeros), or a number (a scalar argument, or a keyword constant
    when NAME is not a positional parameter). E.g. "X=256x512:float32,Y=256x512:float32,a=3.0"."""
    calls = []
    for index, call in enumerate(c for c in text.split(";") if c.strip()):
        values = {}
        for item in (i for i in call.split(",") if i.strip()):
            name, sep, value = item.partition("=")
            if not sep:
                raise ExportError(f"tilegcn export: --shapes call {index}: {item.strip()!r} is not NAME=VALUE")
            values[name.strip()] = _shape_value(value.strip(), name.strip())
        missing = [n for n in arg_names if n not in values]
        if missing:
            raise ExportError(f"tilegcn export: --shapes call {index} lacks {missing} (positional: "
                              f"{', '.join(arg_names)})")
        calls.append({"args": tuple(values.pop(n) for n in arg_names), "kwargs": values})
    return calls


def _shape_value(text: str, name: str):
    import torch

    dims, sep, dtype = text.partition(":")
    if sep:
        try:
            shape = tuple(int(d) for d in dims.lower().split("x"))
            torch_dtype = getattr(torch, dtype.strip())
            if not isinstance(torch_dtype, torch.dtype):
                raise ValueError(dtype)
        except (ValueError, AttributeError):
            raise ExportError(f"tilegcn export: --shapes {name}={text!r}: a tensor is DIMxDIM...:dtype "
                              "(e.g. 256x512:bfloat16)") from None
        return torch.zeros(shape, dtype=torch_dtype)
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    if text in ("True", "False"):
        return text == "True"
    return text  # a string constant
