"""Shared fixtures. Every test gets its own, empty tilegcn disk cache (TILEGCN_CACHE_DIR in tmp_path);
work outside a test (collection, module-level code) uses a session-wide temporary one. The suite never
touches the user's ~/.tilegcn/cache."""
import gc
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent


_session_cache = None
_REAL_CACHE = Path.home() / ".tilegcn" / "cache"  # the user's default cache, which no test may touch
_real_entries = set()


def _entries_in(root: Path) -> set:
    """The entry folders (<shard>/<key>) under a cache root; set() when there is none."""
    try:
        return {f"{shard.name}/{entry.name}" for shard in root.iterdir() if len(shard.name) == 2 and shard.is_dir()
                for entry in shard.iterdir() if not entry.name.startswith(".")}
    except OSError:
        return set()


def pytest_configure(config):
    global _session_cache, _real_entries
    config.addinivalue_line("markers", "slow: a test of several seconds; `pytest -m 'not slow'` (make test-quick) "
                                       "skips them")
    _real_entries = _entries_in(_REAL_CACHE)
    _session_cache = tempfile.mkdtemp(prefix="tilegcn-test-cache-")
    os.environ["TILEGCN_CACHE_DIR"] = _session_cache


def pytest_sessionfinish(session, exitstatus):
    """Fail the session when an entry of the user's real cache vanished while it ran (a test or an example
    cleared or rebuilt it). Only removals count: other processes of the user may add entries meanwhile."""
    lost = _real_entries - _entries_in(_REAL_CACHE)
    if lost:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        sys.stderr.write(f"\nERROR: the test session removed {len(lost)} entries of the real cache {_REAL_CACHE} "
                         f"(e.g. {sorted(lost)[0]}): a test or example touched the user's cache\n")


def pytest_unconfigure(config):
    if _session_cache:
        shutil.rmtree(_session_cache, ignore_errors=True)
    # pytest's unraisable-exception cleanup runs gc.collect() five times after the summary line; over the
    # session's millions of live objects (kernels, decoded programs) that was ~90 s of "exit lag" on a loaded
    # 2-core machine. One collection here still reports what it finds (its unraisables go to pytest's hook);
    # the objects left are then frozen, so the five later passes skip them.
    gc.collect()
    gc.freeze()


def release_emulator_programs():
    """Drop the emulator's decoded and bound programs (tilegcn.runtime.emulator keeps the 32 most recently
    used, ~8-15 MB each for a 256x256 GEMM). A later load decodes again; kernels keep working."""
    emulator = sys.modules.get("tilegcn.runtime.emulator")
    if emulator is not None:
        emulator._DECODED.clear()
        emulator._BOUND.clear()


@pytest.fixture(autouse=True, scope="module")
def _emulator_programs_per_module():
    """Each test module starts with the emulator's program caches empty: without this the whole suite kept
    every program it ever ran (4 GB after the deleted-wait sweep). Within a module, tests still share them."""
    yield
    release_emulator_programs()


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    """A fresh cache root per test; the path is returned for tests that inspect it."""
    root = tmp_path / "tilegcn-cache"
    monkeypatch.setenv("TILEGCN_CACHE_DIR", str(root))
    return root


@pytest.fixture
def subprocess_env(cache_dir):
    """Environment for a child `python -c ...` that imports tilegcn and tests/kernels.py from this checkout
    and shares the test's cache dir."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(TESTS)] + [p for p in [env.get("PYTHONPATH")] if p])
    env["TILEGCN_CACHE_DIR"] = str(cache_dir)
    return env


@pytest.fixture
def run_python(subprocess_env):
    """Run a Python snippet in a new process; returns its stdout (fails the test on a non-zero exit)."""
    import subprocess

    def run(code: str, timeout: float = 120, check: bool = True, env: dict | None = None):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                              env={**subprocess_env, **(env or {})}, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"child failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    return run
