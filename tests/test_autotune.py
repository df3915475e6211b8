"""tilegcn.autotune: sweep mechanics (with a stand-in ranker: the timing model is its own component), the
disk cache of results across processes, dispatch tables, and the asm override with verify=True."""
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import tilegcn
from tilegcn import language as T
from tilegcn.asm_override import AsmOverrideWarning, AsmVerifyError
from tilegcn.autotune import Autotuner, Space, TuneError, TuneWarning, measure

import autotune_kernels as K


@tilegcn.jit
def gemm(A, B, C, *, block_M=64, block_N=64, block_K=64, threads=256, num_stages=1):
    M, K_ = A.shape
    N = B.shape[1]
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        A_s = T.alloc_shared((block_M, block_K), A.dtype)
        B_s = T.alloc_shared((block_K, block_N), B.dtype)
        acc = T.alloc_fragment((block_M, block_N), "float32")
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K_, block_K), num_stages=num_stages):
            T.copy(A[by * block_M, k * block_K], A_s)
            T.copy(B[k * block_K, bx * block_N], B_s)
            T.gemm(A_s, B_s, acc)
        T.copy(acc, C[by * block_M, bx * block_N])


def by_tile(config, args):
    return 1e-6 / (config["block_M"] * config["block_N"])


@pytest.fixture(scope="module")
def gemm_args():
    torch.manual_seed(0)
    a, b = torch.randn(64, 128, dtype=torch.bfloat16), torch.randn(128, 64, dtype=torch.bfloat16)
    return a, b, torch.zeros(64, 64, dtype=torch.bfloat16)


def test_configs_that_cannot_fit_are_skipped_with_the_compilers_reason(gemm_args):
    configs = [dict(block_M=64, block_N=64, block_K=64),
               dict(block_M=256, block_N=256, block_K=128),          # LDS: 128 KiB of tiles
               dict(block_M=40, block_N=64, block_K=64),             # 40 rows: no whole MFMA tiles
               dict(block_M=64, block_N=64, block_K=64, num_stages=2)]
    prune = Space(block_M=[64], block_N=[64, 32], prune=lambda c: c["block_N"] < 64 and "narrow tiles")
    tuner = Autotuner(gemm, configs, ranker=K.ShapeRanker(by_tile), workers=1, progress=False, verbose=False,
                      device="MI300X", verify=False)
    gemm.cache_clear()
    best = tuner.tune(*gemm_args)
    status = {tuple(r.config.items()): (r.status, r.reason) for r in tuner.report.rows}
    assert status[tuple(configs[1].items())][0] == "skipped"
    assert re.search(r"LDS.*needs \d+ bytes.*gfx942 has 65536", status[tuple(configs[1].items())][1])
    assert status[tuple(configs[2].items())][0] == "skipped"
    assert "fits no MFMA shape" in status[tuple(configs[2].items())][1]
    assert gemm.cache_stats.compiles == 2  # the skipped configs were never lowered
    assert best in (configs[0], configs[3]) and tuner.report.arch == "gfx942"
    pruned = Autotuner(gemm, prune, ranker=K.ShapeRanker(by_tile), workers=1, progress=False, verbose=False,
                       device="MI300X", verify=False)
    pruned.tune(*gemm_args)
    assert [(r.status, r.reason) for r in pruned.report.rows][1] == ("skipped", "narrow tiles")
    a, b, c = gemm_args
    tuner(a, b, c)  # num_stages configs run too
    assert torch.allclose(c.float(), a.float() @ b.float(), rtol=2**-7, atol=2**-5)


@pytest.mark.slow
def test_failing_candidates_do_not_stop_the_sweep_and_workers_compile_in_parallel():
    x = torch.randn(64, 256)
    y = torch.empty_like(x)
    K.scale.fn.cache_clear()
    K.scale(x, y)
    assert torch.equal(y, x * 2)
    rows = {tuple(r.config.values()): r for r in K.scale.report.rows}
    failed = [r for r in rows.values() if r.status == "failed"]
    assert {r.config["block_N"] for r in failed if "cannot run" in r.reason} == {32}  # the ranker raised
    assert all(r.status in ("ok", "best") for r in rows.values() if r.config["block_N"] != 32)
    assert K.scale.report.best == dict(block_M=32, block_N=64, threads=256)
    assert K.scale.fn.cache_stats.compiles == 0  # every compile ran in a worker; this process hit the cache
    assert K.scale.fn.cache_stats.disk_hits == 4


def test_a_winner_that_disagrees_with_the_reference_is_failed():
    x = torch.randn(16, 64)
    y = torch.empty_like(x)
    configs = [dict(a=3.0, block_N=64), dict(a=2.0, block_N=32), dict(a=2.0, block_N=64)]
    tuner = Autotuner(K.scale.fn, configs, ranker=K.ShapeRanker(lambda c, args: (c["a"] != 3.0) + c["block_N"] * 1e-3),
                      workers=1, progress=False, verbose=False)
    assert tuner.tune(x, y) == configs[1]  # a=3.0 ranked first (the stand-in ranker ignores a) but is wrong
    assert tuner.report.rows[0].status == "failed"
    assert "output differs from a=2.0 block_N=64" in tuner.report.rows[0].reason


def test_a_new_process_reuses_the_tuned_result(run_python, monkeypatch):
    x = torch.randn(48, 256)
    monkeypatch.setattr(K.scale, "workers", 1)
    K.scale.results.clear()
    sweeps = K.scale.stats["sweeps"]
    best = K.scale.tune(x, torch.empty_like(x))
    assert K.scale.stats["sweeps"] == sweeps + 1
    child = run_python("""
import torch, autotune_kernels as K
x = torch.randn(48, 256); y = torch.empty_like(x)
print(K.scale.tune(x, y), K.ranker.calls, K.scale.fn.cache_stats.traces, K.scale.stats["sweeps"])
""").stdout.split()
    assert " ".join(child[:-3]) == str(best)
    assert child[-3:] == ["0", "0", "0"]  # no ranking, no trace (so no compile), no sweep


def test_dispatch_table_round_trip(tmp_path):
    tuner = Autotuner(K.scale.fn, Space(block_M=[16, 32], block_N=[64, 128]), key=["M", "N"],
                      ranker=K.ShapeRanker(K.small_tiles_for_small_inputs), workers=1, progress=False,
                      verbose=False)
    small, big = torch.randn(16, 128), torch.randn(128, 256)
    tuned = {shape: tuner.tune(t, torch.empty_like(t)) for shape, t in (("small", small), ("big", big))}
    assert tuned["small"] != tuned["big"]
    assert tuner.export_table(tmp_path / "scale.json") == 2

    deployed = Autotuner(K.scale.fn, [dict(block_M=16)], key=["M", "N"], ranker=K.ShapeRanker(lambda c, a: 0),
                         table=tmp_path / "scale.json", verbose=False)
    assert deployed.tune(small, torch.empty_like(small)) == tuned["small"]
    assert deployed.tune(big, torch.empty_like(big)) == tuned["big"]
    near_big = torch.randn(100, 300)
    assert deployed.tune(near_big, torch.empty_like(near_big)) == tuned["big"]  # nearest tuned shape
    y = torch.empty_like(near_big)
    deployed(near_big, y)
    assert torch.equal(y, near_big * 2)
    assert deployed.stats["sweeps"] == 0 and deployed.ranker.calls == 0
    with pytest.raises(TuneError, match="no entry for .*float16"):
        deployed.tune(small.half(), torch.empty_like(small).half())
    with pytest.raises(TuneError, match="keyed by"):
        Autotuner(K.scale.fn, [{}], table=tmp_path / "scale.json")


def test_tune_cli_lists_shows_and_clears(capsys, monkeypatch):
    from tilegcn.__main__ import main

    x = torch.randn(32, 64)
    monkeypatch.setattr(K.scale, "workers", 1)
    K.scale.results.clear()
    K.scale.tune(x, torch.empty_like(x))
    capsys.readouterr()
    main(["tune", "list"])
    ident = re.search(r"^([0-9a-f]{16})  scale .*block_M=(\d+)", capsys.readouterr().out, re.M)
    assert ident
    main(["tune", "show", ident[1]])
    shown = capsys.readouterr().out
    assert "status" in shown and "best" in shown and "failed: RuntimeError: cannot run" in shown
    main(["tune", "clear"])
    assert "removed 1 results" in capsys.readouterr().out
    assert main(["tune", "show", ident[1]]) == 1


def test_measure_flushes_before_every_timed_run():
    events = []
    times = iter([3.0, 1.0, 2.0])

    def elapsed(run):
        run()
        return next(times)

    out = measure(lambda: events.append("run"), warmup=2, repeats=3, flush=lambda: events.append("flush"),
                  elapsed=elapsed)
    assert out == [3.0, 1.0, 2.0]
    assert events == ["run", "run"] + ["flush", "run"] * 3


@pytest.fixture(scope="module")
def scale_kernel():
    x = torch.randn(16, 64)
    return K.scale.fn.compile(x, torch.empty_like(x)), x


def _edited(tmp_path, asm, old, new, name):
    assert old in asm
    path = tmp_path / name
    path.write_text(asm.replace(old, new, 1))
    return path


def test_asm_override_verify_catches_changed_results_and_hazards(tmp_path, scale_kernel):
    kernel, x = scale_kernel
    args = (x, torch.empty_like(x))
    same = kernel.with_asm(_edited(tmp_path, kernel.asm, "", "", "same.s"), verify=True, args=args)
    assert same.verification.max_diff == {"X": 0.0, "Y": 0.0} and same.verification.hazard is None

    changed = _edited(tmp_path, kernel.asm, "v_mul_f32 v2, 2.0, v2", "v_mul_f32 v2, 4.0, v2", "changed.s")
    with pytest.raises(AsmVerifyError) as e:
        kernel.with_asm(changed, verify=True, args=args)
    assert e.value.report.max_diff["Y"] > 0 and e.value.report.hazard is None

    lines = kernel.asm.splitlines()
    last_wait = max(i for i, line in enumerate(lines) if "s_waitcnt vmcnt(0)" in line)
    hazard = tmp_path / "hazard.s"
    hazard.write_text("\n".join(lines[:last_wait] + lines[last_wait + 1:]) + "\n")
    with pytest.raises(AsmVerifyError, match="HazardError") as e:
        kernel.with_asm(hazard, verify=True, args=args)
    assert "estimate, edited" in str(e.value)


def test_asm_override_dir_replaces_the_generated_kernel(tmp_path, monkeypatch, scale_kernel):
    kernel, x = scale_kernel
    _edited(tmp_path, kernel.asm, "v_mul_f32 v2, 2.0, v2", "v_mul_f32 v2, 4.0, v2", f"{kernel.key}.s")
    monkeypatch.setenv("TILEGCN_ASM_OVERRIDE", str(tmp_path))
    K.scale.fn.cache_clear()
    y = torch.empty_like(x)
    with pytest.warns(AsmOverrideWarning, match=r"kernel scale .* runs the hand-edited"):
        K.scale.fn(x, y)
    expected = x * 2
    expected.view(-1)[:256:4] *= 2  # the edited v2: the first float of each thread's first 16-byte load
    assert torch.equal(y, expected)
    K.scale.fn.cache_clear()


# -- compile workers: never the user's __main__, a dying worker, a killed parent (issue 18) ------------------------
REPO = Path(__file__).resolve().parent.parent
HOOKS = REPO / "tests" / "worker_hooks"  # sitecustomize.py: $TILEGCN_TEST_LOWER_HOOK

TUNED_SCRIPT = '''
import torch, tilegcn
from tilegcn import language as T
print("top level ran")

@tilegcn.autotune(configs=[dict(threads=64), dict(threads=128)], workers=2, progress=False, verbose=False)
@tilegcn.jit
def double(X, Y, *, threads=64):
    M, N = X.shape
    with T.Kernel(1, 1, threads=threads) as (bx, by):
        x = T.alloc_fragment((M, N), "float32")
        T.copy(X[0, 0], x)
        for i, j in T.Parallel(M, N):
            x[i, j] = x[i, j] * 2.0
        T.copy(x, Y[0, 0])

x = torch.randn(16, 64)
y = torch.empty_like(x)
double(x, y)
print("right answer:", torch.equal(y, x * 2), "compiled in this process:", double.fn.cache_stats.compiles,
      "tuned:", sorted(r.status for r in double.report.rows))
'''


def _check_tuned_script_output(proc):
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert out.count("top level ran") == 1, out  # no worker re-ran the script
    # both configs compiled in the two workers (this process only hit the disk cache) and ranked
    assert "right answer: True compiled in this process: 0 tuned: ['best', 'ok']" in proc.stdout, out


@pytest.mark.slow
def test_a_plain_script_and_python_c_without_a_main_guard_tune(tmp_path, subprocess_env):
    """No `if __name__ == "__main__":` (most scripts, notebooks, `python -c`): workers must not re-run it."""
    script = tmp_path / "tune_me.py"
    script.write_text(TUNED_SCRIPT)
    runs = [subprocess.Popen(cmd, cwd=tmp_path, env=subprocess_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True) for cmd in ([sys.executable, str(script)], [sys.executable, "-c", TUNED_SCRIPT])]
    for proc in runs:  # the two run side by side: each is mostly imports
        proc.stdout, proc.stderr = proc.communicate(timeout=300)
        _check_tuned_script_output(proc)


def test_a_config_that_kills_its_compile_worker_is_named_and_the_others_still_compile(monkeypatch):
    path = [str(HOOKS), str(REPO)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(path))
    monkeypatch.setenv("TILEGCN_TEST_LOWER_HOOK", "kill:128")  # lowering a 128-thread kernel kills the worker
    local = tilegcn.jit(K.double.fn)  # a fresh function (nothing compiled in this process yet)
    tuner = Autotuner(local, [dict(threads=t) for t in (128, 64, 256)], ranker=K.ShapeRanker(lambda c, a: c["threads"]),
                      workers=2, progress=False, verbose=False)
    x = torch.randn(16, 64)
    y = torch.empty_like(x)
    with pytest.warns(TuneWarning, match=r"config threads=128: its compile worker .* was killed by SIGKILL"):
        tuner(x, y)
    assert torch.equal(y, x * 2)
    rows = {r.config["threads"]: r for r in tuner.report.rows}
    assert rows[128].status == "failed" and re.search(r"compile worker .* was killed by SIGKILL", rows[128].reason)
    assert (rows[64].status, rows[256].status) == ("best", "ok")
    # both others were compiled by workers, one of them after the death
    assert local.cache_stats.compiles == 0, (local.cache_stats, tuner.report.table(), tuner.report.notes)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_killing_the_tuning_process_leaves_no_compile_worker(tmp_path, subprocess_env):
    """kill -9 of a process in the middle of a sweep: its workers exit within seconds, and a caller reading the
    process's output (pipes the workers inherited) sees EOF."""
    busy = tmp_path / "busy"
    busy.mkdir()
    env = {**subprocess_env, "PYTHONPATH": os.pathsep.join([str(HOOKS), subprocess_env["PYTHONPATH"]]),
           "TILEGCN_TEST_LOWER_HOOK": f"sleep:{busy}"}  # each worker's lowering writes busy/<pid>, then sleeps
    code = "import torch, autotune_kernels as K; x = torch.randn(16, 64); K.scale.tune(x, torch.empty_like(x))"
    parent = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    workers = []
    try:
        deadline = time.monotonic() + 180
        while len(workers) < 2 and time.monotonic() < deadline and parent.poll() is None:
            time.sleep(0.2)
            workers = [int(p.name) for p in busy.iterdir()]
        assert len(workers) == 2, (parent.poll(), parent.stderr.read1().decode() if parent.poll() is not None else "")
        parent.kill()
        parent.communicate(timeout=10)  # EOF on its stdout and stderr: no worker holds them
        deadline = time.monotonic() + 5
        while any(map(_alive, workers)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(map(_alive, workers))
    finally:
        parent.kill()
        for pid in filter(_alive, workers):  # only on failure: the workers this test started
            os.kill(pid, signal.SIGKILL)


def test_a_config_is_infeasible_exactly_when_compile_refuses_it():
    """The sweep's resource check is the compiler's own (compiler.plan_resources): 256x256x64 at num_stages=3
    needs 3 x 64 KiB of LDS, more than gfx950's 160 KiB, once pipelined (a copy of the checks once missed that)."""
    from tilegcn.autotune import feasibility
    from tilegcn.errors import ResourceError

    a, b = torch.randn(256, 256, dtype=torch.bfloat16), torch.randn(256, 256, dtype=torch.bfloat16)
    c = torch.zeros(256, 256, dtype=torch.bfloat16)
    too_big = dict(block_M=256, block_N=256, block_K=64, num_stages=3)
    fits = dict(block_M=128, block_N=128, block_K=64, num_stages=3)
    checked = {}
    for name, config in (("too_big", too_big), ("fits", fits)):
        why = feasibility(gemm, (a, b, c), config, "gfx950")
        try:
            gemm.compile(a, b, c, arch="gfx950", **config)
            refused = None
        except ResourceError as e:
            refused = e
        assert (why is None) == (refused is None), (config, why, refused)
        checked[name] = why, refused
    assert checked["fits"] == (None, None)
    why, refused = checked["too_big"]
    assert "LDS budget exceeded" in why and why == f"ResourceError: {refused.raw_message}"
    tuner = Autotuner(gemm, [too_big, fits], ranker=K.ShapeRanker(by_tile), workers=1, progress=False, verbose=False,
                      device="MI355X", verify=False)
    gemm.cache_clear()
    assert tuner.tune(a, b, c) == fits
    assert tuner.report.rows[0].status == "skipped" and tuner.report.rows[0].reason == why
    assert gemm.cache_stats.traces == 1  # the config that cannot fit never went to compile


def test_tune_clear_removes_only_the_records_tilegcn_wrote(capsys, cache_dir):
    from tilegcn.__main__ import main

    x = torch.randn(16, 64)
    Autotuner(K.double, [dict(threads=64), dict(threads=128)], ranker=K.ShapeRanker(lambda c, a: c["threads"]),
              workers=1, progress=False, verbose=False, verify=False).tune(x, torch.empty_like(x))
    tune = cache_dir / "tune"
    others = {"notes.json": '{"mine": true}',  # a user's file, and another tool's named like a record
              "0123456789abcdef0123456789abcdef.json": '{"best": {"threads": 64}, "rows": []}'}
    for name, text in others.items():
        (tune / name).write_text(text)
    capsys.readouterr()
    main(["tune", "list"])
    listed = capsys.readouterr().out
    assert "(1 results)" in listed and "double" in listed
    main(["tune", "clear"])
    assert "removed 1 results (kept 2 file(s) tilegcn did not write)" in capsys.readouterr().out
    assert sorted(p.name for p in tune.iterdir()) == sorted(others)
