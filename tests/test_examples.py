"""Every file in examples/ runs, as a user runs it (`python examples/...`, here in-process to save the torch
import), with small sizes; the tutorial files check their own results against torch and print PASS. Each tutorial
page in docs/tutorials/ shows its example file verbatim, so the docs cannot drift from the code the tests run."""
import contextlib
import io
import pathlib
import runpy
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"

# tutorial file -> its page in docs/tutorials/, in the order people learn
TUTORIALS = {
    "tutorials/vector_add.py": "vector-add.md",
    "tutorials/fused_softmax.py": "fused-softmax.md",
    "tutorials/rms_norm.py": "rms-norm.md",
    "tutorials/matmul.py": "matmul.md",
    "tutorials/autotuning.py": "autotuning.md",
}

# every example file -> the command line it is run with here (small sizes; the defaults are bigger)
COMMANDS = {
    **{name: [] for name in TUTORIALS},
    "elementwise.py": [],
    # TileLang's examples, ported: each main() checks its kernels against torch at a small shape
    # (tests/test_tilelang_ports.py runs them on both arches and three dtypes)
    **{f"tilelang/{name}.py": [] for name in ("online_softmax", "rms_norm", "layernorm", "reduce", "gemv", "cumsum",
                                              "per_token_cast_to_fp8", "elementwise_add", "gemm",
                                              "gemm_splitk", "gemm_splitk_vectorize_atomicadd",
                                              "gemm_fp8_amd", "dequant_gemm_bf16_mxfp4_cdna4",
                                              "dequant_gemm_w4a8")},
    # DeepGEMM's main(): one 128 x 128 x 256 check (--all: upstream's loop over 8 configs)
    "tilelang/deepgemm_fp8_2xacc.py": [],
    "tilelang/topk.py": ["--M", "64", "--N", "32", "--topk", "4"],  # (main() tunes: 9 configs)
    # 4 tiles over 3 workgroups of the persistent grid (--num-sms: its stand-in for the GPU's SM count)
    "tilelang/gemm_persistent.py": ["--M", "64", "--N", "256", "--K", "64", "--num-sms", "3"],
    "tilelang/dynamic_gemm.py": [],
    # upstream's setup at 80 x 128 x 128 over 2 programs: stream-k tiles stored whole and split (atomic adds)
    "tilelang/gemm_streamk.py": ["--m", "80", "--n", "128", "--k", "128", "--total-sm", "2"],
    # flash attention (tests/test_tilelang_attention.py runs them on both arches, causal and not)
    "tilelang/example_mha_fwd_bhsd.py": ["--seq_q", "64", "--seq_kv", "64"],
    "tilelang/example_gqa_fwd_bshd.py": ["--seq_len", "64"],
    "tilelang/example_amd_flash_attn_fwd.py": ["--seq_len", "64"],
    # flash decoding at upstream main()'s head dim 128 and BLOCK_M 128: 20 queries, 256 keys over the 4 splits (one
    # 64-key tile each), then the combine kernel
    "tilelang/example_mha_inference.py": ["--heads", "1", "--q_ctx", "20", "--kv_ctx", "256"],
    # GQA 4/2 heads, ragged causal seq 80 over two 64-row tiles, checked against torch
    "attention/attention.py": ["--heads", "4", "--kv-heads", "2", "--seq", "80", "--causal", "--check"],
    "gemm/gemm.py": ["--m", "96", "--n", "80", "--k", "64", "--block", "64", "64", "32", "--threads", "256",
                     "--check"],
    # its three shapes are fixed (the 8192^3 estimates alone take minutes): only its command line is run here;
    # bench/autotune_compile.py and tests/test_autotune.py run the same sweep machinery on small shapes
    "gemm/autotune.py": ["--help"],
    # int4 weights unpacked in registers for the bf16 matrix cores (tests/test_gemm8.py runs it on both arches)
    "lowp/int4_gemm.py": ["--m", "64", "--n", "64", "--k", "128", "--group", "32", "--check"],
}


def _run_example(name, argv, monkeypatch):
    """Run examples/<name> as `python examples/<name> argv...` would; returns its stdout."""
    path = EXAMPLES / name
    monkeypatch.setattr(sys, "argv", [str(path), *argv])
    monkeypatch.syspath_prepend(str(path.parent))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            runpy.run_path(str(path), run_name="__main__")
        except SystemExit as e:
            assert e.code in (0, None), f"{name} exited with {e.code}:\n{out.getvalue()}"
    return out.getvalue()


def test_every_example_has_a_command():
    files = {str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*.py")}
    assert files == set(COMMANDS), ("examples without a command in tests/test_examples.py (add one with small "
                                    f"sizes): {sorted(files - set(COMMANDS))}; listed but missing: "
                                    f"{sorted(set(COMMANDS) - files)}")


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_example_runs(name, monkeypatch):
    out = _run_example(name, COMMANDS[name], monkeypatch)
    if name in TUTORIALS:
        assert "PASS" in out, out
    elif COMMANDS[name] == ["--help"]:
        assert "usage:" in out, out
    elif "--check" in COMMANDS[name]:
        assert "PASS: max error" in out, out  # the command's own check against torch passed


@pytest.mark.parametrize("name", sorted(TUTORIALS))
def test_tutorial_page_shows_its_file(name):
    page = REPO / "docs" / "tutorials" / TUTORIALS[name]
    code = (EXAMPLES / name).read_text()
    assert f"```python\n{code}```" in page.read_text(), (
        f"{page.relative_to(REPO)} must show examples/{name} verbatim in a ```python block")
