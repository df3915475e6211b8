"""TileLang's flash attention forward ports (examples/tilelang/example_mha_fwd_bhsd.py, example_gqa_fwd_bshd.py,
example_amd_flash_attn_fwd.py) by the timing model at upstream's configs on a 16-head, 2048-token problem (GQA: 4 KV
heads), non-causal, head dims 64 and 128: now a shape of bench/attention.py, which this runs (kept so that the
commands in docs/ keep working):

    PYTHONPATH=$PWD python bench/attention_estimate.py       # = bench/attention.py --shape small --causal no

bench/attention.py --shape small also times them causal (the model times causal grids since issue 21's bench).
"""
import pathlib
import runpy
import sys

if __name__ == "__main__":
    sys.argv = [sys.argv[0], "--shape", "small", "--causal", "no", *sys.argv[1:]]
    runpy.run_path(str(pathlib.Path(__file__).resolve().parent / "attention.py"), run_name="__main__")
