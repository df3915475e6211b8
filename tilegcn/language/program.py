"""TileLang's two ways of writing a jitted tile program, read as TileLang reads them.

- **Closure style**: `@tilegcn.jit` on a factory whose body defines `@T.prim_func def main(A: T.Tensor(...), ...)`
  and returns it. Calling the factory with its (compile-time) arguments gives the jitted kernel; calling that
  with tensors runs it: `layernorm(N, D)(x, gamma, beta, y, mean, rstd)`.
- **Eager style**: the tensors are declared by annotations in the function's body, `A: T.Tensor((M, N), dtype)`,
  and their sizes named with `M, N = T.const("M, N")` (or just named in the annotation). Python never evaluates a
  local variable's annotation (PEP 526), so they are read from the function's source, as TileLang's parser does.
  Every parameter without such an annotation is a compile-time constant, by position or by keyword.
"""
from __future__ import annotations

import ast
import copy
import functools
import inspect
import numbers
import textwrap
import types

from ..errors import ArgumentError, CompileError
from ..ir.types import as_dtype
from .dynamic import DynamicSize
from .tracer import TensorAnnotation, current


class PrimFunc:
    """What `@T.prim_func` makes of a function: the tile program a kernel factory returns (closure style)."""

    def __init__(self, fn):
        self.fn = fn
        functools.update_wrapper(self, fn)

    def __repr__(self):
        return f"<T.prim_func {self.fn.__qualname__}>"


def prim_func(fn):
    """Mark the tile program that a `@tilegcn.jit` kernel factory returns (TileLang's closure style).

    The factory's arguments are compile-time values (sizes, block sizes, dtypes); calling it returns the jitted
    kernel, which is called with tensors. The program's parameters are its tensors, each annotated with
    `T.Tensor(shape, dtype)` (checked on every call).

    Example:

    ```python
    @tilegcn.jit
    def scale_rows(M, N, block_N=64):
        @T.prim_func
        def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
            with T.Kernel(M, threads=64) as bx:
                x = T.alloc_fragment((1, block_N), "float32")
                for k in T.serial(T.ceildiv(N, block_N)):
                    T.copy(X[bx, k * block_N], x)
                    for i, j in T.Parallel(1, block_N):
                        x[i, j] = x[i, j] * 2.0
                    T.copy(x, Y[bx, k * block_N])

        return main

    x = torch.randn(4, 128)
    y = torch.empty_like(x)
    scale_rows(4, 128)(x, y)
    assert torch.equal(y, 2 * x)
    ```
    """
    if isinstance(fn, PrimFunc):
        return fn
    if not inspect.isfunction(fn):
        raise CompileError(f"@T.prim_func decorates a function (the tile program), got {type(fn).__name__}")
    return PrimFunc(fn)


def const(names: str, dtype: str = "int32"):
    """The sizes named in the body's tensor annotations (TileLang's eager style): `M, N = T.const("M, N")`.

    One name gives one int, several (separated by commas or spaces) a tuple. Each is the size of the tensor
    dimension its name labels in an annotation `A: T.Tensor((M, N), dtype)`; a kernel is specialised on it, as on
    every shape. `dtype` is accepted for TileLang's spelling; sizes are ints. Given a number instead of names,
    `T.const(15, T.uint16)` is TVM's typed constant (as TileLang's helpers write it): the number cast to `dtype`.

    Example:

    ```python
    @tilegcn.jit
    def double(X, Y, block=64):
        N = T.const("N")
        X: T.Tensor((N,), "float32")
        Y: T.Tensor((N,), "float32")
        with T.Kernel(T.ceildiv(N, block), threads=64) as bx:
            x = T.alloc_fragment((block,), "float32")
            T.copy(X[bx * block], x)
            for i in T.Parallel(block):
                x[i] = x[i] * 2.0
            T.copy(x, Y[bx * block])

    x = torch.randn(100)
    y = torch.empty_like(x)
    double(x, y)
    assert torch.equal(y, 2 * x)
    ```
    """
    if isinstance(names, numbers.Number) and not isinstance(names, bool):
        from .elementwise import cast

        return cast(names, dtype)
    tracer = current()
    sizes = getattr(tracer, "named_sizes", None)
    if sizes is None:
        raise CompileError(f"T.const({names!r}) names the sizes of tensors annotated in the kernel's body "
                           "(`A: T.Tensor((M, N), dtype)`, TileLang's eager style), and this kernel annotates none: "
                           "read sizes from the tensor instead (`M, N = A.shape`)")
    wanted = [n for n in names.replace(",", " ").split()]
    if not wanted:
        raise CompileError(f"T.const({names!r}): give at least one name")
    missing = [n for n in wanted if n not in sizes]
    if missing:
        known = ", ".join(sizes) or "none"
        raise CompileError(f"T.const: {', '.join(missing)} labels no dimension of a tensor annotated in the body "
                           f"(named sizes: {known}); name it in an annotation, e.g. `A: T.Tensor(({missing[0]},), "
                           "dtype)`")
    values = tuple(sizes[n] for n in wanted)
    return values[0] if len(values) == 1 else values


def dtype(name):
    """A dtype from its name (`"float16"`, `"bfloat16"`, `"float32"`/`"float"`) or a torch dtype. It is also
    TileLang's annotation for a dtype parameter (`dtype: T.dtype = T.float16`).

    Example:

    ```python
    assert T.dtype("float") == T.float32
    ```
    """
    return as_dtype(name)


# -- reading the source ---------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=256)
def _function_node(fn):
    """The ast.FunctionDef of `fn`, or None when its source cannot be read (a lambda, the REPL)."""
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        return None
    try:
        tree = ast.parse(source)
    except SyntaxError:  # a decorator line continued oddly; not TileLang's style anyway
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == fn.__name__:
            return node
    return None


def _is_named(node, name: str) -> bool:
    """`name` or `anything.name`."""
    return (isinstance(node, ast.Name) and node.id == name) or (isinstance(node, ast.Attribute) and node.attr == name)


def is_kernel_factory(fn) -> bool:
    """Whether `fn` defines a `@T.prim_func` (TileLang's closure style) in its body."""
    node = _function_node(fn)
    return node is not None and any(
        isinstance(inner, ast.FunctionDef) and any(_is_named(d, "prim_func") for d in inner.decorator_list)
        for inner in ast.walk(node) if inner is not node)


def _tensor_annotation(node):
    """(shape node, dtype node or None) of `T.Tensor((M, N), dtype)` or `T.Tensor[[M, N], dtype]`, else None."""
    if isinstance(node, ast.Call) and _is_named(node.func, "Tensor") and node.args:
        args = list(node.args) + [kw.value for kw in node.keywords if kw.arg == "dtype"]
    elif isinstance(node, ast.Subscript) and _is_named(node.value, "Tensor"):
        index = node.slice
        args = list(index.elts) if isinstance(index, ast.Tuple) else [index]
    else:
        return None
    return args[0], (args[1] if len(args) > 1 else None)


class ShapeExpression:
    """An annotation's shape given as a variable the body assigned before it, from an expression that is not a
    tuple (`A_shape = (M, K) if not trans_A else (K, M)`; `A: T.Tensor(A_shape, dtype)`): evaluated once the
    constants are known (_EagerCall._evaluated_shape)."""

    def __init__(self, variable: str, node: ast.expr):
        self.variable, self.node = variable, node


def _is_size_call(node) -> bool:
    """`T.const(...)`, `T.dynamic(...)` or `T.symbolic(...)`: an assignment naming sizes, not a shape variable."""
    return isinstance(node, ast.Call) and any(_is_named(node.func, f) for f in ("const", "dynamic", "symbolic"))


def _shape_dims(shape, assigned: dict):
    """The dim nodes of an annotation's shape node: a tuple's elements, a bare size's one dim, or, for a variable the
    body assigned before the annotation (TileLang evaluates annotations where they stand), its value's dims."""
    if isinstance(shape, ast.Name) and shape.id in assigned:
        value = assigned[shape.id]
        if isinstance(value, (ast.Tuple, ast.List)):
            return tuple(value.elts)
        return ShapeExpression(shape.id, value)
    return tuple(shape.elts) if isinstance(shape, (ast.Tuple, ast.List)) else (shape,)


@functools.lru_cache(maxsize=256)
def _body_tensors(fn) -> tuple:
    """(parameter name, dims, dtype node) per `param: T.Tensor(...)` annotation at the top of fn's body; dims is a
    tuple of dim nodes or a ShapeExpression."""
    node = _function_node(fn)
    if node is None:
        return ()
    params = {a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs}
    found, assigned = [], {}
    for stmt in node.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            if _is_size_call(stmt.value):
                assigned.pop(stmt.targets[0].id, None)
            else:
                assigned[stmt.targets[0].id] = stmt.value  # the latest assignment before an annotation counts
        if isinstance(stmt, ast.AnnAssign) and stmt.value is None and isinstance(stmt.target, ast.Name) \
                and stmt.target.id in params:
            annotation = _tensor_annotation(stmt.annotation)
            if annotation is not None and stmt.target.id not in {t[0] for t in found}:  # the first one counts
                shape, dtype_node = annotation
                found.append((stmt.target.id, _shape_dims(shape, assigned), dtype_node))
    return tuple(found)


@functools.lru_cache(maxsize=256)
def _body_dynamic_sizes(fn) -> dict:
    """{variable: size name} for each `M = T.dynamic("m")` (or T.symbolic; `M, N = T.dynamic("m, n")`) at the top of
    fn's body: the annotations naming those variables have dynamic dims."""
    node = _function_node(fn)
    found = {}
    for stmt in node.body if node is not None else ():
        value = stmt.value if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None
        if not (isinstance(value, ast.Call) and (_is_named(value.func, "dynamic") or _is_named(value.func, "symbolic"))
                and value.args and isinstance(value.args[0], ast.Constant) and isinstance(value.args[0].value, str)):
            continue
        target = stmt.targets[0]
        names = [n for n in value.args[0].value.replace(",", " ").split()]
        variables = [t.id for t in target.elts] if isinstance(target, ast.Tuple) else [getattr(target, "id", None)]
        if len(variables) == len(names) and None not in variables:
            found.update(zip(variables, names))
    return found


class EagerProgram:
    """A function in TileLang's eager style: which parameters are tensors, and how to trace it."""

    def __init__(self, fn, tensors: tuple):
        self.fn = fn
        self.signature = inspect.signature(fn)
        for p in self.signature.parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise ArgumentError(f"tilegcn.jit {fn.__name__}: *args/**kwargs are not supported",
                                    location=f"{fn.__code__.co_filename}:{fn.__code__.co_firstlineno}")
        order = list(self.signature.parameters)
        self.tensors = sorted(tensors, key=lambda t: order.index(t[0]))
        self.tensor_names = tuple(t[0] for t in self.tensors)
        # what a call passes and binds by (out_idx's outputs left out: without_arguments)
        self.passed_names, self.call_signature = self.tensor_names, self.signature
        # every other parameter is a compile-time constant (its default, or inspect.Parameter.empty)
        self.defaults = {p.name: p.default for p in self.signature.parameters.values()
                         if p.name not in self.tensor_names}
        if "arch" in self.defaults:
            raise ArgumentError(f"tilegcn.jit {fn.__name__}: 'arch' is reserved for the target arch",
                                location=f"{fn.__code__.co_filename}:{fn.__code__.co_firstlineno}")

    def dynamic_dims(self) -> list:
        """(tensor name, axis, size name) of each annotated dim that is a T.dynamic size (constants aside)."""
        body = _body_dynamic_sizes(self.fn)
        found = []
        for name, dims, _ in self.tensors:
            if isinstance(dims, ShapeExpression):  # known once the constants are: its dims are specialised on
                continue
            for axis, node in enumerate(dims):
                if isinstance(node, ast.Name) and node.id not in self.defaults:
                    outer = self.fn.__globals__.get(node.id)
                    size = body.get(node.id) or (outer.name if isinstance(outer, DynamicSize) else None)
                    if size is not None:
                        found.append((name, axis, size))
        return found

    def without_arguments(self, names: list) -> "EagerProgram":
        """This program with the tensors `names` (out_idx's outputs) left out of what a call passes: the tracer makes
        them from their annotations, and the call's remaining arguments bind as if they were not parameters."""
        program = copy.copy(self)
        program.call_signature = self.signature.replace(
            parameters=[p for p in self.signature.parameters.values() if p.name not in names])
        program.passed_names = tuple(n for n in self.tensor_names if n not in names)
        return program

    @classmethod
    def of(cls, fn):
        """The EagerProgram of `fn`, or None when its body annotates no tensor parameter."""
        tensors = _body_tensors(fn)
        return cls(fn, tensors) if tensors else None

    def split(self, args: tuple, kwargs: dict):
        """(tensor arguments in order, constants by name) of one call, as Python binds it."""
        kwargs = dict(kwargs)
        arch = kwargs.pop("arch", None)
        try:
            bound = self.call_signature.bind_partial(*args, **kwargs)
        except TypeError as e:
            raise ArgumentError(f"tilegcn: {self.fn.__name__}(): {e}") from None
        missing = [n for n in self.passed_names if n not in bound.arguments]
        if missing:
            raise ArgumentError(f"tilegcn: {self.fn.__name__}() is missing tensor argument(s) {', '.join(missing)} "
                                f"(annotated in its body as T.Tensor)")
        tensors = tuple(bound.arguments[n] for n in self.passed_names)
        constants = {k: v for k, v in bound.arguments.items() if k not in self.tensor_names}
        if arch is not None:
            constants["arch"] = arch
        return tensors, constants

    def traced(self, constants: dict):
        """A callable for the tracer: tensors by position, with each body annotation as a TensorAnnotation."""
        return _EagerCall(self, constants)


class _EagerCall:
    """The traced function of an eager program for one set of constants (see EagerProgram.traced)."""

    def __init__(self, program: EagerProgram, constants: dict):
        self.program = program
        self.__name__ = program.fn.__name__
        self.__code__ = program.fn.__code__
        # per tensor, per dim: (what the annotation says, the body variable its size binds or None)
        self.shapes = [self._shape(name, dims, constants) for name, dims, _ in program.tensors]
        self.__signature__ = inspect.Signature([
            inspect.Parameter(name, inspect.Parameter.POSITIONAL_ONLY,
                              annotation=TensorAnnotation([want for want, _ in shape],
                                                          self._dtype(dtype_node, constants)))
            for (name, _, dtype_node), shape in zip(program.tensors, self.shapes)])

    def _shape(self, tensor: str, dims, constants: dict) -> list:
        if isinstance(dims, ShapeExpression):
            return self._evaluated_shape(tensor, dims, constants)
        return [(self._dim(node, constants), self._size_variable(node, constants)) for node in dims]

    @staticmethod
    def _size_variable(node, constants: dict):
        return node.id if isinstance(node, ast.Name) and node.id not in constants else None

    def _dim(self, node, constants: dict):
        """An int (a literal or a constant parameter), a size name (bound from the tensor), or None (anything)."""
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in constants:
                return constants[node.id]
            dynamic = _body_dynamic_sizes(self.program.fn)
            if node.id in dynamic:
                return DynamicSize(dynamic[node.id])
            outer = self.program.fn.__globals__.get(node.id)  # `M = T.dynamic("M")` at module level
            return outer if isinstance(outer, DynamicSize) else node.id
        return None

    def _evaluated_shape(self, tensor: str, shape: ShapeExpression, constants: dict) -> list:
        """The dims of a shape variable's value, evaluated with the constants and every other name standing for the
        dim it labels, as _dim reads a name (`(M, K) if not trans_A else (K, M)` with trans_A=True: (K, M))."""
        names = {n.id for n in ast.walk(shape.node) if isinstance(n, ast.Name)}
        scope = {n: constants[n] if n in constants else _Labelled(n, self._dim(ast.Name(n), constants))
                 for n in names}
        fn = self.program.fn
        try:
            value = eval(compile(ast.Expression(shape.node), fn.__code__.co_filename, "eval"),
                         {"__builtins__": {}}, scope)  # noqa: S307 (the user's own annotation, as Python would)
        except Exception as e:
            raise CompileError(
                f"the annotation of {tensor} takes its shape from {shape.variable} = {ast.unparse(shape.node)}, "
                f"which cannot be evaluated before the body runs ({type(e).__name__}: {e}): only the function's "
                "constants and the size names may appear in it; write the shape as a tuple in the annotation, "
                f"e.g. `{tensor}: T.Tensor((M, K), dtype)`",
                location=f"{fn.__code__.co_filename}:{fn.__code__.co_firstlineno}") from None
        dims = value if isinstance(value, (tuple, list)) else (value,)
        if any(isinstance(d, _Labelled) and isinstance(d.value, DynamicSize) for d in dims):
            raise CompileError(
                f"the annotation of {tensor} takes its shape from {shape.variable}, which names a T.dynamic size: "
                "tilegcn finds dynamic dims in the annotation itself; write the shape as a tuple there, e.g. "
                f"`{tensor}: T.Tensor((M, K), dtype)`",
                location=f"{fn.__code__.co_filename}:{fn.__code__.co_firstlineno}")
        return [(d.value, d.variable) if isinstance(d, _Labelled) else (d if isinstance(d, int) else None, None)
                for d in dims]

    def _dtype(self, node, constants: dict):
        """The annotation's dtype where it can be known before the body runs: a literal, a constant parameter or
        an attribute of a module (`T.float16`); a variable the body assigns (`dtype = T.float`) is not checked."""
        fn = self.program.fn
        if node is None:
            return None
        value = None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            value = node.value
        elif isinstance(node, ast.Name) and node.id in constants:
            value = constants[node.id]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and isinstance(fn.__globals__.get(node.value.id), types.ModuleType):
            value = getattr(fn.__globals__[node.value.id], node.attr, None)
        try:
            return None if value is None else as_dtype(value)
        except ArgumentError:  # not a dtype tilegcn knows: the tensor's own dtype check refuses it
            return None

    def __call__(self, *tensors, **constants):
        names = self.program.tensor_names
        sizes = {}
        for shape, proxy in zip(self.shapes, tensors):
            for (_, variable), size in zip(shape, proxy.shape):  # a T.dynamic size's is an index value
                if variable is not None:
                    sizes.setdefault(variable, size)
        current().named_sizes = sizes
        fn = self.program.fn
        # A size named only in an annotation (never assigned in the body) is a global name to Python: give it the
        # tensor's size, over any module-level variable of that name (TileLang binds it to the dimension).
        scope = {**fn.__globals__, **sizes}
        from .flow import rewritten  # device if / while / range, and / or / not on device values

        body = rewritten(fn, scope)
        return body(**dict(zip(names, tensors)), **constants)


class _Labelled:
    """A name in a shape variable's expression that is not a constant: the dim it labels (a size name or a
    T.dynamic size) and the body variable bound to that dim's size."""

    def __init__(self, variable: str, value):
        self.variable, self.value = variable, value


class KernelFactory:
    """`@tilegcn.jit` on a function that defines and returns a `@T.prim_func` (TileLang's closure style): calling
    it with the factory's arguments gives the jitted kernel (one per distinct set of arguments)."""

    def __init__(self, fn, make_kernel):
        self.fn = fn
        self._make_kernel = make_kernel  # the prim_func's function -> a JITFunction with the decorator's options
        self._kernels = {}
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        try:
            key = (args, tuple(sorted(kwargs.items())))
            hash(key)
        except TypeError:  # an unhashable argument: build the program afresh
            key = None
        kernel = self._kernels.get(key) if key is not None else None
        if kernel is None:
            program = self.fn(*args, **kwargs)
            if not isinstance(program, PrimFunc):
                raise CompileError(f"{self.fn.__name__} defines a @T.prim_func, so tilegcn.jit reads it as a kernel "
                                   f"factory, which must return that prim_func; it returned {program!r}")
            kernel = self._make_kernel(program.fn)
            if key is not None:
                self._kernels[key] = kernel
        return kernel

    def __repr__(self):
        return f"<tilegcn.jit kernel factory {self.fn.__qualname__}>"
