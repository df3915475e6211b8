"""Tile ops (tilegcn/ir/ops.py, tilegcn/ops/): every statement kind is one registered class implementing the
protocol, and the printer, verifier and lowering driver reach a new op through it, with no per-kind code."""
from __future__ import annotations

import ast
import dataclasses
import os
import re
from dataclasses import dataclass
from typing import ClassVar

import pytest
import sympy
import torch

import kernels
import tilegcn
from tilegcn import compiler, ops
from tilegcn.errors import CompileError
from tilegcn.ir import nodes as N
from tilegcn.ir.ops import MFMA_ACCUMULATOR, REGISTRY, TileOp, missing_methods, register
from tilegcn.ir.printer import print_kernel
from tilegcn.ir.verify import verify
from tilegcn.language import trace

PACKAGE = os.path.dirname(tilegcn.__file__)


@pytest.fixture
def scratch_registry():
    """Ops registered by a test are removed again afterwards."""
    before = dict(REGISTRY)
    yield
    REGISTRY.clear()
    REGISTRY.update(before)


def _traced(fn, args, arch="gfx942", **constants):
    _, trace_args = fn._signature(args)
    return trace(fn.fn, trace_args, fn._constants(constants), arch)


def test_every_statement_kind_is_a_registered_op_implementing_the_protocol():
    assert set(REGISTRY.values()) >= {ops.Copy, ops.AsyncCopy, ops.Fill, ops.ParallelStore, ops.Gemm,
                                      ops.CommitGroup, ops.WaitGroup, ops.Loop, ops.Swizzle}
    for name, cls in REGISTRY.items():
        assert cls.opname == name and issubclass(cls, TileOp)
        assert missing_methods(cls) == [], cls
        assert dataclasses.is_dataclass(cls), cls
        assert cls.__module__.startswith("tilegcn.ops."), f"{cls.__name__} lives outside tilegcn/ops/"


@dataclass(eq=False)
class _Marker(TileOp):
    """A statement the compiler has never heard of: it prints, verifies and lowers through the protocol only."""

    opname: ClassVar[str] = "test_marker"
    note: str

    def print_to(self, out):
        out.line(f"marker {self.note!r}")

    def verify(self, scope):
        if self.note == "bad":
            raise CompileError("the marker's note must not be 'bad'", location=self.loc)

    def lower(self, ctx, lower_body):
        ctx.b.comment(f"marker {self.note} at depth {len(ctx.b.frames) - 1}")


def _with_marker(kernel: N.Kernel, note: str, nested: bool) -> N.Kernel:
    marker = _Marker(note, loc="user.py:7")
    if nested:  # inside a loop of 2 trips, the loop itself a registered op
        k = sympy.Symbol("m", integer=True, nonnegative=True)
        marker = ops.Loop(k, 2, 1, [marker], loc="user.py:6")
    return dataclasses.replace(kernel, body=[marker] + list(kernel.body))


@pytest.mark.parametrize("nested", [False, True])
def test_a_new_op_prints_verifies_and_lowers_through_the_registry(scratch_registry, nested):
    register(_Marker)
    x = torch.empty(64, 128)
    kernel = _with_marker(_traced(kernels.copy2d, [x, x.clone()]), "hello", nested)
    text = print_kernel(kernel)
    indent = "    " if nested else "  "
    assert f"\n{indent}marker 'hello'\n" in text
    assert text.index("marker") < text.index("copy ")
    verify(kernel)  # a good marker passes
    asm = compiler.lower(kernel, "gfx942").asm
    assert f"// marker hello at depth {int(nested)}" in asm  # a loop body is lowered in its own frame
    with pytest.raises(CompileError, match="must not be 'bad'") as e:
        verify(_with_marker(kernel, "bad", nested))
    assert e.value.location == "user.py:7"


def test_an_error_raised_while_an_op_lowers_names_its_line(scratch_registry):
    @register
    @dataclass(eq=False)
    class Refused(TileOp):
        opname: ClassVar[str] = "test_refused"

        def print_to(self, out):
            out.line("refused")

        def lower(self, ctx, lower_body):
            raise CompileError("cannot lower this")

    x = torch.empty(64, 128)
    kernel = _traced(kernels.copy2d, [x, x.clone()])
    kernel = dataclasses.replace(kernel, body=list(kernel.body) + [Refused(loc="user.py:9")])
    with pytest.raises(CompileError, match="cannot lower this") as e:
        compiler.lower(kernel, "gfx942")
    assert e.value.location == "user.py:9"


def test_registering_an_incomplete_or_clashing_op_is_refused(scratch_registry):
    @dataclass(eq=False)
    class NoLowering(TileOp):
        opname: ClassVar[str] = "test_no_lowering"

        def print_to(self, out):
            out.line("x")

    with pytest.raises(TypeError, match="NoLowering does not implement lower"):
        register(NoLowering)

    @dataclass(eq=False)
    class Unnamed(TileOp):
        def print_to(self, out):
            out.line("x")

        def lower(self, ctx, lower_body):
            pass

    with pytest.raises(TypeError, match="Unnamed does not implement opname"):
        register(Unnamed)

    @dataclass(eq=False)
    class Impostor(Unnamed):
        opname: ClassVar[str] = "copy"

    with pytest.raises(ValueError, match="'copy' is taken by tilegcn.ops.copy.Copy"):
        register(Impostor)
    assert "test_no_lowering" not in REGISTRY and REGISTRY["copy"] is ops.Copy


def _buffers(regions) -> list:
    return [r.buffer.name for r in regions]


def test_access_regions_of_a_traced_gemm():
    """What each statement of tests/kernels.py's GEMM reads and writes, as its source says; a loop reports
    nothing itself (its body's statements report theirs), the gemm's accumulator takes the MFMA layout."""
    a, b, c = torch.empty(128, 64, dtype=torch.bfloat16), torch.empty(64, 128, dtype=torch.bfloat16), \
        torch.empty(128, 128, dtype=torch.bfloat16)
    kernel = _traced(kernels.gemm, [a, b, c], num_stages=2)
    seen = [(s.opname, _buffers(s.reads()), _buffers(s.writes())) for s in N.walk(kernel.body)]
    assert seen == [("swizzle", [], []), ("fill", [], ["acc"]), ("for", [], []),
                    ("copy", ["A"], ["A_s"]), ("copy", ["B"], ["B_s"]), ("gemm", ["A_s", "B_s", "acc"], ["acc"]),
                    ("copy", ["acc"], ["C"])]
    forced = [(buf.name, kind) for s in N.walk(kernel.body) for buf, kind in s.forced_layouts()]
    assert forced == [("acc", MFMA_ACCUMULATOR)]


def _isinstance_over_ops(path: str) -> list:
    """`isinstance(x, <op class>)` calls in a module (the op classes by name)."""
    names = {cls.__name__ for cls in REGISTRY.values()}
    found = []
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance" and len(node.args) == 2:
            classes = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
            for c in classes:
                name = c.attr if isinstance(c, ast.Attribute) else getattr(c, "id", None)
                if name in names:
                    found.append(f"{os.path.relpath(path, PACKAGE)}:{node.lineno} {name}")
    return found


def test_no_module_outside_the_ops_branches_on_an_op_class():
    """The printer, verifier, passes, tracer, jit and driver ask the op (runtime/ never sees tile IR)."""
    found = []
    for root, _, files in os.walk(PACKAGE):
        if os.path.relpath(root, PACKAGE).split(os.sep)[0] in ("ops", "runtime"):
            continue
        found += [x for f in files if f.endswith(".py") for x in _isinstance_over_ops(os.path.join(root, f))]
    assert found == []


def _imports(path: str) -> set:
    tree = ast.parse(open(path).read())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            out.add("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_the_op_protocol_and_the_passes_do_not_import_the_ops():
    """ir/ (protocol, printer, verifier) imports no language, passes or ops; passes/ imports no ops (the ops
    import the passes' lowerings)."""
    for module in ("ops.py", "printer.py", "verify.py"):
        bad = [m for m in _imports(os.path.join(PACKAGE, "ir", module))
               if re.match(r"(\.\.|tilegcn\.)(language|passes|ops)\b|torch", m)]
        assert bad == [], module
    passes = os.path.join(PACKAGE, "passes")
    for f in os.listdir(passes):
        if f.endswith(".py"):
            assert not [m for m in _imports(os.path.join(passes, f)) if re.match(r"(\.\.|tilegcn\.)ops\b", m)], f
