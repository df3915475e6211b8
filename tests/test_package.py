"""The package a newcomer installs (issue 24): LICENSE and metadata, the `tilegcn` command and its --version,
CLI errors without a bogus location, the version in the cache key, make's install-once stamp, the examples'
--help and the demo's PASS line."""
import importlib
import os
import runpy
import shutil
import subprocess
import sys

import pytest
import torch

import tilegcn
import tilegcn.cache as C
from kernels import copy2d

from conftest import REPO

tomllib = pytest.importorskip("tomllib")  # Python 3.11+


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def test_license_is_apache_2_and_the_metadata_says_so():
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text.splitlines()[1] and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    project = _pyproject()["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert project["readme"] == "README.md" and project["classifiers"] and project["keywords"]


def test_console_script_tilegcn_prints_the_version(subprocess_env, capsys):
    """`[project.scripts] tilegcn` names a function that exists; it and `python -m tilegcn` say the version
    (the one pyproject reads from tilegcn.__version__) and which install runs."""
    pyproject = _pyproject()
    target = pyproject["project"]["scripts"]["tilegcn"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "tilegcn.__version__"}
    module, _, name = target.partition(":")
    entry_point = getattr(importlib.import_module(module), name)
    with pytest.raises(SystemExit) as exit_:
        entry_point(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith(f"tilegcn {tilegcn.__version__} from {REPO / 'tilegcn'}")
    out = subprocess.run([sys.executable, "-m", "tilegcn", "--version"], capture_output=True, text=True,
                         env=subprocess_env, timeout=120)
    assert out.returncode == 0 and out.stdout.startswith(f"tilegcn {tilegcn.__version__} ")


def test_cli_errors_carry_no_runpy_location(monkeypatch, capsys):
    """An ArgumentError raised under `python -m tilegcn` used to read `error: <frozen runpy>:88: tilegcn: ...`
    (run here as `python -m` runs it: runpy executes the package's __main__)."""
    copy2d.cache_clear()  # the entry must be in this test's cache dir
    key = copy2d.compile(torch.zeros(64, 128), torch.zeros(64, 128), arch="gfx950").key
    monkeypatch.setattr(sys, "argv", ["tilegcn", "estimate", key[:12], "--device", "MI400"])
    monkeypatch.delitem(sys.modules, "tilegcn.__main__", raising=False)  # runpy runs it afresh, as `-m` does
    with pytest.raises(SystemExit) as exit_:
        runpy.run_module("tilegcn", run_name="__main__")
    err = capsys.readouterr().err
    assert exit_.value.code == 1
    assert err.startswith("error: tilegcn: unknown device 'MI400'"), err
    assert "frozen" not in err and "runpy" not in err
    # an unwritable --trace is named as such (it used to read "cannot read the cache dir")
    monkeypatch.setattr(sys, "argv", ["tilegcn", "estimate", key[:12], "--trace", "/nonexistent-dir/t.json"])
    with pytest.raises(SystemExit):
        runpy.run_module("tilegcn", run_name="__main__")
    assert capsys.readouterr().err.startswith("error: tilegcn: cannot write the trace /nonexistent-dir/t.json: ")


def test_a_new_tilegcn_version_misses_the_old_versions_cache_entries(monkeypatch, cache_dir):
    x, y = torch.zeros(64, 128), torch.zeros(64, 128)
    copy2d.cache_clear()  # built in this test's cache, not remembered from another test's
    old = copy2d.compile(x, y, arch="gfx950")
    monkeypatch.setattr(C, "__version__", tilegcn.__version__ + ".post1")
    copy2d.cache_clear()  # this process's memo: the next compile asks the disk cache
    hits = copy2d.cache_stats.disk_hits
    new = copy2d.compile(x, y, arch="gfx950")
    assert new.key != old.key and copy2d.cache_stats.disk_hits == hits  # built again, not loaded
    assert {e.key for e in C.Cache().entries()} == {old.key, new.key}


# -- make: install once -----------------------------------------------------------------------------------------
@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_installs_once_and_make_install_always(tmp_path):
    """A fake interpreter logs what make asks of it: the first `make demo` installs, a second one only runs
    the demo, `make install` installs again, and so does any target after pyproject.toml changed."""
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(REPO / name, tmp_path / name)
    log = tmp_path / "calls.log"
    fake = tmp_path / "fakepython"
    fake.write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    fake.chmod(0o755)

    def make(target):
        log.write_text("")
        out = subprocess.run(["make", target, f"PYTHON={fake}"], cwd=tmp_path, capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        return log.read_text()

    assert "-m pip install -e" in make("demo")
    second = make("demo")
    assert "pip install" not in second and "examples/gemm/gemm.py --check" in second
    assert "-m pip install -e" in make("install")
    os.utime(tmp_path / "pyproject.toml", (os.path.getmtime(log) + 10,) * 2)
    assert "-m pip install -e" in make("test")


# -- the examples a newcomer runs first -------------------------------------------------------------------------
_RUN_SCRIPTS = """
import contextlib, io, json, runpy, sys
out = []
for argv in json.loads(sys.argv[1]):
    sys.argv = argv
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            runpy.run_path(argv[0], run_name="__main__")
        code = 0
    except SystemExit as e:
        code = e.code
    out.append([code, buf.getvalue()])
print(json.dumps(out))
"""


def _run_scripts(argvs, env) -> list:
    """[(exit code, stdout)] of each example run as `python argv...`, all in one child (one torch import)."""
    import json

    proc = subprocess.run([sys.executable, "-c", _RUN_SCRIPTS, json.dumps(argvs)], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_examples_answer_help_without_running(subprocess_env):
    scripts = ["examples/elementwise.py", "examples/gemm/autotune.py", "examples/gemm/gemm.py"]
    results = _run_scripts([[s, "--help"] for s in scripts], subprocess_env)
    for script, (code, out) in zip(scripts, results):
        assert code == 0 and out.startswith("usage:") and "show this help message and exit" in out, script
        assert "max error" not in out and "PASS" not in out and "different winners" not in out, script  # nothing ran
    # a second autotune run takes the winners from the tuning cache and prints no sweep tables: the help says so
    autotune_help = " ".join(results[1][1].split())
    assert "prints the tables again" not in autotune_help and "tune show ID" in autotune_help


def test_demo_prints_pass_and_whether_it_hit_the_cache(subprocess_env):
    """`make demo`'s script: a PASS line saying it compiled; run again (a fresh module: only the disk cache
    remembers), a PASS line saying it hit the cache."""
    argv = ["examples/gemm/gemm.py", "--check", "--m", "64", "--n", "64", "--k", "64", "--block", "64", "64", "64",
            "--threads", "256"]
    runs = _run_scripts([argv, argv], subprocess_env)
    assert [code for code, _ in runs] == [0, 0], runs
    first, second = (out.splitlines()[-1] for _, out in runs)
    assert first.startswith("PASS: max error ") and "(compiled in " in first
    assert second.startswith("PASS: max error ") and second.endswith("(cache hit)")


def _readme_quick_start() -> str:
    text = (REPO / "README.md").read_text()
    section = text.split("## Quick start", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_a_fresh_venv_installs_with_pip_and_runs_the_quick_start(tmp_path):
    """The newcomer's path: a new virtual environment, `pip install .` of a copy of the package (not this
    checkout, not editable), then README's quick start run from another folder with nothing of the checkout on
    the path. The venv sees this machine's packages (torch is gigabytes), and pip may not reach an index: the
    suite must not depend on the network, so the build backend is the one installed here."""
    source = tmp_path / "tilegcn-src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(REPO / "tilegcn", source / "tilegcn", ignore=shutil.ignore_patterns("__pycache__"))
    venv = tmp_path / "venv"
    # --without-pip: the venv then has no setuptools of its own (ensurepip's is older than the 77 pyproject asks
    # for) and builds with this machine's; this machine's pip installs into it (`pip --python`)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python, script = venv / "bin" / "python", venv / "bin" / "tilegcn"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HOME=str(tmp_path / "home"), TILEGCN_CACHE_DIR=str(tmp_path / "cache"), PIP_NO_INPUT="1")
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index",
                              "--no-build-isolation", "-q", str(source)], capture_output=True, text=True, env=env,
                             timeout=300)
    assert install.returncode == 0, install.stdout + install.stderr
    version = subprocess.run([str(script), "--version"], capture_output=True, text=True, env=env, timeout=120)
    assert version.returncode == 0 and str(venv) in version.stdout, version.stdout + version.stderr
    quick_start = _readme_quick_start() + "\nprint('quick start ran from', tilegcn.__file__)\n"
    run = subprocess.run([str(python), "-c", quick_start], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"quick start ran from {venv}" in run.stdout
