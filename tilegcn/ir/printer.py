"""Stable, readable text of a tile IR kernel; the text is part of the disk-cache key.

Nothing process-dependent is printed (no ids, no addresses); SymPy expressions print canonically.
"""
from __future__ import annotations

from . import nodes as N


def _region(r: N.Region, texts: dict) -> str:
    """`texts`: the text of each SymPy start printed so far (a pipelined loop repeats a few starts in every copy)."""
    starts = ", ".join(texts.get(s) or texts.setdefault(s, _start_text(s)) for s in r.starts)
    return f"{r.buffer.name}[{starts}; {'x'.join(str(e) for e in r.extents)}]"


def _start_text(start) -> str:
    """str(start), SymPy's text, without SymPy's printer (~100 us an expression: it orders the terms through
    sort keys) where `start` is a sum of symbols with positive integer coefficients and a non-negative constant,
    as tile origins are: SymPy prints those terms by symbol name, then the constant ("256*by + 32*k + 96")."""
    terms = start.args if getattr(start, "is_Add", False) else (start,)
    named, const = [], ""
    for t in terms:
        if getattr(t, "is_Integer", False) and t >= 0:
            const = str(int(t))  # (str of a SymPy Integer goes through its printer)
        elif getattr(t, "is_Symbol", False):
            named.append((t.name, t.name))
        elif getattr(t, "is_Mul", False) and len(t.args) == 2 and t.args[0].is_Integer and t.args[0] > 0 \
                and t.args[1].is_Symbol:
            named.append((t.args[1].name, f"{int(t.args[0])}*{t.args[1].name}"))
        else:
            return str(start)
    if len(named) > len({name for name, _ in named}):  # not SymPy's (two symbols of one name): its order may differ
        return str(start)
    return " + ".join([text for _, text in sorted(named)] + ([const] if const else []))


def print_expr(e: N.Expr) -> str:
    if isinstance(e, N.Const):
        return repr(e.value if isinstance(e.value, int) else float(e.value))  # an int literal prints as one
    if isinstance(e, N.ScalarRef):
        return e.param.name
    if isinstance(e, N.IndexValue):
        return f"index({e.expr})"
    if isinstance(e, N.ElemRef):
        return f"{e.buffer.name}[{', '.join(str(i) for i in e.index)}]"
    if isinstance(e, N.Call):  # every element function (ir/elemfn.py) prints as its row name applied to its args
        return f"{e.fn}({', '.join(print_expr(a) for a in e.args)})"
    if isinstance(e, N.Reinterpret):
        return f"reinterpret({e.dtype.name}, {print_expr(e.x)})"
    if isinstance(e, N.Cast):
        return f"cast<{e.dtype.name}>({print_expr(e.x)})"
    raise TypeError(f"unknown expression {e!r}")


class IRPrinter:
    """Where tile ops print themselves (`TileOp.print_to`): lines at the current indent, with the text helpers
    every op shares (regions, index expressions, element expressions)."""

    def __init__(self, indent: str = "  "):
        self.lines: list = []
        self.indent = indent
        self._texts: dict = {}  # SymPy start -> its text (a pipelined loop repeats a few starts in every copy)

    def line(self, text: str):
        self.lines.append(self.indent + text)

    def body(self, stmts):
        """`stmts` (a nested body) one level deeper."""
        outer, self.indent = self.indent, self.indent + "  "
        try:
            for s in stmts:
                s.print_to(self)
        finally:
            self.indent = outer

    def region(self, r: N.Region) -> str:
        return _region(r, self._texts)

    def index(self, start) -> str:
        return _start_text(start)

    def expr(self, e: N.Expr) -> str:
        return print_expr(e)


def print_kernel(k: N.Kernel, layouts: dict | None = None) -> str:
    """`layouts` ({fragment Buffer: ir.layout.Layout}, after layout inference) adds each fragment's layout. A
    Program (several T.Kernel blocks): its parameters, then each kernel in launch order."""
    if isinstance(k, N.Program):
        head = [f"program {k.name}: {len(k.kernels)} kernels launched in order"] + [_param_line(p) for p in k.params]
        return "\n".join(head) + "\n" + "".join(print_kernel(kernel, layouts) for kernel in k.kernels)
    out = [f"kernel {k.name} grid={k.grid} block={k.block}"]
    out += [_param_line(p) for p in k.params]
    for b in k.buffers:
        if b.scope != N.GLOBAL:
            layout = f" layout={layouts[b].describe()}" if layouts and b in layouts else ""
            out.append(f"  alloc {b.scope} {b.name}: {b.dtype.name}{list(b.shape)}{layout}")
    printer = IRPrinter()
    for s in k.body:
        s.print_to(printer)
    return "\n".join(out + printer.lines) + "\n"


def _param_line(p: N.Param) -> str:
    if p.kind == "tensor":
        b = p.buffer
        return (f"  param {p.name}: tensor<{b.dtype.name}> shape={b.shape} strides={b.spec.strides}"
                f" aligned16={b.spec.aligned16}")
    if p.size_of is not None:
        tensor, axis, divisor = p.size_of
        return f"  param {p.name}: dynamic size {p.symbol} = {tensor}.shape[{axis}]" + (
            f" / {divisor}" if divisor != 1 else "")
    return f"  param {p.name}: scalar<{p.dtype.name}>"
