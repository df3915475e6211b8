"""Dynamic sizes (TileLang's `T.dynamic` / `T.symbolic`): a tensor dimension one compiled kernel serves for every value.

A dimension annotated with a dynamic size is not part of what a call is specialised on: the jit replaces it (and the
strides that depend on it) by a SymPy expression before tracing, the kernel reads its value from the kernel
arguments (the launch passes `A.shape[axis]`), and the grid is evaluated from the actual sizes at launch. What does
change the code is whether a size that some stride is made of (an inner dim: the row length of a (M, K) tensor is
K) is a multiple of DIVISOR (as Triton specialises on divisibility by 16): such a size is traced as
`DIVISOR * <name>_div16`, so that every alignment and divisibility question the passes ask (access widths,
ragged-edge masks) is answered by SymPy from its form; any other size is the plain symbol `<name>`. So a size that
is only ever an outermost dim (a GEMM's M) costs one compile, and an inner one at most two.
"""
from __future__ import annotations

import re
from typing import NamedTuple

import sympy

from ..errors import ArgumentError, CompileError
from .proxies import IndexProxy

DIVISOR = 16  # a dynamic size is specialised on `size % DIVISOR == 0` (Triton's divisibility key)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INT_DTYPES = ("int32", "int64")


class DynamicSize(IndexProxy):
    """A size named by `T.dynamic("M")`. Inside a traced kernel it is the size's index expression (what the jit bound
    for this call's divisibility class); outside one, a plain symbol (so annotations can hold it)."""

    def __init__(self, name: str):  # no IndexProxy.__init__: `expr` is looked up at each use
        self.name = name
        self.roles = (f"the dynamic size {name}",)
        self.plain = True

    @property
    def expr(self):
        from .tracer import _state

        tracer = getattr(_state, "tracer", None)
        bound = getattr(tracer, "dynamic_sizes", {}).get(self.name) if tracer is not None else None
        return bound.expr if bound is not None else sympy.Symbol(self.name, integer=True, positive=True)

    def __repr__(self):
        return f"T.dynamic({self.name!r})"

    __hash__ = object.__hash__


def dynamic(name: str, dtype: str = "int32"):
    """A tensor size known only at launch (TileLang's `T.dynamic`): `M = T.dynamic("M")`, then `M` in a
    `T.Tensor((M, K), dtype)` annotation. One compiled kernel serves every value of M: the size is a runtime value
    (read from the tensor's shape at each call), usable in index math and `T.ceildiv` for the grid; copies mask the
    ragged edge by it. M is only an outermost dim here, so one compile serves every M (an inner dynamic size is
    specialised on whether it is a multiple of 16: at most two compiles).
    Several names at once: `M, N = T.dynamic("M, N")`. A block size, `threads`, a `T.alloc_*` shape, a `T.Parallel`
    extent or `num_stages` cannot be dynamic (docs/refusals.md); a loop over one is a device loop. `dtype` is TileLang's; sizes are
    32-bit.

    Example:

    ```python
    M = T.dynamic("M")

    @tilegcn.jit
    def scale(X: T.Tensor((M, 64), "float32"), Y: T.Tensor((M, 64), "float32"), *, block_M=32):
        with T.Kernel(T.ceildiv(M, block_M), threads=64) as bx:
            x = T.alloc_fragment((block_M, 64), "float32")
            T.copy(X[bx * block_M, 0], x)
            for i, j in T.Parallel(block_M, 64):
                x[i, j] = x[i, j] * 2.0
            T.copy(x, Y[bx * block_M, 0])

    for rows in (5, 64, 100):             # one compile serves all three
        x = torch.randn(rows, 64)
        y = torch.empty_like(x)
        scale(x, y)
        assert torch.equal(y, 2 * x)
    ```
    """
    if str(getattr(dtype, "name", dtype)) not in _INT_DTYPES:  # a dtype's name, or the name itself
        raise CompileError(f"T.dynamic({name!r}, {dtype!r}): a size is an integer; give dtype \"int32\" (the default)")
    names = [n for n in re.split(r"[\s,]+", name.strip()) if n] if isinstance(name, str) else []
    bad = [n for n in names if not _NAME.fullmatch(n)]
    if not names or bad:
        raise CompileError(f"T.dynamic({name!r}): give one or more identifiers, e.g. T.dynamic(\"M\") or "
                           "T.dynamic(\"M, N\")")
    sizes = tuple(DynamicSize(n) for n in names)
    return sizes[0] if len(sizes) == 1 else sizes


def symbolic(name: str, dtype: str = "int32"):
    """TileLang's older name of `T.dynamic` (which see): `M = T.symbolic("M")`.

    Example:

    ```python
    M = T.symbolic("M")
    assert repr(M) == "T.dynamic('M')"
    ```
    """
    return dynamic(name, dtype)


# -- what the jit does with them ------------------------------------------------------------------------------
class DynamicDim(NamedTuple):
    """Dimension `axis` of call argument `arg` (its index among the call's positional arguments) is size `name`."""
    arg: int
    axis: int
    name: str


class Binding(NamedTuple):
    """A dynamic size as one specialisation traces it: `expr` (the size, `symbol` or DIVISOR * `symbol`) and where the
    launch reads its value: `tensor`.shape[`axis`] // `divisor`."""
    name: str
    expr: object
    symbol: object
    tensor: str
    axis: int
    divisor: int


def bind_sizes(dims, arg_names, signature) -> dict:
    """{name: Binding} for this call's specs: each dynamic size's divisibility class. Every dimension a size names
    must agree (the annotation check says the same, but the shapes are generalised before it runs)."""
    seen, bindings = {}, {}
    strided = {dim.name for dim in dims if dim.axis > 0}  # sizes some tensor's stride (an outer dim's) is made of
    for dim in dims:
        spec = signature[dim.arg]
        if not hasattr(spec, "shape") or dim.axis >= len(spec.shape):
            continue  # not a tensor, or fewer dims than annotated: the annotation check refuses it with the details
        value = spec.shape[dim.axis]
        where = f"{arg_names[dim.arg]}.shape[{dim.axis}]"
        first = seen.setdefault(dim.name, (value, where))
        if first[0] != value:
            raise ArgumentError(f"tilegcn: mismatched shapes: {where} = {value} but {dim.name} = {first[0]} from "
                                f"{first[1]}")
        if dim.name in bindings:
            continue
        # only a size a stride is made of changes the code by its divisibility (access widths, alignment); an
        # outermost dim's (a GEMM's M) is the plain symbol in every call: one compile for every value
        if dim.name in strided and value % DIVISOR == 0 and value > 0:
            symbol = sympy.Symbol(f"{dim.name}_div{DIVISOR}", integer=True, positive=True)
            bindings[dim.name] = Binding(dim.name, DIVISOR * symbol, symbol, arg_names[dim.arg], dim.axis, DIVISOR)
        else:
            symbol = sympy.Symbol(dim.name, integer=True, nonnegative=True)
            bindings[dim.name] = Binding(dim.name, symbol, symbol, arg_names[dim.arg], dim.axis, 1)
    return bindings


def generalise(spec, axes: dict):
    """`spec` with the dims in `axes` ({axis: Binding}) symbolic, and each stride that is the contiguous stride over
    them symbolic too (the row stride of a (K, M) tensor is M); any other stride stays the call's (specialised)."""
    from ..ir.types import TensorSpec

    shape = tuple(axes[d].expr if d in axes else n for d, n in enumerate(spec.shape))
    strides = []
    for d, stride in enumerate(spec.strides):
        contiguous = 1
        for n in spec.shape[d + 1:]:
            contiguous *= n
        inner = shape[d + 1:]
        if stride == contiguous and any(a > d for a in axes):
            stride = sympy.Mul(*inner)
        strides.append(stride)
    return TensorSpec(spec.dtype, shape, tuple(strides), spec.aligned16)


def size_role(expr) -> str:
    """How messages name a dimension of T.dynamic sizes: by the user's name where it is one size (not `16*M_div16`)."""
    from .tracer import current

    names = {b.expr: b.name for b in current().dynamic_sizes.values()}
    return f"the dynamic size {names.get(expr, expr)}"


def is_symbolic(value) -> bool:
    return isinstance(value, sympy.Basic) and not value.is_Integer
