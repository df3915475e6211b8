"""``@tilegcn.jit``: specialisation, the compile pipeline, the in-memory memo and the call.

    @tilegcn.jit
    def kernel(X, Y, *, block_M=64): ...

    kernel(x, y)                      # specialise, compile or hit a cache, launch
    kernel(x, y, block_M=128, arch="gfx942")
    k = kernel.compile(x, y)          # CompiledKernel: .ir, .asm, .hsaco_path, .metadata, k(x, y)

A call is specialised on each tensor's dtype, shape, strides and 16-byte alignment of its data pointer,
each scalar's Python type, the keyword constants and the target arch; a dim annotated with a `T.dynamic` size (and
the strides over it) only on whether the size, where some stride is made of it, is a multiple of 16 (an outermost
dim not at all: language/dynamic.py). Three levels serve a call:

1. the warm path: a flat tuple built straight from the arguments (`_make_keyfn` generates the code per
   function: positional-only, no loops) looks up a prepared `_Launcher` (device module, kernel name, grid,
   block) in a dict. No tracing, no hashing of sources or IR, no disk access, no objects created but the key.
   The key also holds $TILEGCN_ARCH and $TILEGCN_DEVICE (read from the environment's backing dict), so
   changing either mid-process picks a new kernel / device instead of a stale one. The launcher's `run`
   (generated per launcher too) checks what the key does not fix: where the tensors the kernel writes lie
   against the other arguments, and their autograd state; after the launch it bumps their version counters.
2. on a memo miss: arguments are checked and turned into TensorSpecs (their dynamic dims generalised:
   `_specialise`); (specs, constants, arch) looks up a CompiledKernel of this process (still no tracing), whose
   launcher for the call's dynamic sizes (grid, size arguments) is made once per set of sizes.
3. else: trace -> canonical IR text -> cache key -> disk cache (a verified entry, or lower + assemble and an
   atomic publish under a per-key file lock).
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import numbers
import os
import time
from dataclasses import dataclass
from pathlib import Path

from . import __version__, toolchain
from .amdgcn.arch import DEFAULT_ARCH, HSA_MAX_GRID_WORKITEMS, get_arch
from .amdgcn.schedule import INTERLEAVE
from .cache import ENV_ASM_OVERRIDE, Cache, announce_override, make_key, override_file
from .errors import ArgumentError, CompileError, TilegcnError, UnsupportedArchError
from .options import CompileOptions

# torch and the IR are imported on first use, so that `import tilegcn` (and `python -m tilegcn cache ...`)
# stays fast; every decorated function imports torch when it is created.

ENV_ARCH = "TILEGCN_ARCH"
ENV_DEVICE = "TILEGCN_DEVICE"

# Reading os.environ costs ~0.7 us (key encoding, Mapping machinery); its backing dict costs ~40 ns.
# os.environ's own __setitem__/__delitem__ keep that dict current, so this sees every change made in Python.
_environ_data = getattr(os.environ, "_data", None)
if os.name == "posix" and type(_environ_data) is dict:
    _env_get = _environ_data.get
    _ENV_KEYS = (os.environ.encodekey(ENV_ARCH), os.environ.encodekey(ENV_DEVICE))
else:  # pragma: no cover - other platforms
    _env_get = os.environ.get
    _ENV_KEYS = (ENV_ARCH, ENV_DEVICE)

_SCALAR_TYPES = (int, float, bool)


@dataclass
class CacheStats:
    """Counters of one JITFunction in this process."""

    traces: int = 0  # tile programs traced (one per new specialisation in this process)
    compiles: int = 0  # lower + assemble runs (disk cache misses)
    disk_hits: int = 0  # compiles served by a verified disk cache entry
    remote_hits: int = 0  # compiles served by the remote cache ($TILEGCN_REMOTE_CACHE), written through to disk
    memo_misses: int = 0  # calls that left the warm path


# -- target arch --------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _visible_gpu_arch() -> str | None:
    """The gfx name of the visible AMD GPU, or None (no HIP runtime, no GPU, or no probe available)."""
    try:
        from .runtime import hip

        return hip.gpu_arch() or None
    except Exception:  # the HIP probe is optional: any failure means "no GPU to ask"
        return None


def resolve_arch(arch=None) -> str:
    """The target arch: `arch`, else $TILEGCN_ARCH, else the visible AMD GPU, else DEFAULT_ARCH.

    Unsupported names raise UnsupportedArchError listing the supported arches. The GPU is not consulted
    when TILEGCN_DEVICE=emulator.
    """
    if arch is not None:
        return get_arch(arch).name
    env = os.environ.get(ENV_ARCH)
    if env:
        try:
            return get_arch(env).name
        except UnsupportedArchError as e:
            raise UnsupportedArchError(f"{e} (from {ENV_ARCH}={env})") from None
    if os.environ.get(ENV_DEVICE, "").lower() != "emulator":
        gpu = _visible_gpu_arch()
        if gpu:
            try:
                return get_arch(gpu).name
            except UnsupportedArchError as e:
                raise UnsupportedArchError(
                    f"{e} (the visible GPU is {gpu}; set {ENV_ARCH} or pass arch= to compile for another)"
                ) from None
    return get_arch(DEFAULT_ARCH).name


# -- the warm path's key ------------------------------------------------------------------------------------
def _make_keyfn(n: int):
    """A function of exactly `n` positional arguments returning the memo key of a call.

    Per argument: (dtype, shape, strides, data_ptr & 15, device, negative bit) for a torch.Tensor (exact
    class), else the argument's class (a scalar is specialised on its type only); then the two environment
    values. A tensor with the negative bit set takes the slow path, which refuses it (`_check_tensor_storage`).
    """
    names = [f"a{i}" for i in range(n)]
    items = "".join(
        f"(({a}.dtype, {a}.shape, {a}.stride(), {a}.data_ptr() & 15, {a}.device, {a}.is_neg()) "
        f"if {a}.__class__ is _Tensor else {a}.__class__), "
        for a in names
    )
    params = ", ".join(names) + (", /, " if names else "") + "*, _Tensor=_Tensor, _get=_get, _ka=_ka, _kd=_kd"
    src = f"def keyfn({params}):\n    return ({items}_get(_ka), _get(_kd))\n"
    import torch

    namespace = {"_Tensor": torch.Tensor, "_get": _env_get, "_ka": _ENV_KEYS[0], "_kd": _ENV_KEYS[1]}
    exec(compile(src, f"<tilegcn keyfn/{n}>", "exec"), namespace)
    return namespace["keyfn"]


def _memoizable(key, base, n: int) -> bool:
    """A key identifies a specialisation when it is hashable and every argument was an exact Tensor
    (its key item is a tuple) or an int/float/bool (its class)."""
    try:
        hash(key)
    except TypeError:
        return False
    return all(k.__class__ is tuple or k in _SCALAR_TYPES for k in base[:n])


def _has_float_zero(kwargs: dict) -> bool:
    """A float constant 0.0 or -0.0: the warm key (a dict's items) cannot tell them apart, so such calls
    take the slow path, whose key (_freeze) can."""
    return any(v.__class__ is float and v == 0.0 for v in kwargs.values())


def _freeze(value):
    """A hashable stand-in for a constant's value, keeping its type (2 and 2.0 and True differ)."""
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_freeze(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, _freeze(v)) for k, v in value.items())))
    if isinstance(value, float):
        return ("float", value.hex())  # by bits: 0.0 and -0.0 compare equal but compute differently
    try:
        hash(value)
    except TypeError:
        return (type(value).__name__, repr(value))
    return (type(value).__name__, value)


class _Launcher:
    """What the warm path needs to launch one kernel on one device. `run(launcher, args)` checks the
    arguments a call can change without changing its key (memory overlap, autograd state of the tensors the
    kernel writes), launches, and bumps the written tensors' version counters (`_make_runner`)."""

    __slots__ = ("module", "name", "grid", "block", "kernel", "run", "overlaps")

    def __init__(self, module, name, grid, block, kernel, spans=None):
        self.module, self.name, self.grid, self.block, self.kernel = module, name, grid, block, kernel
        self.run = _make_runner(kernel, spans or {})  # spans: {tensor: bytes} of those with dynamic sizes
        self.overlaps = {}  # (written index, other index, pointer difference) -> do their elements overlap?


class _SelectArgs:
    """Module wrapper for a kernel whose parameters are not exactly the function's positional arguments."""

    __slots__ = ("module", "indices")

    def __init__(self, module, indices):
        self.module, self.indices = module, indices

    def launch(self, name, grid, block, args):
        return self.module.launch(name, grid, block, [args[i] for i in self.indices])


class _KernelSequence:
    """The loaded code object of a program with several T.Kernel blocks (meta.json's `kernels`): one launch runs
    each kernel in order, on its own grid (evaluated at the launcher's dynamic sizes) and with the program's
    arguments it takes, as TileLang launches a prim_func's blocks; a later kernel sees the earlier ones' global
    writes (launches on one stream, or the emulator, run in order). Returns the last kernel's launch result."""

    __slots__ = ("module", "plan")

    def __init__(self, module, kernels: list, program_args: list, values: dict):
        self.module = module
        self.plan = tuple((k["name"], _evaluate_grid(k["grid"], values), tuple(k["block"]),
                           tuple(program_args.index(a["name"]) for a in k["args"])) for k in kernels)

    def launch(self, name, grid, block, args):
        result = None
        for kernel, kernel_grid, kernel_block, indices in self.plan:
            if all(kernel_grid):  # a dynamic size 0: this kernel has nothing to run
                result = self.module.launch(kernel, kernel_grid, kernel_block, [args[i] for i in indices])
        return result


def _evaluate_grid(grid, values: dict) -> tuple:
    """meta.json's grid (ints, or the text of a dynamic-size expression) at the dynamic sizes' `values`."""
    return tuple(g if isinstance(g, int) else max(_evaluate(g, values), 0) for g in grid)


@dataclass
class PrintedTile:
    """What one `T.print` showed for one workgroup: `msg`, the tile's `name`, the `block` id (bx, by, bz as
    given to T.Kernel) and the tile's values as a float32 CPU tensor."""

    msg: str
    name: str
    block: tuple
    values: object  # torch.Tensor

    def __str__(self):
        where = self.block[0] if len(self.block) == 1 else self.block
        return f"T.print: {self.msg + ' ' if self.msg else ''}{self.name} block {where}: {self.values}"


class _SizedArgs:
    """Module wrapper for a kernel with T.dynamic sizes (and no other hidden parameter): the call's tensors and scalars
    by position, each size by value (fixed per launcher); a grid with a 0 (a size 0) launches nothing."""

    __slots__ = ("module", "plan")

    def __init__(self, module, positional, names, sizes: dict):
        self.module = module
        self.plan = tuple((True, positional.index(n)) if n in positional else (False, sizes[n]) for n in names)

    def launch(self, name, grid, block, args):
        if all(grid) or isinstance(self.module, _KernelSequence):  # a sequence decides per kernel
            return self.module.launch(name, grid, block, [args[v] if passed else v for passed, v in self.plan])
        return None


class _HiddenArgsModule:
    """Module wrapper for a kernel with parameters the caller does not pass. `T.print`s: each launch gets fresh
    hidden float32 outputs (one slot per workgroup and call site); after the launch the host prints them per
    workgroup in dispatch order (bx fastest) and keeps them in `.printed` of the CompiledKernel and of its jit
    function. Outputs (`out_idx`, `T.empty`): each launch allocates them (torch.empty) and returns them. T.dynamic
    sizes: `sizes` ({name: value}, fixed per launcher) are passed by value, and the outputs take their shapes."""

    __slots__ = ("module", "kernel", "indices", "sites", "outputs", "scratch", "sizes")

    def __init__(self, module, kernel: "CompiledKernel", names: list, sizes=None):
        import torch

        positional = kernel.fn.arg_names
        self.module, self.kernel = module, kernel
        self.sites = {site.param: site for site in kernel.prints}
        self.indices = [positional.index(n) if n in positional else n for n in names]
        self.sizes = dict(sizes or {})
        values = kernel.dynamic_values_of(self.sizes)
        self.outputs = {n: (_evaluate_shape(shape, values), getattr(torch, dtype))
                        for n, shape, dtype in kernel.outputs}
        self.scratch = {n: (_evaluate_shape(shape, values), getattr(torch, dtype))
                        for n, shape, dtype in kernel.scratch}

    def launch(self, name, grid, block, args):
        import torch

        from .runtime.emulator import _RECORDING  # set while do_bench records launches instead of running them

        devices = [a.device for a in args if isinstance(a, torch.Tensor)]
        device = devices[0] if devices else "cpu"
        hidden = {param: torch.zeros(site.shape, dtype=torch.float32, device=device)
                  for param, site in self.sites.items()}
        outputs = {n: torch.empty(shape, dtype=dtype, device=device) for n, (shape, dtype) in self.outputs.items()}
        hidden.update(outputs)
        # T.alloc_global: fresh scratch per call, uninitialised as in TileLang, never returned
        hidden.update({n: torch.empty(shape, dtype=dtype, device=device) for n, (shape, dtype) in self.scratch.items()})
        hidden.update(self.sizes)
        passed = [hidden[i] if isinstance(i, str) else args[i] for i in self.indices]
        # a size 0: nothing to run (a sequence of kernels decides per kernel, each on its own grid)
        run = all(grid) or isinstance(self.module, _KernelSequence)
        result = self.module.launch(name, grid, block, passed) if run else None
        if outputs:  # out_idx / T.empty: the call returns them, one tensor or a tuple in order
            result = tuple(outputs.values()) if len(outputs) > 1 else next(iter(outputs.values()))
        if _RECORDING.get() is not None or not self.sites:  # nothing ran (do_bench) or nothing to print
            return result
        printed = [tile for param, site in self.sites.items() for tile in _printed_tiles(site, hidden[param])]
        self.kernel.printed = self.kernel.fn.printed = printed
        for tile in printed:
            print(tile)
        return result


def _evaluate_shape(shape, values: dict) -> tuple:
    """A shape whose dims may be expressions of dynamic sizes (an output's), at this launch's sizes."""
    return tuple(n if isinstance(n, int) else _evaluate(n, values) for n in shape)


def _evaluate(expr, values: dict) -> int:
    """An int expression (SymPy, or its text from meta.json) at `values` ({symbol name: int})."""
    import sympy

    # the sizes' names as symbols (a size named N, S or E would otherwise read as SymPy's function or constant)
    expr = sympy.sympify(expr, locals={name: sympy.Symbol(name) for name in values})
    return int(expr.subs({s: values[s.name] for s in expr.free_symbols}))


def _check_dynamic_spans(kernel, args, outputs: dict) -> None:
    """A tensor with a dynamic size has its bytes counted at run time in 32 bits (its buffer descriptor's
    NUM_RECORDS, amdgcn/abi.py): refuse one that spans 2 GiB or more rather than wrap. `outputs`: {name: (shape,
    torch dtype)} of the outputs the launch allocates. Returns the spans, {name: bytes}: a launcher's (its sizes, and
    the key's shapes and strides, fix them), for its overlap checks (_make_runner)."""
    import math

    from .amdgcn.abi import BUFFER_REACH

    spans = {n: _tensor_span(a) for n, a in zip(kernel.fn.arg_names, args) if n in kernel.dynamic_tensors}
    spans.update({n: math.prod(shape) * dtype.itemsize for n, (shape, dtype) in outputs.items()
                  if n in kernel.dynamic_tensors})
    for name, span in spans.items():
        if span >= BUFFER_REACH:
            raise ArgumentError(f"tilegcn: tensor {name} spans {span} bytes; a tensor with a dynamic size (T.dynamic) "
                                f"must span less than {BUFFER_REACH >> 30} GiB: drop T.dynamic to compile for its "
                                "size, or split the work")
    return spans


def _printed_tiles(site, out) -> list:
    import itertools

    values = out.cpu()
    dims = site.grid_dims
    tiles = []
    for ids in itertools.product(*(range(n) for n in values.shape[:dims])):  # [.., by, bx]: bx fastest
        tiles.append(PrintedTile(site.msg, site.buffer, tuple(reversed(ids)), values[ids]))
    return tiles


# -- what a call checks and records around the launch ------------------------------------------------------
# A call's key fixes dtypes, shapes and strides, not where the tensors are nor their autograd state, so these are
# checked on every call, by straight-line code generated per launcher (a few attribute reads and comparisons):
#  - a tensor the kernel writes must not share memory with another argument, unless it is the very same view
#    (same data pointer, dtype, shape, strides) of a tensor the kernel only reads: an in-place update, safe when
#    each block reads the elements it writes (an elementwise kernel), as in TileLang and Triton. Byte ranges that
#    overlap are looked at element by element (column halves of one matrix are disjoint), once per pointer
#    difference;
#  - a written tensor that requires grad is refused while grad mode is on (torch refuses an in-place op on a
#    leaf that requires grad, and autograd cannot see through a kernel into a non-leaf);
#  - after the launch the written tensors' version counters are bumped, as torch's in-place ops do, so that
#    backward through a tensor saved before the kernel overwrote it raises instead of using the new values.
def _written_params(kernel) -> tuple:
    """Names of the tensor parameters a traced kernel writes (the destinations of copies into global memory)."""
    from .ir import nodes as N

    written = {r.buffer.name for s in N.walk(kernel.body) for r in s.writes() if r.buffer.scope == N.GLOBAL}
    return tuple(p.name for p in kernel.params if p.name in written)


def _outputs(kernel) -> tuple:
    """(name, shape, torch dtype name) of each parameter a traced kernel returns (out_idx, T.empty), in order."""
    params = {p.name: p for p in kernel.params}
    return tuple((n, tuple(params[n].buffer.shape), params[n].dtype.name) for n in getattr(kernel, "outputs", ()))


def _scratch(kernel) -> tuple:
    """(name, shape, torch dtype name) of each T.alloc_global buffer of a traced kernel or program."""
    params = {p.name: p for p in kernel.params}
    return tuple((n, tuple(params[n].buffer.shape), params[n].dtype.name) for n in getattr(kernel, "scratch", ()))


def _span(spec) -> int:
    """Bytes from a tensor's first element to the end of its last; 0 for an empty tensor."""
    if not all(spec.shape):
        return 0
    return (sum((n - 1) * st for n, st in zip(spec.shape, spec.strides)) + 1) * spec.dtype.bytes


def _make_runner(kernel: "CompiledKernel", spans: dict = None):
    """run(launcher, args): the checks above, the launch, the version bumps, as one generated function. `spans`:
    {name: bytes} of the tensors with T.dynamic sizes (their signature's spec is symbolic), at the launcher's sizes."""
    from .ir.types import TensorSpec

    names, signature, spans = kernel.fn.arg_names, kernel.signature, spans or {}
    dynamic = {i for i, n in enumerate(names) if n in spans}
    tensors = [i for i, s in enumerate(signature) if isinstance(s, TensorSpec)
               and (spans[names[i]] if i in dynamic else _span(s))]
    written = [i for i in tensors if names[i] in kernel.written]
    span = lambda i: spans[names[i]] if i in dynamic else _span(signature[i])  # noqa: E731
    extra = lambda w, o: f", a{w}, a{o}" if {w, o} & dynamic else ""  # noqa: E731
    launch = "L.module.launch(L.name, L.grid, L.block, args)"
    if not written:
        lines = [f"    return {launch}"]
    else:
        unpack = "".join(f"a{i}, " for i in range(len(signature)))
        lines = [f"    {unpack}= args"]
        lines += [f"    if a{w}.requires_grad and _grad_enabled(): _refuse_grad(L, {w}, a{w})" for w in written]
        lines += [f"    p{i} = a{i}.data_ptr()" for i in tensors]
        for w in written:
            for o in tensors:
                if o == w or (o in written and o < w):  # two written tensors: one check
                    continue
                # the same view of a read-only tensor (in place) is allowed: where the specs agree, equal
                # pointers decide it here, without a call
                in_place = f"p{o} != p{w} and " if signature[o] == signature[w] and o not in written else ""
                lines.append(f"    if {in_place}p{o} < p{w} + {span(w)} and p{w} < p{o} + "
                             f"{span(o)}: _check_overlap(L, {w}, {o}, p{w}, p{o}{extra(w, o)})")
        bumped = "".join(f"a{w}, " for w in written)
        lines += ["    try:", f"        return {launch}", "    finally:", f"        _bump(({bumped}))"]
    src = "def run(L, args):\n" + "\n".join(lines) + "\n"
    import torch

    # torch.autograd.graph.increment_version(tensors) is this call behind an isinstance test (~0.2 us a call)
    bump = getattr(torch._C, "_increment_version", torch.autograd.graph.increment_version)
    namespace = {"_grad_enabled": torch.is_grad_enabled, "_refuse_grad": _refuse_grad,
                 "_check_overlap": _check_overlap, "_bump": bump}
    # named inside the package: errors raised from it point at the user's call, not at this code
    filename = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"<launch {kernel.name}>")
    exec(compile(src, filename, "exec"), namespace)
    return namespace["run"]


def _refuse_grad(launcher, index: int, t) -> None:
    name = launcher.kernel.fn.arg_names[index]
    if t.is_leaf:
        raise ArgumentError(f"tilegcn: tensor {name} is written by the kernel but is a leaf that requires grad "
                            "(torch refuses the same: a leaf Variable that requires grad is being used in an in-place "
                            f"operation); write into a tensor that does not require grad, or under torch.no_grad() "
                            "(as an optimizer's update does)")
    raise ArgumentError(f"tilegcn: tensor {name} is written by the kernel but requires grad: autograd does not "
                        "differentiate a tilegcn kernel, so its graph would silently ignore the write; write into a "
                        f"tensor that does not require grad ({name}.detach()), or under torch.no_grad()")


def _tensor_span(t) -> int:
    """_span of a tensor with dynamic sizes, from its own shape."""
    return (sum((n - 1) * st for n, st in zip(t.shape, t.stride())) + 1) * t.element_size() if t.numel() else 0


def _check_overlap(launcher, w: int, o: int, pw: int, po: int, tw=None, to=None) -> None:
    """Written tensor `w` and tensor `o` span overlapping bytes: refuse unless they are the same view of a
    tensor the kernel only reads, or their elements are disjoint (interleaved views). `tw`, `to`: the tensors, where
    one has dynamic sizes (its signature's spec is symbolic: the call's own specs are compared)."""
    from .ir.types import TensorSpec

    kernel = launcher.kernel
    sw, so = kernel.signature[w], kernel.signature[o]
    if tw is not None:
        sw, so = TensorSpec.of(tw), TensorSpec.of(to)
    names = kernel.fn.arg_names
    both_written = names[o] in kernel.written
    if pw == po and sw == so and not both_written:
        return  # in place
    key = (w, o, po - pw) if tw is None else (w, o, po - pw, sw.shape, so.shape)
    overlap = launcher.overlaps.get(key)
    if overlap is None:
        if len(launcher.overlaps) > 256:  # pointer differences seen by one launcher: keep the memo small
            launcher.overlaps.clear()
        overlap = launcher.overlaps[key] = _elements_overlap(sw, pw, so, po)
    if not overlap:
        return
    if both_written:
        raise ArgumentError(f"tilegcn: tensors {names[min(w, o)]} and {names[max(w, o)]} are both written by the "
                            "kernel and share memory: which write lands is undefined; pass separate tensors")
    raise ArgumentError(
        f"tilegcn: tensor {names[w]} is written by the kernel and overlaps tensor {names[o]} in memory without being "
        f"the same view ({names[w]}: {list(sw.shape)} strides {list(sw.strides)} at 0x{pw:x}, {names[o]}: "
        f"{list(so.shape)} strides {list(so.strides)} at 0x{po:x}): blocks could read elements other blocks "
        f"already overwrote; pass a separate tensor ({names[o]}.clone()), or the very same tensor for an in-place "
        "update")


def _elements_overlap(sa, pa: int, sb, pb: int) -> bool:
    """Do two views (TensorSpec and data pointer) share a byte? Marks a's bytes, then reads b's, in units of
    the largest size dividing every element size and offset."""
    import math

    import torch

    lo = min(pa, pb)
    unit = math.gcd(sa.dtype.bytes, sb.dtype.bytes, pa - lo, pb - lo)
    length = (max(pa + _span(sa), pb + _span(sb)) - lo) // unit
    marks = torch.zeros(length, dtype=torch.bool)

    def units(spec, ptr):
        per = spec.dtype.bytes // unit
        return marks.as_strided(tuple(spec.shape) + (per,),
                                tuple(st * per for st in spec.strides) + (1,), (ptr - lo) // unit)

    units(sa, pa).fill_(True)
    return bool(units(sb, pb).any())


# -- compiled kernels ---------------------------------------------------------------------------------------
class CompiledKernel:
    """One specialisation, compiled: `.ir`, `.asm` (text), `.hsaco` (bytes), `.metadata` (meta.json), `.name`,
    `.key` (cache key), `.arch`, `.grid`, `.block`, `.hsaco_path`/`.cache_path` (where the entry was);
    call it with arguments of the same specialisation.

    It keeps the bytes of its verified cache entry in memory: it launches exactly the code object that
    was verified, and keeps working after `python -m tilegcn cache clear` removed the entry.

    Example:

    ```python
    k = double.compile(x, y)
    print(k.metadata["vgprs"], k.metadata["lds_bytes"])
    print(k.asm.splitlines()[0])
    k(x, y)                                       # launch this specialisation directly
    ```
    """

    def __init__(self, fn: "JITFunction", entry, signature: tuple, constants: dict, arch: str, timings: dict,
                 written=None, prints=(), outputs=(), dynamic=None, scratch=()):
        from .ir.types import TensorSpec
        from .language.dynamic import is_symbolic

        self.fn = fn
        # T.dynamic sizes ({name: language/dynamic.py Binding}): the grid and their values come from each call's shapes
        self.dynamic = dict(dynamic or {})
        self.dynamic_tensors = {n for n, spec in zip(fn.arg_names, signature) if isinstance(spec, TensorSpec)
                                and any(map(is_symbolic, spec.shape + spec.strides))}
        self.dynamic_tensors |= {n for n, shape, _ in tuple(outputs) + tuple(scratch) if any(map(is_symbolic, shape))}
        self.key = entry.key
        self.metadata = entry.meta
        self.arch = arch
        self.name = entry.meta["name"]
        self.grid = tuple(entry.meta["grid"])  # a dimension of dynamic sizes is its expression's text (grid_for)
        self.block = tuple(entry.meta["block"])
        self.hsaco_path = str(entry.hsaco_path)
        self.cache_path = str(entry.path)
        self.ir = entry.data["kernel.ir"].decode()
        self.asm = entry.data["kernel.s"].decode()
        self.hsaco = entry.data["kernel.hsaco"]
        self.signature = signature
        self.constants = constants
        self.timings = timings  # seconds spent in this process: trace, key, lower, assemble, cache, total
        # names of the tensor parameters the kernel writes (T.copy into them); unknown: every tensor parameter
        self.written = tuple(written) if written is not None else tuple(
            n for n, s in zip(fn.arg_names, signature) if not isinstance(s, type))
        self.prints = tuple(prints)  # T.print sites (language.builtins.PrintSite): hidden outputs, shown per launch
        self.printed = []  # after a launch with T.print: one PrintedTile per site and workgroup
        # (name, shape, torch dtype name) per parameter the call allocates and returns (out_idx, T.empty), in order
        self.outputs = tuple(outputs)
        self.scratch = tuple(scratch)  # (name, shape, torch dtype name) per T.alloc_global buffer: allocated per call
        # a program of several T.Kernel blocks: each kernel's meta (name, grid, block, args), in launch order
        self.launches = tuple(entry.meta.get("kernels", ()))
        self._launchers = {}  # (device, grid) -> _Launcher
        self._modules = {}  # device -> the loaded code object

    def dynamic_sizes(self, args) -> dict:
        """{size name: the int32 the kernel receives for it} for a call with positional `args`: the tensor's size,
        divided by 16 where this specialisation traced it as `16 * <name>_div16`."""
        positional = self.fn.arg_names
        return {b.name: args[positional.index(b.tensor)].shape[b.axis] // b.divisor for b in self.dynamic.values()}

    def dynamic_values_of(self, sizes: dict) -> dict:
        """{symbol name: value} of `dynamic_sizes`' values, for evaluating the grid and output shapes."""
        return {b.symbol.name: sizes[b.name] for b in self.dynamic.values()}

    def grid_for(self, args) -> tuple:
        """The launch grid: `.grid`, with each dimension that depends on dynamic sizes evaluated at `args`' shapes."""
        if not self.dynamic:
            return self.grid
        values = self.dynamic_values_of(self.dynamic_sizes(args))
        grid = tuple(g if isinstance(g, int) else max(_evaluate(g, values), 0) for g in self.grid)
        for n, per in zip(grid, self.block):
            if n * per > HSA_MAX_GRID_WORKITEMS:
                raise ArgumentError(f"tilegcn: {self.name}: the grid {grid} at these sizes has {n * per} work-items "
                                    f"in a dimension; a dispatch allows at most {HSA_MAX_GRID_WORKITEMS}")
        return grid

    def _launcher(self, args=()) -> _Launcher:
        """The launcher for the device selected now (module loaded once per device) and, for a kernel with dynamic
        sizes, the sizes of `args` (its grid and size arguments fixed: a call whose key matched it has those shapes;
        the spans of its tensors, which the key's shapes and strides fix too, are checked once, here)."""
        from .runtime import device_name, get_device

        dev = device_name()
        sizes = self.dynamic_sizes(args) if self.dynamic else {}
        launcher = self._launchers.get((dev, *sizes.values()))
        if launcher is None:
            module = self._modules.get(dev)
            if module is None:
                module = self._modules[dev] = get_device(dev).load(self.hsaco)
            names = [a["name"] for a in self.metadata["args"]]
            positional = self.fn.arg_names
            outputs = {}
            if self.launches:
                module = _KernelSequence(module, self.launches, names, self.dynamic_values_of(sizes))
            if self.prints or self.outputs or self.scratch:
                module = _HiddenArgsModule(module, self, names, sizes)
                outputs = {**module.outputs, **module.scratch}
            elif sizes:
                module = _SizedArgs(module, positional, names, sizes)
            elif names and names != list(positional):
                module = _SelectArgs(module, tuple(positional.index(n) for n in names))
            spans = _check_dynamic_spans(self, args, outputs) if sizes else {}
            launcher = _Launcher(module, self.name, self.grid_for(args), self.block, self, spans)
            self._launchers[(dev, *sizes.values())] = launcher
        return launcher

    def __call__(self, *args):
        signature, _, _ = self.fn._specialise(args)
        if signature != self.signature:
            raise ArgumentError(
                f"tilegcn: {self.name} was compiled for {_describe(self.fn.arg_names, self.signature)}, "
                f"called with {_describe(self.fn.arg_names, signature)}; call the jit function instead"
            )
        launcher = self._launcher(args)
        return launcher.run(launcher, args)

    def with_asm(self, path, *, verify=False, args=None, tolerance=0.0) -> "CompiledKernel":
        """This launch running the hand-edited assembly in `path`; `verify=True` runs both on the emulated
        device on `args` (see tilegcn.asm_override). The edit is taken to write the tensors this kernel writes.
        The edited file is assembled and linked like generated code and stored in the disk cache under a key of
        its own text (the generated entry is untouched)."""
        from .cache import ENTRY_FILE_LIMIT, read_limited
        from .testing import AsmVerifyError, compare

        path = Path(path)
        if verify and args is None:
            raise ArgumentError("tilegcn: with_asm(verify=True) needs args=(...), the inputs to run both kernels on")
        try:  # limited: a path to /dev/zero or a huge file is refused, not read until memory runs out
            asm = read_limited(path, ENTRY_FILE_LIMIT, follow_symlinks=True).decode()
        except (OSError, ValueError) as e:
            raise ArgumentError(f"tilegcn: cannot read the overriding assembly {path}: {e}") from None
        llvm = toolchain.find_llvm(self.arch)
        ident = "\0".join(["asm-override", asm, self.arch, llvm.version, __version__, repr(self.metadata["args"])])
        key = hashlib.sha256(ident.encode()).hexdigest()

        def build(tmp: Path) -> dict:
            t0 = time.perf_counter()
            hsaco = toolchain.assemble(asm, self.arch)  # ToolchainError names the bad line
            (tmp / "kernel.ir").write_text(self.ir)
            (tmp / "kernel.s").write_text(asm)
            (tmp / "kernel.hsaco").write_bytes(hsaco)
            meta = {k: v for k, v in self.metadata.items() if k not in ("key", "hsaco_sha256")}
            meta.update(asm_override=str(path.resolve()), overrides=self.key, created=time.time(),
                        compile_time={"assemble": time.perf_counter() - t0})
            return meta

        entry, _ = Cache().get_or_build(key, build)
        edited = CompiledKernel(self.fn, entry, self.signature, self.constants, self.arch, {}, written=self.written,
                                prints=self.prints, outputs=self.outputs, dynamic=self.dynamic, scratch=self.scratch)
        if verify:
            report = compare(self, edited, args)
            edited.verification = report
            if not report.ok(tolerance):
                raise AsmVerifyError(report)
        return edited

    def _overridden(self) -> "CompiledKernel":
        """This kernel, or, when $TILEGCN_ASM_OVERRIDE holds a safe <cache key>.s for it, a kernel running that
        file, announced once per process (AsmOverrideWarning): code that is not the generated one never runs
        unsaid."""
        path = override_file(self.key)
        if path is None:
            return self
        announce_override((self.key, str(path), None),
                          f"tilegcn: {ENV_ASM_OVERRIDE}: kernel {self.name} (cache key {self.key[:16]}, "
                          f"{self.fn.source_location}) runs the hand-edited {path}, not the generated code")
        return self.with_asm(path)

    def estimate(self, device=None, args=None, **options):
        """The timing model's estimate of one launch on `device` ("MI300X" for gfx942, "MI355X" for gfx950;
        default: this kernel's arch): see `tilegcn.perfmodel`. A program of several T.Kernel blocks: the sum of its
        launches, in order (a `SequenceEstimate`, `.launches` holding each one's). `args` default to zero tensors
        of the specialised shapes (and 1 for scalars). Options: flops, clock_hz, trace, detail_iterations."""
        import torch

        from .amdgcn.arch import TIMING
        from .perfmodel import estimate
        from .perfmodel.sequence import SequenceEstimate
        from .runtime.emulator import load

        if args is None:
            if self.dynamic:
                raise ArgumentError(f"tilegcn: {self.name} has dynamic sizes ({', '.join(self.dynamic)}): pass "
                                    "estimate(args=...) with tensors of the sizes to estimate")
            args = [_placeholder(s) for s in self.signature]
        grid = self.grid_for(args)
        sizes = self.dynamic_sizes(args) if self.dynamic else {}
        values = self.dynamic_values_of(sizes)
        module = load(self.hsaco, arch=self.arch)
        names = [a["name"] for a in self.metadata["args"]]
        if names and names != list(self.fn.arg_names):
            hidden = {site.param: torch.zeros(site.shape, dtype=torch.float32) for site in self.prints}
            hidden.update({n: torch.zeros(_evaluate_shape(shape, values), dtype=getattr(torch, dtype))
                           for n, shape, dtype in self.outputs + self.scratch})
            hidden.update(sizes)
            args = [hidden[n] if n in hidden else args[self.fn.arg_names.index(n)] for n in names]
        device = device or TIMING[self.arch].device
        if not self.launches:
            return estimate(module, self.name, grid, self.block, args, device=device, **options)
        # several T.Kernel blocks: each launch estimated in order on the same tensors (a later kernel reads what
        # the earlier ones wrote), their cycles summed (launches on one stream run one after the other)
        return SequenceEstimate([
            estimate(module, k["name"], _evaluate_grid(k["grid"], values), tuple(k["block"]),
                     [args[names.index(a["name"])] for a in k["args"]], device=device, **options)
            for k in self.launches])

    def __repr__(self):
        return f"<CompiledKernel {self.name} {self.arch} key={self.key[:12]}>"


def _check_constant_type(name: str, value, default) -> None:
    """A constant whose default is a number (or a string) must be given a number (a string): `block_M="64"`
    would otherwise fail deep inside tracing."""
    if default is inspect.Parameter.empty or default is None:
        return
    for kind, what in ((numbers.Real, "a number"), (str, "a string")):
        if isinstance(default, kind) and not isinstance(value, kind):
            raise ArgumentError(f"tilegcn: constant {name}={value!r} is a {type(value).__name__}; the default is "
                                f"{type(default).__name__} {default!r}, so pass {what}")


def _check_tensor_storage(name: str, t) -> None:
    """Tensors the device can read: strided (not sparse), with no lazy negation or conjugation pending.

    torch marks `z.conj().imag` or `torch._neg_view(x)` with a negative (conjugate) bit and applies it only
    when an op reads the tensor; the kernel reads the raw memory. Refused rather than resolved into a copy: a
    written tensor cannot be written through a copy, and a silent copy per call would hide its cost."""
    import torch

    if t.layout != torch.strided:
        raise ArgumentError(f"tilegcn: tensor {name} has layout {t.layout} (sparse); pass a dense tensor "
                            "(.to_dense())")
    for lazy, what, fix in ((t.is_neg(), "negative", "resolve_neg"), (t.is_conj(), "conjugate", "resolve_conj")):
        if lazy:
            raise ArgumentError(f"tilegcn: tensor {name} has its {what} bit set (a lazy view, e.g. "
                                f"z.conj().imag or torch._neg_view(x)): the kernel would read its memory without "
                                f"the {what}; pass {name}.{fix}() or {name}.clone()")


def _placeholder(spec):
    """A zero tensor matching one TensorSpec (1 for a scalar parameter)."""
    import torch

    from .ir.types import TensorSpec

    if not isinstance(spec, TensorSpec):
        return spec(1)
    size = 1 + sum((n - 1) * st for n, st in zip(spec.shape, spec.strides)) if all(spec.shape) else 0
    # zero bytes viewed as the dtype: torch cannot fill a float4_e2m1fn_x2 tensor
    zeros = torch.zeros(size * spec.dtype.bytes, dtype=torch.uint8).view(getattr(torch, spec.dtype.name))
    return zeros.as_strided(spec.shape, spec.strides)


def _describe(names, signature) -> str:
    from .ir.types import TensorSpec

    parts = []
    for name, s in zip(names, signature):
        if isinstance(s, TensorSpec):
            parts.append(f"{name}: {s.dtype} {list(s.shape)} strides {list(s.strides)}"
                         + ("" if s.aligned16 else " (not 16-byte aligned)"))
        else:
            parts.append(f"{name}: {s.__name__}")
    return ", ".join(parts)


def call_signature(fn_name: str, arg_names: tuple, args) -> tuple:
    """(signature, trace_args) of a call with one argument per name: per argument a TensorSpec or a scalar
    type (what a call is specialised on besides its constants and arch), after the checks every call makes.
    Shared by jit calls and exported kernels (tilegcn.aot), so both key and refuse a call alike."""
    import torch

    from .ir.types import TensorSpec

    signature, trace_args, devices = [], [], {}
    for name, a in zip(arg_names, args):
        if isinstance(a, torch.Tensor):
            _check_tensor_storage(name, a)
            spec = TensorSpec.of(a, name)
            if a.dim() and a.shape[-1] > 1 and a.stride(-1) != 1:
                raise ArgumentError(
                    f"tilegcn: tensor {name} has unsupported strides {tuple(a.stride())} for shape "
                    f"{tuple(a.shape)}: the last dimension must have stride 1; call .contiguous() on it"
                )
            devices.setdefault(str(a.device), name)
            signature.append(spec)
            trace_args.append(spec)
        elif isinstance(a, (int, float)):
            kind = float if isinstance(a, float) else int
            signature.append(kind)
            trace_args.append(kind(a))
        else:
            hint = "; convert it with torch.from_numpy" if type(a).__module__ == "numpy" else ""
            raise ArgumentError(
                f"tilegcn: argument {name} of {fn_name}() must be a torch tensor or an int/float "
                f"scalar, got {type(a).__name__}{hint}"
            )
    if len(devices) > 1:
        where = ", ".join(f"{n} on {d}" for d, n in devices.items())
        raise ArgumentError(f"tilegcn: tensors of {fn_name}() are on different devices: {where}")
    if "meta" in devices:
        raise ArgumentError(f"tilegcn: tensor {devices['meta']} is a meta tensor: it has a shape but no memory "
                            "to compute on; pass a tensor on the CPU (emulator) or an AMD GPU")
    return tuple(signature), trace_args


# -- the decorator ------------------------------------------------------------------------------------------
class JITFunction:
    """A tile program. Call it to launch; `.compile(...)` to get a CompiledKernel without launching.

    Example:

    ```python
    kernel = double.compile(x, y, arch="gfx942")   # a CompiledKernel, not launched
    double(x, y, block=128)                       # keyword constants: a new value, a new specialisation
    ```
    """

    def __init__(self, fn, *, arch=None, schedule=INTERLEAVE, copy="auto", out_idx=None, fp_contract=True):
        from .language.program import EagerProgram, PrimFunc

        if isinstance(fn, PrimFunc):
            fn = fn.fn
        if not inspect.isfunction(fn):
            raise ArgumentError(f"tilegcn.jit decorates a Python function (a tile program), got "
                                f"{type(fn).__name__} {fn!r}")
        self.fn = fn
        self.name = fn.__name__
        self.arch = None if arch is None else get_arch(arch).name
        # the compile options (cache key); the arch is resolved per call (`_compiled`)
        self.options = _jit_options(self.arch, schedule=schedule, copy=copy, fp_contract=fp_contract)
        self.source_location = f"{fn.__code__.co_filename}:{fn.__code__.co_firstlineno}"
        self._eager = EagerProgram.of(fn)  # tensors annotated in the body (TileLang's eager style), or None
        self._positional_constants = []  # positional parameters with a default: constants passed by position
        if self._eager is not None:
            positional, defaults = list(self._eager.tensor_names), dict(self._eager.defaults)
        else:
            positional, defaults = self._parameters(fn)
        # TileLang's out_idx: parameters the caller does not pass; each call allocates and returns them
        self.out_idx = self._out_indices(out_idx, positional)
        self.arg_names = tuple(n for i, n in enumerate(positional) if i not in self.out_idx)
        if self._eager is not None and self.out_idx:
            self._eager = self._eager.without_arguments([positional[i] for i in self.out_idx])
        self.defaults = defaults
        self._dynamic_dims = self._find_dynamic_dims(positional)  # T.dynamic dims of the call's tensors
        self.cache_stats = CacheStats()
        self._keyfn = _make_keyfn(len(self.arg_names))
        self._memo = {}  # warm key -> _Launcher
        self.printed = []  # the PrintedTiles of the last launch of a kernel with T.print
        self._kernels = {}  # (signature, constants, arch) -> CompiledKernel
        functools.update_wrapper(self, fn)

    def _out_indices(self, out_idx, positional: list) -> tuple:
        """out_idx (an int or a list of ints, negative from the end, as TileLang takes it) as sorted indices into
        the positional parameters; each must be a tensor annotated `T.Tensor(shape, dtype)`."""
        from .language.tracer import TensorAnnotation

        if out_idx is None:
            return ()
        where = f"tilegcn.jit(out_idx={out_idx!r}) on {self.name}"
        indices = [out_idx] if isinstance(out_idx, int) and not isinstance(out_idx, bool) else out_idx
        if not isinstance(indices, (list, tuple)) or not all(
                isinstance(i, int) and not isinstance(i, bool) for i in indices):
            raise ArgumentError(f"{where}: out_idx is an int or a list of ints (parameter positions, negative from "
                                "the end), e.g. out_idx=[-1]", location=self.source_location)
        n = len(positional)
        resolved = []
        for i in indices:
            if not -n <= i < n:
                raise ArgumentError(f"{where}: index {i} is out of range for the {n} parameter(s) "
                                    f"({', '.join(positional)})", location=self.source_location)
            if i % n in resolved:
                raise ArgumentError(f"{where}: parameter {positional[i % n]} is listed twice",
                                    location=self.source_location)
            resolved.append(i % n)
        parameters = inspect.signature(self.fn).parameters
        for i in resolved:
            name = positional[i]
            if self._eager is not None:  # its positional parameters are the tensors annotated in the body
                continue
            if not isinstance(parameters[name].annotation, TensorAnnotation):
                raise ArgumentError(f"{where}: parameter {name} is not annotated as a tensor, so there is no shape "
                                    f"and dtype to allocate it with: annotate it `{name}: T.Tensor(shape, dtype)` "
                                    "(a scalar cannot be an output)", location=self.source_location)
        if len(resolved) == n:
            raise ArgumentError(f"{where}: every parameter is an output; the kernel needs an input tensor (its "
                                "device is where the outputs are allocated)", location=self.source_location)
        return tuple(resolved)

    def _find_dynamic_dims(self, positional: list) -> tuple:
        """language/dynamic.py DynamicDims: the dims of the passed tensors that annotations give a T.dynamic size."""
        from .language.dynamic import DynamicDim, DynamicSize
        from .language.tracer import TensorAnnotation

        if self._eager is not None:
            dims = self._eager.dynamic_dims()
        else:
            parameters = inspect.signature(self.fn).parameters
            dims = [(name, axis, d.name) for name in positional
                    if isinstance(parameters[name].annotation, TensorAnnotation)
                    for axis, d in enumerate(parameters[name].annotation.shape) if isinstance(d, DynamicSize)]
        return tuple(DynamicDim(self.arg_names.index(name), axis, size) for name, axis, size in dims
                     if name in self.arg_names)

    def _parameters(self, fn) -> tuple:
        """(positional parameter names, {keyword-only constant: default}) of a tile program."""
        positional, defaults = [], {}
        for p in inspect.signature(fn).parameters.values():
            where = f"tilegcn.jit {self.name}"
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise ArgumentError(f"{where}: *args/**kwargs are not supported", location=self.source_location)
            if p.kind == p.KEYWORD_ONLY:
                if p.name == "arch":
                    raise ArgumentError(f"{where}: 'arch' is reserved for the target arch",
                                        location=self.source_location)
                defaults[p.name] = p.default  # inspect.Parameter.empty when required
            elif p.default is not p.empty:  # a compile-time constant, by position or by keyword
                defaults[p.name] = p.default
                self._positional_constants.append(p.name)
            else:
                positional.append(p.name)
        return positional, defaults

    def _bind_constants(self, args: tuple, kwargs: dict) -> tuple:
        """(runtime arguments, constants by name) of a call passing constants by position (after the runtime
        arguments, as Python orders parameters with defaults)."""
        n = len(self.arg_names)
        extra = args[n:]
        if len(extra) > len(self._positional_constants):
            raise self._arity_error(args)
        kwargs = dict(kwargs)
        for name, value in zip(self._positional_constants, extra):
            if name in kwargs:
                raise ArgumentError(f"tilegcn: {self.name}() got constant {name} both by position and by keyword")
            kwargs[name] = value
        return args[:n], kwargs

    # The warm path: keep it lean (see the module docstring); measure with bench/compile_time.py.
    def __call__(self, *args, **kwargs):
        if self._eager is not None:
            args, kwargs = self._eager.split(args, kwargs)
        elif len(args) > len(self.arg_names):
            args, kwargs = self._bind_constants(args, kwargs)
        try:
            key = self._keyfn(*args)
        except Exception:  # wrong arity, or a tensor the key cannot describe (sparse: no data pointer)
            self._signature(args)  # raises the ArgumentError naming the argument
            raise
        if kwargs:
            key = (key, tuple(kwargs.items()), tuple(map(type, kwargs.values())))
        try:
            launcher = self._memo[key]
        except (KeyError, TypeError):  # TypeError: an unhashable constant
            launcher = None
        if launcher is None:  # outside the except block: a user's error does not show the KeyError as context
            launcher = self._miss(key, args, kwargs)
        return launcher.run(launcher, args)

    def _miss(self, key, args, kwargs) -> _Launcher:
        self.cache_stats.memo_misses += 1
        launcher = self._compiled(args, kwargs)._launcher(args)
        if _memoizable(key, key[0] if kwargs else key, len(self.arg_names)) and not _has_float_zero(kwargs):
            self._memo[key] = launcher
        return launcher

    def compile(self, *args, **kwargs) -> CompiledKernel:
        """Specialise on `args` (tensors or int/float scalars) and compile (or hit a cache); no launch.
        Keyword arguments: the function's keyword-only constants and `arch`."""
        if self._eager is not None:
            args, kwargs = self._eager.split(args, kwargs)
        elif len(args) > len(self.arg_names):
            args, kwargs = self._bind_constants(args, kwargs)
        return self._compiled(args, kwargs)

    def launchers(self) -> list:
        """The warm path's prepared launchers (a hook for benchmarks and tests: replacing a launcher's
        `.module` with an object whose `launch(name, grid, block, args)` does nothing leaves only the
        host-side overhead of a call)."""
        return list({id(launcher): launcher for launcher in self._memo.values()}.values())

    def cache_clear(self) -> None:
        """Forget this process's compiled kernels and launchers, and zero `cache_stats` (disk cache kept)."""
        self._memo.clear()
        self._kernels.clear()
        self.cache_stats = CacheStats()

    # -- the slow path --------------------------------------------------------------------------------
    def _arity_error(self, args) -> ArgumentError:
        return ArgumentError(
            f"tilegcn: {self.name}() takes {len(self.arg_names)} positional argument(s) "
            f"({', '.join(self.arg_names)}), got {len(args)}"
        )

    def _constants(self, kwargs: dict) -> dict:
        for k in kwargs:
            if k not in self.defaults:
                valid = ", ".join([*self.defaults, "arch"])
                how = " (it is positional: pass it by position)" if k in self.arg_names else ""
                if k in CompileOptions.jit_options():
                    how = f" ({k} is a decorator option: tilegcn.jit({self.name}, {k}=...))"
                raise ArgumentError(
                    f"tilegcn: {self.name}() got an unknown keyword argument {k!r}{how}; "
                    f"valid keyword arguments: {valid}"
                )
        for k, v in kwargs.items():
            _check_constant_type(k, v, self.defaults[k])
        constants = {**self.defaults, **kwargs}
        missing = [k for k, v in constants.items() if v is inspect.Parameter.empty]
        if missing:
            raise ArgumentError(f"tilegcn: {self.name}() is missing keyword argument(s): {', '.join(missing)}")
        return constants

    def _signature(self, args) -> tuple:
        """(signature, trace_args): per argument a TensorSpec or a scalar type; checks the arguments."""
        if len(args) != len(self.arg_names):
            raise self._arity_error(args)
        return call_signature(self.name, self.arg_names, args)

    def _specialise(self, args) -> tuple:
        """(signature, trace_args, dynamic sizes): _signature's, with each T.dynamic dim (and the strides over it)
        replaced by its expression for this call's divisibility class (language/dynamic.py)."""
        signature, trace_args = self._signature(args)
        if not self._dynamic_dims:
            return signature, trace_args, {}
        from .language.dynamic import bind_sizes, generalise

        bindings = bind_sizes(self._dynamic_dims, self.arg_names, signature)
        axes: dict = {}
        for dim in self._dynamic_dims:
            spec = signature[dim.arg]
            if dim.name in bindings and hasattr(spec, "shape") and dim.axis < len(spec.shape):
                axes.setdefault(dim.arg, {})[dim.axis] = bindings[dim.name]
        signature = tuple(generalise(spec, axes[i]) if i in axes else spec for i, spec in enumerate(signature))
        trace_args = [signature[i] if i in axes else a for i, a in enumerate(trace_args)]
        return signature, trace_args, bindings

    def _compiled(self, args, kwargs) -> CompiledKernel:
        kwargs = dict(kwargs)
        arch = kwargs.pop("arch", None)  # "" is an arch name (refused), not "the default": test None only
        arch = resolve_arch(self.arch if arch is None else arch)
        constants = self._constants(kwargs)
        signature, trace_args, dynamic = self._specialise(args)
        skey = (signature, _freeze(constants), arch)
        kernel = self._kernels.get(skey)
        if kernel is None:
            kernel = self._kernels[skey] = self._build(signature, trace_args, constants, arch, dynamic)
        return kernel

    def _build(self, signature, trace_args, constants, arch, dynamic=None) -> CompiledKernel:
        from .language import trace

        t0 = time.perf_counter()
        program = self.fn if self._eager is None else self._eager.traced(constants)
        kernel = trace(program, trace_args, constants, arch, self.out_idx, dynamic)
        self.cache_stats.traces += 1
        entry, built, timings = build_traced(kernel, self.options.with_arch(arch), self._described(constants),
                                             time.perf_counter() - t0)
        if built:
            self.cache_stats.compiles += 1
        elif entry.fetched:
            self.cache_stats.remote_hits += 1
        else:
            self.cache_stats.disk_hits += 1
        kernel = CompiledKernel(self, entry, signature, constants, arch, timings, written=_written_params(kernel),
                                prints=getattr(kernel, "prints", ()), outputs=_outputs(kernel), dynamic=dynamic,
                                scratch=_scratch(kernel))
        return kernel._overridden()  # $TILEGCN_ASM_OVERRIDE/<key>.s, announced

    def _described(self, constants: dict) -> dict:
        """The fields of meta.json that describe where a kernel came from (see build_traced)."""
        return {"source": self.source_location, "function": self.fn.__qualname__,
                "constants": {k: _jsonable(v) for k, v in constants.items()}}

    def __repr__(self):
        return f"<tilegcn.jit {self.name} at {self.source_location}>"


def build_traced(kernel, options: CompileOptions, described: dict, trace_seconds: float = 0.0):
    """Lower and assemble a traced kernel into the disk cache, or find its verified entry there:
    (entry, built, timings); `options` name the arch. `described`: meta.json's source, function and constants
    (JSON values), so that a process without the Python function (tilegcn.autotune's compile workers) builds the
    very entry a call would."""
    from .ir import nodes as N
    from .ir import print_kernel

    arch = options.arch
    timings = {"trace": trace_seconds}
    t1 = time.perf_counter()
    ir = print_kernel(kernel)
    llvm = toolchain.find_llvm(arch)
    key = make_key(ir, options, llvm.version)
    t2 = time.perf_counter()
    timings["key"] = t2 - t1

    def build(tmp: Path) -> dict:
        from .compiler import lower, lower_program  # only on a miss: a cache hit never imports the lowering passes

        tb0 = time.perf_counter()
        lowered = _lower_or_report(lower_program if isinstance(kernel, N.Program) else lower, kernel, options)
        passes = f"{_PASSES_MARKER}{lowered.ir}" if lowered.ir else ""
        (tmp / "kernel.ir").write_text(ir + passes)
        (tmp / "kernel.s").write_text(lowered.asm)
        tb1 = time.perf_counter()
        hsaco = toolchain.assemble(lowered.asm, arch)
        (tmp / "kernel.hsaco").write_bytes(hsaco)
        tb2 = time.perf_counter()
        timings.update(lower=tb1 - tb0, assemble=tb2 - tb1)
        meta = dict(lowered.meta)
        meta.setdefault("name", kernel.name)
        meta.setdefault("grid", grid_json(kernel.grid))
        meta.setdefault("block", list(kernel.block))
        meta.setdefault("args", [{"name": p.name, "kind": p.kind} for p in kernel.params])
        meta.update(
            arch=arch,
            options=options.key_fields(),  # what the key hashed besides the IR (`tilegcn cache show KEY`)
            **described,
            compile_time={"trace": trace_seconds, "lower": tb1 - tb0, "assemble": tb2 - tb1,
                          "total": trace_seconds + tb2 - t1},
            llvm_version=llvm.version,
            tilegcn_version=__version__,
            created=time.time(),
        )
        return meta

    entry, built = Cache().get_or_build(key, build, verify=functools.partial(_entry_problem, ir, kernel, arch))
    t3 = time.perf_counter()
    timings.update(cache=t3 - t2 - timings.get("lower", 0.0) - timings.get("assemble", 0.0),
                   total=trace_seconds + t3 - t1)
    return entry, built, timings


def _lower_or_report(lower, kernel, options: CompileOptions):
    """Run the lowering passes; a Python exception from inside them is a tilegcn bug, reported as a
    CompileError at the kernel's line (the original traceback stays chained) rather than a raw exception."""
    arch = options.arch
    try:
        return lower(kernel, options)
    except TilegcnError:
        raise
    except Exception as e:  # noqa: BLE001 - every escape is turned into a tilegcn error, chained
        raise CompileError(f"internal error while lowering {kernel.name} for {arch} ({type(e).__name__}: {e}); "
                           "this is a tilegcn bug, please report it with the kernel", location=kernel.loc) from e


# kernel.ir holds the traced IR (what the key hashes), then, when a tile-IR pass rewrote it, this marker and
# the rewritten IR (e.g. the software-pipelined loop) with every fragment's inferred layout
_PASSES_MARKER = "\n// after the tile-IR passes (software pipelining, layout inference):\n"


def _entry_problem(ir: str, kernel, arch: str, entry) -> str | None:
    """Why a (hash-verified) cache entry does not fit the traced kernel, or None. The entry must hold the
    very IR its key was made from (followed only by what the tile-IR passes made of it), and the launch fields of meta.json (kernel name, grid, block, argument
    order) must be the traced kernel's: a meta.json rewritten together with its digest is still caught."""
    meta = entry.meta
    stored = entry.data["kernel.ir"]
    traced = ir.encode()
    if stored != traced and not stored.startswith(traced + _PASSES_MARKER.encode()):
        return "kernel.ir is not the IR this key was made from"
    expected = {"name": kernel.name, "arch": arch, "grid": grid_json(kernel.grid), "block": list(kernel.block)}
    for name, value in expected.items():
        if meta.get(name) != value:
            return f"meta.json says {name}={meta.get(name)!r}, the traced kernel has {value!r}"
    args = meta.get("args")
    names = [a.get("name") if isinstance(a, dict) else None for a in args] if isinstance(args, list) else None
    if names != [p.name for p in kernel.params]:
        return f"meta.json's args {names} are not the kernel's parameters {[p.name for p in kernel.params]}"
    return _launches_problem(meta.get("kernels"), getattr(kernel, "kernels", None))


def _launches_problem(stored, kernels) -> str | None:
    """Why meta.json's `kernels` (the launches of a program of several T.Kernel blocks) are not the traced
    program's, or None; a single-kernel entry has none."""
    if kernels is None:
        return None if stored is None else "meta.json lists kernels, the traced program has one T.Kernel block"
    expected = [{"name": k.name, "grid": grid_json(k.grid), "block": list(k.block),
                 "args": [p.name for p in k.params]} for k in kernels]
    try:
        found = [{"name": m["name"], "grid": m["grid"], "block": m["block"], "args": [a["name"] for a in m["args"]]}
                 for m in stored]
    except (TypeError, KeyError):
        return "meta.json's kernels are not a list of launches"
    if found != expected:
        return f"meta.json's kernels {found} are not the traced program's launches {expected}"
    return None


def grid_json(grid) -> list:
    """meta.json's grid: ints, and the text of a dimension that depends on dynamic sizes (CompiledKernel.grid_for)."""
    return [g if isinstance(g, int) else str(g) for g in grid]


def _jsonable(v):
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return repr(v)


def _fp_contract(fp_contract, compile_flags) -> bool:
    """tilegcn.jit's fp_contract, else what TileLang's compile_flags say to hipcc (-ffp-contract=off / on / fast; the
    last one given wins, as in clang), else True (HIP's default)."""
    if fp_contract is not None:
        return fp_contract
    flags = compile_flags.split() if isinstance(compile_flags, str) else list(compile_flags or ())
    said = [f.split("=", 1)[1] for f in flags if isinstance(f, str) and f.startswith("-ffp-contract=")]
    return not said or said[-1] != "off"


def _jit_options(arch, **options) -> CompileOptions:
    try:
        return CompileOptions(arch, **options)
    except ArgumentError as e:
        raise ArgumentError(str(e).replace("tilegcn:", "tilegcn.jit:", 1)) from None


def jit(fn=None, *, arch=None, schedule=INTERLEAVE, copy="auto", out_idx=None, fp_contract=None,
        pass_configs=None, target=None, execution_backend=None, verbose=None, compile_flags=None):
    """Decorate a tile program: ``@tilegcn.jit``, ``@tilegcn.jit(arch="gfx942")``, ``tilegcn.jit(fn, schedule="plain")``.

    TileLang's two styles are read as TileLang reads them (docs/language.md): a function whose body defines and
    returns a `@T.prim_func` is a kernel factory (`factory(N, D)` gives the jitted kernel), and one whose body
    annotates its tensor parameters (`A: T.Tensor((M, N), dtype)`) takes every other parameter as a constant.

    `schedule`: "interleave" (default) list-schedules the code around MFMAs (the GEMM's K loop) so that LDS
    reads, copies and address math issue between back-to-back MFMAs; "plain" keeps the order the passes emit (to measure what scheduling buys).
    `copy`: how a pipelined K loop copies GEMM operands into LDS: "auto" (default: the per-arch choice, LDS DMA on
    gfx950, register staging on gfx942), "lds_dma" (buffer_load_* ... lds, also gfx942's 4 bytes a lane; a
    CompileError where the arch or operand cannot) or "registers".
    `out_idx`: TileLang's outputs, an int or a list of ints (positions of the kernel's tensor parameters, negative
    from the end): the caller does not pass them; each call allocates them (torch.empty with the annotated shape
    and dtype, on the inputs' device) and returns them, one tensor or a tuple in the listed order.
    `fp_contract`: whether an fp32 `a * b + c` in element code becomes one FMA (one rounding; default True, as HIP's
    -ffp-contract=fast and Triton's enable_fp_fusion); TileLang's way to say it, `compile_flags=["-ffp-contract=off"]`
    (the flag its HIP backend hands to hipcc), is read the same way.
    `pass_configs`, `target`, `execution_backend`, `verbose` and other `compile_flags` (TileLang's) are accepted and
    ignored: they configure TileLang's CUDA/HIP passes (TMA, warp specialisation), which tilegcn does not have.

    Example:

    ```python
    @tilegcn.jit
    def double(X, Y, *, block=64):
        with T.Kernel(T.ceildiv(X.shape[0], block), threads=64) as bx:
            x = T.alloc_fragment((block,), "float32")
            T.copy(X[bx * block], x)
            for i in T.Parallel(block):
                x[i] = x[i] * 2.0
            T.copy(x, Y[bx * block])

    double(x, y)                                  # compile (or hit the disk cache) and run
    ```
    """
    if fn is None:
        return lambda f: jit(f, arch=arch, schedule=schedule, copy=copy, out_idx=out_idx, fp_contract=fp_contract,
                             compile_flags=compile_flags)
    from .language.program import KernelFactory, is_kernel_factory

    options = dict(arch=arch, schedule=schedule, copy=copy, out_idx=out_idx,
                   fp_contract=_fp_contract(fp_contract, compile_flags))
    if inspect.isfunction(fn) and is_kernel_factory(fn):  # TileLang's closure style: returns a @T.prim_func
        return KernelFactory(fn, lambda program: JITFunction(program, **options))
    return JITFunction(fn, **options)
