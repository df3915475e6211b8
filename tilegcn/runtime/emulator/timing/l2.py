"""Per-XCD L2 hit rate from the lines the co-resident workgroups of one XCD touch (timing.md 0.5, S19v9).

Workgroup i runs on XCD i % 8, and each XCD has a private 4 MB L2, so the workgroups that share an L2 in
a dispatch round are those with the same i % 8. The trace records, for each of them, the 128-byte lines
its global loads touch in each loop iteration (a workgroup's repeated touches of one line inside an
iteration are one L1->L2 request: the L1 keeps them). Requests = the sum over workgroups and iterations
of those line counts (the TCP->TCC requests of rocprof); misses = the distinct lines among all of them
(each is fetched from HBM once per round while the round's working set fits in L2). So grid orders that
put workgroups sharing A rows or B columns on one XCD (T.use_swizzle, XCD remap) raise the hit rate.
Assumptions: the workgroups of a round advance in step; nothing survives in L2 between rounds; MALL is
not modelled (a miss goes to HBM).
"""
from __future__ import annotations


def hit_rate(footprints: dict, l2_bytes: int, line_bytes: int) -> tuple:
    """(hit rate, requests, misses) over the steady loop iterations recorded (segments >= 1 when any)."""
    segs = sorted({s for _, s in footprints})
    steady = [s for s in segs if s >= 1] or segs
    requests, per_seg = 0, {}
    for (_, seg), lines in footprints.items():
        if seg in steady:
            requests += len(lines)
            per_seg.setdefault(seg, set()).update(lines)
    if not requests:
        return 1.0, 0, 0
    # a line touched in several iterations is fetched once, unless one iteration's lines overflow the L2
    if max(len(v) for v in per_seg.values()) > l2_bytes // line_bytes:
        return 0.0, requests, requests
    misses = len(set().union(*per_seg.values()))
    return 1.0 - misses / requests, requests, misses
