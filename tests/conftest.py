"""Shared fixtures. Every test gets its own, empty tilegcn disk cache (TILEGCN_CACHE_DIR in tmp_path);
work outside a test (collection, module-level code) uses a session-wide temporary one. The suite never
touches the user's ~/.tilegcn/cache."""
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent


_session_cache = None


def pytest_configure(config):
    global _session_cache
    _session_cache = tempfile.mkdtemp(prefix="tilegcn-test-cache-")
    os.environ["TILEGCN_CACHE_DIR"] = _session_cache


def pytest_unconfigure(config):
    if _session_cache:
        shutil.rmtree(_session_cache, ignore_errors=True)


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
