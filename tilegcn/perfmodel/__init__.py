"""A timing model of MI300X (gfx942) / MI355X (gfx950), driven by the emulated device.

    from tilegcn import perfmodel
    est = perfmodel.estimate(module, "gemm", grid, block, args, device="MI355X")   # any loaded code object
    est = kernel.estimate(device="MI355X")                                       # a tilegcn CompiledKernel
    est.cycles, est.seconds, est.tflops, est.breakdown; print(est)

It is a package of its own, above the emulated device: it observes runs through the emulator's public trace
API (tilegcn/runtime/emulator/tracing.py) and the emulator never imports it.

Architecture (why this shape): the functional emulator already decodes every instruction, computes every
address and the LDS bank-conflict phases of every DS access; a separate static model would have to
re-derive all of that and could only guess control flow. So (1) `trace.py` runs the kernel functionally
for the workgroups that share one XCD in the first dispatch round, recording the detailed workgroup's
per-wave instruction streams and every workgroup's L2 line footprint, fast-forwarding long counted
loops after a few trips; (2) `l2.py` turns the footprints into the XCD's L2 hit rate; (3) `cu.py`
replays the streams of the co-resident workgroups of one CU clock by clock (issue slots, MFMA pipe,
waits, barriers) against `memory.py` (LDS ports, TCP, L2/HBM bandwidth and latency); (4) `grid.py`
places workgroups (occupancy, dispatch rounds) and adds the fast-forwarded trips at the steady trip
time; when five workgroups sampled along x take different paths (a causal grid), it times each and
interpolates between them. The model counts cycles; `clock_hz` (a sustained clock, far below the peak under MFMA load)
converts them to seconds. Parameters: `tilegcn.amdgcn.arch.TIMING`, each with its source.
"""
from .grid import Estimate, estimate

__all__ = ["Estimate", "estimate"]
