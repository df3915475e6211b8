"""`python -m tilegcn.runtime.emulator.coverage`: the instructions of a code object the emulator cannot run."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tilegcn.runtime import emulator
from tilegcn.runtime.emulator import coverage
from tilegcn.toolchain import assemble

sys.path.insert(0, str(Path(__file__).parent))
from asm.emukit import kernel_asm  # noqa: E402

ROOT = Path(__file__).parent.parent
# a real gfx942 instruction (2-block fp32 MFMA) that the emulator does not model, twice, between modelled ones
BODY = """
v_mov_b32 v1, 1.0
v_mfma_f32_32x32x1_2b_f32 a[0:31], v1, v1, a[0:31]
s_nop 7
v_mfma_f32_32x32x1_2b_f32 a[0:31], v1, v1, a[0:31]
s_endpgm
"""


@pytest.fixture(scope="module")
def unmodelled(tmp_path_factory):
    path = tmp_path_factory.mktemp("cov") / "k.hsaco"
    path.write_bytes(assemble(kernel_asm(BODY, vgprs=64, accum=32, args=()), "gfx942"))
    return path


def test_report_names_the_unmodelled_mnemonics_per_kernel(unmodelled):
    found = coverage.unsupported(emulator.load(unmodelled))
    assert list(found) == ["k"]
    (mnemonic, where), = found["k"].items()
    assert mnemonic == "v_mfma_f32_32x32x1_2b_f32" and len(where) == 2
    assert "not an MFMA the emulator implements" in where[0][1] or "unknown instruction" in where[0][1]


def test_cli_exit_status_and_output(unmodelled):
    ok = ROOT / "tests" / "corpus" / "grid_info.gfx942.hsaco"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = subprocess.run([sys.executable, "-m", "tilegcn.runtime.emulator.coverage", str(unmodelled), str(ok)],
                         capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 1, run.stderr
    lines = run.stdout.splitlines()
    assert "gfx942 k: 2 of 5 instructions not modelled" in lines[0]
    assert lines[1].strip().startswith("v_mfma_f32_32x32x1_2b_f32 x2 (first at 0x")
    assert lines[2].endswith("grid_info_kernel: ok, all 90 instructions modelled")



def test_fully_modelled_code_object_exits_zero(capsys):
    ok = ROOT / "tests" / "corpus" / "grid_info.gfx950.hsaco"
    assert coverage.main([str(ok)]) == 0
    out = capsys.readouterr().out
    assert "grid_info_kernel: ok" in out and "not modelled" not in out


def _unmodelled(paths):
    return {p.name: found for p in paths for found in [coverage.unsupported(emulator.load(p))] if any(found.values())}


def test_nothing_unmodelled_in_the_corpus():
    paths = sorted((ROOT / "tests" / "corpus").glob("*.hsaco"))
    assert len(paths) >= 30
    assert not _unmodelled(paths)
