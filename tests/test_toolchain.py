"""Finding LLVM and assembling: the errors a user sees when the toolchain is missing or rejects our asm."""
import pytest

from tilegcn import toolchain
from tilegcn.errors import ToolchainError


@pytest.fixture
def fresh_llvm_search():
    """find_llvm memoises per process; search again for this test and forget the result afterwards."""
    toolchain.find_llvm.cache_clear()
    yield
    toolchain.find_llvm.cache_clear()


def test_missing_llvm_names_the_install_command(tmp_path, monkeypatch, fresh_llvm_search):
    monkeypatch.setenv("TILEGCN_LLVM_DIR", str(tmp_path))  # an empty folder: no llvm-mc there
    with pytest.raises(ToolchainError) as err:
        toolchain.find_llvm("gfx950")
    msg = str(err.value)
    assert "no usable LLVM" in msg and "gfx950" in msg
    assert "apt-get install -y llvm-22 lld-22" in msg
    with pytest.raises(ToolchainError, match="apt-get install -y llvm-22 lld-22"):
        toolchain.assemble("s_endpgm\n", "gfx950")


def test_llvm_without_amdgpu_target_is_rejected_by_name(tmp_path, monkeypatch, fresh_llvm_search):
    for tool in ("llvm-mc", "ld.lld", "llvm-objdump"):
        script = tmp_path / tool
        script.write_text("#!/bin/sh\necho 'LLVM version 22.1.0'\necho '  x86-64 - 64-bit X86'\n")
        script.chmod(0o755)
    monkeypatch.setenv("TILEGCN_LLVM_DIR", str(tmp_path))
    with pytest.raises(ToolchainError, match="no AMDGPU target"):
        toolchain.find_llvm("gfx942")


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_assemble_makes_an_elf_code_object(arch):
    asm = "\n".join([
        ".amdgcn_target \"amdgcn-amd-amdhsa--%s\"" % arch,
        ".text",
        ".globl k",
        ".p2align 8",
        ".type k,@function",
        "k:",
        "  s_endpgm",
        "",
    ])
    hsaco = toolchain.assemble(asm, arch)
    assert hsaco[:4] == b"\x7fELF"
    assert "s_endpgm" in toolchain.disassemble(hsaco, arch)


def test_assembler_error_quotes_the_offending_line():
    asm = ".text\nk:\n  s_mov_b32 s0, 0\n  v_bogus_op v1, v2\n  s_endpgm\n"
    with pytest.raises(ToolchainError) as err:
        toolchain.assemble(asm, "gfx950")
    msg = str(err.value)
    assert "line 4" in msg and "v_bogus_op v1, v2" in msg
    assert "s_mov_b32" not in msg  # only the offending line, not the whole listing


def test_llvm_probe_is_remembered_on_disk_and_redone_for_a_new_binary(tmp_path, monkeypatch):
    import os
    import shutil
    import subprocess

    from tilegcn import toolchain

    monkeypatch.setenv("TILEGCN_CACHE_DIR", str(tmp_path / "cache"))
    real_mc = toolchain.find_llvm("gfx942").mc
    mc = tmp_path / "llvm-mc"
    shutil.copy2(real_mc if os.path.isabs(real_mc) else shutil.which(real_mc), mc)
    runs = []
    real_run = subprocess.run

    def counting_run(cmd, *a, **k):
        runs.append(cmd)
        return real_run(cmd, *a, **k)

    monkeypatch.setattr(toolchain.subprocess, "run", counting_run)
    probe = toolchain._probe.__wrapped__  # bypass the in-process memo: a new process
    first = probe(str(mc))
    assert first[1] and runs  # the copy runs and has the AMDGPU target
    runs.clear()
    assert probe(str(mc)) == first and not runs  # answered from disk
    os.utime(mc, ns=(0, 0))  # "a new LLVM installed at the same path"
    assert probe(str(mc)) == first and runs
