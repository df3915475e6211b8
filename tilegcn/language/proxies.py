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
    if isinstance(x, N.Expr) and not N.is_condition(x):  # int math on one-element variables (`v[0] // 4`)
        from .variables import variable_index

        return variable_index(x, what)
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
    """`A[by * 128, k * 32]`: a region's start; the extent comes from the other side of T.copy. With a slice in the
    key (`Q[b, s0:s1, h, :]`) it is a region as TileLang reads one (`sliced`): a slice spans its extent (`:` and
    missing trailing dims: to the end of the dim), an index one element."""

    def __init__(self, buffer: N.Buffer, starts, extents, sliced: bool = False, open_dims=frozenset()):
        self.buffer, self.starts, self.extents, self.sliced = buffer, starts, extents, sliced
        self.open_dims = open_dims  # dims sliced to their end (`:`, `s:`) or left out of the key

    def sliced_extents(self) -> list:
        """TileLang's extents of a sliced region: per dim the slice's extent, 1 for an index (None: unknown)."""
        out = []
        for k, (start, extent) in enumerate(zip(self.starts, self.extents)):
            if extent is None and k in self.open_dims:
                extent = sympy.simplify(self.buffer.shape[k] - start)
            out.append(1 if extent is None else (int(extent) if sympy.sympify(extent).is_Integer else None))
        return out

    def _not_a_value(self, *_):
        b = self.buffer
        raise CompileError(f"{b.name}[{', '.join(map(str, self.starts))}] outside T.Parallel is the start of a "
                           f"{b.scope} region (for T.copy), not a value to test: an `if` / `while` tests a one-element "
                           "variable (v = T.alloc_var(dtype); v[0]), block ids, loop variables or scalars; compare "
                           "elements inside T.Parallel")

    __bool__ = __lt__ = __le__ = __gt__ = __ge__ = _not_a_value
    __eq__ = __ne__ = _not_a_value
    __hash__ = object.__hash__

    def __element_expr__(self):
        """`s = scales_b[bx, k]` outside T.Parallel, then used in an element expression inside one (TileLang's
        BufferLoad of one global element, DeepGEMM's per-block scale): the element at those indices, read where the
        expression is evaluated. Only a whole index into a global tensor is one value."""
        b = self.buffer
        if b.scope != N.GLOBAL or self.sliced or any(e is not None for e in self.extents):
            raise CompileError(f"{b.name}[{', '.join(map(str, self.starts))}] outside T.Parallel is the start of a "
                               f"{b.scope} region (for T.copy), not a value: read {b.scope} elements inside "
                               "T.Parallel, or copy them into a fragment first")
        return N.ElemRef(b, tuple(self.starts))


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

    def _variable_index(self, key):
        """The index of `v[0]` outside T.Parallel where `v` is a one-element register buffer (T.alloc_var,
        T.alloc_local((1,), ...)): a variable every thread holds, read and assigned as a value; else None."""
        from .tracer import current

        b = self.buffer
        if current().parallel is not None or b.scope != N.FRAGMENT or b.numel != 1:
            return None
        key = key if isinstance(key, tuple) else (key,)
        if len(key) != self.ndim or not all(isinstance(k, numbers.Integral) and k == 0 for k in key):
            return None
        return tuple(sympy.Integer(0) for _ in key)

    def __getitem__(self, key):
        from .variables import is_variable, note_read

        variable = self._variable_index(key)
        if variable is not None:
            ref = N.ElemRef(self.buffer, variable)
            note_read(ref)  # where its value is, should an index need it (language/variables.py)
            return ref
        index = self._parallel_index(key)
        if index is not None:
            if len(index) != self.ndim:
                raise CompileError(f"{self.buffer.name} has {self.ndim} dims, indexed with {len(index)}")
            ref = N.ElemRef(self.buffer, index)
            if is_variable(self.buffer):
                note_read(ref)
            if self.buffer.scope in (N.FRAGMENT, N.SHARED):
                try:  # a thread's own element is read in place (any shared one may be updated by T.atomic_*)
                    self._check_own_element(index, uniform_dims=self.buffer.scope == N.FRAGMENT)
                except CompileError as e:
                    computed = any(not sympy.sympify(k).is_Integer for k in index)
                    if self.buffer.scope == N.FRAGMENT and not computed:
                        raise
                    # another thread's element at an index computed from the loop's (`B[i, j // 2]`): a gather
                    # through LDS (passes/memspace.py stage_parallel); an atomic update raises the refusal
                    ref.gather = computed
                    ref.refusal = e.raw_message
            return ref
        starts, extents = _normalise_key(key, self.ndim, f"indexing {self.buffer.name}")
        keys = key if isinstance(key, tuple) else (key,)
        open_dims = frozenset(d for d in range(self.ndim)
                              if d >= len(keys) or (isinstance(keys[d], slice) and keys[d].stop is None))
        return RegionRef(self.buffer, starts, extents, any(isinstance(k, slice) for k in keys), open_dims)

    def _check_own_element(self, index, uniform_dims=False):
        """Inside T.Parallel a thread reads the fragment elements it holds: those at the T.Parallel indices in
        order (`x[i, j]`), a broadcast of some of them in order (`x[i]` or `x[j]` in T.Parallel(M, N): layout
        inference gives x the layout of the loop with the other dims reduced), or constants (`x[0]`: x held
        whole by every thread). Any other index (`x[j, i]`, `x[63 - i]`, `x[i + 1]`) names another thread's
        registers, which tilegcn does not fetch: refused rather than read wrongly. With `uniform_dims` (a
        fragment), every loop index in order beside indices free of them also passes (`x[k, i]` in
        T.Parallel(M), k a constant or a loop variable: ops/parallel.py's ExpandOf checks it is constant then)."""
        from .tracer import current

        indices = list(current().parallel[1])
        if uniform_dims and _loop_indices_beside_uniform(index, indices):
            return
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
            "them in order (a broadcast such as x[i]), at constants (x[0]), or at all of them in order beside "
            "constants (x[k, i]); other elements live in other threads. To permute, copy through a global tensor")

    def __setitem__(self, key, value):
        from .tracer import current

        tracer = current()
        variable = self._variable_index(key)
        if variable is not None:  # `v[0] = value`: a one-element T.Parallel store
            indices = tuple(sympy.Symbol(f"p_v{axis}", integer=True, nonnegative=True) for axis in range(self.ndim))
            tracer.parallel = (tuple(1 for _ in variable), indices)
            try:
                self.__setitem__(indices, value)
            finally:
                tracer.parallel = None
            return
        if tracer.parallel is None:
            raise CompileError(f"element assignment to {self.buffer.name} outside T.Parallel (outside it, only a "
                               "one-element variable is assigned: `v[0] = ...` with v = T.alloc_var(dtype))")
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


def _loop_indices_beside_uniform(index, indices: list) -> bool:
    """Every T.Parallel index, in the loop's order, on some dims, and indices free of them (the same on every
    thread) on at least one other dim: x[k, i] in T.Parallel(M)."""
    looped = [k for k in index if k in indices]
    uniform = [k for k in index if k not in indices]
    return looped == indices and bool(uniform) and \
        not any(sympy.sympify(k).free_symbols & set(indices) for k in uniform)


def _decision_refusal(what: str, value) -> str:
    return (f"{what} on {value.describe()} would be decided once, while the program is traced, not on the device "
            "for each block or trip. The device decides the tests of `if`, `elif`, `while` and `and` / `or` / `not` "
            "/ chained comparisons written in the kernel function itself (tilegcn rewrites its source); here Python "
            "needed the value at once (a conditional expression `a if c else b`, assert, bool(), or a function whose "
            "source tilegcn cannot read). Write it as an `if` statement in the kernel function, pick elements with "
            "T.if_then_else / T.max / T.min, or branch on compile-time constants (shapes, keyword constants)")


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
        left, right = _device_index(self), _device_index(o)
        if left is not None and right is not None:  # outside T.Parallel: a test for a device if / while
            return DeviceCondition(N.Condition(name, (left, right)))
        if any(isinstance(v, ScalarProxy) and v.param.symbol is None for v in (self, o)):
            raise CompileError(f"{what} on {self.describe()} with {o!r}: a device `if` / `while` compares integer "
                               "indices (block ids, loop variables, int runtime scalars); a float runtime scalar is "
                               "compared per element inside T.Parallel (T.if_then_else)")
        raise CompileError(_decision_refusal(what, self))
    return compare


def _device_index(x):
    """`x` as a SymPy integer for a device comparison (an index, an int runtime scalar, an int), else None."""
    if isinstance(x, IndexProxy):
        return x.expr if x.expr.is_integer else None
    if isinstance(x, ScalarProxy):
        return x.param.symbol
    if isinstance(x, numbers.Integral) and not isinstance(x, bool):
        return sympy.Integer(int(x))
    return None


class DeviceCondition(N.RefusesPythonOperators):
    """A comparison on device values made outside T.Parallel (`bx == 0`, `k < n`): the test of a device `if` /
    `while`, decided on the device. The kernel function's source is rewritten (language/flow.py) so that `if`,
    `while`, `and`, `or`, `not` and chained comparisons hand it over instead of asking Python for its truth."""

    def __init__(self, condition: N.Condition):
        self.condition = condition

    def describe(self) -> str:
        return f"the device condition `{self.condition.text()}`"

    def _subject(self) -> str:
        return self.describe()

    def _combine(self, op: str, o):
        if not isinstance(o, DeviceCondition):
            return NotImplemented
        return DeviceCondition(N.Condition(op, (self.condition, o.condition)))

    def __and__(self, o): return self._combine("and", o)
    def __rand__(self, o): return self._combine("and", o)
    def __or__(self, o): return self._combine("or", o)
    def __ror__(self, o): return self._combine("or", o)
    def __invert__(self): return DeviceCondition(N.Condition("not", (self.condition,)))

    def __bool__(self):
        raise CompileError(_decision_refusal("a truth test", self))

    def __repr__(self):
        return self.condition.text()


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

    def astype(self, dtype):
        """TileLang's `x.astype(dtype)`: the value as an element expression cast to `dtype` (T.cast)."""
        return N.lift(self).astype(dtype)


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
    # the int operations (ir/elemfn.py's INT rows; a float scalar is refused there, naming T.cast)
    def __floordiv__(self, o): return self._e() // o
    def __rfloordiv__(self, o): return as_expr(o) // self._e()
    def __mod__(self, o): return self._e() % o
    def __rmod__(self, o): return as_expr(o) % self._e()
    def __and__(self, o): return self._e() & o
    def __rand__(self, o): return as_expr(o) & self._e()
    def __or__(self, o): return self._e() | o
    def __ror__(self, o): return as_expr(o) | self._e()
    def __xor__(self, o): return self._e() ^ o
    def __rxor__(self, o): return as_expr(o) ^ self._e()
    def __lshift__(self, o): return self._e() << o
    def __rlshift__(self, o): return as_expr(o) << self._e()
    def __rshift__(self, o): return self._e() >> o
    def __rrshift__(self, o): return as_expr(o) >> self._e()
    def __invert__(self): return ~self._e()



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
        """An index is an element value too (an int, fp32 in element math: exact below 2^24): inside T.Parallel, and
        outside it with a one-element variable (`v[0] = bx * 2`, `if v[0] < bx:`)."""
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
