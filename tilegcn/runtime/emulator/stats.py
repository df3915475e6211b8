"""Per-launch statistics of the emulated device, and the LDS bank-conflict model.

Bank-conflict model (one DS instruction, one wave): a DS access of B bytes per lane is served in
the phases `Arch.lds_phases` gives each lane (ops_mem._count_conflicts passes them): those measured on hardware where
the arch table has them (gfx950's ds_read_b128: HipKittens' MI355X phases, S21p), else runs of max(1, banks*4 // B)
consecutive lanes (all 64 lanes in one phase for B <= 2 on 32 banks). The launch statistics and the timing model's
trace hook get the same count.
Within a phase every active lane touches the dwords covering its B bytes; a dword lies in bank
(dword_address % banks) of 4-byte banks (banks = arch.lds_banks). The phase costs one extra cycle for
each further DISTINCT dword address that lands in its busiest bank: extra = max over banks of
(number of distinct dwords hitting that bank) - 1. Several lanes reading the same dword are one access
(broadcast). A read2/write2 instruction is modelled as its two accesses one after the other. LDS DMA
(buffer_load ... lds) writes whole contiguous rows and is not counted. Conflicts are summed per
instruction (extra cycles over all its phases and waves), in total and per mnemonic.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

# Instruction classes the counts are kept by.
CLASSES = ("salu", "smem", "branch", "waitcnt", "barrier", "nop", "valu", "mfma", "vmem", "ds", "other")


@dataclass
class LaunchStats:
    kernel: str = ""
    arch: str = ""
    grid: tuple = (1, 1, 1)
    block: tuple = (1, 1, 1)
    workgroups: int = 0
    waves: int = 0
    instructions: dict = field(default_factory=dict)  # class -> wave-instructions executed
    by_mnemonic: dict = field(default_factory=dict)  # mnemonic -> wave-instructions executed
    lane_instructions: int = 0  # sum over vector instructions (VALU, MFMA, VMEM, DS) of EXEC-active lanes
    lds_bank_conflicts: int = 0  # extra LDS cycles, total (see module docstring)
    lds_bank_conflicts_by_mnemonic: dict = field(default_factory=dict)
    bytes_global_to_vgpr: int = 0
    bytes_vgpr_to_global: int = 0
    bytes_global_to_lds: int = 0
    bytes_lds_to_vgpr: int = 0
    bytes_vgpr_to_lds: int = 0
    bytes_global_to_sgpr: int = 0
    seconds: float = 0.0

    @property
    def total_instructions(self) -> int:
        return sum(self.instructions.values())

    def summary(self) -> str:
        counts = ", ".join(f"{k} {v}" for k, v in self.instructions.items() if v)
        return (f"{self.kernel} on {self.arch}: {self.waves} waves, {self.total_instructions} wave-instructions "
                f"({counts}); {self.lane_instructions} lane-instructions; LDS bank conflicts "
                f"{self.lds_bank_conflicts}; bytes global->VGPR {self.bytes_global_to_vgpr}, VGPR->global "
                f"{self.bytes_vgpr_to_global}, global->LDS {self.bytes_global_to_lds}, LDS->VGPR "
                f"{self.bytes_lds_to_vgpr}, VGPR->LDS {self.bytes_vgpr_to_lds}; {self.seconds:.3f} s")


def bank_conflicts(addr: torch.Tensor, active, bytes_per_lane: int, banks: int, lane_phases=None) -> int:
    """Extra cycles of one DS access for all waves: addr int64 [W, 64] LDS byte addresses of each lane's
    first byte, active bool [W, 64] or None (all lanes). `lane_phases`: each lane's phase (Arch.lds_phases);
    None: runs of banks*4 // bytes_per_lane consecutive lanes."""
    W = addr.shape[0]
    lanes_per_phase = max(1, (banks * 4) // bytes_per_lane)
    phases = -(-64 // lanes_per_phase)
    ndw = max(1, -(-bytes_per_lane // 4))
    first = addr >> 2
    last = (addr + bytes_per_lane - 1) >> 2
    dwords = first.unsqueeze(-1) + torch.arange(ndw, dtype=torch.int64, device=addr.device)
    dwords = torch.minimum(dwords, last.unsqueeze(-1))  # unaligned sub-dword accesses touch <= 2 dwords
    lane = torch.arange(64, dtype=torch.int64, device=addr.device)
    if lane_phases is None:
        phase = (lane // lanes_per_phase).view(1, 64, 1)
    else:
        phase = torch.as_tensor(lane_phases, dtype=torch.int64, device=addr.device).view(1, 64, 1)
        phases = int(phase.max()) + 1
    wave = torch.arange(W, dtype=torch.int64, device=addr.device).view(W, 1, 1)
    bank = dwords % banks
    group = (wave * phases + phase) * banks + bank
    key = (group << 20) | (dwords & 0xFFFFF)
    if active is not None:
        key = key[active.unsqueeze(-1).expand_as(key)]
    if key.numel() == 0:
        return 0
    distinct = torch.unique(key.reshape(-1))
    per_bank = torch.bincount(distinct >> 20, minlength=W * phases * banks).view(W * phases, banks)
    worst = per_bank.max(dim=1).values
    return int((worst - 1).clamp(min=0).sum())
