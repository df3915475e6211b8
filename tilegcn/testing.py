"""Helpers for tests and benchmarks of tilegcn kernels, shaped like `triton.testing`'s.

    ms = tilegcn.testing.do_bench(lambda: gemm(a, b, c))   # measured on a HIP GPU; the timing model's
    print(ms, ms.source)                                   #   estimate on the emulated device (labelled)
    tilegcn.testing.assert_close(c, a.float() @ b.float()) # dtype-aware tolerances, a message that says where

On a HIP device `do_bench` times `fn` as `triton.testing.do_bench` does: warm-up, the L2 (and Infinity Cache)
flushed before each repeat, HIP events on torch's current stream. On the emulated device there is nothing to
time: the kernels `fn` launches are recorded (not run) and the timing model estimates each one for a named
device (docs/testing-api.md says what that estimate promises).

`compare(generated, edited, args)` runs two builds of one launch on the emulated device with every check on and
reports how their outputs differ (`CompiledKernel.with_asm(verify=True)`, tilegcn/asm_override.py).
"""
from __future__ import annotations

import dataclasses
import statistics
import warnings

from .errors import ArgumentError, EmulatorError, MismatchError, TilegcnError

__all__ = ["do_bench", "assert_close", "BenchResult", "EstimateWarning", "MismatchError", "measure"]

# more than the last-level cache, so a flush evicts every line: MI300X and MI355X have a 256 MiB Infinity Cache
FLUSH_BYTES = 512 << 20
RETURN_MODES = ("min", "max", "mean", "median", "all")


class EstimateWarning(UserWarning):
    """`do_bench` ran on the emulated device: its number is the timing model's estimate, not a measurement."""


class BenchResult(float):
    """Milliseconds, as `triton.testing.do_bench` returns them, with where they come from: `.source` (e.g.
    "timing model estimate for MI355X"), `.estimated` (True on the emulated device) and, when estimated,
    `.estimates` (the timing model's Estimate of each launch: cycles, breakdown, `print(e)`)."""

    def __new__(cls, ms: float, source: str, estimated: bool, estimates=()):
        self = super().__new__(cls, ms)
        self.source, self.estimated, self.estimates = source, estimated, list(estimates)
        return self

    def __repr__(self):
        return f"{float(self):.4g} ms ({self.source})"


# -- timing on a HIP device -------------------------------------------------------------------------------------
def measure(run, *, warmup: int = 3, repeats: int = 20, flush=None, elapsed=None) -> list:
    """Seconds of each of `repeats` timed calls of `run()` after `warmup` untimed ones, `flush()` before each
    (as triton.testing.do_bench does, so every repeat starts from a cold L2). `elapsed(run)` times one call
    (default: HIP events on torch's current stream). The autotuner's measured ranking uses it too."""
    elapsed = elapsed or _event_elapsed
    for _ in range(warmup):
        run()
    times = []
    for _ in range(repeats):
        if flush is not None:
            flush()
        times.append(elapsed(run))
    return times


def _event_elapsed(run) -> float:
    import torch

    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    run()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) * 1e-3


class L2Flush:
    """Called before each timed repeat: overwrites FLUSH_BYTES of device memory (allocated on first use)."""

    def __init__(self, nbytes: int = FLUSH_BYTES):
        self.nbytes = nbytes
        self._scratch = None

    def __call__(self):
        import torch

        if self._scratch is None:
            self._scratch = torch.empty(self.nbytes // 4, dtype=torch.int32, device="cuda")
        self._scratch.zero_()


def _measured(fn, warmup_ms, rep_ms, grad_to_none, *, elapsed=None, flush=None) -> tuple:
    """(milliseconds of each repeat, how many repeats): as many warm-up and timed calls as fit in `warmup_ms`
    and `rep_ms` at the time of a first few calls (at least one of each)."""
    elapsed = elapsed or _event_elapsed
    flush = flush or L2Flush()
    fn()  # the first call may compile: not timed
    first_ms = statistics.fmean(elapsed(fn) for _ in range(5)) * 1e3
    per_call = max(first_ms, 1e-6)
    n_warmup, n_repeat = max(1, int(warmup_ms / per_call)), max(1, int(rep_ms / per_call))

    def before_each():
        for t in grad_to_none or ():  # a backward pass in `fn` must not accumulate into the last one's grads
            t.grad = None
        flush()

    seconds = measure(fn, warmup=n_warmup, repeats=n_repeat, flush=before_each, elapsed=elapsed)
    return [s * 1e3 for s in seconds], n_repeat


# -- the timing model's estimate on the emulated device --------------------------------------------------------
def _estimated(fn, device) -> list:
    """The timing model's Estimate of every kernel launch `fn` makes on the emulated device (not run)."""
    from .runtime.emulator import recording_launches

    with recording_launches() as launches:
        fn()
    return [_estimate_launch(module, name, launch, device) for module, name, launch in launches]


def _estimate_launch(module, name, launch, device):
    """One launch's Estimate, on copies of its tensors: the estimate runs part of the kernel, and the caller's
    tensors stay as they were (the same tensor passed twice stays one tensor)."""
    import torch

    from .amdgcn.arch import TIMING
    from .perfmodel import estimate

    cloned = {}

    def copied(value):
        if isinstance(value, torch.Tensor):
            return cloned.setdefault(id(value), value.clone())
        return value

    options = dict(launch, args=[copied(a) for a in launch["args"]],
                   buffers=[copied(b) for b in launch["buffers"]])
    grid, block = options.pop("grid"), options.pop("block")
    return estimate(module, name, grid, block, device=device or TIMING[module.arch.name].device, **options)


# -- do_bench ---------------------------------------------------------------------------------------------------

def do_bench(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="median", *, device=None):
    """Time `fn()` (a function of no arguments that launches tilegcn kernels), in milliseconds.

    triton.testing.do_bench's arguments: `warmup` and `rep` are budgets in ms for the untimed and the timed
    calls, `grad_to_none` tensors get `.grad = None` before each call, `quantiles` (e.g. [0.5, 0.2, 0.8])
    returns those quantiles instead, `return_mode` is "median" (the default here: robust to an odd slow
    repeat; triton's is "mean"), "mean", "min", "max" or "all" (the list of every repeat).

    On a HIP device: measured (warm-up, L2 flushed before each repeat, HIP events). On the emulated device:
    the sum of the timing model's estimates of the kernels `fn` launches, for `device` ("MI300X" or "MI355X";
    default: each kernel's arch's device); the kernels are not run and the caller's tensors keep their values;
    time `fn` spends outside tilegcn kernels is not counted; `warmup`, `rep` and `grad_to_none` do nothing. The
    result is a float with `.source` saying which it is (on the emulated device an EstimateWarning says so too)."""
    from .runtime import device_name

    if return_mode not in RETURN_MODES:
        raise ArgumentError(f"tilegcn.testing.do_bench: return_mode={return_mode!r}; choose one of "
                            f"{', '.join(RETURN_MODES)}")
    if device_name() == "hip":
        times, n = _measured(fn, warmup, rep, grad_to_none)
        return _summary(times, quantiles, return_mode,
                        BenchResult.__new__(BenchResult, 0.0, f"measured on the HIP device, {n} repeats, L2 "
                                            "flushed before each", False))
    estimates = _estimated(fn, device)
    if not estimates:
        raise ArgumentError("tilegcn.testing.do_bench: fn launched no tilegcn kernel, so the emulated device has "
                            "nothing to estimate; pass a function of no arguments that calls a @tilegcn.jit "
                            "kernel (e.g. lambda: kernel(x, y))")
    devices = ", ".join(sorted({e.device for e in estimates}))
    label = BenchResult(sum(e.seconds for e in estimates) * 1e3,
                        f"timing model estimate for {devices}, {len(estimates)} launch(es), not a measurement",
                        True, estimates)
    # shown once per calling line (Python's default warning filter), so a loop of benchmarks is not flooded
    warnings.warn(f"tilegcn.testing.do_bench: on the emulated device nothing is timed: the result is the timing "
                  f"model's estimate for {devices}, not a measured time; see its .source and .estimates",
                  EstimateWarning, stacklevel=2)
    return _summary([float(label)], quantiles, return_mode, label)


def _summary(times: list, quantiles, return_mode: str, label: BenchResult):
    """triton's summary of the repeats, each number carrying `label`'s source."""
    def labelled(ms):
        return BenchResult(ms, label.source, label.estimated, label.estimates)

    if quantiles is not None:
        return [labelled(_quantile(times, q)) for q in quantiles]
    if return_mode == "all":
        return [labelled(t) for t in times]
    pick = {"min": min, "max": max, "mean": statistics.fmean, "median": statistics.median}[return_mode]
    return labelled(pick(times))


def _quantile(values: list, q: float) -> float:
    """Linear interpolation between the closest ranks, as torch.quantile does."""
    if not 0.0 <= q <= 1.0:
        raise ArgumentError(f"tilegcn.testing.do_bench: quantile {q!r} is not within [0, 1]")
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


# -- assert_close -----------------------------------------------------------------------------------------------
# (rtol, atol) by dtype: torch.testing.assert_close's defaults, and for fp8 one unit in the last place
_TOLERANCES = {
    "float64": (1e-7, 1e-7), "float32": (1.3e-6, 1e-5), "float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5),
    "float8_e4m3fn": (0.125, 1e-3), "float8_e4m3fnuz": (0.125, 1e-3),
    "float8_e5m2": (0.25, 1e-3), "float8_e5m2fnuz": (0.25, 1e-3),
}


def default_tolerances(*dtypes) -> tuple:
    """(rtol, atol) for comparing tensors of these dtypes: the loosest of theirs (a bf16 kernel output checked
    against an fp32 torch reference is held to bf16's), (0, 0) for integers and bool."""
    import torch

    pairs = [_TOLERANCES.get(str(d).replace("torch.", ""), (0.0, 0.0)) if d.is_floating_point else (0.0, 0.0)
             for d in dtypes if isinstance(d, torch.dtype)]
    return max(p[0] for p in pairs), max(p[1] for p in pairs)


def assert_close(actual, expected, *, rtol=None, atol=None, equal_nan=False, msg=None) -> None:
    """Raise MismatchError (an AssertionError) unless |actual - expected| <= atol + rtol * |expected| for every
    element, as torch.testing.assert_close does; the message says how many elements differ, the largest
    difference and where, and the block of indices the mismatches span (a tile kernel's bug is usually one
    tile, one edge or one lane pattern). Tensors of different float dtypes compare in float64 (a kernel's
    bf16 output against an fp32 torch reference); default tolerances come from the less precise dtype
    (`default_tolerances`); give rtol and atol together or neither."""
    import torch

    actual, expected = torch.as_tensor(actual), torch.as_tensor(expected)
    if (rtol is None) != (atol is None):
        raise ArgumentError("tilegcn.testing.assert_close: pass both rtol and atol, or neither (dtype defaults)")
    if rtol is None:
        rtol, atol = default_tolerances(actual.dtype, expected.dtype)
    if actual.shape != expected.shape:
        raise MismatchError(_prefix(msg) + f"shapes differ: actual {tuple(actual.shape)}, expected "
                            f"{tuple(expected.shape)}")
    a = actual.detach().cpu().to(torch.float64)
    e = expected.detach().cpu().to(torch.float64)
    bad = ~torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=equal_nan)
    if not bool(bad.any()):
        return
    raise MismatchError(_prefix(msg) + _mismatch_text(a, e, bad, rtol, atol, actual.dtype, expected.dtype))


def _prefix(msg) -> str:
    return f"tilegcn.testing.assert_close: {msg + ': ' if msg else ''}"


def _mismatch_text(a, e, bad, rtol, atol, actual_dtype, expected_dtype) -> str:
    import torch

    count, total = int(bad.sum()), bad.numel()
    diff = (a - e).abs().where(bad, torch.zeros((), dtype=a.dtype)).nan_to_num(float("inf"))
    worst = tuple(int(i) for i in torch.unravel_index(diff.argmax(), a.shape)) if a.dim() else ()
    where = bad.nonzero()
    span = ", ".join(f"{int(lo)}..{int(hi)}" for lo, hi in zip(where.min(0).values, where.max(0).values))
    dtypes = str(actual_dtype).replace("torch.", "") + (
        "" if actual_dtype == expected_dtype else f" vs {str(expected_dtype).replace('torch.', '')}")
    lines = [
        f"{count} of {total} elements ({100.0 * count / total:.3g} %) differ by more than atol={atol:g} + "
        f"rtol={rtol:g} * |expected| ({dtypes})",
        f"  largest difference {float(diff[worst]):.6g} at index {worst}: actual {float(a[worst]):.6g}, "
        f"expected {float(e[worst]):.6g}",
    ]
    if a.dim():
        lines.append(f"  the mismatches span indices [{span}] of shape {tuple(a.shape)}")
    lines.append("  (pass rtol= and atol= to loosen it; a kernel's rows or columns past a multiple of its block "
                 "size differing alone point at masking of the ragged edge)")
    return "\n".join(lines)


def copies(args) -> list:
    """`args` with every tensor cloned (a kernel run on them leaves the caller's as they are)."""
    import torch

    return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]


# -- an edited kernel against the generated one (CompiledKernel.with_asm(verify=True); tilegcn/asm_override.py) --
class AsmVerifyError(TilegcnError):
    """An overriding assembly file changed the results or introduced a hazard. `.report` says how."""

    def __init__(self, report: "AsmReport"):
        self.report = report
        super().__init__(str(report))


@dataclasses.dataclass
class AsmReport:
    """The generated kernel vs the edited one on the same inputs (emulated device, checks on)."""

    name: str
    edited_path: str
    max_diff: dict  # tensor argument -> max |edited - generated| (inf where a NaN appears on one side only)
    hazard: str | None  # the emulator's HazardError / RaceError for the edited kernel
    estimates: tuple  # (generated, edited): str() of the timing model's estimate, or why there is none

    def ok(self, tolerance: float = 0.0) -> bool:
        return self.hazard is None and all(d <= tolerance for d in self.max_diff.values())

    def __str__(self):
        diffs = ", ".join(f"{k} {v:.4g}" for k, v in self.max_diff.items()) or "not compared"
        lines = [f"asm override of {self.name} with {self.edited_path}:",
                 f"  max |edited - generated|: {diffs}",
                 f"  hazards: {self.hazard or 'none'}",
                 f"  estimate, generated: {self.estimates[0]}",
                 f"  estimate, edited:    {self.estimates[1]}"]
        return "\n".join(lines)


def compare(generated, edited, args) -> AsmReport:
    """Run both kernels on copies of `args` on the emulated device and report (see AsmReport)."""
    import torch

    if getattr(generated, "launches", ()) or getattr(generated, "scratch", ()):
        raise ArgumentError(f"tilegcn: with_asm(verify=True) runs one kernel on the caller's tensors; {generated.name} "
                            "has several T.Kernel blocks or T.alloc_global scratch: verify by calling the program "
                            "with the override in place ($TILEGCN_ASM_OVERRIDE) and comparing its outputs")
    outputs, hazard = [], None
    for k in (generated, edited):
        run_on = copies(args)
        try:
            _run_emulated(k, run_on, check=True)
        except EmulatorError as e:
            if k is generated:
                raise
            hazard = f"{type(e).__name__}: {e}"
            try:
                _run_emulated(k, run_on, check=False)  # still compare what it computes
            except EmulatorError as after:  # unchecked, it runs into what the hazard causes (a memory fault)
                hazard += f"\n    without the checks it then fails: {type(after).__name__}: {after}"
                run_on = None  # nothing to compare
        outputs.append(run_on)
    diffs = {}
    for name, a, b in zip(generated.fn.arg_names, *outputs) if outputs[1] is not None else ():
        if isinstance(a, torch.Tensor) and a.numel():
            d = (b.double() - a.double()).abs()
            d[a.isnan() & b.isnan()] = 0.0
            diffs[name] = d.nan_to_num(float("inf")).max().item()
    return AsmReport(generated.name, edited.metadata.get("asm_override", "?"), diffs, hazard,
                     (_estimate(generated, args), _estimate(edited, args)))


def _run_emulated(kernel, args, check: bool):
    from .runtime.emulator import load

    names = [a["name"] for a in kernel.metadata["args"]]  # the kernel's parameters among the positional args
    grid = kernel.grid_for(args)  # T.dynamic sizes: evaluated at these arguments' shapes, passed by value
    sizes = kernel.dynamic_sizes(args) if kernel.dynamic else {}
    args = [sizes[n] if n in sizes else args[kernel.fn.arg_names.index(n)] for n in names] if names else list(args)
    load(kernel.hsaco).launch(kernel.name, grid, kernel.block, args, check=check)


def _estimate(kernel, args) -> str:
    try:
        return str(kernel.estimate(args=copies(args)))  # for the kernel's arch's device
    except TilegcnError as e:
        return f"unavailable ({e})"
