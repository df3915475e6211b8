"""The timing model's estimate of a program of several T.Kernel blocks: its launches, one after the other."""
from __future__ import annotations


class SequenceEstimate:
    """Launches that run in order on one stream (each waits for the one before): `.cycles` and `.seconds` are the
    sums of the launches' (`.launches`, one perfmodel Estimate each; launch overhead between them is not modelled);
    `.tflops` over the summed time when a launch was given the FLOPs (`estimate(flops=...)` gives them to each
    launch: the first one's count is the program's)."""

    def __init__(self, launches: list):
        self.launches = list(launches)
        first = self.launches[0]
        self.kernel = " + ".join(e.kernel for e in self.launches)
        self.device, self.arch, self.clock_hz, self.flops = first.device, first.arch, first.clock_hz, first.flops
        self.cycles = sum(e.cycles for e in self.launches)
        self.breakdown = {"launches": [e.breakdown for e in self.launches]}

    @property
    def seconds(self) -> float:
        return sum(e.seconds for e in self.launches)

    @property
    def error_band(self):
        return self.launches[0].error_band

    @property
    def tflops(self):
        return None if not self.flops else self.flops / self.seconds / 1e12

    def __repr__(self):
        return f"<SequenceEstimate {self.kernel} on {self.device}: {self.cycles:.0f} cycles>"

    def __str__(self):
        total = f"{len(self.launches)} launches in order: {self.cycles:,.0f} cycles, {self.seconds * 1e6:,.1f} us"
        if self.tflops is not None:
            total += f", {self.tflops:,.1f} TFLOP/s"
        return "\n".join([total] + [str(e) for e in self.launches])
