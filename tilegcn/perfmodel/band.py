"""How far an estimate can be trusted: the timing model's error on kernels it was not fitted to.

`bench/model_accuracy.py --foreign-only --calib DIR` (DIR built by bench/build_calibration.py) estimates the
foreign kernels of its calibration set, each with a published measurement, and prints the error of the
hold-out half (launches no parameter was taken from) apart from the calibration half. The figures below are
that run's hold-out rows; re-measure them (and the date) whenever the model changes. A device with no foreign
hold-out measurement has no band: its estimates are only checked against tilegcn's own rankings and the
clock-free cases of the accuracy table (docs/timing.md).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ErrorBand:
    median: float  # median |model - published| / published over the hold-out launches
    worst: float  # the largest of those
    within_20: int  # hold-out launches within 20 %
    launches: int
    kernels: int  # distinct code objects among the launches
    measured: str  # when, and what differs from the plain command

    def __str__(self):
        return (f"hold-out median |error| {self.median:.1%}, worst {self.worst:.1%} ({self.within_20} of "
                f"{self.launches} within 20 %; {self.launches} published launches of {self.kernels} foreign "
                f"kernels, {self.measured})")


HOLDOUT = {
    # python bench/model_accuracy.py --foreign-only --card MI355X --calib DIR: 30 launches of 19 code objects:
    # aiter's bf16gemm_bf16_tn_256x256 (-9.0 ... +18.8 %, 7 shapes), Gluon a16w16 v5 (-16.0 %), aiter's FAv3 forward
    # (+5.3 %, +0.6 %), HipKittens' bf16 GEMM at 2048 / 8192 (+11.1 %, -5.0 %), its attention forward, non-causal
    # (+5.9 ... +13.0 %, 5 shapes) and causal (-7.0 ... +11.2 %, 5 shapes), aiter's fp8 blockscale GEMMs 128x128 /
    # 80x128 (-12.2 ... +4.1 %, 4) and MXFP4 GEMMs 256x256 / 128x512 (-3.7 ... +17.5 %, 4), 2026-11-27
    "MI355X": ErrorBand(median=0.071, worst=0.188, within_20=30, launches=30, kernels=19,
                        measured="2026-11-27"),
    # python bench/model_accuracy.py --foreign-only --card MI300X: 17 launches of aiter's gfx942 int8 GEMMs
    # I8gemm_bf16_perTokenI8_BpreShuffle_{16,32,48,80}x128 and _112x256 (-12.5 ... +10.7 %) and its FAv3
    # forward (-4.3 %, -6.1 %), 2026-11-27
    "MI300X": ErrorBand(median=0.050, worst=0.125, within_20=17, launches=17, kernels=6,
                        measured="2026-11-27; GEMMs int8 only"),
}


def band_text(device: str) -> str:
    band = HOLDOUT.get(device)
    if band is None:
        return f"not measured: no foreign kernel with a published {device} figure is in the hold-out set"
    return str(band)
