"""Per-XCD L2 hit rate from the access stream of the co-resident workgroups of one XCD (docs/timing-sources.md
§0.5, S19v9).

Workgroup i runs on XCD i % 8, and each XCD has a private 4 MB L2, so the workgroups that share an L2 in
a dispatch round are those with the same i % 8. The trace records, for each of them, the 128-byte lines
each of its global load instructions touches, numbered by the instruction's position in the wave's stream
of global loads (its *step*). Workgroups running the same code reach a step at about the same time, so the
XCD's access stream is the workgroups' touches ordered by step, then by dispatch order.

Requests. A workgroup's re-touch of a line it touched fewer than `l1_bytes` of its own touches before is an
L1 (TCP) hit and never reaches the L2; every other touch is one L1->L2 request (the TCP->TCC requests of
rocprof).

Misses, by reuse distance over that stream (not by what one loop iteration touches, so unrolling a loop does
not change them). A request misses when its line was never touched before (cold), or when more distinct lines
than the L2 holds were touched since its previous touch (LRU capacity: the distinct lines of the steps
between). Otherwise it hits, except that workgroups of a round do not advance in step: they start in
dispatch order (an XCD's workgroups in ascending id) and drift apart as they run, so a line touched by
another workgroup `gap` positions away in the XCD's dispatch order may have been evicted meanwhile. The
model charges such a request a refetch with probability `refetch_base + refetch_per_gap * gap` (capped at
1; `Timing.l2_refetch_*`, fitted to two of C10's grid orders, see arch.py). So grid orders that put
workgroups sharing A rows or B columns on one XCD, and close together in its dispatch order (T.use_swizzle,
XCD remap), raise the hit rate.
Counted: the touches of the steady loop iterations (segments >= 1 when any); earlier ones are history.
Assumptions: nothing survives in L2 between rounds; MALL is not modelled (a miss goes to HBM).

`footprints`: (workgroup id, segment) -> either a set of lines (all touched at one step, the segment) or a
pair of arrays (steps, lines) from the trace.
"""
from __future__ import annotations

import numpy as np

MAX_STEPS = 2048  # steps are merged in runs beyond this (the distance table is steps^2)
LINE_BITS = 48  # line numbers (trace.py: buffer << 32 | line in buffer) stay below 2^48


def hit_rate(footprints: dict, l2_bytes: int, line_bytes: int, refetch_base: float = 0.0,
             refetch_per_gap: float = 0.0, l1_bytes: int = 0) -> tuple:
    """(hit rate, requests, misses) of the steady touches (module docstring)."""
    step, rank, line, steady = _stream(footprints)
    if l1_bytes:
        keep = ~_l1_hits(step, rank, line, l1_bytes // line_bytes)
        step, rank, line, steady = step[keep], rank[keep], line[keep], steady[keep]
    requests = int(steady.sum())
    if not requests:
        return 1.0, 0, 0
    prev = _previous_touch(line)
    cold = prev < 0
    p = np.where(cold, 0, prev)
    far = ~cold & (step[p] < step) & (_distinct_between(step, line, step[p], step) > l2_bytes // line_bytes)
    gap = np.abs(rank - rank[p])
    refetch = np.where(cold | far | (gap == 0), 0.0,
                       np.minimum(1.0, refetch_base + refetch_per_gap * gap) if refetch_base or refetch_per_gap
                       else 0.0)
    miss = np.where(cold | far, 1.0, refetch)[steady]
    misses = float(miss.sum())
    if not (refetch_base or refetch_per_gap):
        misses = int(misses)
    return 1.0 - misses / requests, requests, misses


def _stream(footprints):
    """(step, dispatch rank, line, steady?) of every touch, in stream order (step, then rank, then line)."""
    wgs = sorted({wg for wg, _ in footprints})
    rank_of = {wg: i for i, wg in enumerate(wgs)}
    segs = {s for _, s in footprints}
    steady_from = 1 if any(s >= 1 for s in segs) else min(segs, default=0)
    parts = []
    for (wg, seg), v in footprints.items():
        if isinstance(v, (set, frozenset)):
            lines = np.fromiter(v, dtype=np.int64, count=len(v))
            steps = np.full(len(lines), seg, dtype=np.int64)
        else:
            steps, lines = (np.asarray(x, dtype=np.int64) for x in v)
        n = len(lines)
        parts.append((steps, np.full(n, rank_of[wg], np.int64), lines, np.full(n, seg >= steady_from)))
    if not parts:
        e = np.zeros(0, np.int64)
        return e, e, e, np.zeros(0, bool)
    step, rank, line, steady = (np.concatenate(x) for x in zip(*parts))
    order = np.lexsort((line, rank, step))
    step, rank, line, steady = step[order], rank[order], line[order], steady[order]
    first = np.ones(len(step), bool)  # one touch per (step, workgroup, line)
    first[1:] = (step[1:] != step[:-1]) | (rank[1:] != rank[:-1]) | (line[1:] != line[:-1])
    return step[first], rank[first], line[first], steady[first]


def _previous_touch(line):
    """Index of the previous touch of the same line in the stream, -1 for none."""
    order = np.argsort(line, kind="stable")
    prev = np.full(len(line), -1, np.int64)
    same = line[order][1:] == line[order][:-1]
    prev[order[1:][same]] = order[:-1][same]
    return prev


def _l1_hits(step, rank, line, l1_lines):
    """Touches a workgroup makes of a line it touched within its last `l1_lines` touches."""
    order = np.lexsort((line, step, rank))  # each workgroup's own stream
    pos = np.empty(len(step), np.int64)
    pos[order] = np.arange(len(step))
    by_line = np.lexsort((pos, line, rank))
    r, l, q = rank[by_line], line[by_line], pos[by_line]
    hit = np.zeros(len(step), bool)
    hit[by_line[1:]] = (r[1:] == r[:-1]) & (l[1:] == l[:-1]) & (q[1:] - q[:-1] <= l1_lines)
    return hit


def _distinct_between(step, line, after, upto):
    """Distinct lines touched at steps in (after, upto], per pair (LRU stack distance at step granularity)."""
    steps, idx = np.unique(step, return_inverse=True)
    merge = max(1, -(-len(steps) // MAX_STEPS))
    idx = idx // merge
    n = int(idx.max()) + 1
    # the XCD's (step, line) pairs once each, with the step at which the line was touched before
    keys = np.unique((idx.astype(np.int64) << LINE_BITS) | line)
    s, ln = keys >> LINE_BITS, keys & ((1 << LINE_BITS) - 1)
    prev = np.full(len(s), -1, np.int64)
    order = np.lexsort((s, ln))
    same = ln[order][1:] == ln[order][:-1]
    prev[order[1:][same]] = s[order[:-1][same]]
    # table[a, b]: pairs with step <= a and previous step < b; distinct in (k1, k2] = those with
    # k1 < step <= k2 whose previous touch is at or before k1
    table = np.zeros((n, n + 1), np.int64)
    np.add.at(table, (s, prev + 1), 1)
    table = table.cumsum(0).cumsum(1)
    k1 = np.searchsorted(steps, after) // merge
    k2 = np.searchsorted(steps, upto) // merge
    return table[k2, k1 + 1] - table[k1, k1 + 1]
