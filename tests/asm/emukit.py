"""Hand-written kernels for the emulator tests: wrap an instruction body in the code-object boilerplate
(kernel descriptor + metadata), assemble with LLVM, load on the emulated device (cached per text)."""
from __future__ import annotations

import functools

from tilegcn.runtime import emulator
from tilegcn.toolchain import assemble


def kernel_asm(body: str, arch: str = "gfx942", name: str = "k", args=("ptr",), vgprs: int = 32, sgprs: int = 32,
               accum: int | None = None, lds: int = 0, wg_ids: str = "x", workitem: int = 0, extra: str = "",
               max_threads: int = 1024) -> str:
    """`args`: 'ptr' (8-byte global buffer) or 'u32'/'f32' (4-byte by-value) in order."""
    lines, off = [], 0
    for a in args:
        size = 8 if a == "ptr" else 4
        off = (off + size - 1) // size * size
        kind = "global_buffer, .address_space: global" if a == "ptr" else "by_value"
        type_name = ", .type_name: float" if a == "f32" else ""
        lines.append(f"      - {{.offset: {off}, .size: {size}, .value_kind: {kind}{type_name}}}")
        off += size
    kernarg = max(8, (off + 7) // 8 * 8)
    accum = vgprs if accum is None else accum
    ids = "\n".join(f"  .amdhsa_system_sgpr_workgroup_id_{a} 1" for a in wg_ids)
    body = "\n".join("  " + ln.strip() for ln in body.strip().splitlines())
    args_yaml = "\n".join(lines) if lines else "      []"
    return f""".amdgcn_target "amdgcn-amd-amdhsa--{arch}"
.text
.globl {name}
.p2align 8
.type {name},@function
{name}:
{body}
.size {name}, .-{name}
.rodata
.p2align 6
.amdhsa_kernel {name}
  .amdhsa_user_sgpr_kernarg_segment_ptr 1
{ids}
  .amdhsa_system_vgpr_workitem_id {workitem}
  .amdhsa_next_free_vgpr {vgprs}
  .amdhsa_next_free_sgpr {sgprs}
  .amdhsa_accum_offset {accum}
  .amdhsa_group_segment_fixed_size {lds}
{extra}
.end_amdhsa_kernel
.amdgpu_metadata
---
amdhsa.version: [1, 2]
amdhsa.kernels:
  - .name: {name}
    .symbol: {name}.kd
    .kernarg_segment_size: {kernarg}
    .kernarg_segment_align: 8
    .group_segment_fixed_size: {lds}
    .private_segment_fixed_size: 0
    .wavefront_size: 64
    .sgpr_count: {sgprs}
    .vgpr_count: {vgprs}
    .max_flat_workgroup_size: {max_threads}
    .args:
{args_yaml}
...
.end_amdgpu_metadata
"""


def kernels_asm(bodies: dict, arch: str = "gfx942", **kw) -> str:
    """One code object holding a kernel per `name: body` of `bodies`, all with the same descriptor settings `kw`
    (see kernel_asm): tests that check many small snippets assemble and load once instead of once per snippet."""
    texts = [kernel_asm(body, arch=arch, name=name, **kw) for name, body in bodies.items()]
    target = texts[0].split("\n", 1)[0]
    code = [t.split("\n", 1)[1].split(".amdgpu_metadata", 1)[0] for t in texts]
    entries = [t.split("amdhsa.kernels:\n", 1)[1].split("...\n.end_amdgpu_metadata", 1)[0] for t in texts]
    header = texts[0].split(".amdgpu_metadata", 1)[1].split("amdhsa.kernels:\n", 1)[0]
    return (target + "\n" + "".join(code) + ".amdgpu_metadata" + header + "amdhsa.kernels:\n" + "".join(entries)
            + "...\n.end_amdgpu_metadata\n")


@functools.lru_cache(maxsize=None)
def build(asm: str, arch: str = "gfx942", run_as: str | None = None):
    """Assemble `asm` for `arch` and load it on the emulator (optionally decoded as another arch)."""
    return emulator.load(assemble(asm, arch), arch=run_as)


def module(body: str, arch: str = "gfx942", run_as: str | None = None, **kw):
    return build(kernel_asm(body, arch=arch, **kw), arch, run_as)


# V# for a raw buffer over the tensor whose pointer is in s[ptr:ptr+1]: s[dst:dst+3], NUM_RECORDS = nbytes
def srd(dst: int, ptr: int, nbytes) -> str:
    return f"""s_mov_b32 s{dst}, s{ptr}
s_and_b32 s{dst + 1}, s{ptr + 1}, 0xffff
s_mov_b32 s{dst + 2}, {nbytes}
s_mov_b32 s{dst + 3}, 0x20000"""


def lane_kernel(body: str, n_in: int, n_out: int, arch: str = "gfx942", block: int = 256, **kw) -> str:
    """A kernel where each thread t (global id) loads in_i[t] into v(10+i), runs `body`, and stores
    v(20+j) to out_j[t]. Arguments: n_in input pointers then n_out output pointers, all dword arrays."""
    n = n_in + n_out
    lines = [f"s_load_dwordx2 s[{4 + 2 * i}:{5 + 2 * i}], s[0:1], {hex(8 * i)}" for i in range(n)]
    lines += ["v_and_b32 v1, 0x3ff, v0", f"s_mul_i32 s3, s2, {block}", "v_add_u32 v1, s3, v1",
              "v_lshlrev_b32 v2, 2, v1", "s_waitcnt lgkmcnt(0)"]
    first = (4 + 2 * n + 3) // 4 * 4  # SRDs after the pointers; s[96:101] stay free for the tests
    for i in range(n):
        lines += srd(first + 4 * i, 4 + 2 * i, "0x7fffffff").splitlines()
    lines += [f"buffer_load_dword v{10 + i}, v2, s[{first + 4 * i}:{first + 3 + 4 * i}], 0 offen" for i in range(n_in)]
    lines += ["s_waitcnt vmcnt(0)"] + body.strip().splitlines()
    lines += [f"buffer_store_dword v{20 + j}, v2, s[{first + 4 * (n_in + j)}:{first + 3 + 4 * (n_in + j)}], 0 offen"
              for j in range(n_out)]
    lines += ["s_endpgm"]
    kw.setdefault("vgprs", 64)
    kw.setdefault("sgprs", 102)
    return kernel_asm("\n".join(lines), arch=arch, args=("ptr",) * n, **kw)


def run_lanes(body: str, inputs, n_out: int = 1, arch: str = "gfx942", block: int = 256, **kw):
    """Run `body` per lane over equally long 4-byte inputs; returns the n_out outputs as int32 tensors."""
    import torch

    n = inputs[0].numel()
    mod = build(lane_kernel(body, len(inputs), n_out, arch, block, **kw), arch)
    ins = [t.contiguous().view(torch.int32) if t.dtype != torch.int32 else t.contiguous() for t in inputs]
    outs = [torch.zeros(n, dtype=torch.int32) for _ in range(n_out)]
    mod.launch("k", grid=(-(-n // block), 1, 1), block=(block, 1, 1), args=ins + outs)
    return outs


@functools.lru_cache(maxsize=None)
def llc_module(ir: str, arch: str = "gfx942", llc_args: tuple = ()):
    """Compile LLVM IR with `llc` (LLVM is the oracle for what compilers emit), link, load on the emulator."""
    import subprocess

    from tilegcn.toolchain import find_llvm

    llc = find_llvm(arch).tool("llc")
    asm = subprocess.run([llc, "-mtriple=amdgcn-amd-amdhsa", f"-mcpu={arch}", "-O2", *llc_args, "-o", "-"], input=ir,
                         capture_output=True, text=True, check=True).stdout
    return emulator.load(assemble(asm, arch))


def lane_ir(body: str, n_in: int, n_out: int, ty: str = "i32") -> str:
    """IR of a kernel where thread t reads %x0..%x{n_in-1} = in_i[t] (type `ty`), runs `body` (which must
    define %y0..%y{n_out-1} of type `ty`) and writes out_j[t] = %yj. Pointers: inputs, then outputs."""
    params = ", ".join(f"ptr addrspace(1) %p{i}" for i in range(n_in + n_out))
    lines = ["%tid = call i32 @llvm.amdgcn.workitem.id.x()", "%wg = call i32 @llvm.amdgcn.workgroup.id.x()",
             "%base = mul i32 %wg, 256", "%i = add i32 %base, %tid"]
    for k in range(n_in):
        lines += [f"%a{k} = getelementptr {ty}, ptr addrspace(1) %p{k}, i32 %i", f"%x{k} = load {ty}, ptr addrspace(1) %a{k}"]
    lines += [ln.strip() for ln in body.strip().splitlines()]
    for j in range(n_out):
        lines += [f"%o{j} = getelementptr {ty}, ptr addrspace(1) %p{n_in + j}, i32 %i",
                  f"store {ty} %y{j}, ptr addrspace(1) %o{j}"]
    text = "\n  ".join(lines)
    return (f"define amdgpu_kernel void @k({params}) {{\n  {text}\n  ret void\n}}\n"
            "declare i32 @llvm.amdgcn.workitem.id.x()\ndeclare i32 @llvm.amdgcn.workgroup.id.x()\n")


def run_ir(body: str, inputs, n_out: int = 1, ty: str = "i32", arch: str = "gfx942", out_dtype=None):
    """Run `lane_ir(body)` compiled by llc over equally long inputs (multiple of 256); returns the outputs."""
    import torch

    n = inputs[0].numel()
    mod = llc_module(lane_ir(body, len(inputs), n_out, ty), arch)
    outs = [torch.zeros(n, dtype=out_dtype or inputs[0].dtype) for _ in range(n_out)]
    mod.launch("k", grid=(n // 256, 1, 1), block=(256, 1, 1), args=list(inputs) + outs)
    return outs
