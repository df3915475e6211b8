"""Tracing: run the decorated function once per specialisation with proxies and record tile IR.

The function runs as ordinary Python: shapes are concrete ints, block ids and loop variables are
SymPy symbols, Python `for ... in range` unrolls, and each `T.*` call appends a statement to the
innermost open body. Every statement remembers the user's file:line for later error messages.
"""
from __future__ import annotations

import dataclasses
import hashlib
import inspect
import linecache
import math
import os
import re
import sysconfig
import threading
import traceback

import sympy

from .. import ops
from ..amdgcn.arch import get_arch
from ..errors import _PACKAGE_DIR, ArgumentError, CompileError, ResourceError, TilegcnError, user_location
from ..ir import nodes as N
from ..ir.ops import MFMA_ACCUMULATOR, TileOp
from ..ir.types import TensorSpec, as_dtype, float32, int32
from .dynamic import DynamicSize, is_symbolic
from .proxies import BufferProxy, ScalarProxy
from .unroll import unroll_fragment_loops

_state = threading.local()
_ASSIGNED_NAME = re.compile(r"^\s*([A-Za-z_]\w*)\s*(?::[^=]*)?=[^=]")


def current() -> "Tracer":
    tracer = getattr(_state, "tracer", None)
    if tracer is None:
        raise CompileError("tilegcn.language (T.*) used outside a @tilegcn.jit kernel")
    return tracer


class TensorAnnotation:
    """`X: T.Tensor(("M", "N"), "bfloat16")`: checked against each call's tensors.

    Dimensions are ints (must match), strings (a named size that must agree across arguments),
    `T.dynamic` sizes (named sizes one compiled kernel serves for every value) or None (anything).
    dtype None accepts any supported dtype.
    

    Example:

    ```python
    @tilegcn.jit
    def add(X: T.Tensor(("M", "N"), "float32"), Y: T.Tensor(("M", "N"))):   # both must be M x N
        ...
    ```
    """

    def __init__(self, shape, dtype=None):
        self.shape = tuple(shape)
        self.dtype = None if dtype is None else as_dtype(dtype)

    def check(self, name: str, spec: TensorSpec, sizes: dict):
        if self.dtype is not None and spec.dtype != self.dtype:
            raise ArgumentError(f"tilegcn: argument {name} has dtype {spec.dtype.name}, "
                                f"the kernel declares {self.dtype.name}")
        if len(self.shape) != len(spec.shape):
            raise ArgumentError(f"tilegcn: argument {name} has {len(spec.shape)} dims {spec.shape}, "
                                f"the kernel declares {len(self.shape)} {self.shape}")
        for axis, (want, got) in enumerate(zip(self.shape, spec.shape)):
            if isinstance(want, DynamicSize):
                want = want.name  # a size that must agree across arguments, like a named one
            if isinstance(want, int) and want != got:
                raise ArgumentError(f"tilegcn: argument {name} has shape {spec.shape}; "
                                    f"dimension {axis} must be {want}")
            if isinstance(want, str):
                seen = sizes.setdefault(want, (got, name))
                if seen[0] != got:
                    raise ArgumentError(
                        f"tilegcn: mismatched shapes: {name}.shape[{axis}] = {got} but {want} = {seen[0]} "
                        f"from argument {seen[1]}")


@dataclasses.dataclass
class KernelBlock:
    """One closed `with T.Kernel(...)` block: its launch, its statements and the buffers it allocated (shared,
    fragment; a T.alloc_global inside it is the program's)."""
    grid: tuple
    block: tuple
    block_ids: tuple
    body: list
    loc: str | None
    local_buffers: list


class Tracer:
    def __init__(self, name: str):
        self.name = name
        self.params: list[N.Param] = []
        self.buffers: list[N.Buffer] = []
        self.bodies: list[list] = []
        self.kernel_blocks: list = []  # KernelBlock per `with T.Kernel(...)`, in program order
        self.scratch: list = []  # the global buffers T.alloc_global declared (allocated per call, not returned)
        self.parallel = None  # (extents, indices) inside T.Parallel
        self.grid_ids = ()  # (size, block-id symbol) per grid dimension given to T.Kernel, while it is open
        self.prints: list = []  # PrintSite per T.print call, in program order (hidden output tensors)
        self.empties: list = []  # the global buffers T.empty declared (outputs if the program returns them)
        self._names: dict[str, int] = {}
        # id(ElemRef) -> [ref, body, statement before, index symbol or None]: variables' reads (language/variables.py)
        self.variable_reads: dict = {}
        self.dynamic_sizes: dict = {}  # T.dynamic size name -> language/dynamic.py Binding (this specialisation's)

    # -- naming ---------------------------------------------------------------------------------
    def unique_name(self, base: str) -> str:
        count = self._names.get(base, 0)
        self._names[base] = count + 1
        return base if count == 0 else f"{base}_{count}"

    def name_from_source(self, loc: str | None, fallback: str) -> str:
        """The variable a buffer is assigned to on the user's line (`A_s = T.alloc_shared(...)`)."""
        if loc:
            filename, _, line = loc.rpartition(":")
            m = _ASSIGNED_NAME.match(linecache.getline(filename, int(line)))
            if m:
                return self.unique_name(m.group(1))
        return self.unique_name(fallback)

    # -- recording ------------------------------------------------------------------------------
    def body(self) -> list:
        if not self.bodies:
            raise CompileError("tile statements must be inside `with T.Kernel(...)`")
        return self.bodies[-1]

    def record(self, stmt: TileOp):
        if self.parallel is not None and not stmt.allowed_in_parallel:
            raise CompileError(f"{type(stmt).__name__.lower()} is not allowed inside T.Parallel")
        self.body().append(stmt)

    def record_parallel_store(self, buffer: N.Buffer, index, value: N.Expr):
        """A fragment or shared buffer is stored at the T.Parallel indices in order (its own element); a global
        tensor at index expressions of them (`Mean[bx * blk_m + i]`), which passes/memspace.py checks."""
        extents, indices = self.parallel
        if buffer.scope == N.GLOBAL:
            self.body().append(ops.ParallelStore(tuple(extents), tuple(indices), buffer, value, index=tuple(index),
                                                 loc=user_location()))
            return
        if tuple(index) != tuple(indices):
            raise CompileError(f"assign {buffer.name}[{', '.join(map(str, indices))}] with the T.Parallel "
                               f"indices in order; got [{', '.join(map(str, index))}]")
        if tuple(buffer.shape) != tuple(extents):
            raise CompileError(f"T.Parallel{tuple(extents)} does not match the shape {buffer.shape} "
                               f"of {buffer.scope} buffer {buffer.name}")
        self.body().append(ops.ParallelStore(tuple(extents), tuple(indices), buffer, value, loc=user_location()))

    def alloc(self, scope: str, shape, dtype, fallback: str) -> BufferProxy:
        from .builtins import _concrete
        from .elementwise import program_dtype

        loc = user_location()
        dims = shape if isinstance(shape, (tuple, list)) else (shape,)
        shape = tuple(_concrete(s, f"buffer shape {_show(shape)}: dimension {axis}") for axis, s in enumerate(dims))
        if any(s <= 0 for s in shape):
            raise CompileError(f"buffer shape {shape} must be positive")
        buf = N.Buffer(self.name_from_source(loc, fallback), scope, program_dtype(dtype), shape, loc=loc)
        self.buffers.append(buf)
        return BufferProxy(buf)


def _show(value) -> str:
    return str(tuple(value)) if isinstance(value, (tuple, list)) else repr(value)


# Internal class names a raw exception message may carry, and what the user calls them.
_USER_NAMES = {"ElemRef": "tile element", "BinOp": "tile element expression", "Call": "tile element expression",
               "Const": "constant", "ScalarRef": "runtime scalar", "ScalarProxy": "runtime scalar",
               "BufferProxy": "tile", "RegionRef": "tensor region"}


def _as_program_error(e: Exception) -> CompileError:
    """A Python exception raised by the user's tile program while it was traced, as a CompileError at the
    innermost line of the user's code in its traceback."""
    libraries = [_PACKAGE_DIR] + [sysconfig.get_paths()[k] for k in ("stdlib", "purelib", "platlib")]
    location = None
    for frame, line in traceback.walk_tb(e.__traceback__):
        filename = os.path.abspath(frame.f_code.co_filename)
        if not any(filename.startswith(os.path.abspath(lib) + os.sep) for lib in libraries):
            location = f"{frame.f_code.co_filename}:{line}"
    message = str(e)
    for internal, user in _USER_NAMES.items():
        message = re.sub(rf"'?\b{internal}\b'?", user, message)
    return CompileError(f"{type(e).__name__} while tracing the tile program: {message}", location=location)


def _returned_empties(fn, tracer: Tracer, returned) -> tuple:
    """The names of the T.empty buffers `fn` returns (one, or a tuple/list of them), in the order returned."""
    if not tracer.empties:
        return ()
    values = returned if isinstance(returned, (tuple, list)) else (returned,)
    empties = {id(buf): buf for buf in tracer.empties}
    names = tuple(v.buffer.name for v in values if isinstance(v, BufferProxy) and id(v.buffer) in empties)
    unreturned = [buf for buf in tracer.empties if buf.name not in names]
    if unreturned:
        buf = unreturned[0]
        raise CompileError(f"T.empty buffer {buf.name} is never returned, so no caller could read it: "
                           f"`return {buf.name}` (several outputs: `return {buf.name}, ...`), or drop it",
                           location=buf.loc)
    return names


def _representative(value) -> int:
    """An int, or a T.dynamic size's expression at size 2 (or 32 where it is a multiple of 16): a size > 1, where a
    stride specialised to 0 or too small (language/dynamic.generalise keeps such strides) shows as an overlap."""
    if isinstance(value, sympy.Basic):
        return int(value.subs({s: 2 for s in value.free_symbols}))
    return value


def _check_written_tensors(kernel: N.Kernel) -> None:
    """A tensor the kernel writes must not overlap itself (a broadcast view from expand(), a stride-0 dim,
    or rows that share memory): its elements would be written by several threads in no defined order."""
    for s, dst in ((s, r.buffer) for s in N.walk(kernel.body) for r in s.writes()):
        if dst.scope == N.GLOBAL:
            spec, name = dst.spec, dst.name
            reach = 0  # the furthest element offset the inner dims reach
            dims = [(_representative(n), _representative(st)) for n, st in zip(spec.shape, spec.strides)]
            for size, stride in sorted(((n, st) for n, st in dims if n > 1),
                                       key=lambda d: d[1]):
                if stride <= reach:
                    what = "stride 0 (a broadcast view, e.g. from expand())" if stride == 0 else \
                        f"stride {stride} on a dim of size {size}, so its elements may overlap"
                    raise ArgumentError(f"tilegcn: tensor {name} is written by the kernel ({s.loc}) but has {what}:"
                                        f" shape {spec.shape}, strides {spec.strides}; pass a tensor with its own "
                                        "memory for each element (.contiguous())")
                reach += (size - 1) * stride


def _check_fragment_budgets(kernel: N.Kernel, arch) -> None:
    """Refuse a fragment that cannot fit the registers before anything is lowered (lowering a 2^14-row fragment
    took minutes only to fail). A fragment other than a T.gemm accumulator lives in the arch VGPRs
    (passes/layout.py), which a wave has only as much of as the workgroup's share of the unified file; some
    thread holds at least ceil(elements / threads) of its elements, 16-bit ones packed two a register. A lower
    bound, so a kernel that fits is never refused here; the register allocator has the exact word. T.gemm
    accumulators (AGPRs) are left to the GEMM planner, which refuses them first thing in lowering, at the T.gemm
    line."""
    arch, threads = get_arch(arch), kernel.threads
    budget = min(arch.arch_vgprs, arch.workgroup_register_budget(threads))
    accumulators = {buf for s in N.walk(kernel.body) for buf, kind in s.forced_layouts() if kind == MFMA_ACCUMULATOR}
    for buf in kernel.buffers:
        if buf.scope != N.FRAGMENT or buf in accumulators:
            continue
        per_thread = -(-math.prod(buf.shape) // threads)
        registers = -(-per_thread * buf.dtype.bytes // 4)
        if registers > budget:
            raise ResourceError(
                f"register budget exceeded: fragment {buf.name} ({buf.dtype.name}{list(buf.shape)}) spread over "
                f"{threads} threads needs at least {registers} VGPRs per thread, and {arch.name} has {budget} "
                f"per thread in a workgroup of {threads} threads. tilegcn never spills: use a smaller tile "
                "(block size) or more threads", location=buf.loc)


_SYMBOL_CHARS = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def assembler_symbol(name: str) -> str:
    """The kernel's symbol in the assembly and the code object: a plain ASCII identifier stays as it is (so
    existing entries and asm look the same); any other name (`ядро`, `<lambda>`, or a `;` or newline that would
    inject assembly) becomes [A-Za-z0-9_] with each other byte hex-escaped, plus a short hash of the name so
    two names never share an escaped form. The runtime finds the kernel by this name (meta.json's `name`)."""
    if _SYMBOL_CHARS.fullmatch(name):
        return name
    escaped = "".join(c if c.isascii() and (c.isalnum() or c == "_") else
                      "".join(f"_{byte:02x}" for byte in c.encode("utf-8", "surrogatepass")) for c in name)
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"k_{escaped}_{digest}"


def _bind_arguments(fn, args: list, out_idx: tuple = (), constants=(), dynamic=None):
    """Proxies for the positional parameters, with annotation checks. The parameters at `out_idx` (indices into
    the positional parameters) are outputs the caller does not pass: each is made from its annotation."""
    sig = inspect.signature(fn)
    positional = [p for p in sig.parameters.values()  # a positional parameter with a default is a constant
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name not in constants]
    if out_idx:
        args = list(args)
        for index in sorted(out_idx):
            args.insert(index, _OUTPUT)
    if len(args) != len(positional):
        raise ArgumentError(f"tilegcn: {fn.__name__} takes {len(positional)} positional arguments "
                            f"({', '.join(p.name for p in positional)}), got {len(args)}")
    sizes: dict = {}
    params, buffers, proxies = [], [], []
    for index, (p, value) in enumerate(zip(positional, args)):
        if value is _OUTPUT:
            proxies.append(None)  # after the inputs: its annotation's named sizes come from them
            continue
        if isinstance(value, TensorSpec):
            if isinstance(p.annotation, TensorAnnotation):
                p.annotation.check(p.name, value, sizes)
            buf = N.Buffer(p.name, N.GLOBAL, value.dtype, value.shape, spec=value, param_index=index)
            params.append(N.Param(p.name, "tensor", value.dtype, buffer=buf))
            buffers.append(buf)
            proxies.append(BufferProxy(buf))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            dtype = float32 if isinstance(value, float) else int32
            symbol = sympy.Symbol(p.name, integer=True) if dtype is int32 else None
            param = N.Param(p.name, "scalar", dtype, symbol=symbol)
            params.append(param)
            proxies.append(ScalarProxy(param))
        else:
            raise ArgumentError(f"tilegcn: argument {p.name} must be a tensor, int or float, "
                                f"got {type(value).__name__}")
    for index in sorted(out_idx):
        p = positional[index]
        spec = _output_spec(fn, p, sizes)
        buf = N.Buffer(p.name, N.GLOBAL, spec.dtype, spec.shape, spec=spec, param_index=index)
        params.insert(index, N.Param(p.name, "tensor", spec.dtype, buffer=buf))
        buffers.append(buf)
        proxies[index] = BufferProxy(buf)
    params += _dynamic_size_params(fn, params, dynamic or {})
    return params, buffers, proxies


def _dynamic_size_params(fn, params: list, dynamic: dict) -> list:
    """One runtime int32 parameter per dynamic size (language/dynamic.py's Binding), after every other parameter: the
    launch passes its value, read from the tensor's shape."""
    taken = {p.name for p in params}
    out = []
    for b in dynamic.values():
        if b.name in taken:
            raise ArgumentError(f"tilegcn: {fn.__name__}: the dynamic size {b.name} has the name of a parameter; name "
                                f"it otherwise (T.dynamic(\"{b.name}_size\"))",
                                location=f"{fn.__code__.co_filename}:{fn.__code__.co_firstlineno}")
        out.append(N.Param(b.name, "scalar", int32, symbol=b.symbol, size_of=(b.tensor, b.axis, b.divisor)))
    return out


class _Output:
    """Marks an out_idx parameter among a call's arguments: tilegcn allocates it."""

    def __repr__(self):
        return "<output>"


_OUTPUT = _Output()


def contiguous_spec(shape: tuple, dtype) -> TensorSpec:
    """The TensorSpec of a fresh contiguous tensor (what torch.empty gives: row-major, 16-byte aligned)."""
    strides = tuple(math.prod(shape[axis + 1:]) for axis in range(len(shape)))
    return TensorSpec(dtype, tuple(shape), strides, True)


def _output_spec(fn, p, sizes: dict) -> TensorSpec:
    """An out_idx parameter's shape and dtype, from its `T.Tensor(shape, dtype)` annotation; a named size is the
    one the inputs bound."""
    where = f"{fn.__code__.co_filename}:{fn.__code__.co_firstlineno}"
    annotation = p.annotation
    if not isinstance(annotation, TensorAnnotation) or annotation.dtype is None:
        raise ArgumentError(f"tilegcn.jit(out_idx=...): output {p.name} of {fn.__name__} needs its shape and dtype "
                            f"to be allocated: annotate it `{p.name}: T.Tensor(shape, dtype)`, or pass it as an "
                            "argument (drop it from out_idx)", location=where)
    shape = []
    for axis, dim in enumerate(annotation.shape):
        if isinstance(dim, DynamicSize):
            dim = dim.name
        if isinstance(dim, str) and dim in sizes:
            dim = sizes[dim][0]
        if not isinstance(dim, int) and not is_symbolic(dim):
            raise ArgumentError(f"tilegcn.jit(out_idx=...): dimension {axis} of output {p.name} ({dim!r}) is not "
                                "known from the inputs: give it as an int, or as a size name that an input's "
                                "annotation also uses", location=where)
        shape.append(dim)
    return contiguous_spec(tuple(shape), annotation.dtype)


def trace(fn, args: list, constants: dict, arch: str, out_idx: tuple = (), dynamic=None) -> N.Kernel:
    """Run `fn` on proxies for `args` (TensorSpec or int/float) with keyword `constants`; `dynamic` binds the
    T.dynamic sizes (language/dynamic.py's bind_sizes) that `args`' shapes hold as expressions.

    The jit calls it for you; the traced tile IR is what a CompiledKernel's `.ir` shows, before lowering.

    Example:

    ```python
    print(double.compile(x, y).ir)       # the tile IR that T.trace recorded (and the passes rewrote)
    ```
    """
    tracer = Tracer(fn.__name__)
    tracer.dynamic_sizes = dict(dynamic or {})
    previous = getattr(_state, "tracer", None)
    _state.tracer = tracer  # the annotation check and the output shapes read the dynamic sizes' expressions
    try:
        params, buffers, proxies = _bind_arguments(fn, args, out_idx, constants, tracer.dynamic_sizes)
    finally:
        _state.tracer = previous
    tracer.params, tracer.buffers = params, list(buffers)
    tracer.arch = arch
    _state.tracer = tracer
    try:
        from .flow import rewritten  # device if / while / range, and / or / not on device values

        returned = rewritten(fn)(*proxies, **constants)
    except TilegcnError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's program failed in plain Python: say where and why
        raise _as_program_error(e) from e
    finally:
        _state.tracer = previous
    if not tracer.kernel_blocks:
        raise CompileError(f"{fn.__name__} never opened `with T.Kernel(...)`",
                           location=f"{fn.__code__.co_filename}:{fn.__code__.co_firstlineno}")
    if len(tracer.kernel_blocks) == 1:
        blk = tracer.kernel_blocks[0]
        body = unroll_fragment_loops(blk.body)  # a fragment indexed by a loop variable needs a constant there
        kernel = N.Kernel(assembler_symbol(fn.__name__), tracer.params, tracer.buffers, blk.grid, blk.block,
                          blk.block_ids, body, loc=blk.loc)
        kernels = [kernel]
    else:
        _check_block_allocations(tracer)
        kernels = [_block_kernel(tracer, fn.__name__, i, blk) for i, blk in enumerate(tracer.kernel_blocks)]
        kernel = N.Program(assembler_symbol(fn.__name__), tracer.params, kernels, loc=tracer.kernel_blocks[0].loc)
    kernel.prints = tuple(tracer.prints)  # host side of T.print: what to show after a launch (not in the IR)
    # what the call returns, in order: the out_idx parameters, then the T.empty buffers the program returns
    kernel.outputs = tuple(params[i].name for i in out_idx) + _returned_empties(fn, tracer, returned)
    kernel.scratch = tuple(buf.name for buf in tracer.scratch)  # T.alloc_global: allocated per call, not returned
    for k in kernels:
        _check_fragment_budgets(k, arch)
    _check_written_tensors(kernel)
    return kernel


def _check_block_allocations(tracer: Tracer) -> None:
    """With several T.Kernel blocks, a shared or fragment buffer lives in one kernel's LDS or registers: it must be
    allocated inside the block that uses it."""
    local = {id(b) for blk in tracer.kernel_blocks for b in blk.local_buffers}
    for buf in tracer.buffers:
        if buf.scope != N.GLOBAL and id(buf) not in local:
            raise CompileError(f"{buf.scope} buffer {buf.name} is allocated outside the program's T.Kernel blocks; "
                               "with several blocks each is a kernel of its own: allocate it inside the `with "
                               "T.Kernel(...)` block that uses it", location=buf.loc)


def _block_kernel(tracer: Tracer, name: str, index: int, blk: KernelBlock) -> N.Kernel:
    """The Kernel of one of several T.Kernel blocks: named `<program>_kernel<index>`, taking the program's tensor
    parameters its statements use (in the program's order) and every scalar one."""
    body = unroll_fragment_loops(blk.body)
    used = _global_buffers(body)
    params = [p for p in tracer.params if p.kind != "tensor" or id(p.buffer) in used]
    buffers = [p.buffer for p in params if p.kind == "tensor"] + list(blk.local_buffers)
    return N.Kernel(assembler_symbol(f"{name}_kernel{index}"), params, buffers, blk.grid, blk.block, blk.block_ids,
                    body, loc=blk.loc)


def _global_buffers(stmts: list) -> set:
    """id() of every global buffer the statements (and their expressions and nested bodies) refer to: the fields
    of the IR's dataclasses, followed down to the buffers."""
    found, seen = set(), set()

    def visit(x):
        if isinstance(x, N.Buffer):
            if x.scope == N.GLOBAL:
                found.add(id(x))
            return
        if isinstance(x, (str, int, float, sympy.Basic)) or x is None or id(x) in seen:
            return
        seen.add(id(x))
        if isinstance(x, (list, tuple, set, frozenset)):
            for item in x:
                visit(item)
        elif isinstance(x, dict):
            for item in x.values():
                visit(item)
        elif dataclasses.is_dataclass(x) and not isinstance(x, type):
            for f in dataclasses.fields(x):
                visit(getattr(x, f.name))

    visit(stmts)
    return found
