"""Memory of the emulated device: global memory (the launch's tensors and the dispatch's read-only
segments: kernarg segment, dispatch packet, queue) and LDS.

Global memory is a flat address space: each tensor argument maps the bytes of its elements (a strided
view's rows, not the gaps between them), the kernarg segment is mapped read-only, and every other
address faults (one with bit 63 set too). For speed the spans from each tensor's first to its last byte
are staged into one flat byte buffer on the tensors' device for the launch; the bytes stores wrote land
in the user's tensors when the launch finishes (`GlobalMemory.finish`), and only those: a launch from
another thread on other parts of the same storage keeps its writes.

LDS is one byte array per workgroup, bounded by the kernel's group segment size. Beside the data it
keeps what the checks need: per byte, how many LDS-DMA writes are in flight (any wave), and which
waves of the workgroup wrote or read it in the current barrier epoch (smallest and largest wave
index, which is enough to tell "only me" from "someone else").
"""
from __future__ import annotations

import bisect

import torch

M32 = 0xFFFFFFFF


class Fault(Exception):
    """Raised inside an instruction; the machine adds kernel, pc, instruction and wave to the message.
    `row` is the wave's row within the executing group (or a global wave id when `global_wave`), `lane`
    the lane, `kind` the public error class name ('EmulatorError', 'HazardError', 'RaceError')."""

    def __init__(self, message, row=None, lane=None, kind="EmulatorError", global_wave=False):
        super().__init__(message)
        self.message, self.row, self.lane, self.kind, self.global_wave = message, row, lane, kind, global_wave
        self.pc = None  # set when the fault belongs to an earlier instruction retired by the current one


def first_true(mask: torch.Tensor):
    """(row, lane) of the first True in a [rows, 64] (or [rows, 64, k]) bool tensor."""
    idx = int(torch.nonzero(mask.reshape(mask.shape[0], -1).any(-1) if mask.dim() > 2 else mask)[0][0])
    if mask.dim() == 2:
        lane = int(torch.nonzero(mask[idx])[0][0])
    else:
        lane = int(torch.nonzero(mask[idx].reshape(64, -1).any(-1))[0][0])
    return idx, lane


_I64_MIN = -(1 << 63)
_M64 = (1 << 64) - 1


def _extent(t) -> int:
    """Bytes a non-empty tensor spans from its data_ptr (covers strided views)."""
    return (sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if s > 0) + 1) * t.element_size()


def _dense(t) -> bool:
    """Do the tensor's elements fill its span without gaps (contiguous up to a permutation of dims)?"""
    expect = 1
    for stride, size in sorted((st, n) for st, n in zip(t.stride(), t.shape) if n > 1):
        if stride != expect:
            return False
        expect *= size
    return True


def _covers(views, lo, hi) -> bool:
    """Do these tensors (spans within [lo, hi), overlapping one another) map every byte of [lo, hi)?"""
    if any(v.data_ptr() == lo and v.data_ptr() + _extent(v) == hi and _dense(v) for v in views):
        return True
    return bool(_element_bytes(views, lo, hi - lo, torch.device("cpu")).all())


def _element_bytes(views, lo, length, device) -> torch.Tensor:
    """bool [length]: the bytes of [lo, lo + length) that some element of `views` occupies."""
    mask = torch.zeros(length, dtype=torch.bool)
    for v in views:
        item = v.element_size()
        mask.as_strided(tuple(v.shape) + (item,), tuple(st * item for st in v.stride()) + (1,),
                        v.data_ptr() - lo).fill_(True)
    return mask.to(device)


# bytes per page a lazy GlobalMemory stages on first touch (a page of the host's memory: what torch.empty leaves
# unallocated until written)
LAZY_PAGE_SHIFT = 12


class GlobalMemory:
    def __init__(self, tensors: list, segments: list, device, lazy: bool = False):
        """`tensors` are mapped read-write at their data pointers; `segments` (dispatch.Segment: address,
        data) read-only at theirs (the kernarg segment, dispatch packet, ...).

        `lazy` (the timing model's functional runs, which touch a few MB of a GEMM's 384 MB of arguments and
        whose outputs nobody reads): a tensor's bytes are staged page by page when an access first touches
        them, and stores are never written back into the tensors (`finish` does nothing). Every check is the
        same: faults depend on the mapping, not on what is staged.

        A tensor maps only its own elements: a strided view (x[:, :32] of a 64-wide x) is staged as the
        byte span from its first to its last element, but the gaps between its rows are not mapped, and an
        access there faults as an access to memory the kernel was not given would on a GPU (`mapped`)."""
        self.device = device
        spans = []
        for t in tensors:
            if t.numel() == 0:
                continue
            lo = t.data_ptr()
            spans.append([lo, lo + _extent(t), t.untyped_storage(), [t]])
        spans.sort(key=lambda s: s[0])
        merged = []
        for lo, hi, storage, views in spans:
            if merged and lo < merged[-1][1]:
                if merged[-1][2].data_ptr() != storage.data_ptr():
                    raise Fault("two tensor arguments overlap in memory without sharing storage")
                merged[-1][1] = max(merged[-1][1], hi)
                merged[-1][3] += views
            else:
                merged.append([lo, hi, storage, views])
        # (base, end, storage or bytes, writable, views: the tensors mapped there, None for a segment)
        regions = [(lo, hi, storage, True, views) for lo, hi, storage, views in merged]
        regions += [(seg.address, seg.address + len(seg.data), seg.data, False, None) for seg in segments]
        regions.sort(key=lambda r: r[0])
        for a, b in zip(regions, regions[1:]):
            if a[1] > b[0]:
                raise Fault("a read-only segment (kernarg, dispatch packet, ...) collides with a tensor argument")
        self.regions = [r[:4] for r in regions]
        offsets, total = [], 0
        for lo, hi, _, _, _ in regions:
            offsets.append(total)
            total += (hi - lo + 15) & ~15
        self.scratch = total  # 64 bytes past the mapped ones: where inactive lanes point
        self.offset_list = offsets
        self.base_list = [r[0] for r in regions]
        self.end_list = [r[1] for r in regions]
        self.lazy = lazy
        # lazy: nothing written yet, so the host leaves the pages of an unstaged tensor unallocated
        self.flat = (torch.empty if lazy else torch.zeros)(total + 64, dtype=torch.uint8, device=device)
        for (lo, hi, storage, writable, _), off in zip(regions, offsets):
            if not writable:
                self.flat[off:off + hi - lo] = torch.frombuffer(bytearray(storage), dtype=torch.uint8).to(device)
            elif not lazy:
                self.flat[off:off + hi - lo] = self._storage_bytes(storage, lo, hi)
        # lazy: per page of the flat buffer, is it staged? The pages of the read-only segments (staged above)
        # and of the scratch bytes are, with the tensors' bytes they share a page with. (The padding between
        # regions and the scratch bytes hold anything: no access reads them.)
        self.staged = None
        if lazy:
            self.staged = torch.zeros(((total + 63) >> LAZY_PAGE_SHIFT) + 1, dtype=torch.bool, device=device)
            for (lo, hi, _, writable, _), off in zip(regions, offsets):
                if not writable:
                    self.staged[off >> LAZY_PAGE_SHIFT:((off + hi - lo - 1) >> LAZY_PAGE_SHIFT) + 1] = True
            self.staged[total >> LAZY_PAGE_SHIFT:] = True
            for page in torch.nonzero(self.staged).reshape(-1).tolist():
                self._copy_in(page << LAZY_PAGE_SHIFT, (page + 1) << LAZY_PAGE_SHIFT)
        self.flat32 = self.flat.view(torch.int32)
        self.mapped = None  # bool per flat byte, only when some region has gaps (a strided view's)
        self.gapped = [False] * len(regions)  # per region: are some of its bytes unmapped?
        for r, ((lo, hi, _, _, views), off) in enumerate(zip(regions, offsets)):
            if views is not None and not _covers(views, lo, hi):
                if self.mapped is None:
                    self.mapped = self._all_mapped(regions, offsets, total)
                self.mapped[off:off + hi - lo] = _element_bytes(views, lo, hi - lo, device)
                self.gapped[r] = True
        self.bases = torch.tensor([r[0] for r in regions], dtype=torch.int64, device=device)
        self.ends = torch.tensor([r[1] for r in regions], dtype=torch.int64, device=device)
        self.offsets = torch.tensor(offsets, dtype=torch.int64, device=device)
        self.writable = torch.tensor([r[3] for r in regions], dtype=torch.bool, device=device)
        # the bytes the kernel stored to (allocated at the first store): only those go back to the tensors, so
        # a launch never writes back bytes it did not write (another thread's launch on the same storage may
        # have written them meanwhile)
        self.written = None

    def _all_mapped(self, regions, offsets, total):
        mapped = torch.zeros(total + 64, dtype=torch.bool, device=self.device)
        for (lo, hi, _, _, _), off in zip(regions, offsets):
            mapped[off:off + hi - lo] = True
        mapped[total:] = True  # the scratch bytes of inactive lanes
        return mapped

    @staticmethod
    def _storage_bytes(storage, lo, hi):
        whole = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)
        start = lo - storage.data_ptr()
        return whole[start:start + hi - lo]

    def finish(self):
        """Copy the bytes the kernel stored to back into the tensors' storage (none when nothing was stored, or
        when the memory is lazy)."""
        if self.written is None or self.lazy:
            return
        for (lo, hi, storage, writable), off in zip(self.regions, self.offset_list):
            if not writable:
                continue
            written = self.written[off:off + hi - lo]
            staged, target = self.flat[off:off + hi - lo], self._storage_bytes(storage, lo, hi)
            if bool(written.all()):  # an output written whole: the usual case
                target.copy_(staged)
                continue
            idx = torch.nonzero(written).squeeze(1)  # none for a tensor the kernel only read
            if idx.numel():
                target.index_copy_(0, idx, staged.index_select(0, idx))

    def _stage(self, flat: torch.Tensor, nbytes: int):
        """Lazy memory: stage the pages of the flat buffer that accesses of nbytes at `flat` touch and that
        are not staged yet (inactive lanes point at the scratch bytes, always staged)."""
        touched = [flat >> LAZY_PAGE_SHIFT]
        if nbytes > 1:
            touched.append((flat + (nbytes - 1)) >> LAZY_PAGE_SHIFT)
        if all(bool(self.staged[pages].all()) for pages in touched):
            return
        pages = torch.cat([p.reshape(-1) for p in touched])
        pages = torch.unique(pages[~self.staged[pages]])
        self.staged[pages] = True
        for page in pages.tolist():
            self._copy_in(page << LAZY_PAGE_SHIFT, (page + 1) << LAZY_PAGE_SHIFT)

    def _copy_in(self, start: int, end: int):
        """Copy the tensors' bytes that flat[start:end] stages (writable regions only: the rest is staged at
        set-up)."""
        r = max(bisect.bisect_right(self.offset_list, start) - 1, 0)
        while r < len(self.regions) and self.offset_list[r] < end:
            base, stop, storage, writable = self.regions[r]
            off = self.offset_list[r]
            lo, hi = max(start, off), min(end, off + stop - base)
            if writable and lo < hi:
                self.flat[lo:hi] = self._storage_bytes(storage, base + lo - off, base + hi - off)
            r += 1

    def _written(self):
        if self.written is None:
            self.written = torch.zeros_like(self.flat)
        return self.written

    def mark_written(self, byte_index: torch.Tensor):
        """Record stores to these flat byte indices (any shape); lazy memory writes nothing back."""
        if self.lazy:
            return
        self._written().index_fill_(0, byte_index.reshape(-1), 1)

    def mark_written_words(self, word_index: torch.Tensor, word_bytes: int):
        """Record stores to these flat word indices (words of 4 or 8 bytes)."""
        if self.lazy:
            return
        view = self._written().view(torch.int32 if word_bytes == 4 else torch.int64)
        view.index_fill_(0, word_index.reshape(-1), -1)

    def translate(self, addr: torch.Tensor, nbytes: int, active, write: bool = False) -> torch.Tensor:
        """Flat buffer index of each lane's address; faults (Fault with row/lane) on unmapped active lanes.
        Inactive lanes get the index of a scratch word past the mapped bytes (loads there are discarded,
        stores land harmlessly). addr: int64 [rows, X] (an address with bit 63 set is negative); active:
        bool [rows, X] or None (all)."""
        if addr.numel() == 0:
            return addr
        if active is None:
            lo, hi = int(addr.min()), int(addr.max())
        else:
            hi = int(torch.where(active, addr, _I64_MIN).max())
            if hi == _I64_MIN and not bool(active.any()):  # no active lane
                return torch.full_like(addr, self.scratch)
            lo = int(torch.where(active, addr, hi).min())
        r = bisect.bisect_right(self.base_list, lo) - 1
        if r >= 0 and hi + nbytes <= self.end_list[r] and (self.regions[r][3] or not write):
            flat = addr + (self.offset_list[r] - self.base_list[r])  # one region holds every lane: the usual case
            if self.gapped[r]:
                self._check_mapped(addr, flat, nbytes, active, write)
        else:
            flat = self._translate_lanes(addr, nbytes, active, write)
        if active is not None:
            flat = torch.where(active, flat, self.scratch)
        if self.lazy:
            self._stage(flat, nbytes)
        return flat

    def _translate_lanes(self, addr, nbytes, active, write):
        region = torch.searchsorted(self.bases, addr, right=True) - 1
        rc = region.clamp(min=0)
        inside = (region >= 0) & (addr + nbytes <= self.ends[rc])
        ok = inside & self.writable[rc] if write else inside
        bad = ~ok if active is None else (active & ~ok)
        if bool(bad.any()):
            row, lane = first_true(bad)
            a = int(addr[row, lane]) & _M64
            if write and bool(inside[row, lane]):
                raise Fault(f"store to read-only memory (the kernarg segment or the dispatch packet) at 0x{a:x}", row, lane)
            what = "store to" if write else "access to"
            raise Fault(f"memory fault: {what} 0x{a:x} ({nbytes} bytes) is outside every tensor argument and the "
                        f"dispatch's read-only segments", row, lane)
        flat = addr - self.bases[rc] + self.offsets[rc]
        if self.mapped is not None:
            self._check_mapped(addr, flat, nbytes, active, write)
        return flat

    def _check_mapped(self, addr, flat, nbytes, active, write):
        """Fault on an active lane whose bytes fall in a gap of a strided view (between its rows)."""
        idx = (flat.unsqueeze(-1) + torch.arange(nbytes, device=flat.device)).clamp(0, self.mapped.numel() - 1)
        bad = ~self.mapped[idx].all(-1)
        if active is not None:
            bad &= active
        if bool(bad.any()):
            row, lane = first_true(bad)
            what = "store to" if write else "access to"
            raise Fault(f"memory fault: {what} 0x{int(addr[row, lane]) & _M64:x} ({nbytes} bytes) lies between the "
                        f"elements of a strided tensor view (a gap between its rows: memory the kernel was not "
                        f"given)", row, lane)

    def load_dwords(self, flat: torch.Tensor, ndw: int) -> torch.Tensor:
        """int32 [..., ndw] read at byte index `flat` (any alignment)."""
        if not bool((flat & 3).any()):
            idx = (flat >> 2).unsqueeze(-1) + torch.arange(ndw, device=flat.device)
            return self.flat32.index_select(0, idx.reshape(-1)).view(idx.shape)
        return self.load_bytes(flat, 4 * ndw).view(torch.int32)

    def load_bytes(self, flat: torch.Tensor, nbytes: int) -> torch.Tensor:
        idx = flat.unsqueeze(-1) + torch.arange(nbytes, device=flat.device)
        return self.flat.index_select(0, idx.reshape(-1)).view(idx.shape)

    def store_dwords(self, flat: torch.Tensor, data: torch.Tensor, mask):
        """data int32 [..., ndw] written at byte index `flat` (lanes outside `mask` must already point at
        the scratch word, as translate() leaves them)."""
        ndw = data.shape[-1]
        if not bool((flat & 3).any()):
            idx = (flat >> 2).unsqueeze(-1) + torch.arange(ndw, device=flat.device)
            self.flat32.scatter_(0, idx.reshape(-1), data.reshape(-1))
            self.mark_written_words(idx, 4)
        else:
            self.store_bytes(flat, data.contiguous().view(torch.uint8), mask)

    def store_bytes(self, flat: torch.Tensor, data: torch.Tensor, mask):
        nbytes = data.shape[-1]
        idx = flat.unsqueeze(-1) + torch.arange(nbytes, device=flat.device)
        self.flat.scatter_(0, idx.reshape(-1), data.reshape(-1))
        self.mark_written(idx)


class Lds:
    """The LDS of the workgroups of one chunk, with the DMA-in-flight and race bookkeeping."""

    def __init__(self, n_workgroups: int, size: int, device, track: bool):
        self.size = size
        self.stride = (max(size, 4) + 15) & ~15  # bytes per workgroup in the flat array
        self.n = n_workgroups
        self.dummy = n_workgroups * self.stride  # a scratch index for lanes that do not access LDS
        self.data = torch.zeros(n_workgroups * self.stride + 16, dtype=torch.uint8, device=device)
        self.data32 = self.data.view(torch.int32)
        self.track = track
        self.dma_in_flight_ops = 0  # DMA queue entries outstanding (any wave); 0 lets reads skip the check
        if track:
            self.dma_pending = torch.zeros(n_workgroups * self.stride + 16, dtype=torch.int16, device=device)
            self.races = RaceTracker(n_workgroups * self.stride + 16, self.stride, device)

    def new_epoch(self, workgroups: list):
        """All waves of these workgroups passed s_barrier."""
        if self.track:
            self.races.new_epoch(workgroups, self.n)


class RaceTracker:
    """Who read and who wrote each LDS byte in the current barrier epoch, per workgroup.

    Per byte the smallest and largest wave index (within the workgroup) of its readers and of its
    writers are enough to tell "only this wave" from "another wave too". Accesses are first kept as a
    list per epoch and folded into those arrays only when an access of the other kind comes in the same
    epoch: a pipelined kernel whose reads and writes sit in different epochs never pays for the arrays.
    """

    NOBODY_LO, NOBODY_HI = 127, -1

    def __init__(self, size, stride, device):
        self.stride = stride
        self.reads, self.writes = [], []  # pending (idx [rows, k], me [rows, 1] int8, active, row_waves)
        self.arrays_dirty = False
        mk = lambda v: torch.full((size,), v, dtype=torch.int8, device=device)  # noqa: E731
        self.r_lo, self.r_hi, self.w_lo, self.w_hi = mk(127), mk(-1), mk(127), mk(-1)

    def access(self, first, size, me, active, row_waves, is_write):
        """Check and record accesses of `size` bytes from flat LDS byte index first [rows, L] by the rows'
        waves (me [rows, 1] int8: wave index within the workgroup); active [rows, L] bool or None."""
        other_kind = self.reads if is_write else self.writes
        if other_kind:
            self._fold(other_kind, not is_write)
            other_kind.clear()
        if self.arrays_dirty:
            self._check(first, size, me, active, row_waves, is_write)
        (self.writes if is_write else self.reads).append((first, size, me, active))

    @staticmethod
    def _bytes(first, size, active):
        idx = (first.unsqueeze(-1) + torch.arange(size, device=first.device)).reshape(first.shape[0], -1)
        act = None if active is None else active.unsqueeze(-1).expand(*active.shape, size).reshape(idx.shape)
        return idx, act

    def _fold(self, pending, is_write):
        lo, hi = (self.w_lo, self.w_hi) if is_write else (self.r_lo, self.r_hi)
        scratch = lo.numel() - 1
        for first, size, me, active in pending:
            idx, act = self._bytes(first, size, active)
            if act is not None:
                idx = torch.where(act, idx, scratch)
            flat = idx.reshape(-1)
            val = me.expand(idx.shape).reshape(-1)
            lo.scatter_reduce_(0, flat, val, "amin")
            hi.scatter_reduce_(0, flat, val, "amax")
        lo[-1], hi[-1] = self.NOBODY_LO, self.NOBODY_HI  # the scratch byte stays untouched
        self.arrays_dirty = True

    def _check(self, first, size, me, active, row_waves, is_write):
        lo_arr, hi_arr = (self.r_lo, self.r_hi) if is_write else (self.w_lo, self.w_hi)
        idx, act = self._bytes(first, size, active)
        flat = idx.reshape(-1)
        lo = lo_arr.index_select(0, flat).view(idx.shape)
        hi = hi_arr.index_select(0, flat).view(idx.shape)
        other = (hi >= 0) & ((lo != me) | (hi != me))
        if act is not None:
            other &= act
        if not bool(other.any()):
            return
        row = int(torch.nonzero(other.any(1))[0][0])
        col = int(torch.nonzero(other[row])[0][0])
        byte = int(idx[row, col]) % self.stride
        mine = int(me[row, 0])
        them = int(hi[row, col]) if int(hi[row, col]) != mine else int(lo[row, col])
        if is_write:
            msg = (f"writes LDS byte {byte}, which wave {them} of the same workgroup read in this barrier epoch "
                   f"(write-after-read race: separate them with s_waitcnt + s_barrier)")
        else:
            msg = (f"reads LDS byte {byte}, which wave {them} of the same workgroup wrote in this barrier epoch "
                   f"(read-after-write race: the writer needs s_waitcnt, then s_barrier, before this read)")
        raise Fault(msg, row_waves[row], None, "RaceError", global_wave=True)

    def new_epoch(self, workgroups, n_workgroups):
        if len(workgroups) == n_workgroups:
            self.reads.clear()
            self.writes.clear()
            if self.arrays_dirty:
                for arr, v in ((self.w_lo, 127), (self.w_hi, -1), (self.r_lo, 127), (self.r_hi, -1)):
                    arr.fill_(v)
                self.arrays_dirty = False
            return
        # only some workgroups move on: fold everything, then forget theirs
        for pending, is_write in ((self.reads, False), (self.writes, True)):
            if pending:
                self._fold(pending, is_write)
                pending.clear()
        for wg in workgroups:
            lo, hi = wg * self.stride, (wg + 1) * self.stride
            for arr, v in ((self.w_lo, 127), (self.w_hi, -1), (self.r_lo, 127), (self.r_hi, -1)):
                arr[lo:hi].fill_(v)
