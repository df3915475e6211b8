"""Example calls for tests/test_aot.py's exports (`python -m tilegcn export ... --example aot_examples.py:NAME`)."""
import torch


def elementwise_calls():
    """Two shapes of kernels.axpb_relu, one fp32 and one bf16, with small tiles (keyword constants by dict)."""
    small = {"block_M": 32, "block_N": 64, "threads": 64}
    return [
        {"args": (torch.zeros(64, 128), torch.zeros(64, 128)), "kwargs": {**small, "a": 3.0}},
        {"args": (torch.zeros(32, 64, dtype=torch.bfloat16), torch.zeros(32, 64, dtype=torch.bfloat16)),
         "kwargs": {**small, "a": 3.0}},
    ]
