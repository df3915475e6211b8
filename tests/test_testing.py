"""tilegcn.testing: do_bench (the timing model's estimate on the emulated device, labelled; measured on HIP)
and assert_close (dtype-aware tolerances, a message that says where)."""
import warnings

import pytest
import torch

import tilegcn
from tilegcn.testing import BenchResult, EstimateWarning, assert_close, do_bench
from kernels import axpb_relu


def _bench_quietly(fn, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EstimateWarning)
        return do_bench(fn, **kwargs)


def test_do_bench_on_the_emulator_is_the_timing_models_estimate_labelled_as_such():
    x = torch.randn(256, 512, dtype=torch.bfloat16)
    y = torch.zeros_like(x)
    kernel = axpb_relu.compile(x, y, arch="gfx950")
    with pytest.warns(EstimateWarning, match="timing model's estimate for MI355X, not a measured time"):
        ms = do_bench(lambda: axpb_relu(x, y, arch="gfx950"))
    assert isinstance(ms, float) and ms > 0
    assert ms.estimated and "timing model estimate for MI355X" in ms.source and "not a measurement" in repr(ms)
    # the number is the timing model's, for the kernel fn launched: the same as the kernel's own estimate
    assert float(ms) == pytest.approx(kernel.estimate(device="MI355X").seconds * 1e3, rel=1e-9)
    assert torch.count_nonzero(y) == 0  # estimated, not run: the caller's tensors keep their values
    # triton's return shapes: quantiles -> a list, "all" -> every repeat (one: an estimate does not vary)
    assert _bench_quietly(lambda: axpb_relu(x, y, arch="gfx950"), quantiles=[0.5, 0.2]) == [float(ms)] * 2
    assert _bench_quietly(lambda: axpb_relu(x, y, arch="gfx950"), return_mode="all") == [float(ms)]


def test_do_bench_sums_every_launch_and_names_the_device_asked_for():
    x = torch.randn(256, 512, dtype=torch.bfloat16)
    y = torch.zeros_like(x)
    once = _bench_quietly(lambda: axpb_relu(x, y, arch="gfx942"), device="MI300X")
    twice = _bench_quietly(lambda: (axpb_relu(x, y, arch="gfx942"), axpb_relu(y, x, arch="gfx942")),
                           device="MI300X")
    assert "MI300X" in once.source and len(twice.estimates) == 2
    assert float(twice) == pytest.approx(2 * float(once), rel=1e-9)


def test_do_bench_refuses_a_function_that_launches_nothing():
    with pytest.raises(tilegcn.ArgumentError, match="fn launched no tilegcn kernel") as info:
        do_bench(lambda: torch.zeros(4).add_(1))
    assert info.value.location and info.value.location.startswith(__file__)  # the user's do_bench line
    with pytest.raises(tilegcn.ArgumentError, match="return_mode='p99'; choose one of min, max, mean, median"):
        do_bench(lambda: None, return_mode="p99")


def test_do_bench_on_hip_times_as_many_repeats_as_fit_and_flushes_before_each():
    """The HIP path (no AMD GPU here): its budget arithmetic, flush and grad clearing, with a fake event timer
    whose calls take 2, 2, ... ms; the time it reports is their median."""
    from tilegcn.testing import _measured, _summary

    calls, flushes = [], []
    w = torch.zeros(3, requires_grad=True)
    w.grad = torch.ones(3)

    def elapsed(run):
        run()
        calls.append(w.grad)
        return 0.002 + 0.001 * (len(calls) % 2)  # 2 ms and 3 ms alternately

    times, repeats = _measured(lambda: None, 25, 100, [w], elapsed=elapsed, flush=lambda: flushes.append(1))
    assert repeats == int(100 / 2.6) and len(times) == repeats and len(flushes) == repeats  # 2.6 ms a call at first
    assert calls[-1] is None  # grads cleared before each timed call
    result = _summary(times, None, "median", BenchResult(0.0, "measured", False))
    assert float(result) == pytest.approx(2.5) and not result.estimated  # 19 of 2 ms, 19 of 3 ms


def test_assert_close_passes_a_bf16_kernel_output_against_an_fp32_reference():
    x = torch.randn(128, 256, dtype=torch.bfloat16)
    y = torch.empty_like(x)
    axpb_relu(x, y)
    assert_close(y, torch.relu(x.float() * 2.0 + 1.0))  # bf16 rounding: within bf16's default tolerance


def test_assert_close_says_how_many_where_and_by_how_much():
    expected = torch.randn(128, 256)
    actual = expected.clone()
    actual[64:80, 200] += 0.5
    with pytest.raises(AssertionError) as info:
        assert_close(actual, expected, msg="gemm 128x256")
    text = str(info.value)
    assert isinstance(info.value, tilegcn.TilegcnError)
    assert text.startswith("tilegcn.testing.assert_close: gemm 128x256: 16 of 32768 elements")
    assert "atol=1e-05 + rtol=1.3e-06 * |expected| (float32)" in text  # float32's defaults, as torch's
    assert "the mismatches span indices [64..79, 200..200] of shape (128, 256)" in text
    with pytest.raises(AssertionError, match=r"shapes differ: actual \(2, 3\), expected \(3, 2\)"):
        assert_close(torch.zeros(2, 3), torch.zeros(3, 2))
    with pytest.raises(AssertionError, match="1 of 3 elements"):  # integers compare exactly
        assert_close(torch.tensor([1, 2, 3]), torch.tensor([1, 2, 4]))
    assert_close(actual, expected, rtol=0.0, atol=0.6)  # loosened on request
