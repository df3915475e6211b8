"""tilegcn.autotune on a Dask cluster (tilegcn/autotune_cluster.py): a real 2-worker LocalCluster on loopback
compiles and ranks a small sweep; the parent imports the entries into its own cache and keeps the record."""
import os
import re
import socket
import sys
from pathlib import Path

import pytest
import torch

import tilegcn
from tilegcn import autotune_cluster
from tilegcn.autotune import Autotuner, EstimateRanker, TuneError, TuneWarning
from tilegcn.cache import Cache

sys.path.insert(0, str(Path(__file__).resolve().parent))
import autotune_kernels as K  # noqa: E402

# CI installs the 'test' extra (make test): there a missing Dask fails instead of skipping
distributed = __import__("distributed") if os.environ.get("CI") == "true" else pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Two worker processes with their own cache dir, as if on other hosts: nothing they build is in the
    parent's cache unless the parent imports it."""
    workers_cache = tmp_path_factory.mktemp("workers-cache")
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, host="127.0.0.1",
                                  dashboard_address=":0", env={"TILEGCN_CACHE_DIR": str(workers_cache)}) as c:
        yield c


def _tuner(configs, **options):
    fn = tilegcn.jit(K.double.fn)  # a fresh function: nothing compiled in this process yet
    return fn, Autotuner(fn, configs, progress=False, verbose=False, **options)


def test_a_sweep_on_a_two_worker_cluster_is_compiled_and_ranked_by_both_workers(cluster):
    fn, tuner = _tuner([dict(threads=t) for t in (64, 128, 256, 512)], cluster=cluster)
    x = torch.randn(16, 64)
    y = torch.empty_like(x)
    tuner(x, y)
    assert torch.equal(y, x * 2)
    assert fn.cache_stats.compiles == 0, tuner.report.table()  # this process compiled nothing itself
    workers = {w.worker_address for w in cluster.workers.values()}
    built_on = [r.kernel.metadata.get("built_on") for r in tuner.report.rows]
    assert set(built_on) == workers and len(workers) == 2, (built_on, tuner.report.table())
    note = tuner.report.notes[-1]
    assert f"on the Dask cluster {cluster.scheduler_address}: compile and rank of 4 config(s) on 2 worker(s)" in note
    # the entries are in this process's cache, verified and signed with its own key
    entries = Cache().entries()
    assert len(entries) == 4 and all(e.problem is None for e in entries), [e.problem for e in entries]
    # the workers' ranking is the one this process would have made
    ranker = EstimateRanker(tuner.report.device.split("estimate:")[-1])
    for row in tuner.report.rows:
        assert row.score.seconds == pytest.approx(ranker(row.kernel, [x.clone(), y.clone()]).seconds)
    # the tuning record landed in the tuning store: a process without the cluster dispatches from it
    _, again = _tuner([dict(threads=t) for t in (64, 128, 256, 512)])
    assert again.tune(x, y) == tuner.report.best and again.stats["disk_hits"] == 1 and again.stats["sweeps"] == 0


def test_the_environment_variable_names_the_scheduler(cluster, monkeypatch):
    monkeypatch.setenv("TILEGCN_TUNE_CLUSTER", cluster.scheduler_address)
    fn, tuner = _tuner([dict(threads=64), dict(threads=128)])
    x = torch.randn(8, 64)
    y = torch.empty_like(x)
    tuner(x, y)
    assert torch.equal(y, x * 2)
    assert fn.cache_stats.compiles == 0
    assert {r.kernel.metadata.get("built_on") for r in tuner.report.rows} <= {
        w.worker_address for w in cluster.workers.values()}
    assert any(cluster.scheduler_address in note for note in tuner.report.notes), tuner.report.notes


def test_an_unreachable_scheduler_warns_and_the_sweep_runs_here(monkeypatch):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    monkeypatch.setenv("TILEGCN_TUNE_CLUSTER", address)
    monkeypatch.setattr(autotune_cluster, "CONNECT_TIMEOUT_S", 1.0)
    fn, tuner = _tuner([dict(threads=64), dict(threads=128)], workers=1)
    x = torch.randn(8, 64)
    y = torch.empty_like(x)
    with pytest.warns(TuneWarning, match=f"cannot reach the Dask scheduler at {address}.*tuning on this machine") as w:
        tuner(x, y)
    assert [r.filename for r in w if r.category is TuneWarning] == [__file__]  # once, at the user's call
    assert torch.equal(y, x * 2)
    assert fn.cache_stats.compiles == 2  # here, as without a cluster


def test_without_distributed_installed_the_error_names_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # `import distributed` raises ImportError
    monkeypatch.setenv("TILEGCN_TUNE_CLUSTER", "tcp://127.0.0.1:8786")
    _, tuner = _tuner([dict(threads=64), dict(threads=128)])
    x = torch.randn(8, 64)
    with pytest.raises(TuneError, match=r"pip install 'tilegcn\[cluster\]'.*unset TILEGCN_TUNE_CLUSTER"):
        tuner(x, torch.empty_like(x))


def test_an_entry_that_does_not_match_its_digests_is_not_imported(monkeypatch):
    """A worker (or the link) that returns other bytes than its meta.json's digests: the config is compiled
    here instead, and the sweep says so. An in-process cluster, so that the task can be tampered with."""
    real = autotune_cluster._build_and_rank

    def tampered(*a):
        result = real(*a)
        result["files"]["kernel.s"] += b"\n; changed on the way\n"
        return result

    monkeypatch.setattr(autotune_cluster, "_build_and_rank", tampered)
    with distributed.LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as c, \
            distributed.Client(c, set_as_default=False) as client:
        fn, tuner = _tuner([dict(threads=64), dict(threads=128)], cluster=client)
        x = torch.randn(8, 64)
        y = torch.empty_like(x)
        tuner(x, y)
    assert torch.equal(y, x * 2)
    note = next(n for n in tuner.report.notes if "Dask cluster" in n)
    assert "2 config(s) back here (kernel.s from" in note and "does not match the sha256" in note, note
    assert all("built_on" not in r.kernel.metadata for r in tuner.report.rows)


def test_the_docs_example_runs(capsys):
    page = Path(__file__).resolve().parent.parent / "docs" / "distributed-tuning.md"
    example = re.findall(r"```python\n(.*?)```", page.read_text(), re.S)[0]
    exec(compile(example, str(page), "exec"), {"__name__": "__main__"})
    out = capsys.readouterr().out
    assert "on the Dask cluster" in out and "best" in out, out
