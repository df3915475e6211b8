"""A reduced run of bench/fuzz.py: seeded elementwise and GEMM kernels (shapes, strides, dtypes, tile
configs, arches) on the emulated device, compared with torch. A wrong answer or a raw exception fails;
a clear tilegcn refusal is allowed. The larger run: `PYTHONPATH=$PWD python bench/fuzz.py --cases 200`."""
import functools
import importlib.util
import sys

import pytest

from conftest import REPO

_spec = importlib.util.spec_from_file_location("bench_fuzz", REPO / "bench" / "fuzz.py")
fuzz = sys.modules["bench_fuzz"] = importlib.util.module_from_spec(_spec)  # dataclasses look their module up
_spec.loader.exec_module(fuzz)

CASES = fuzz.make_cases(seed=2026, n=18)


def test_the_sample_covers_both_kinds_and_arches():
    assert {c.kind for c in CASES} == {"elementwise", "gemm"}
    assert {c.arch for c in CASES} == set(fuzz.ARCHES)


@functools.cache
def outcome(index: int) -> tuple:
    return fuzz.run_case(CASES[index])


@pytest.mark.parametrize("index", range(len(CASES)), ids=[f"{i}-{c.kind}-{c.arch}" for i, c in enumerate(CASES)])
def test_fuzz_case_matches_torch_or_is_refused(index):
    result, detail = outcome(index)
    assert result in ("ok", "refused"), f"{result}: {CASES[index]}\n{detail}"


def test_most_of_the_sample_runs_rather_than_being_refused():
    results = [outcome(i)[0] for i in range(len(CASES))]
    assert results.count("ok") >= len(CASES) // 2, results
