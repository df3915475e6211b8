"""Every s_waitcnt / s_barrier of the pipelined 256x256x64 GEMM's K loop deleted in turn, on gfx942 and gfx950,
NT and NN: the emulator must refuse each deletion (HazardError / RaceError).

    PYTHONPATH=$PWD python bench/pipelined_waits.py                  # all four kernels, a table of figures
    PYTHONPATH=$PWD python bench/pipelined_waits.py --arch gfx950 --layout NT

The exhaustive sweep behind tests/test_pipelining.py's
test_deleting_a_sample_of_the_pipelined_loops_waits_is_caught, which deletes a seeded sample of these lines.
Per kernel it prints how many lines were deleted, how many the emulator caught, and lists each one it missed:
"redundant" (the right result without it: the pipelining pass should stop emitting it) or "unchecked" (a wrong
result and no error: a gap in the emulator's checks). Exits 1 when anything was missed.

Measured 2026-11-26 on the shared 2-core machine (load average ~3): 220 lines deleted (gfx942 NT 74, NN 66;
gfx950 40 each), 220 caught, 79 s, 324 MB peak RSS; the suite's sample is 28 of them (8, 8, 6, 6), ~14 s.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
# a scratch cache, removed at exit: never the user's ~/.tilegcn/cache (set before tilegcn is imported)
_scratch = tempfile.TemporaryDirectory(prefix="tilegcn-bench-waits-")
os.environ.setdefault("TILEGCN_CACHE_DIR", _scratch.name)
os.environ["TILEGCN_DEVICE"] = "emulator"

from test_pipelining import PipelinedLoopWaits  # noqa: E402  (the test's kernel, inputs and deletion)

ARCHES = ("gfx942", "gfx950")
LAYOUTS = ("NT", "NN")  # NT: B is (N, K), as the test's "NK" parameter


def sweep(arch: str, layout: str) -> tuple[dict, PipelinedLoopWaits, float]:
    start = time.perf_counter()
    loop = PipelinedLoopWaits(arch, "NK" if layout == "NT" else "KN")
    outcomes = {i: loop.delete(i) for i in loop.targets}
    return outcomes, loop, time.perf_counter() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Delete each wait of the pipelined GEMM's K loop; "
                                                 "count what the emulator catches.")
    parser.add_argument("--arch", choices=ARCHES, action="append", help="only this arch (repeatable)")
    parser.add_argument("--layout", choices=LAYOUTS, action="append", help="only this layout (repeatable)")
    args = parser.parse_args(argv)
    print(f"{'kernel':<14} {'deleted':>7} {'caught':>6} {'redundant':>9} {'unchecked':>9} {'seconds':>7}")
    missed = []
    for arch in args.arch or ARCHES:
        for layout in args.layout or LAYOUTS:
            outcomes, loop, seconds = sweep(arch, layout)
            counts = {kind: sum(o == kind for o in outcomes.values()) for kind in ("caught", "redundant", "unchecked")}
            print(f"{arch + ' ' + layout:<14} {len(outcomes):>7} {counts['caught']:>6} {counts['redundant']:>9} "
                  f"{counts['unchecked']:>9} {seconds:>7.1f}", flush=True)
            missed += [f"{arch} {layout} {outcome}: {loop.describe(i)}" for i, outcome in outcomes.items()
                       if outcome != "caught"]
    for line in missed:
        print("  missed:", line)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
