"""What the traced function sees in place of tensors, buffers and scalars."""
from __future__ import annotations

import numbers

import sympy

from ..errors import CompileError
from ..ir import nodes as N
from ..ir.types import DType


def as_expr(x) -> N.Expr:
    """Lift a Python number, a scalar proxy or an expression into an element expression (ir.nodes.lift; the
    proxies below say how they convert through `__element_expr__`)."""
    return N.lift(x)


def as_index(x, what: str):
    """A SymPy integer expression from an int, a block id, a loop variable or index arithmetic."""
    if isinstance(x, bool):
        raise CompileError(f"{what}: a bool is not an index")
    if isinstance(x, numbers.Integral):
        return sympy.Integer(int(x))
    if isinstance(x, IndexProxy):
        return x.expr
    if isinstance(x, sympy.Expr):
        return x
    if isinstance(x, ScalarProxy) and x.param.symbol is not None:
        return x.param.symbol
    raise CompileError(f"{what}: expected an integer index expression, got {x!r}")


def _normalise_key(key, ndim: int, what: str):
    """starts and (optional) extents from an indexing key: ints/expressions or slices."""
    if not isinstance(key, tuple):
        key = (key,)
    if len(key) > ndim:
        raise CompileError(f"{what}: {len(key)} indices for a {ndim}-d buffer")
    starts, extents = [], []
    for k in key:
        if isinstance(k, slice):
            if k.step is not None and not (isinstance(k.step, numbers.Integral) and k.step == 1):
                raise CompileError(f"{what}: slices with a step are not supported")
            start = as_index(k.start if k.start is not None else 0, what)
            starts.append(start)
            extents.append(None if k.stop is None else sympy.simplify(as_index(k.stop, what) - start))
        else:
            starts.append(as_index(k, what))
            extents.append(None)
    starts += [sympy.Integer(0)] * (ndim - len(key))
    extents += [None] * (ndim - len(key))
    return tuple(starts), tuple(extents)


class RegionRef:
    """`A[by * 128, k * 32]`: a region's start; the extent comes from the other side of T.copy."""

    def __init__(self, buffer: N.Buffer, starts, extents):
        self.buffer, self.starts, self.extents = buffer, starts, extents


def _whole_tile_math(proxy, *_):
    b = proxy.buffer
    raise CompileError(f"arithmetic on the whole {b.scope} {'tensor' if b.scope == N.GLOBAL else 'tile'} "
                       f"{b.name}: element math goes inside `for i, j in T.Parallel(...)`, e.g. "
                       f"x[i, j] = x[i, j] * 2.0")


class BufferProxy(N.RefusesPythonOperators):
    """A global tensor, a shared buffer or a fragment as the traced program sees it."""

    def __init__(self, buffer: N.Buffer):
        self.buffer = buffer

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _whole_tile_math
    __truediv__ = __rtruediv__ = __neg__ = _whole_tile_math
    __pow__ = __rpow__ = __mod__ = __rmod__ = __floordiv__ = __rfloordiv__ = _whole_tile_math

    def _subject(self) -> str:
        return f"the whole tile {self.buffer.name}"

    def __iter__(self):  # without it, Python would iterate by calling __getitem__(0), (1), ... forever
        raise CompileError(f"iterating over {self.buffer.scope} {self.buffer.name}: loop over its elements with "
                           "`for i, j in T.Parallel(...)`, or over tiles with `for k in T.Pipelined(...)`")

    @property
    def shape(self):
        """The buffer's dims: ints, and for a T.dynamic size an index value (usable in index math and T.ceildiv, but
        unknown while tracing)."""
        shape = self.buffer.shape
        if all(isinstance(n, numbers.Integral) for n in shape):
            return shape
        from .dynamic import size_role

        return tuple(n if isinstance(n, numbers.Integral) else IndexProxy(n, (size_role(n),), plain=True)
                     for n in shape)

    @property
    def dtype(self) -> DType:
        return self.buffer.dtype

    @property
    def ndim(self):
        return len(self.buffer.shape)

    def _parallel_index(self, key):
        from .tracer import current

        par = current().parallel
        if par is None:
            return None
        key = key if isinstance(key, tuple) else (key,)
        return tuple(as_index(k, f"indexing {self.buffer.name}") for k in key)

    def __getitem__(self, key):
        index = self._parallel_index(key)
        if index is not None:
            if len(index) != self.ndim:
                raise CompileError(f"{self.buffer.name} has {self.ndim} dims, indexed with {len(index)}")
            if self.buffer.scope != N.GLOBAL:
                self._check_own_element(index)
            return N.ElemRef(self.buffer, index)
        starts, extents = _normalise_key(key, self.ndim, f"indexing {self.buffer.name}")
        return RegionRef(self.buffer, starts, extents)

    def _check_own_element(self, index):
        """Inside T.Parallel a thread reads the fragment elements it holds: those at the T.Parallel indices in
        order (`x[i, j]`), a broadcast of some of them in order (`x[i]` or `x[j]` in T.Parallel(M, N): layout
        inference gives x the layout of the loop with the other dims reduced), or constants (`x[0]`: x held
        whole by every thread). Any other index (`x[j, i]`, `x[63 - i]`, `x[i + 1]`) names another thread's
        registers, which tilegcn does not fetch: refused rather than read wrongly."""
        from .tracer import current

        indices = list(current().parallel[1])
        if _in_order(index, indices) or all(sympy.sympify(k).is_Integer for k in index):
            for axis, (k, size) in enumerate(zip(index, self.buffer.shape)):
                if sympy.sympify(k).is_Integer and not 0 <= int(k) < size:
                    raise CompileError(f"{self.buffer.name}[{', '.join(map(str, index))}]: index {k} on dim {axis}"
                                       f" is outside its shape {list(self.buffer.shape)}")
            return
        names = {s: sympy.Symbol(str(s)[1:]) for s in indices}  # p_i -> i, as the user wrote it
        want = ", ".join(str(names[s]) for s in indices)
        got = ", ".join(str(sympy.sympify(k).xreplace(names)) for k in index)
        raise CompileError(
            f"{self.buffer.scope} {self.buffer.name} read at [{got}] inside "
            f"T.Parallel: a fragment can only be read at the T.Parallel indices in order, [{want}], at some of "
            "them in order (a broadcast such as x[i]), or at constants (x[0]); other elements live in other "
            "threads. To permute, copy through a global tensor")

    def __setitem__(self, key, value):
        from .tracer import current

        tracer = current()
        if tracer.parallel is None:
            raise CompileError(f"element assignment to {self.buffer.name} outside T.Parallel")
        index = self._parallel_index(key)
        value = as_expr(value)
        if N.is_condition(value):
            raise CompileError(f"{self.buffer.name}[...] = {N.print_condition(value)}: a comparison is a condition, "
                               "not an element value; store the value it picks with T.if_then_else(cond, 1.0, 0.0)")
        tracer.record_parallel_store(self.buffer, index, value)

    def __repr__(self):
        return f"<{self.buffer.scope} {self.buffer.name}: {self.buffer.dtype.name}{list(self.buffer.shape)}>"


def _in_order(index, indices: list) -> bool:
    """index is one or more distinct T.Parallel indices, in the loop's order."""
    positions = [indices.index(k) if k in indices else -1 for k in index]
    return bool(positions) and -1 not in positions and positions == sorted(set(positions))


def _decision_refusal(what: str, value) -> str:
    return (f"{what} on {value.describe()} would be decided once, while the program is traced, not on the device "
            "for each block, thread or trip: tilegcn has no device control flow (if/while on device values) yet. "
            "Compute with index arithmetic instead (e.g. a tile start `by * block_M`), pick elements with "
            "T.if_then_else / T.max / T.min, or branch only on compile-time constants (shapes, keyword constants)")


def _refuse_decision(what: str):
    def refuse(self, *_):
        raise CompileError(_decision_refusal(what, self))
    return refuse


def _in_parallel() -> bool:
    from .tracer import current

    return current().parallel is not None


def _compare(name: str, what: str):
    """Inside T.Parallel a comparison of a device value (an index, a runtime scalar) with another or with a number is
    a per-element condition for T.if_then_else (`T.if_then_else(by * block_M + i < M, x[i, j], 0.0)`); its truth
    value is refused with the message a comparison outside gets at once (no element there to decide for)."""
    def compare(self, o):
        if _in_parallel() and (isinstance(o, (N.Expr, _DeviceValue)) or
                               isinstance(o, numbers.Real) and not isinstance(o, bool)):
            condition = N.apply(name, self, o)
            condition.refusal = _decision_refusal(what, self)
            return condition
        raise CompileError(_decision_refusal(what, self))
    return compare


class _DeviceValue(N.RefusesPythonOperators):
    """A value only the device knows: every truth test is refused, every comparison too except a per-element condition
    inside T.Parallel (see _compare). Hashed by identity, so such values may still sit in sets and dicts."""

    def describe(self) -> str:
        raise NotImplementedError

    __hash__ = object.__hash__
    __eq__ = _compare("eq", "comparison `==`")
    __ne__ = _compare("ne", "comparison `!=`")
    __lt__ = _compare("lt", "comparison `<`")
    __le__ = _compare("le", "comparison `<=`")
    __gt__ = _compare("gt", "comparison `>`")
    __ge__ = _compare("ge", "comparison `>=`")
    __bool__ = _refuse_decision("a truth test (`if`, `while`, `and`, `or`, `not`, bool())")


class ScalarProxy(_DeviceValue):
    """A runtime scalar argument (int or float, passed by value)."""

    def __init__(self, param: N.Param):
        self.param = param

    def _subject(self) -> str:
        return f"runtime scalar {self.param.name}"

    def __repr__(self):  # in messages: what the user named it, never the proxy object
        return f"{self.param.name} (runtime {self.param.dtype.name} scalar)"

    def describe(self) -> str:
        return f"the runtime scalar {self.param.name}"

    def _e(self):
        return N.ScalarRef(self.param)

    __element_expr__ = _e

    def __add__(self, o): return self._e() + o
    def __radd__(self, o): return as_expr(o) + self._e()
    def __sub__(self, o): return self._e() - o
    def __rsub__(self, o): return as_expr(o) - self._e()
    def __mul__(self, o): return self._e() * o
    def __rmul__(self, o): return as_expr(o) * self._e()
    def __truediv__(self, o): return self._e() / o
    def __rtruediv__(self, o): return as_expr(o) / self._e()
    def __neg__(self): return -self._e()



def _operand(o):
    """`o` as SymPy for index arithmetic, or None when it is no index operand (Python then tries the other side)."""
    if isinstance(o, IndexProxy):
        return o.expr
    if isinstance(o, (numbers.Real, sympy.Expr)) and not isinstance(o, bool):
        return o
    return None


def _index_op(op):
    def forward(self, o):
        other = _operand(o)
        if other is None:
            return NotImplemented
        return IndexProxy(op(self.expr, other), self.roles + (o.roles if isinstance(o, IndexProxy) else ()))
    return forward


class IndexProxy(_DeviceValue):
    """A value only the device knows: a block index, a T.Pipelined loop variable, a T.Parallel index, or index
    arithmetic on them (and on runtime int scalars). It does index arithmetic (SymPy underneath) and refuses every
    comparison and truth test: SymPy would answer `bx == 0` structurally (False) and Python would take one branch
    for every block."""

    def __init__(self, expr, roles: tuple = (), plain: bool = False):
        self.expr = sympy.sympify(expr)
        self.roles = roles  # what the symbols in expr are, for messages ("the block index bx", ...)
        self.plain = plain  # the value itself, as T.* gave it (no arithmetic yet)

    @classmethod
    def of(cls, expr, role: str) -> "IndexProxy":
        return cls(expr, (role,), plain=True)

    def describe(self) -> str:
        if self.plain:
            return self.roles[0]
        roles = ", ".join(dict.fromkeys(self.roles)) or "a device value"
        return f"`{self.expr}`, which depends on {roles}"

    def _subject(self) -> str:
        return self.describe()

    __add__ = _index_op(lambda a, b: a + b)
    __radd__ = _index_op(lambda a, b: b + a)
    __sub__ = _index_op(lambda a, b: a - b)
    __rsub__ = _index_op(lambda a, b: b - a)
    __mul__ = _index_op(lambda a, b: a * b)
    __rmul__ = _index_op(lambda a, b: b * a)
    __truediv__ = _index_op(lambda a, b: a / b)
    __rtruediv__ = _index_op(lambda a, b: b / a)
    __floordiv__ = _index_op(lambda a, b: a // b)
    __rfloordiv__ = _index_op(lambda a, b: b // a)
    __mod__ = _index_op(lambda a, b: a % b)
    __rmod__ = _index_op(lambda a, b: b % a)
    __pow__ = _index_op(lambda a, b: a ** b)
    __rpow__ = _index_op(lambda a, b: b ** a)

    def __element_expr__(self):
        """Inside T.Parallel an index is an element value too (an int, fp32 in element math: exact below 2^24)."""
        if not _in_parallel():
            raise CompileError(f"cannot use {self.describe()} in an element expression outside T.Parallel")
        if not self.expr.is_integer:
            raise CompileError(f"{self.describe()} is not an integer (index arithmetic with a float: {self.expr}); "
                               "to compute with an index as a number, convert it first: T.cast(i, \"float32\") * 0.5")
        return N.IndexValue(self.expr)

    def __neg__(self): return IndexProxy(-self.expr, self.roles)
    def __pos__(self): return self
    def __abs__(self): return IndexProxy(sympy.Abs(self.expr), self.roles)


    def _refuse_conversion(self, *_):
        raise CompileError(f"{self.describe()} is known only on the device, not while the program is traced: "
                           "int(), range() and Python indexing need a compile-time int; write the index "
                           "arithmetic into the tile start instead (e.g. A[by * block_M, k * block_K])")

    __int__ = __index__ = __float__ = __complex__ = __round__ = __trunc__ = __floor__ = __ceil__ = _refuse_conversion

    def __repr__(self):
        return str(self.expr)

    __str__ = __repr__
