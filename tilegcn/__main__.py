"""Command line (`tilegcn ...`, or `python -m tilegcn ...`): inspect the disk cache; `tilegcn --version`.

    python -m tilegcn cache list          # one line per entry: key, kernel, arch, grid/block, LDS, registers
    python -m tilegcn cache show KEY      # the entry's folder and its meta.json (KEY may be a unique prefix)
    python -m tilegcn cache clear         # remove every entry (only what tilegcn wrote; says what it kept)
    python -m tilegcn asm KEY             # print the entry's kernel.s (the cache dir goes to stderr)
    python -m tilegcn tune list|show ID|clear   # autotuning results (tilegcn.autotune), see tilegcn/autotune.py
    python -m tilegcn estimate KEY [--device MI300X|MI355X] [--trace FILE]   # the timing model's estimate
    python -m tilegcn export kernels.py:fn --arch gfx942,gfx950 --example kernels.py:calls -o DIR   # tilegcn.aot
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from . import __version__
from .cache import Cache
from .errors import TilegcnError


def _fmt_dims(d) -> str:
    return "x".join(str(v) for v in d) if isinstance(d, (list, tuple)) else "?"


def _created_text(meta: dict) -> str:
    value = meta.get("created")
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(value))
    except (TypeError, ValueError, OverflowError, OSError):  # absent, not a number, out of range
        return "?"


def _list(cache: Cache) -> int:
    entries = cache.entries()
    bad = sum(e.problem is not None for e in entries)
    print(f"cache dir: {cache.root} ({len(entries)} entries" + (f", {bad} bad" if bad else "") + ")")
    if entries:
        print(f"{'key':16}  {'kernel':20} {'arch':7} {'grid':>11} {'block':>9} {'lds':>7} {'v/a/s gprs':>11}  "
              f"{'created':19}  source")
    for e in entries:
        if e.problem:  # reported, never trusted: the next compile of that kernel rebuilds it
            print(f"{e.key[:16]}  BAD ENTRY: {e.problem} ({e.path})")
            continue
        m = e.meta
        regs = "/".join(str(m.get(k, "?")) for k in ("vgprs", "agprs", "sgprs"))
        remote = " (from the remote cache)" if m.get("origin") == "remote" else ""
        print(f"{e.key[:16]}  {str(m.get('name', '?')):20} {str(m.get('arch', '?')):7} "
              f"{_fmt_dims(m.get('grid')):>11} {_fmt_dims(m.get('block')):>9} {str(m.get('lds_bytes', '?')):>7} "
              f"{regs:>11}  {_created_text(m):19}  {m.get('source', '')}{remote}")
    return 0


def _origin_text(meta: dict) -> str:
    """'built here', or 'remote (fetched from URL at TIME)' for an entry the remote cache served."""
    if meta.get("origin") != "remote":
        return "built here"
    remote = meta.get("remote") if isinstance(meta.get("remote"), dict) else {}
    return f"remote (fetched from {remote.get('url', '?')} at {_created_text({'created': remote.get('fetched')})})"


def _show(cache: Cache, key: str) -> int:
    entry = cache.find(key)
    print(f"cache dir: {cache.root}")
    print(f"entry:     {entry.path}")
    print(f"origin:    {_origin_text(entry.meta)}")
    for name in ("kernel.ir", "kernel.s", "kernel.hsaco"):
        print(f"  {name:13} {len(entry.data[name]):>9} bytes")
    print(json.dumps(entry.meta, indent=2, sort_keys=True))
    return 0


def _clear(cache: Cache, max_lines: int = 50) -> int:
    report = cache.clear()
    extra = (f" and {len(report.removed_other)} other tilegcn files (locks, temp folders, the LLVM probe memo)"
             if report.removed_other else "")
    print(f"cache dir: {cache.root}: removed {len(report.removed)} entries{extra}")
    for path in report.removed[:max_lines]:
        print(f"  removed {path}")
    if len(report.removed) > max_lines:
        print(f"  ... and {len(report.removed) - max_lines} more")
    if report.left:
        print(f"left {len(report.left)} items in place:")
        for path, why in report.left[:max_lines]:
            print(f"  kept {path}: {why}")
        if len(report.left) > max_lines:
            print(f"  ... and {len(report.left) - max_lines} more")
    return 0


def _asm(cache: Cache, key: str) -> int:
    entry = cache.find(key)
    print(f"cache dir: {cache.root}; entry {entry.path}", file=sys.stderr)
    sys.stdout.flush()
    sys.stdout.buffer.write(entry.data["kernel.s"])  # the verified bytes, as they are
    sys.stdout.buffer.flush()
    return 0


def _estimate(cache: Cache, args) -> int:
    from .perfmodel.entry import estimate_entry

    entry = cache.find(args.key)
    try:
        print(estimate_entry(entry, args.device, trace=args.trace))
    except OSError as e:  # the trace file, not the cache dir, which `find` has read
        if not args.trace:
            raise
        raise TilegcnError(f"tilegcn: cannot write the trace {args.trace}: {e.strerror or e}; give --trace a "
                           "path in a folder you can write") from e
    return 0


def _prog() -> str:
    """How the user started the command line, for usage lines: the console script or `python -m`."""
    started_as = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return "python -m tilegcn" if started_as in ("__main__.py", "-m", "") else "tilegcn"


def version_text() -> str:
    """`tilegcn --version`: the version and where this tilegcn was imported from (which install runs)."""
    here = os.path.dirname(os.path.abspath(__file__))
    return f"tilegcn {__version__} from {here} (python {sys.version_info.major}.{sys.version_info.minor})"


class _Version(argparse.Action):
    """--version: argparse's own action wraps its text to the terminal, which would break the install path."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, **kwargs):
        super().__init__(option_strings, dest, default=argparse.SUPPRESS, nargs=0,
                         help="print the version and the folder this tilegcn runs from, and exit")

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text())
        parser.exit()


def _export(args) -> int:
    """`export`: compile the example calls for each arch into an export folder (see tilegcn/aot.py)."""
    from . import aot

    fn = aot.import_object(args.function, "function")
    if (args.example is None) == (args.shapes is None):
        raise aot.ExportError("tilegcn export: give the calls to build with --example MODULE:NAME or --shapes TEXT "
                              "(one of them)")
    if args.example is not None:
        make = aot.import_object(args.example, "--example")
        calls = make() if callable(make) else make
    else:
        calls = aot.parse_shapes(args.shapes, aot.jit_function_of(fn).arg_names)
    archs = [a.strip() for a in args.arch.split(",") if a.strip()]
    out = aot.export(fn, list(calls), archs, args.out)
    manifest = json.loads((out / aot.MANIFEST).read_text())
    print(f"exported {manifest['function']}: {len(manifest['entries'])} entries to {out}")
    for e in manifest["entries"]:
        shapes = " ".join("x".join(map(str, s["shape"])) + f":{s['dtype']}" if "shape" in s else s["scalar"]
                          for s in e["signature"])
        tuned = f"  tuned {e['tuned']}" if e["tuned"] else ""
        print(f"  {e['arch']}  {shapes}  grid {_fmt_dims(e['grid'])} block {_fmt_dims(e['block'])}{tuned}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog=_prog(), description="tilegcn tools")
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", required=True)
    cache_p = sub.add_parser("cache", help="inspect or clear the disk cache ($TILEGCN_CACHE_DIR)")
    cache_sub = cache_p.add_subparsers(dest="action", required=True)
    cache_sub.add_parser("list", help="list entries")
    show = cache_sub.add_parser("show", help="show one entry's files and meta.json")
    show.add_argument("key", help="cache key or a unique prefix of it")
    cache_sub.add_parser("clear", help="remove every entry (and nothing tilegcn did not write)")
    asm = sub.add_parser("asm", help="print the AMDGCN assembly (kernel.s) of a cache entry")
    asm.add_argument("key", help="cache key or a unique prefix of it")
    tune_p = sub.add_parser("tune", help="inspect or clear the autotuning results (<cache dir>/tune)")
    tune_sub = tune_p.add_subparsers(dest="action", required=True)
    tune_sub.add_parser("list", help="one line per tuned key: id, function, key, arch, winner")
    tune_show = tune_sub.add_parser("show", help="the sweep table of one result")
    tune_show.add_argument("id", help="result id or a unique prefix of it")
    tune_sub.add_parser("clear", help="remove every tuning result")
    est = sub.add_parser("estimate", help="the timing model's estimate of a cache entry's kernel")
    est.add_argument("key", help="cache key or a unique prefix of it")
    est.add_argument("--device", help="MI300X (gfx942) or MI355X (gfx950); default: the entry's arch")
    est.add_argument("--trace", help="write the simulated schedule as Chrome/Perfetto trace JSON here")
    exp = sub.add_parser("export", help="compile a kernel ahead of time for deployment (load it with tilegcn.load)")
    exp.add_argument("function", help="the @tilegcn.jit or @tilegcn.autotune function: path/to/module.py:name")
    exp.add_argument("--arch", required=True, help="comma-separated arches, e.g. gfx942,gfx950")
    exp.add_argument("--example", help="MODULE:NAME of a function (or list) giving the example calls: a list of "
                                       "argument tuples, or of {'args': (...), 'kwargs': {...}}")
    exp.add_argument("--shapes", help="the example calls as text: 'X=256x512:float32,Y=256x512:float32,a=2.0;...' "
                                      "(';' between calls; a tensor is DIMxDIM:dtype, a number a scalar or constant)")
    exp.add_argument("-o", "--out", required=True, help="the export folder to write (replaced if an earlier export)")
    args = parser.parse_args(argv)
    try:
        if args.command == "export":
            return _export(args)
        if args.command == "tune":
            from .autotune import tune_command

            return tune_command(args.action, getattr(args, "id", None))
        cache = Cache(create=False)  # looking does not create the cache dir
        if args.command == "asm":
            return _asm(cache, args.key)
        if args.command == "estimate":
            return _estimate(cache, args)
        if args.action == "list":
            return _list(cache)
        if args.action == "show":
            return _show(cache, args.key)
        return _clear(cache)
    except TilegcnError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `python -m tilegcn asm KEY | head`
        return 0
    except OSError as e:  # the cache dir itself is unreadable
        print(f"error: tilegcn: cannot read the cache dir: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
