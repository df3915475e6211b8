"""Config sweeps over a ``@tilegcn.jit`` kernel: ``@tilegcn.autotune(configs, key)``, tuned dispatch tables.

    @tilegcn.autotune(configs=tilegcn.Space(block_M=[128, 256], threads=[256, 512]), key=["M", "N", "K"])
    @tilegcn.jit
    def gemm(A: T.Tensor(("M", "K")), B: T.Tensor(("K", "N")), C: T.Tensor(("M", "N")), *, block_M=128, ...): ...

    gemm(a, b, c)                 # first call per key: sweep, pick, remember (memory + disk); later calls dispatch
    gemm.tune(a, b, c)            # the winner's config without launching; gemm.report is the sweep's table
    gemm.export_table("gemm.json"); other.load_table("gemm.json")   # ship the winners, never tune again

A sweep, per key value (default key: every tensor argument's shape; the dtypes always belong to it):
1. prune: the `Space` prune hook, then the compiler's own resource checks made before lowering on a trace of
   each config (`compiler.plan_resources`, the prefix of the compiler's pass list that `compiler.lower` starts
   with: pipelining, the MFMA plan of every T.gemm, the LDS allocation), so a config that cannot fit is skipped,
   with the compiler's reason, before anything is compiled (the register budget needs the lowered code: a config
   that exceeds it is skipped when its compile says so; `feasibility` runs every check up front);
2. compile the rest in `workers` processes (tilegcn/_worker.py: they get the traced tile IR, never import the
   user's script, and share the disk cache, whose per-key locks make that safe); a candidate that fails, or
   whose worker dies, is recorded with its error and the sweep goes on. With a Dask cluster configured
   (`cluster=` or $TILEGCN_TUNE_CLUSTER) its workers compile, and rank with the timing model, instead
   (tilegcn/autotune_cluster.py);
3. rank: a `Ranker` turns a CompiledKernel into a `Score`. On a HIP device the default measures it (`measure`:
   warm-up, repeats with the L2 flushed before each, median); on the emulated device it asks the timing model
   (`kernel.estimate(device=...)`);
4. check: the winner and a reference config (the first other candidate that compiled) run on copies of the
   call's arguments and must agree; a winner that does not is marked failed and the next one is checked.
Results are cached on disk (`<cache dir>/tune/`), keyed by the function's source, the config list, the key
values, dtypes, arch, device, ranker, tilegcn version and compiler sources: a new process with the same shapes
dispatches without tuning. A record is used only when its winner is one of the configs tuned over (else a
warning and a new sweep); one that cannot be written is kept in memory, with a warning.
`python -m tilegcn tune list|show|clear` inspects them (only the records tilegcn wrote).
"""
from __future__ import annotations

import dataclasses
import hashlib
import inspect
import itertools
import json
import math
import os
import pickle
import re
import statistics
import sys
import time
import warnings
from pathlib import Path

from . import __version__
from ._worker import error_text, run_jobs
from .errors import ArgumentError, CompileError, TilegcnError
from .remote_cache import fetch_tuning_record, publish_tuning_record
from .testing import L2Flush, measure
from .testing import copies as _copies  # (a kernel run must leave the caller's tensors as they are)

ENV_WORKERS = "TILEGCN_TUNE_WORKERS"
TABLE_FORMAT = "tilegcn-dispatch-table/1"
RECORD_FORMAT = "tilegcn-tune-record/1"  # inside every tuning record tilegcn writes
_RECORD_NAME = re.compile(r"[0-9a-f]{32}\.json")  # and its file name (`Autotuner._disk_path`)


class TuneError(TilegcnError):
    """No config of a sweep worked, a dispatch table cannot serve a call, or a ranker is unavailable.

    Example:

    ```python
    try:
        scale(x, y)
    except tilegcn.TuneError as e:        # every config failed: the table of reasons is in the message
        print(e)
    ```
    """


class TuneWarning(UserWarning):
    """A tuning record that cannot be used or saved, or a compile worker that died: the sweep goes on."""


# -- search spaces ----------------------------------------------------------------------------------------------
class Space:
    """The cartesian product of keyword values, e.g. ``Space(block_M=[128, 256], threads=[256, 512])``.

    `prune(config)` may drop a config before any check: return a reason (a str, or True) to drop it, a falsy
    value to keep it.

    Example:

    ```python
    tilegcn.Space(block_M=[128, 256], num_stages=[1, 2],
                  prune=lambda c: "too big" if c["block_M"] == 256 and c["num_stages"] == 2 else None)
    ```
    """

    def __init__(self, prune=None, **axes):
        for name, values in axes.items():
            if not isinstance(values, (list, tuple)) or not values:
                raise ArgumentError(f"tilegcn.Space: {name} must be a non-empty list of values, got {values!r}")
        self.axes = {name: list(values) for name, values in axes.items()}
        self.prune = prune

    def configs(self) -> list:
        names = list(self.axes)
        return [dict(zip(names, combo)) for combo in itertools.product(*self.axes.values())]

    def prune_reason(self, config: dict):
        if self.prune is None:
            return None
        why = self.prune(config)
        if not why:
            return None
        return why if isinstance(why, str) else "dropped by the prune hook"

    def __len__(self):
        return math.prod(len(v) for v in self.axes.values())

    def __repr__(self):
        return f"Space({', '.join(f'{k}={v}' for k, v in self.axes.items())})"


# -- ranking ----------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Score:
    """What a ranker says about one compiled candidate: lower `seconds` wins."""

    seconds: float
    tflops: float | None = None
    limit: str = ""  # the limiting resource, where the ranker knows it
    kind: str = ""  # "estimate" (the timing model), "measured", or a custom ranker's word


class EstimateRanker:
    """The timing model's estimate for a device (e.g. "MI355X")."""

    kind = "estimate"

    def __init__(self, device: str):
        self.device = device
        self.name = f"estimate:{device}"

    def __call__(self, kernel, args) -> Score:
        e = kernel.estimate(device=self.device, args=args)  # runs part of the kernel: `args` are the sweep's copies
        breakdown = getattr(e, "breakdown", None) or {}
        limit = breakdown.get("limiting") or breakdown.get("limit") or ""
        return Score(float(e.seconds), getattr(e, "tflops", None), str(limit), "estimate")


class MeasureRanker:
    """Measured time on the HIP device: median of `repeats` runs, L2 (and MALL) flushed before each."""

    kind = "measured"
    name = "measure"

    def __init__(self, warmup: int = 3, repeats: int = 20):
        self.warmup, self.repeats = warmup, repeats
        self._flush = L2Flush()  # tilegcn.testing's, shared with do_bench

    def __call__(self, kernel, args) -> Score:
        times = measure(lambda: kernel(*args), warmup=self.warmup, repeats=self.repeats, flush=self._flush)
        return Score(statistics.median(times), None, "", "measured")


def default_ranker(device: str | None):
    """Measured time on a HIP device; the timing model's estimate for `device` on the emulator."""
    from .runtime import device_name

    if device_name() == "hip":
        return MeasureRanker()
    return EstimateRanker(device or _arch_device(None))


def _arch_device(arch) -> str:
    """The device the timing model ranks for by default: the arch's part (gfx942 -> MI300X)."""
    from .amdgcn.arch import DEFAULT_ARCH, TIMING, get_arch

    return TIMING[get_arch(arch or DEFAULT_ARCH).name].device


def _device_arch(device: str) -> str:
    from .amdgcn.arch import TIMING

    for arch, t in TIMING.items():
        if t.device.upper() == str(device).upper():
            return arch
    raise ArgumentError(f"tilegcn.autotune: unknown device {device!r}; known: "
                        f"{', '.join(t.device for t in TIMING.values())}")


# -- feasibility ------------------------------------------------------------------------------------------------
def feasibility(jitfn, args, config: dict, arch: str) -> str | None:
    """None when `config` passes every resource check of the compiler on a trace of it (`compiler.check_resources`:
    the passes `compile` starts with, through register allocation), else the compiler's reason: a config is
    feasible exactly when it compiles."""
    try:
        _, trace_args, dynamic = jitfn._specialise(args)
    except ArgumentError as e:
        return _reason(e)
    _, why = _traced_if_feasible(jitfn, trace_args, config, arch, every_check=True, dynamic=dynamic)
    return why


def _traced_if_feasible(jitfn, trace_args, config: dict, arch: str, every_check: bool = False, dynamic=None):
    """(the traced kernel, None), or (None, the compiler's reason) when it refuses `config`.

    By default cheap (a trace and `compiler.plan_resources`, no statement lowered: the sweep's first step): the
    checks `compiler.lower` starts with, so a config skipped here is one `compile` refuses with the same error;
    the register budget, known only once the code is lowered, is checked by the compile itself (a ResourceError
    there skips the config too). `every_check`: `compiler.check_resources`, every check."""
    from .language import trace
    from .compiler import check_resources, plan_resources

    try:
        constants = jitfn._constants(config)
        program = jitfn.fn if jitfn._eager is None else jitfn._eager.traced(constants)  # TileLang's eager style
        kernel = trace(program, trace_args, constants, arch, jitfn.out_idx, dynamic=dynamic)  # T.dynamic sizes
        (check_resources if every_check else plan_resources)(kernel, jitfn.options.with_arch(arch))
    except (CompileError, ArgumentError) as e:
        return None, _reason(e)
    return kernel, None


def _refused_for_resources(reason: str) -> bool:
    """A compile failure that is the compiler's resource check (the register budget): the config is infeasible,
    as `feasibility` says, not a failure of the sweep's."""
    return reason.startswith("ResourceError:")


_reason = error_text


# -- the sweep's record -----------------------------------------------------------------------------------------
@dataclasses.dataclass
class Row:
    config: dict
    status: str = "pending"  # skipped | failed | ok | best
    reason: str = ""
    score: Score | None = None
    kernel: object = None
    traced: object = None  # the tile IR of the config (what a compile worker gets)


@dataclasses.dataclass
class TuneReport:
    """One sweep: every config with its status, and the winner."""

    function: str
    key: dict
    arch: str
    device: str
    rows: list
    best: dict | None
    notes: list = dataclasses.field(default_factory=list)
    flops: float | None = None
    phases: dict = dataclasses.field(default_factory=dict)  # seconds: check, compile, rank, verify

    def table(self, top: int | None = None) -> str:
        """One line per config (with `top`: the `top` best ranked and every skipped or failed one)."""
        kinds = {r.score.kind for r in self.rows if r.score is not None}
        head = ("config", kinds.pop() if len(kinds) == 1 and "" not in kinds else "time", "TFLOP/s", "limit",
                "status")
        rows, hidden = self.rows, 0
        if top is not None:
            ranked = sorted((r for r in self.rows if r.score is not None and r.status in ("ok", "best")),
                            key=lambda r: r.score.seconds)
            rows = ranked[:top] + [r for r in self.rows if r.status not in ("ok", "best")]
            hidden = len(ranked) - len(ranked[:top])
        lines = []
        for r in rows:
            cfg = " ".join(f"{k}={v}" for k, v in r.config.items())
            s = r.score
            time_s = "" if s is None else f"{s.seconds * 1e6:.1f} us"
            tflops = s.tflops if s is not None and s.tflops is not None else (
                self.flops / s.seconds * 1e-12 if s is not None and self.flops else None)
            status = r.status + (f": {r.reason}" if r.reason else "")
            lines.append((cfg, time_s, "" if tflops is None else f"{tflops:.1f}", "" if s is None else s.limit,
                          status))
        widths = [max(len(x) for x in col) for col in zip(head, *lines)][:4]
        fmt = lambda row: "  ".join(v.ljust(w) for v, w in zip(row[:4], widths)) + "  " + row[4]  # noqa: E731
        key = ", ".join(f"{k}={v}" for k, v in self.key.items())
        out = [f"{self.function} [{key}] on {self.arch} ({self.device})", fmt(head)] + [fmt(r) for r in lines]
        if hidden:
            out.append(f"... and {hidden} more ranked configs")
        return "\n".join(out + self.notes)

    __str__ = table

    def to_json(self) -> dict:
        return {
            "function": self.function, "key": self.key, "arch": self.arch, "device": self.device,
            "best": self.best, "notes": self.notes,
            "rows": [{"config": r.config, "status": r.status, "reason": r.reason,
                      "score": None if r.score is None else dataclasses.asdict(r.score)} for r in self.rows],
        }


# -- the tuning cache on disk -----------------------------------------------------------------------------------
def tune_dir(create: bool = True) -> Path:
    from .cache import cache_dir

    path = cache_dir(create) / "tune"
    if create:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def tuned_entries() -> list:
    """(path, record) of every tuning record tilegcn wrote, newest first (other files in `tune/` are not
    tilegcn's: never listed, shown or removed)."""
    root = tune_dir(create=False)
    out = []
    for p in sorted(root.iterdir()) if root.is_dir() else []:
        if _RECORD_NAME.fullmatch(p.name) and p.is_file() and not p.is_symlink():
            try:
                record = _read_record(p)
            except OSError:
                continue
            if isinstance(record, dict) and record.get("format") == RECORD_FORMAT:
                out.append((p, record))
    return sorted(out, key=lambda e: -e[1].get("created", 0) if isinstance(e[1].get("created"), (int, float))
                  else 0)


def _read_record(path: Path):
    """The JSON value in `path`, None when it is not JSON (an OSError when it cannot be read; never a
    symbolic link, a device file or a file past the size limit, read whole)."""
    from .cache import SMALL_FILE_LIMIT, read_limited

    try:
        return json.loads(read_limited(path, SMALL_FILE_LIMIT))
    except ValueError:  # UnicodeDecodeError included
        return None


def _write_json(path: Path, record: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)  # atomic: a reader sees the old record or the new one
    except BaseException:
        tmp.unlink(missing_ok=True)  # e.g. a partial file when the disk is full
        raise


def _canonical(config) -> str:
    """A config as its record stores it (JSON: tuples become lists), to compare a record with the space."""
    return json.dumps(_jsonable(config), sort_keys=True, default=repr)


# -- the decorator ----------------------------------------------------------------------------------------------
def _jsonable(value):
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def _tuplify(value):
    if isinstance(value, list):
        return tuple(_tuplify(v) for v in value)
    return value


class Autotuner:
    """A ``@tilegcn.jit`` function with a config sweep per key value (see the module doc).

    Example:

    ```python
    scale.tune(x, y)                      # the winning config for these arguments' key, without launching
    scale.export_table("scale.json")      # every tuned key -> config (a dispatch table)
    ```
    """

    def __init__(self, fn, configs, key=None, *, device=None, ranker=None, workers=None, verify=True,
                 progress=True, verbose=True, flops=None, table=None, cluster=None):
        from .jit import JITFunction

        if not isinstance(fn, JITFunction):
            raise ArgumentError("tilegcn.autotune must decorate a @tilegcn.jit function (put @tilegcn.jit below it)")
        self.fn = fn
        self.space = configs if isinstance(configs, Space) else None
        self.configs = configs.configs() if isinstance(configs, Space) else [dict(c) for c in configs]
        if not self.configs:
            raise ArgumentError(f"tilegcn.autotune({fn.name}): configs is empty")
        for c in self.configs:
            for k in c:
                if k not in fn.defaults:
                    raise ArgumentError(f"tilegcn.autotune({fn.name}): config key {k!r} is not a keyword-only "
                                        f"parameter of {fn.name} ({', '.join(fn.defaults)})")
        self.key_names = None if key is None else list(key)
        self._check_key_names()
        self.device = device
        self.arch = None if device is None else _device_arch(device)
        self.ranker = ranker
        self.workers = workers
        self.cluster = cluster  # a Dask scheduler: see tilegcn/autotune_cluster.py
        self.verify = verify
        self.progress = progress
        self.verbose = verbose
        self.flops = flops
        self.results = {}  # key -> config (memory memo, from sweeps, the disk cache or a table)
        self.reports = {}  # key -> TuneReport of this process's sweeps
        self.report = None  # the last sweep's
        self.table = None  # key -> config of a loaded dispatch table; then calls never tune
        self.stats = {"sweeps": 0, "disk_hits": 0, "table_hits": 0, "remote_hits": 0}
        self.name = fn.name
        if table is not None:
            self.load_table(table)

    # -- keys ---------------------------------------------------------------------------------------------------
    def _check_key_names(self):
        if self.key_names is None:
            return
        known = set(self.fn.arg_names)
        for p in inspect.signature(self.fn.fn).parameters.values():
            known.update(d for d in getattr(p.annotation, "shape", ()) if isinstance(d, str))
        unknown = [k for k in self.key_names if k not in known]
        if unknown:
            raise ArgumentError(f"tilegcn.autotune({self.name}): key {unknown} names no argument and no named "
                                f"size of a T.Tensor annotation; known: {sorted(known)}")

    TAIL = 3  # the key's last items, which must match exactly: constants passed, dtypes, arch

    def key_of(self, args, kwargs=None) -> tuple:
        """((name, value), ...) of the key, then ("constants", the keyword arguments passed but not tuned),
        ("dtypes", (...)) and ("arch", ...): what selects a config."""
        import torch

        kwargs = kwargs or {}
        if len(args) != len(self.fn.arg_names):
            raise self.fn._arity_error(args)
        tensors = [(n, a) for n, a in zip(self.fn.arg_names, args) if isinstance(a, torch.Tensor)]
        tail = (("constants", tuple(sorted((k, v) for k, v in kwargs.items() if k != "arch"))),
                ("dtypes", tuple(str(a.dtype).replace("torch.", "") for _, a in tensors)),
                ("arch", self._arch(kwargs)))
        if self.key_names is None:
            return tuple((f"{n}.shape", tuple(a.shape)) for n, a in tensors) + tail
        sizes = dict(zip(self.fn.arg_names, args))
        params = inspect.signature(self.fn.fn).parameters
        for n, a in tensors:
            for axis, d in enumerate(getattr(params[n].annotation, "shape", ())):
                if isinstance(d, str) and axis < a.dim():
                    sizes.setdefault(d, a.shape[axis])
        missing = [k for k in self.key_names if k not in sizes]
        if missing:
            self.fn._signature(args)  # the argument error, when there is one
            raise ArgumentError(f"tilegcn.autotune({self.name}): no size {missing} in these arguments")
        return tuple((k, sizes[k]) for k in self.key_names) + tail

    # -- calls --------------------------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        args, kwargs = self._split(args, kwargs)
        config = self.tune(*args, **kwargs)
        return self.fn(*args, **self._merge(config, kwargs))

    def _split(self, args, kwargs):
        """(runtime arguments, keyword arguments) of a call that passes compile-time constants by position (TileLang's
        `tl_topk(logits, topk, ...)`: an eager program's constants, or constants after the runtime arguments), as the
        jit function binds them."""
        if self.fn._eager is not None:
            return self.fn._eager.split(args, kwargs)
        if len(args) > len(self.fn.arg_names):
            return self.fn._bind_constants(args, kwargs)
        return args, kwargs

    def _merge(self, config, kwargs):
        """The call's keyword arguments with the config's: a tuned parameter the call passes too takes the config's
        value, as TileLang's autotuner merges them (its top-k example passes `blk_m=` to the tuned function)."""
        return {**kwargs, **config}

    def tune(self, *args, **kwargs) -> dict:
        """The config for these arguments: remembered, from a dispatch table, from the disk cache, or a sweep
        (which compiles and ranks but does not launch the winner on these arguments' outputs)."""
        args, kwargs = self._split(args, kwargs)
        key = self.key_of(args, kwargs)
        config = self.results.get(key)
        if config is not None:
            return config
        self.fn._signature(args)  # bad arguments are the caller's error, not every config's
        if self.table is not None:
            config = self.results[key] = self._from_table(key)
            self.stats["table_hits"] += 1
            return config
        arch = key[-1][1]
        disk = self._disk_path(key, arch)
        config = self._recorded(disk)
        if config is not None:
            self.stats["disk_hits"] += 1
        elif fetch_tuning_record(disk) and (config := self._recorded(disk)) is not None:  # another host tuned it
            self.stats["remote_hits"] += 1
        else:
            report = self._sweep(args, kwargs, key, arch)
            config = report.best
            record = report.to_json()
            record.update(format=RECORD_FORMAT, created=time.time(), source=self.fn.source_location,
                          tilegcn_version=__version__)
            self._save(disk, record)
        self.results[key] = config
        return config

    def _recorded(self, path: Path) -> dict | None:
        """The config a tuning record on disk names, when it is one of this space's configs; None when there
        is no record, or (with a TuneWarning) when it cannot be used: then the caller tunes again."""
        try:
            record = _read_record(path)
        except OSError:  # none yet, or unreadable (e.g. `tune/` is a file): tune, and `_save` says what fails
            return None
        problem = self._record_problem(record)
        if problem is None:
            return dict(next(c for c in self.configs if _canonical(c) == _canonical(record["best"])))
        warnings.warn(f"tilegcn.autotune({self.name}): ignoring the tuning record {path}: {problem}; "
                      "tuning again", TuneWarning, stacklevel=4)
        return None

    def _record_problem(self, record) -> str | None:
        """Why `record` cannot choose this function's config, or None. Its `best` must be exactly one of the
        configs tuned over: a record must not set any other constant (`s=100.0` would change the math) nor
        the target (`arch`)."""
        if not isinstance(record, dict):
            return "it is not a JSON object"
        if record.get("format") != RECORD_FORMAT:
            return f"its format is {record.get('format')!r}, not {RECORD_FORMAT!r}"
        best = record.get("best")
        if not isinstance(best, dict):
            return f"its best config is {best!r}, not a config"
        tuned = {k for c in self.configs for k in c}
        extra = sorted(set(best) - tuned)
        if extra:
            return f"its best config sets {extra}, which are not tuned (tuned: {sorted(tuned)})"
        if not any(_canonical(c) == _canonical(best) for c in self.configs):
            return f"its best config {_config_text(best)} is not one of the configs tuned over"
        return None

    def _save(self, path: Path, record: dict) -> None:
        """Write a tuning record; when it cannot be written (read-only or full disk, `tune/` is a file, a config
        value JSON cannot hold), the result stays in this process's memory and a TuneWarning says so."""
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            _write_json(path, record)
            publish_tuning_record(path)  # to the fleet's remote cache, when $TILEGCN_REMOTE_CACHE names one
        except (OSError, TypeError, ValueError) as e:
            warnings.warn(f"tilegcn.autotune({self.name}): cannot save the tuning result to {path} ({e}); "
                          "keeping it in this process only", TuneWarning, stacklevel=4)

    def _arch(self, kwargs) -> str:
        from .jit import resolve_arch

        arch = kwargs.get("arch")  # "" is refused by resolve_arch, never read as "the default"
        return resolve_arch(arch if arch is not None else self.arch or self.fn.arch)

    def _device_label(self, arch) -> str:
        from .runtime import device_name

        return f"{device_name()} device, ranked by {_ranker_name(self._ranker(arch))}"

    def _ranker(self, arch):
        if self.ranker is not None:
            return self.ranker
        return default_ranker(self.device or _arch_device(arch))

    def _disk_path(self, key, arch) -> Path:
        from .cache import compiler_hash

        try:
            source = inspect.getsource(self.fn.fn)
        except (OSError, TypeError):
            source = self.fn.fn.__code__.co_code.hex()
        ident = json.dumps([source, self.configs, _jsonable(key), arch, self._device_label(arch), __version__,
                            compiler_hash()], sort_keys=True, default=repr)
        return tune_dir(create=False) / f"{hashlib.sha256(ident.encode()).hexdigest()[:32]}.json"

    # -- the sweep ----------------------------------------------------------------------------------------------
    def _sweep(self, args, kwargs, key, arch) -> TuneReport:
        self.stats["sweeps"] += 1
        extra = {k: v for k, v in kwargs.items() if k != "arch"}
        rows = [Row(dict(c)) for c in self.configs]
        progress = _Progress(len(rows), f"tune {self.name}", self.progress)
        phases = {}
        clock = time.perf_counter()
        try:
            _, trace_args, dynamic = self.fn._specialise(args)
            for row in rows:  # 1. prune and the compiler's resource checks
                why = self.space.prune_reason(row.config) if self.space else None
                if not why:
                    row.traced, why = _traced_if_feasible(self.fn, trace_args, self._merge(row.config, extra), arch,
                                                          dynamic=dynamic)
                if why:
                    row.status, row.reason = "skipped", why
                    progress.update()
            live = [r for r in rows if r.status == "pending"]
            phases["check"], clock = time.perf_counter() - clock, time.perf_counter()
            self._compile(live, args, extra, arch, progress)  # 2.
            for row in rows:
                row.traced = None  # the tile IR was for the workers: don't keep it in the report
            phases["compile"], clock = time.perf_counter() - clock, time.perf_counter()
            ranker = self._ranker(arch)
            scratch = _copies(args)  # a ranker may run the kernel: keep the caller's tensors as they are
            seen = {}  # configs that compile to the same code object (e.g. a knob the compiler ignores) rank once
            for row in (r for r in live if r.status == "pending"):  # 3.
                same = (row.kernel.metadata.get("hsaco_sha256"), row.kernel.grid, row.kernel.block)
                try:
                    if row.score is None:  # not ranked on a cluster already
                        row.score = seen[same] if same in seen else ranker(row.kernel, scratch)
                    seen[same] = row.score
                    row.status = "ok"
                except Exception as e:  # a candidate that cannot run is recorded, not fatal
                    row.status, row.reason = "failed", _reason(e)
                progress.update()
            phases["rank"], clock = time.perf_counter() - clock, time.perf_counter()
        finally:
            progress.close()
        report = TuneReport(self.name, {k: _jsonable(v) for k, v in key}, arch, self._device_label(arch), rows,
                            None, flops=self._flops(args), phases=phases)
        self._pick(report, args)  # 4.
        phases["verify"] = time.perf_counter() - clock
        where = self._cluster_note or f"{self._workers(len(rows))} compile worker(s)"
        report.notes.append("sweep: " + ", ".join(f"{k} {v:.1f} s" for k, v in phases.items()) + f" ({where})")
        self.reports[key] = self.report = report
        if self.verbose:
            print(report.table(), file=sys.stderr)
        if report.best is None:
            raise TuneError(f"tilegcn.autotune({self.name}): no config worked for {report.key}:\n{report.table()}")
        return report

    def _flops(self, args):
        return None if self.flops is None else self.flops(*args)

    def _workers(self, n) -> int:
        workers = self.workers or int(os.environ.get(ENV_WORKERS, 0)) or os.cpu_count() or 1
        return max(1, min(workers, n))

    def _compile(self, rows, args, extra, arch, progress):
        workers = self._workers(len(rows))
        self._cluster_note = self._on_cluster(rows, args, extra, arch, progress)  # takes the rows it handled
        rest = [r for r in rows if r.status == "pending" and r.traced is not None]
        if rest and workers > 1 and os.name == "posix":
            self._compile_in_workers(rest, extra, arch, min(workers, len(rest)), progress)
        for row in rows:  # in this process: compile (or, after the workers, a disk-cache hit)
            if row.status != "pending":
                continue
            try:
                row.kernel = self.fn.compile(*args, arch=arch, **self._merge(row.config, extra))
            except Exception as e:
                why = _reason(e)
                row.status, row.reason = "skipped" if _refused_for_resources(why) else "failed", why
                progress.update()

    def _compile_in_workers(self, rows, extra, arch, workers, progress):
        """Worker processes lower and assemble each config's traced tile IR into the disk cache; a config that
        fails there is marked failed (the one a dying worker was compiling too: the others go on in a fresh
        worker); the ones a worker could not take are left for this process."""
        jobs, sent = [], []
        for row in rows:
            described = self.fn._described(self.fn._constants(self._merge(row.config, extra)))
            try:
                jobs.append(pickle.dumps((row.traced, self.fn.options.with_arch(arch), described)))
            except Exception:  # noqa: BLE001 - an IR the pickle cannot take: this process compiles it
                continue
            sent.append(row)
        for index, reply in run_jobs(jobs, workers):
            if reply is None or reply[0] == "load":  # built, or left to this process
                continue
            row = sent[index]
            stage, error = reply
            row.status, row.reason = "skipped" if _refused_for_resources(error) else "failed", error
            progress.update()
            if stage == "died":
                warnings.warn(f"tilegcn.autotune({self.name}): config {_config_text(row.config)}: {error}; the sweep "
                              "goes on without it", TuneWarning, stacklevel=5)

    # -- a Dask cluster (tilegcn/autotune_cluster.py) -----------------------------------------------------------
    _cluster_note = None

    def _on_cluster(self, rows, args, extra, arch, progress) -> str | None:
        """Compile (and rank) `rows` on the configured Dask cluster; where they ran, or None when no cluster is
        configured or reachable (then this machine's workers do it)."""
        from .autotune_cluster import cluster_spec, run_on_cluster

        spec = cluster_spec(self.cluster)
        return None if spec is None else run_on_cluster(self, spec, rows, args, extra, arch, progress)

    # -- dispatch tables ----------------------------------------------------------------------------------------
    def export_table(self, path) -> int:
        """Write every config this process knows (sweeps, disk cache, a loaded table) to a JSON dispatch table;
        the number of entries."""
        entries = [{"key": [[k, _jsonable(v)] for k, v in key], "config": config}
                   for key, config in self.results.items()]
        _write_json(Path(path), {"format": TABLE_FORMAT, "function": self.name, "key_names": self.key_names,
                                 "entries": entries})
        return len(entries)

    def load_table(self, path) -> int:
        """Serve calls from a dispatch table: the exact key, else the nearest tuned shape with the same dtypes;
        no call tunes afterwards. The number of entries."""
        from .cache import ENTRY_FILE_LIMIT, read_limited

        try:
            record = json.loads(read_limited(path, ENTRY_FILE_LIMIT, follow_symlinks=True))  # never /dev/zero whole
            if record.get("format") != TABLE_FORMAT:
                raise ValueError(f"format is {record.get('format')!r}, expected {TABLE_FORMAT!r}")
            table = {tuple((k, _tuplify(v)) for k, v in e["key"]): dict(e["config"]) for e in record["entries"]}
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise TuneError(f"tilegcn.autotune({self.name}): cannot read dispatch table {path}: {e}") from None
        if record.get("key_names") != self.key_names:
            raise TuneError(f"tilegcn.autotune({self.name}): dispatch table {path} is keyed by "
                            f"{record.get('key_names') or 'tensor shapes'}, this function by "
                            f"{self.key_names or 'tensor shapes'}")
        self.table = {**(self.table or {}), **table}
        self.results.update(table)
        self.table_path = str(path)
        return len(table)

    def _from_table(self, key) -> dict:
        names = [k for k, _ in key]
        best, best_d = None, math.inf
        for tkey, config in self.table.items():
            if [k for k, _ in tkey] != names or tkey[-self.TAIL:] != key[-self.TAIL:]:
                continue
            d = _distance([v for _, v in key[:-self.TAIL]], [v for _, v in tkey[:-self.TAIL]])
            if d < best_d:
                best, best_d = config, d
        if best is None:
            tuned = sorted({str(dict(t[-self.TAIL:])) for t in self.table})
            raise TuneError(f"tilegcn.autotune({self.name}): dispatch table {self.table_path} has no entry for "
                            f"{dict(key[-self.TAIL:])} (tuned: {', '.join(tuned)})")
        return best

    def _pick(self, report, args):
        """Best score first; with `verify`, the winner must agree with a reference config on these arguments
        (the function's defaults when they are a candidate, else the next best): one that does not is failed."""
        ranked = sorted((r for r in report.rows if r.status == "ok"), key=lambda r: r.score.seconds)
        verify = self.verify(*args) if callable(self.verify) else self.verify
        if ranked and not verify:
            report.notes.append("not checked: verify is off for these arguments")
        for winner in ranked:
            others = [r for r in ranked if r is not winner and r.status == "ok"]
            defaults = {k: self.fn.defaults[k] for k in winner.config}
            reference = next((r for r in others if r.config == defaults), others[0] if others else None)
            if not verify or reference is None:
                if verify:
                    report.notes.append("not checked: no other config compiled to compare with")
                winner.status, report.best = "best", winner.config
                return
            diff = _compare(winner.kernel, reference.kernel, args)
            if diff is None:
                winner.status, report.best = "best", winner.config
                report.notes.append(f"checked: the winner's output matches the reference config "
                                    f"({_config_text(reference.config)}) on these arguments")
                return
            winner.status, winner.reason = "failed", f"output differs from {_config_text(reference.config)}: {diff}"


def _ranker_name(ranker) -> str:
    return getattr(ranker, "name", None) or getattr(ranker, "__qualname__", None) or type(ranker).__qualname__


def _config_text(config) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items())


def _compare(kernel, reference, args):
    """Run both kernels on copies of `args`; None when every tensor agrees within output rounding, else why."""
    import torch

    outs = []
    for k in (kernel, reference):
        copies = _copies(args)
        try:
            returned = k(*copies)
        except TilegcnError as e:
            return _reason(e)
        # the outputs a kernel allocates and returns (out_idx, T.empty) are compared too, after the arguments
        returned = returned if isinstance(returned, tuple) else () if returned is None else (returned,)
        outs.append(list(copies) + list(returned))
    names = list(kernel.fn.arg_names) + [name for name, _, _ in kernel.outputs]
    for name, a, b in zip(names, *outs):
        if isinstance(a, torch.Tensor):
            diff = (a.double() - b.double()).abs().nan_to_num(float("inf")).max().item() if a.numel() else 0.0
            bound = _rounding(a.dtype) * max(1.0, b.double().abs().max().item() if b.numel() else 0.0)
            if diff > bound:
                return f"max |{name} - reference| = {diff:.4g} > {bound:.3g}"
    return None


def _rounding(dtype) -> float:
    """Two units in the last place of `dtype`, relative: configs may sum in a different order."""
    import torch

    return 2.0 * torch.finfo(dtype).eps if dtype.is_floating_point else 0.0


class _Progress:
    """A tqdm bar over the sweep's configs (a plain count on stderr when tqdm is missing)."""

    def __init__(self, total, desc, enabled):
        self.bar = None
        self.enabled = enabled
        self.n, self.total, self.desc = 0, total, desc
        if enabled:
            try:
                from tqdm.auto import tqdm

                self.bar = tqdm(total=total, desc=desc, unit="config", file=sys.stderr)
            except ImportError:
                pass

    def update(self):
        self.n += 1
        if self.bar is not None:
            self.bar.update(1)

    def close(self):
        if self.bar is not None:
            self.bar.close()
        elif self.enabled:
            print(f"{self.desc}: {self.n}/{self.total} configs", file=sys.stderr)


def autotune(configs, key=None, **options):
    """Decorate a ``@tilegcn.jit`` function: ``@tilegcn.autotune(configs=[{...}, ...] or Space(...), key=...)``.

    Options: `device` ("MI300X"/"MI355X": the target the timing model ranks for, and its arch), `ranker`
    (kernel, args -> Score), `workers` (compile processes; default $TILEGCN_TUNE_WORKERS or the CPU count),
    `cluster` (a Dask scheduler that compiles and ranks the candidates, default $TILEGCN_TUNE_CLUSTER: see
    tilegcn/autotune_cluster.py),
    `verify` (check the winner against a reference config; a bool or a function of the call's arguments),
    `progress`, `verbose` (print the table),
    `flops` (args -> FLOPs, for TFLOP/s of measured times), `table` (a dispatch table to load).

    Example:

    ```python
    @tilegcn.autotune(configs=tilegcn.Space(block_M=[16, 64], threads=[64, 256]), key=["M", "N"], device="MI355X")
    @tilegcn.jit
    def scale(X: T.Tensor(("M", "N")), Y: T.Tensor(("M", "N")), *, block_M=64, block_N=256, threads=256):
        ...

    scale(x, y)           # the first call per key sweeps, then runs the winner
    print(scale.report)   # the sweep's table
    ```
    """
    return lambda fn: Autotuner(fn, configs, key, **options)


def _distance(a, b) -> float:
    """Distance of two key values: sum of |log2(x / y)| over their sizes (inf when their structure differs)."""
    fa, fb = _flatten(a), _flatten(b)
    if len(fa) != len(fb):
        return math.inf
    return sum(abs(math.log2(max(x, 1) / max(y, 1))) for x, y in zip(fa, fb))


def _flatten(v) -> list:
    if isinstance(v, (list, tuple)):
        return [x for item in v for x in _flatten(item)]
    return [v] if isinstance(v, (int, float)) else [0]


# -- python -m tilegcn tune ... ---------------------------------------------------------------------------------
def tune_command(action: str, ident: str | None = None) -> int:
    entries = tuned_entries()
    root = tune_dir(create=False)
    if action == "clear":
        for path, _ in entries:
            path.unlink(missing_ok=True)
        others = sum(1 for _ in root.iterdir()) if root.is_dir() else 0
        kept = f" (kept {others} file(s) tilegcn did not write)" if others else ""
        print(f"tune dir: {root}: removed {len(entries)} results{kept}")
        return 0
    if action == "list":
        print(f"tune dir: {root} ({len(entries)} results)")
        for path, r in entries:
            key = ", ".join(f"{k}={v}" for k, v in (r.get("key") or {}).items())
            best = _config_text(r["best"]) if r.get("best") else "?"
            print(f"{path.stem[:16]}  {r.get('function', '?'):16} {r.get('arch', '?'):7} [{key}] -> {best}")
        return 0
    matches = [(p, r) for p, r in entries if p.stem.startswith(ident or "")] if ident and len(ident) >= 2 else []
    if len(matches) != 1:
        raise TuneError(f"tilegcn: {'no' if not matches else 'more than one'} tuning result {ident!r} in {root}")
    path, r = matches[0]
    rows = [Row(x["config"], x["status"], x["reason"], None if x["score"] is None else Score(**x["score"]))
            for x in r.get("rows", [])]
    report = TuneReport(r.get("function", "?"), r.get("key", {}), r.get("arch", "?"), r.get("device", "?"), rows,
                        r.get("best"), r.get("notes", []))
    print(f"{path}\nsource: {r.get('source', '?')}")
    print(report.table())
    return 0
