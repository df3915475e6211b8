"""tilegcn.autotune on a Dask distributed cluster: compile and rank a sweep's candidates on its workers.

Configured by ``Autotuner(..., cluster=...)`` (an address, a ``distributed.Client`` or a cluster object such as
``distributed.LocalCluster``) or ``$TILEGCN_TUNE_CLUSTER=tcp://host:port`` (a Dask scheduler). Without one, or
when the scheduler cannot be reached (one TuneWarning), the sweep runs on this machine as before.

Why Dask's `distributed` and not Ray: it is pure Python (two wheels of ~1.5 + 1 MB against Ray's ~80 MB), a
`LocalCluster` starts in seconds, and a sweep needs nothing but "run this function on some worker, give me its
result", which `Client.submit` is. The scheduling, retries of a task whose worker died, and data transfer are
Dask's (no home-made scheduler here).

What runs where (the phases of `Autotuner._sweep`):
- check: this process traces each config (it has the user's function) and applies the compiler's resource
  checks, as without a cluster;
- compile + rank: one task per distinct traced IR (configs the compiler makes identical run once). The task
  gets the pickled traced tile IR (what the local compile workers get: `tilegcn._worker`), lowers and
  assembles it into the *worker's* disk cache (`jit.build_traced`), and, when the ranker is the timing model's
  (`EstimateRanker`, the default on the emulated device; an 8192^3 estimate takes seconds a config, so this is
  where a cluster pays), ranks it there on a copy of the call's arguments (scattered to every worker once).
  It returns the entry's files, meta.json and the score. Any other ranker (measured times on this host's GPU,
  a custom one) ranks here, after;
- import: workers may be other hosts, with other disks, so this process writes the returned files into its own
  cache through the cache's normal build path (`Cache.get_or_build`): only when the worker's key is the one
  this process computes for the same IR (same tilegcn, compiler sources and LLVM version), the files match
  the digests in the worker's meta.json and the entry fits the traced kernel (`jit._entry_problem`); the
  entry is then digested and signed (`meta_hmac`) with this cache's own secret, and its meta.json names the
  worker (`built_on`). A candidate that fails any of that is compiled by this machine's compile workers;
- verify: the winner runs here against a reference config, as without a cluster.
The tuning record lands in this process's tuning store (`<cache dir>/tune/`), as any sweep's does.
"""
from __future__ import annotations

import collections
import contextlib
import functools
import hashlib
import os
import pickle
import time
import types
import warnings
from pathlib import Path

from ._worker import error_text

ENV_CLUSTER = "TILEGCN_TUNE_CLUSTER"
CONNECT_TIMEOUT_S = 10.0
INSTALL_HINT = "pip install 'tilegcn[cluster]' (or: pip install distributed)"


def cluster_spec(option):
    """What a sweep runs on: the `cluster=` option, else $TILEGCN_TUNE_CLUSTER, else None (this machine)."""
    if option is not None:
        return option
    return os.environ.get(ENV_CLUSTER) or None


def _distributed():
    from .autotune import TuneError

    try:
        import distributed
    except ImportError as e:
        raise TuneError(f"tilegcn.autotune: a Dask cluster is configured ({ENV_CLUSTER} or cluster=), but Dask's "
                        f"`distributed` package cannot be imported ({e}); install it: {INSTALL_HINT}, or unset "
                        f"{ENV_CLUSTER} to tune on this machine") from None
    return distributed


@contextlib.contextmanager
def client_for(spec):
    """A `distributed.Client` for `spec` (one of the caller's, or one opened for this sweep and closed after
    it, which also frees what the sweep sent to the workers), or None (with a TuneWarning) when the scheduler
    cannot be reached."""
    from .autotune import TuneError, TuneWarning

    distributed = _distributed()
    if isinstance(spec, distributed.Client):
        yield spec
        return
    address = getattr(spec, "scheduler_address", spec)  # a LocalCluster, SpecCluster, ...
    if not isinstance(address, str) or not address:
        raise TuneError(f"tilegcn.autotune: cluster={spec!r} is not a Dask scheduler address "
                        "('tcp://host:port'), a distributed.Client or a Dask cluster object")
    try:
        client = distributed.Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (ValueError, TypeError) as e:
        raise TuneError(f"tilegcn.autotune: {address!r} is not a Dask scheduler address ({e}); give "
                        f"'tcp://host:port' ({ENV_CLUSTER} or cluster=)") from None
    except (OSError, TimeoutError) as e:
        warnings.warn(f"tilegcn.autotune: cannot reach the Dask scheduler at {address} ({e}); tuning on this "
                      "machine", TuneWarning, stacklevel=9)  # the user's call of the tuned function
        yield None
        return
    try:
        yield client
    finally:
        client.close()


# -- the parent's side -------------------------------------------------------------------------------------------
def run_on_cluster(tuner, spec, rows, args, extra, arch, progress) -> str | None:
    """Compile (and rank, with the timing model) `rows` on the cluster; rows it could not handle stay
    "pending" for this process. The sweep's note on where it ran, or None when no cluster is reachable."""
    with client_for(spec) as client:
        return None if client is None else _run(client, tuner, rows, args, extra, arch, progress)


def _run(client, tuner, rows, args, extra, arch, progress) -> str:
    from .autotune import EstimateRanker
    from .testing import copies as _copies

    ranker = tuner._ranker(arch)
    remote_rank = isinstance(ranker, EstimateRanker)
    groups = _by_ir(rows)
    shared_args = None
    if remote_rank:  # sent once to each worker, not once a task; pickled by torch (Dask's own tensor
        # serializer goes through numpy, which has no bfloat16)
        [shared_args] = client.scatter([_Pickled(tuple(_copies(args)))], broadcast=True, hash=False)
    futures = {}
    for ir, group in groups.items():
        first = group[0]
        described = tuner.fn._described(tuner.fn._constants(tuner._merge(first.config, extra)))
        try:
            blob = pickle.dumps((first.traced, tuner.fn.options.with_arch(arch), described))
        except Exception:  # noqa: BLE001 - an IR the pickle cannot take: this process compiles it
            continue
        future = client.submit(_build_and_rank, blob, ranker if remote_rank else None, tuple(tuner.fn.arg_names),
                               shared_args, pure=False)
        futures[future] = ir
    distributed = _distributed()
    by_worker, busy = collections.Counter(), collections.Counter()
    local = []  # why configs went back to this process
    for future in distributed.as_completed(list(futures), loop=client.loop):
        group = groups[futures[future]]
        try:
            result = future.result()
        except Exception as e:  # noqa: BLE001 - the task never returned (its workers died, the link dropped)
            _task_lost(tuner, group, e, distributed, progress)
            continue
        why = _take(tuner, group, result, arch, progress)
        if why:
            local.extend([why] * len(group))
        else:
            by_worker[result["worker"]] += len(group)
        busy[result["worker"]] += result["seconds"]
    address = getattr(client, "scheduler", None) and client.scheduler.address
    placed = ", ".join(f"{w}: {n}, {busy[w]:.1f} s busy" for w, n in sorted(by_worker.items())) or "none"
    note = (f"on the Dask cluster {address}: compile{' and rank' if remote_rank else ''} of "
            f"{sum(by_worker.values())} config(s) on {len(by_worker)} worker(s) ({placed})")
    if local:
        note += f"; {len(local)} config(s) back here ({local[0]})"
    return note


def _by_ir(rows) -> dict:
    """The rows with a traced kernel, grouped by their IR text: one key, one code object, one task."""
    from .ir import print_kernel

    groups = {}
    for row in rows:
        if row.status == "pending" and row.traced is not None:
            groups.setdefault(print_kernel(row.traced), []).append(row)
    return groups


def _task_lost(tuner, group, error, distributed, progress) -> None:
    from .autotune import TuneWarning, _config_text

    if isinstance(error, distributed.KilledWorker):  # the config itself kills workers: fail it, as locally
        for row in group:
            row.status, row.reason = "failed", f"it killed its Dask workers ({error_text(error)})"
            progress.update()
        return
    warnings.warn(f"tilegcn.autotune({tuner.name}): config {_config_text(group[0].config)} did not come back "
                  f"from the Dask cluster ({error_text(error)}); compiling it here", TuneWarning, stacklevel=9)


def _take(tuner, group, result, arch, progress) -> str | None:
    """Apply one task's result to its rows; None when done, else why the rows are left to this process."""
    from .autotune import Score, _refused_for_resources

    status = result["status"]
    if status == "load":  # e.g. an object of the user's script in the IR: the worker cannot unpickle it
        return f"{result['worker']} cannot load the IR: {result['error']}"
    if status == "compile":
        refused = _refused_for_resources(result["error"])  # the register budget: infeasible, as feasibility says
        for row in group:
            row.status, row.reason = "skipped" if refused else "failed", result["error"]
            progress.update()
        return None
    why = _import_entry(tuner, group[0].traced, arch, result)
    if why:
        return why
    for row in group:
        row.traced = None  # handled: the local compile workers need not see it
        if result.get("rank_error"):
            row.status, row.reason = "failed", result["rank_error"]
            progress.update()
        elif result.get("score") is not None:
            row.score = Score(**result["score"])
    return None


def _import_entry(tuner, kernel, arch, result) -> str | None:
    """Write a worker's entry into this process's cache, re-digested and signed here; None when done (or it
    was here already), else why not."""
    from . import toolchain
    from .cache import DIGEST_FIELDS, Cache, Entry, make_key
    from .ir import print_kernel
    from .jit import _entry_problem

    ir = print_kernel(kernel)
    key = make_key(ir, tuner.fn.options.with_arch(arch), toolchain.find_llvm(arch).version)
    if result["key"] != key:
        return (f"{result['worker']} built another key (its tilegcn, compiler sources or LLVM "
                f"{result['meta'].get('llvm_version')} differ from this process's)")
    files, meta = result["files"], result["meta"]
    for name, field in DIGEST_FIELDS.items():
        if hashlib.sha256(files.get(name, b"")).hexdigest() != meta.get(field):
            return f"{name} from {result['worker']} does not match the sha256 in its meta.json"
    fits = functools.partial(_entry_problem, ir, kernel, arch)
    problem = fits(Entry(key, Path(), meta, files))
    if problem:
        return f"the entry from {result['worker']} does not fit the traced kernel: {problem}"
    signed_there = ("key", "meta_sha256", "meta_hmac", *DIGEST_FIELDS.values())  # get_or_build makes its own

    def write(tmp: Path) -> dict:
        for name in DIGEST_FIELDS:
            (tmp / name).write_bytes(files[name])
        return {**{k: v for k, v in meta.items() if k not in signed_there}, "built_on": result["worker"]}

    Cache().get_or_build(key, write, verify=fits)
    return None


class _Pickled:
    """The call's arguments, pickled once here and unpickled once per worker process (then kept: every task of
    the sweep on that worker ranks on a copy of them)."""

    _unpickled = {}  # in a worker: token -> the arguments (only the last sweep's are kept)

    def __init__(self, value):
        self.blob = pickle.dumps(value)
        self.token = hashlib.sha256(self.blob).hexdigest()

    def value(self):
        if self.token not in self._unpickled:
            self._unpickled.clear()
            self._unpickled[self.token] = pickle.loads(self.blob)
        return self._unpickled[self.token]


# -- the worker's side --------------------------------------------------------------------------------------------
def _build_and_rank(blob: bytes, ranker, arg_names: tuple, args) -> dict:
    """One Dask task: build the pickled traced kernel into this worker's cache and, with a ranker, rank it on
    a copy of `args`. Errors are the config's, returned (never raised: Dask would retry them elsewhere)."""
    import distributed

    from .jit import build_traced

    start = time.perf_counter()
    result = {"worker": distributed.get_worker().address}
    try:
        kernel, options, described = pickle.loads(blob)
    except Exception as e:  # noqa: BLE001 - e.g. an object of the user's in the IR: the parent compiles it
        result.update(status="load", error=error_text(e))
    else:
        result.update(_build_then_rank(build_traced, kernel, options, described, ranker, arg_names, args))
    result["seconds"] = time.perf_counter() - start
    return result


def _build_then_rank(build_traced, kernel, options, described, ranker, arg_names, args) -> dict:
    from .testing import copies as _copies

    try:
        entry, _, _ = build_traced(kernel, options, described)
    except Exception as e:  # noqa: BLE001 - the config's own failure, reported in the sweep's table
        return {"status": "compile", "error": error_text(e)}
    result = {"status": "ok", "key": entry.key, "meta": entry.meta, "files": dict(entry.data), "score": None}
    if ranker is not None:
        try:
            result["score"] = vars(ranker(_built_kernel(entry, options.arch, arg_names), _copies(args.value())))
        except Exception as e:  # noqa: BLE001 - a candidate that cannot run is recorded, not fatal
            result["rank_error"] = error_text(e)
    return result


def _built_kernel(entry, arch, arg_names):
    """A CompiledKernel of a cache entry, for the timing model (which needs the code object and the order of
    the arguments, not the Python function this worker does not have)."""
    from .jit import CompiledKernel

    stand_in = types.SimpleNamespace(arg_names=list(arg_names))
    return CompiledKernel(stand_in, entry, (), {}, arch, {}, written=())
