"""The one compiler (tilegcn/compiler.py): CompileOptions, the ordered pass list, and autotune's feasibility
check as a prefix of that list, agreeing with `compile` on examples/gemm/autotune.py's whole space."""
import importlib.util
import pathlib

import pytest
import torch

import tilegcn
from tilegcn import compiler
from tilegcn import language as T
from tilegcn.autotune import Score, feasibility
from tilegcn.compiler import CompileOptions, run_machine_passes
from tilegcn.errors import ArgumentError, ResourceError, UnsupportedArchError

REPO = pathlib.Path(__file__).resolve().parent.parent


def _example_autotune():
    spec = importlib.util.spec_from_file_location("gemm_autotune_example", REPO / "examples/gemm/autotune.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


EXAMPLE = _example_autotune()


def _gemm_args(k=128):
    a, b = torch.empty(256, k, dtype=torch.bfloat16), torch.empty(k, 256, dtype=torch.bfloat16)
    return a, b, torch.empty(256, 256, dtype=torch.bfloat16)


def _compile_verdict(fn, args, config, arch):
    try:
        fn.compile(*args, arch=arch, **config)
    except (tilegcn.CompileError, ArgumentError) as e:
        return f"{type(e).__name__}: {e.raw_message}"
    return None


def _agree(configs, arch, args=None):
    """(config, feasibility's verdict, compile's verdict) for every config where the two differ."""
    args = args or _gemm_args()
    fn = EXAMPLE.gemm
    fn.cache_clear()
    out = []
    for config in configs:
        why, refused = feasibility(fn, args, config, arch), _compile_verdict(fn, args, config, arch)
        if why != refused:
            out.append((config, why, refused))
    return out


def test_feasibility_refuses_exactly_the_register_budget_compile_refuses():
    """gfx942, 256x256 tiles on 512 threads: 3 stages (two K steps ahead in VGPRs) need more than the 256 registers
    a wave of 8 keeps (compile refuses with the register budget), 1 and 2 stages fit. feasibility says the same,
    with the same words."""
    base, args = dict(block_M=256, block_N=256, block_K=64, threads=512, panel=8), _gemm_args(k=256)  # 4 K steps
    assert _agree([dict(base, num_stages=s) for s in (1, 2, 3)], "gfx942", args) == []
    assert feasibility(EXAMPLE.gemm, args, dict(base, num_stages=2), "gfx942") is None
    why = feasibility(EXAMPLE.gemm, args, dict(base, num_stages=3), "gfx942")
    assert why.startswith("ResourceError: register budget exceeded")


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_feasibility_and_compile_agree_on_the_example_autotune_space(arch):
    configs = [c for c in EXAMPLE.SPACE.configs() if EXAMPLE.SPACE.prune_reason(c) is None]
    assert len(configs) == 40
    assert _agree(configs, arch) == []


def test_the_sweep_skips_a_config_over_the_register_budget_with_the_compilers_reason():
    """The sweep checks LDS before compiling; the register budget, known once compiled, skips the config too
    (not 'failed'), with the reason feasibility gives."""
    base, args = dict(block_M=256, block_N=256, block_K=64, threads=512, panel=8), _gemm_args(k=256)
    configs = [dict(base, num_stages=3), dict(base, num_stages=1)]  # 3 stages: two K steps ahead in VGPRs
    tuner = tilegcn.Autotuner(EXAMPLE.gemm, configs, ranker=lambda kernel, args: Score(1e-3), workers=1,
                              progress=False, verbose=False, device="MI300X", verify=False)
    EXAMPLE.gemm.cache_clear()
    assert tuner.tune(*args, arch="gfx942") == configs[1]
    over = tuner.report.rows[0]
    assert over.status == "skipped"
    assert over.reason == feasibility(EXAMPLE.gemm, args, configs[0], "gfx942")


# -- CompileOptions ---------------------------------------------------------------------------------------------
@tilegcn.jit
def scale(X, Y, *, block=64):
    with T.Kernel(T.ceildiv(X.shape[0], block), threads=64) as bx:
        x = T.alloc_fragment((block,), "float32")
        T.copy(X[bx * block], x)
        for i in T.Parallel(block):
            x[i] = x[i] * 3.0
        T.copy(x, Y[bx * block])


def test_options_are_validated_and_name_the_choices():
    with pytest.raises(ArgumentError, match=r"unknown schedule='fast'; choose one of 'interleave', 'plain'"):
        CompileOptions("gfx942", schedule="fast")
    with pytest.raises(ArgumentError, match=r"tilegcn.jit: unknown copy='dma'"):
        tilegcn.jit(scale.fn, copy="dma")
    with pytest.raises(UnsupportedArchError):
        CompileOptions("gfx1100")
    with pytest.raises(Exception):  # frozen: options are a value, part of a cache key
        CompileOptions("gfx942").schedule = "plain"


def test_every_option_is_part_of_the_cache_key(cache_dir):
    """The same kernel compiled with other options is another cache entry (and other code), never a hit on
    the first one's."""
    x = torch.arange(128, dtype=torch.float32)
    y = torch.empty_like(x)
    keys = {}
    for schedule in ("interleave", "plain"):
        fn = tilegcn.jit(scale.fn, schedule=schedule)
        k = fn.compile(x, y, arch="gfx942")
        assert fn.cache_stats.compiles == 1  # built, not found under the other option's key
        keys[schedule] = k.key
        assert k.metadata["options"] == {"arch": "gfx942", "schedule": schedule, "copy": "auto",
                                            "fp_contract": True}  # cache show
        k(x, y)
        torch.testing.assert_close(y, x * 3.0)
    assert keys["interleave"] != keys["plain"]


# -- the pass list ----------------------------------------------------------------------------------------------
def _traced(arch="gfx942"):
    x = torch.empty(128)
    _, trace_args = scale._signature((x, x))
    return T.trace(scale.fn, trace_args, scale._constants({}), arch)


def test_lower_runs_every_pass_of_the_list_in_order():
    c = compiler.run_passes(_traced(), CompileOptions("gfx942"))
    assert tuple(c.seconds) == compiler.PASS_NAMES
    assert compiler.PASS_NAMES.index(compiler.PLAN_LAST) < compiler.PASS_NAMES.index(compiler.FEASIBILITY_LAST)
    assert compiler.lower(_traced(), "gfx942").asm == c.lowered.asm


def test_a_prefix_stops_where_it_is_told():
    c = compiler.plan_resources(_traced(), "gfx950")
    assert tuple(c.seconds)[-1] == compiler.PLAN_LAST and c.lowered is None and c.insts == []
    with pytest.raises(ArgumentError, match="no pass 'regalloc2'; the passes are verify, .*pipelining"):
        compiler.run_passes(_traced(), "gfx950", last="regalloc2")


def test_machine_passes_on_hand_built_code_start_after_register_allocation():
    """run_machine_passes is the list's waits and hazards: it refuses to start where a builder is needed."""
    with pytest.raises(ArgumentError, match="starts at 'waits' or later.*run them through run_passes"):
        run_machine_passes([], "gfx942", first="schedule")
    with pytest.raises(ArgumentError, match="no pass 'wait'; the passes are"):
        run_machine_passes([], "gfx942", first="wait")


def test_a_register_budget_refusal_is_raised_by_the_feasibility_prefix_already():
    """The last resource check is in the prefix that feasibility runs: lower fails at the same pass."""
    a, b, c = _gemm_args(k=256)
    _, trace_args = EXAMPLE.gemm._signature((a, b, c))
    config = dict(block_M=256, block_N=256, block_K=64, threads=512, num_stages=3, panel=8)  # 2 K steps in VGPRs
    kernel = T.trace(EXAMPLE.gemm.fn, trace_args, EXAMPLE.gemm._constants(config), "gfx942")
    with pytest.raises(ResourceError) as prefix:
        compiler.check_resources(kernel, "gfx942")
    with pytest.raises(ResourceError) as whole:
        compiler.lower(kernel, "gfx942")
    assert prefix.value.raw_message == whole.value.raw_message
