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
        return repr(float(e.value))
    if isinstance(e, N.ScalarRef):
        return e.param.name
    if isinstance(e, N.ElemRef):
        return f"{e.buffer.name}[{', '.join(str(i) for i in e.index)}]"
    if isinstance(e, N.BinOp):
        return f"{e.op}({print_expr(e.a)}, {print_expr(e.b)})"
    if isinstance(e, N.Call):
        return f"{e.fn}({', '.join(print_expr(a) for a in e.args)})"
    if isinstance(e, N.Cast):
        return f"cast<{e.dtype.name}>({print_expr(e.x)})"
    raise TypeError(f"unknown expression {e!r}")


def _stmt(s: N.Stmt, indent: str, out: list, texts: dict):
    if isinstance(s, N.AsyncCopy):
        live = f" while {_start_text(s.live[0])} < {s.live[1]}" if s.live else ""
        out.append(f"{indent}async_copy {_region(s.src, texts)} -> {_region(s.dst, texts)} stage={s.stage}{live}")
    elif isinstance(s, N.Copy):
        out.append(f"{indent}copy {_region(s.src, texts)} -> {_region(s.dst, texts)}")
    elif isinstance(s, N.CommitGroup):
        out.append(f"{indent}commit_group")
    elif isinstance(s, N.WaitGroup):
        out.append(f"{indent}wait_group {s.pending}")
    elif isinstance(s, N.Fill):
        out.append(f"{indent}fill {s.buffer.name} = {float(s.value)!r}")
    elif isinstance(s, N.ParallelStore):
        idx = ", ".join(str(i) for i in s.indices)
        ext = ", ".join(str(e) for e in s.extents)
        out.append(f"{indent}parallel ({idx}) in ({ext}): {s.buffer.name}[{idx}] = {print_expr(s.value)}")
    elif isinstance(s, N.LayoutConvert):
        out.append(f"{indent}convert_layout {s.src.name} -> {s.dst.name} via {s.scratch.name}")
    elif isinstance(s, N.Gemm):
        out.append(f"{indent}gemm {s.A.name}{'^T' if s.transpose_A else ''} @ {s.B.name}"
                   f"{'^T' if s.transpose_B else ''} += {s.C.name}"
                   + (f" stage={s.stage}" if s.stage else ""))
    elif isinstance(s, N.Loop):
        out.append(f"{indent}for {s.var} in pipelined({s.extent}, num_stages={s.num_stages}):")
        for b in s.body:
            _stmt(b, indent + "  ", out, texts)
    elif isinstance(s, N.Swizzle):
        out.append(f"{indent}swizzle panel_size={s.panel_size} num_xcds={s.num_xcds}")
    else:
        raise TypeError(f"unknown statement {s!r}")


def print_kernel(k: N.Kernel, layouts: dict | None = None) -> str:
    """`layouts` ({fragment Buffer: ir.layout.Layout}, after layout inference) adds each fragment's layout."""
    out = [f"kernel {k.name} grid={k.grid} block={k.block}"]
    for p in k.params:
        if p.kind == "tensor":
            b = p.buffer
            out.append(f"  param {p.name}: tensor<{b.dtype.name}> shape={b.shape} strides={b.spec.strides}"
                       f" aligned16={b.spec.aligned16}")
        else:
            out.append(f"  param {p.name}: scalar<{p.dtype.name}>")
    for b in k.buffers:
        if b.scope != N.GLOBAL:
            layout = f" layout={layouts[b].describe()}" if layouts and b in layouts else ""
            out.append(f"  alloc {b.scope} {b.name}: {b.dtype.name}{list(b.shape)}{layout}")
    texts: dict = {}
    for s in k.body:
        _stmt(s, "  ", out, texts)
    return "\n".join(out) + "\n"
