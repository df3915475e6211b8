"""Per-XCD L2 hit rate from the lines the co-resident workgroups of one XCD touch (docs/timing-sources.md §0.5, S19v9).

Workgroup i runs on XCD i % 8, and each XCD has a private 4 MB L2, so the workgroups that share an L2 in
a dispatch round are those with the same i % 8. The trace records, for each of them, the 128-byte lines
its global loads touch in each loop iteration (a workgroup's repeated touches of one line inside an
iteration are one L1->L2 request: the L1 keeps them). Requests = the sum over workgroups and iterations
of those line counts (the TCP->TCC requests of rocprof).

Misses. A line is fetched from HBM by the first workgroup that touches it; each later workgroup touching
it hits, unless it reaches the line too long after the previous one, when the line has been evicted.
Workgroups of a round do not advance in step: they start in dispatch order (an XCD's workgroups in
ascending id), one after another, and drift apart as they run, so the further apart two workgroups are
in the XCD's dispatch order, the likelier the later one misses. The model charges the later of two
consecutive sharers (in dispatch order, `gap` positions apart) a refetch with probability
`refetch_base + refetch_per_gap * gap` (capped at 1; `Timing.l2_refetch_*`, fitted to two of C10's grid
orders, see arch.py). So grid orders that put workgroups sharing A rows or B columns on one XCD, and
close together in its dispatch order (T.use_swizzle, XCD remap), raise the hit rate.
Assumptions: nothing survives in L2 between rounds; MALL is not modelled (a miss goes to HBM).
"""
from __future__ import annotations

import numpy as np


def hit_rate(footprints: dict, l2_bytes: int, line_bytes: int, refetch_base: float = 0.0,
             refetch_per_gap: float = 0.0) -> tuple:
    """(hit rate, requests, misses) over the steady loop iterations recorded (segments >= 1 when any).
    `footprints`: (workgroup id, segment) -> set of line numbers, for workgroups of one XCD and round."""
    segs = sorted({s for _, s in footprints})
    steady = [s for s in segs if s >= 1] or segs
    steady_fp = {key: lines for key, lines in footprints.items() if key[1] in steady and lines}
    requests = sum(len(lines) for lines in steady_fp.values())
    if not requests:
        return 1.0, 0, 0
    per_seg = {}
    for (_, seg), lines in steady_fp.items():
        per_seg.setdefault(seg, set()).update(lines)
    # a line touched in several iterations is fetched once, unless one iteration's lines overflow the L2
    if max(len(v) for v in per_seg.values()) > l2_bytes // line_bytes:
        return 0.0, requests, requests
    misses = _fetches(steady_fp, refetch_base, refetch_per_gap)
    return 1.0 - misses / requests, requests, misses


def _fetches(footprints, base, per_gap):
    """Expected HBM fetches: one per distinct line, plus the refetches of later sharers (module docstring)."""
    rank = {wg: i for i, wg in enumerate(sorted({wg for wg, _ in footprints}))}
    lines = np.concatenate([np.fromiter(s, dtype=np.int64, count=len(s)) for s in footprints.values()])
    ranks = np.concatenate([np.full(len(s), rank[wg], dtype=np.int64) for (wg, _), s in footprints.items()])
    shift = max(1, len(rank) - 1).bit_length()
    keys = np.unique((lines << shift) | ranks)  # sorted by line, then dispatch rank
    line, rank_of = keys >> shift, keys & ((1 << shift) - 1)
    same_line = line[1:] == line[:-1]
    distinct = len(keys) - int(same_line.sum())
    if not (base or per_gap):
        return distinct
    gaps = (rank_of[1:] - rank_of[:-1])[same_line]
    return distinct + float(np.minimum(1.0, base + per_gap * gaps).sum())
