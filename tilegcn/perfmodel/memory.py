"""The CU's memory paths, as servers that hand back completion times (all times in clk).

LDS (S11, S17): each SIMD pair has its own port and an 8-entry FIFO shared by reads and writes; an
instruction waits to enter a full FIFO. The port serves one DS instruction at a time: a read takes
bytes / read bandwidth (gfx942 64 B/clk, gfx950 128 B/clk per pair), a write carries 4 B of address per
lane with its data (S11: a b32 store takes 8 clk, a b128 20 clk at 64 B/clk). An access with bank
conflicts takes (phases + extra) / phases as long, the extra cycles being the emulator's bank-conflict
count (stats.py). Data is back `lds_latency_clk` after service ends.

VMEM (S18, docs/timing-sources.md §0.4): every vector memory instruction (loads, stores, LDS DMA) is processed by
the CU's TCP in order, taking `tcp_clk_per_dword[dwords per lane]` (16 clk for a dwordx4). A load holds its bytes
of the TCP (`vmem_inflight_bytes`, 32 KB) from when the TCP takes it until its data is back; in front of the TCP
sits a request queue of `vmem_queue_entries` instructions (about 12) that the waves have issued but the TCP has
not taken yet. An instruction cannot issue while the queue is full: it waits for the oldest queued one to enter
the TCP, which in turn waits for the TCP to have room, i.e. for the oldest load in flight to return. So a CU
has at most 32 KB + 12 instructions in flight, and its load bandwidth is at most 32 KB per round trip (Little's
law). S18 counts the queued 12 KB as in flight too (44 KB per round trip, its analytic cap of 70 % MFMA
efficiency for a 128x128x64 16-bit tile, measured 69 %); counting them here lets tilegcn's own, less tuned
128x128 GEMM reach 73 % at 8192^3, above that measured cap, so a load's round trip starts when the TCP takes
it. Bytes come from L2 (hit) or HBM (miss) in the ratio of the L2 model's
hit rate: a request returns after the mean round-trip latency, and no earlier than the CU's share of the L2 and
HBM bandwidth allows (a fluid server per CU). Returns are in order per wave (vmcnt semantics).
"""
from __future__ import annotations

from collections import deque


class LdsPort:
    def __init__(self, t, banks):
        self.t = t
        self.banks = banks
        self.free = 0.0
        self.fifo = deque()  # service end times of the instructions in the FIFO
        self.reserved = {}  # wave -> when the FIFO entry it waits for frees (held for it, in arrival order)

    def blocked_until(self, now, wave=None):
        """None if `wave` may put a DS instruction into the FIFO at `now`, else when to come back. Waves that find
        the FIFO full get its entries in the order they arrived: the two SIMDs of a pair issue in fixed slots
        (t % 4), so a free-for-all would hand every entry to the same SIMD (its slot always comes first after an
        8-clk b128 service) and starve the other until the first drained its reads."""
        fifo = self.fifo
        while fifo and fifo[0] <= now:
            fifo.popleft()
        due = self.reserved.get(wave)
        if due is not None and due <= now:
            del self.reserved[wave]
            return None
        if due is not None:
            return due
        if len(fifo) + len(self.reserved) < self.t.lds_fifo_entries:
            return None
        k = len(self.reserved)
        if k >= len(fifo):
            return fifo[-1] if fifo else now + 1
        self.reserved[wave] = fifo[k]
        return fifo[k]

    def issue(self, now, op, extra_cycles):
        """(completion time, port clk it takes) of DS instruction `op` issued at `now`."""
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
        self.fifo.append(self.free)
        return self.free + t.lds_latency_clk, service


class VmemPath:
    def __init__(self, t, hit_rate, l2_bytes_per_clk, hbm_bytes_per_clk):
        self.t = t
        self.latency = hit_rate * t.l2_hit_latency_clk + (1 - hit_rate) * t.hbm_latency_clk
        # clk per byte through the fabric: L2 hits at the CU's share of L2 bandwidth, misses at its HBM share
        self.clk_per_byte = hit_rate / l2_bytes_per_clk + (1 - hit_rate) / hbm_bytes_per_clk
        self.tcp_free = 0.0
        self.fabric_free = 0.0
        self.starts = deque()  # TCP start times of the issued instructions, oldest first
        self.inflight = deque()  # (return time, bytes) of the loads in the TCP, in TCP order
        self.inflight_bytes = 0

    def blocked_until(self, now):
        """None if a VMEM instruction may issue at `now`, else when the oldest queued one enters the TCP."""
        starts = self.starts
        while starts and starts[0] <= now:
            starts.popleft()
        return starts[0] if len(starts) >= self.t.vmem_queue_entries else None

    def issue(self, now, op, active_lanes=64):
        """(completion time, TCP clk it takes) of `op` issued at `now` (completion: a load's data back, a store's
        write done)."""
        t = self.t
        dwords = max(1, op.bytes_per_lane // 4)
        clk = t.tcp_clk_per_dword.get(dwords, 4 * dwords)
        nbytes = op.bytes_per_lane * active_lanes
        start = max(now, self.tcp_free)
        if not op.store:
            start = self._room(start, nbytes)
        self.tcp_free = start + clk
        self.starts.append(start)
        self.fabric_free = max(self.fabric_free, start) + nbytes * self.clk_per_byte
        done = max(self.tcp_free + self.latency, self.fabric_free)
        if not op.store:
            self.inflight.append((done, nbytes))
            self.inflight_bytes += nbytes
        return done, clk

    def _room(self, start, nbytes):
        """First time >= `start` at which the TCP has room for `nbytes` more: loads leave it as their data returns,
        in the order the TCP took them (each starts after the previous one at the same latency)."""
        inflight = self.inflight
        while inflight and (inflight[0][0] <= start or self.inflight_bytes + nbytes > self.t.vmem_inflight_bytes):
            done, b = inflight.popleft()
            self.inflight_bytes -= b
            start = max(start, done)
        return start
