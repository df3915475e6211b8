"""The CU's memory paths, as servers that hand back completion times (all times in clk).

LDS (S11, S17): each SIMD pair has its own port and an 8-entry FIFO shared by reads and writes; an
instruction waits to enter a full FIFO. The port serves one DS instruction at a time: a read takes
bytes / read bandwidth (gfx942 64 B/clk, gfx950 128 B/clk per pair), a write carries 4 B of address per
lane with its data (S11: a b32 store takes 8 clk, a b128 20 clk at 64 B/clk). An access with bank
conflicts takes (phases + extra) / phases as long, the extra cycles being the emulator's bank-conflict
count (stats.py). Data is back `lds_latency_clk` after service ends.

VMEM (S18): every vector memory instruction (loads, stores, LDS DMA) is processed by the CU's TCP in
order, taking `tcp_clk_per_dword[dwords per lane]` (16 clk for a dwordx4). An instruction cannot issue
while `vmem_queue_entries` instructions wait for the TCP or while the loads in flight exceed
`vmem_inflight_bytes`. Bytes then come from L2 (hit) or HBM (miss) in the ratio of the L2 model's hit
rate: a request returns after the mean round-trip latency, and no earlier than the CU's share of the
L2 and HBM bandwidth allows (a fluid server per CU). Returns are in order per wave (vmcnt semantics).
"""
from __future__ import annotations

import bisect
from collections import deque


class LdsPort:
    def __init__(self, t, banks):
        self.t = t
        self.banks = banks
        self.free = 0.0
        self.fifo = deque()  # service end times of the instructions in the FIFO
        self.busy = 0.0

    def blocked_until(self, now):
        fifo = self.fifo
        while fifo and fifo[0] <= now:
            fifo.popleft()
        return fifo[0] if len(fifo) >= self.t.lds_fifo_entries else None

    def issue(self, now, op, extra_cycles):
        t = self.t
        nbytes = op.bytes_per_lane * 64
        if op.store:
            base = (nbytes + 4 * 64) / t.lds_port_write_bytes_per_clk
        else:
            base = nbytes / t.lds_port_read_bytes_per_clk
        phases = max(1, nbytes // (4 * self.banks))
        service = base * (phases + extra_cycles) / phases
        start = max(now, self.free)
        self.free = start + service
        self.busy += service
        self.fifo.append(self.free)
        return self.free + t.lds_latency_clk


class VmemPath:
    def __init__(self, t, hit_rate, l2_bytes_per_clk, hbm_bytes_per_clk):
        self.t = t
        self.hit = hit_rate
        self.latency = hit_rate * t.l2_hit_latency_clk + (1 - hit_rate) * t.hbm_latency_clk
        # clk per byte through the fabric: L2 hits at the CU's share of L2 bandwidth, misses at its HBM share
        self.clk_per_byte = hit_rate / l2_bytes_per_clk + (1 - hit_rate) / hbm_bytes_per_clk
        self.tcp_free = 0.0
        self.fabric_free = 0.0
        self.starts = deque()  # TCP start times of queued instructions
        self.inflight = []  # sorted return times of loads, with their bytes
        self.inflight_bytes = {}
        self.tcp_busy = 0.0
        self.bytes = 0

    def blocked_until(self, now, nbytes):
        starts = self.starts
        while starts and starts[0] <= now:
            starts.popleft()
        if len(starts) >= self.t.vmem_queue_entries:
            return starts[0]
        inflight = self.inflight
        while inflight and inflight[0][0] <= now:
            inflight.pop(0)
        total = sum(b for _, b in inflight)
        if inflight and total + nbytes > self.t.vmem_inflight_bytes:
            need = total + nbytes - self.t.vmem_inflight_bytes
            for when, b in inflight:
                need -= b
                if need <= 0:
                    return when
        return None

    def issue(self, now, op, active_lanes=64):
        t = self.t
        dwords = max(1, op.bytes_per_lane // 4)
        clk = t.tcp_clk_per_dword.get(dwords, 4 * dwords)
        start = max(now, self.tcp_free)
        self.tcp_free = start + clk
        self.tcp_busy += clk
        self.starts.append(start)
        nbytes = op.bytes_per_lane * active_lanes
        self.bytes += nbytes
        self.fabric_free = max(self.fabric_free, start) + nbytes * self.clk_per_byte
        done = max(self.tcp_free + self.latency, self.fabric_free)
        if not op.store:
            bisect.insort(self.inflight, (done, nbytes))
        return done
