"""The instruction table: every opcode the machine layer may emit, with the facts the passes need of it.

One row per opcode (the text tables below are the data; the code under them only reads them):
  - kind: what the passes switch on (isa.SALU, isa.VALU, ...; the KINDS table says what each kind counts in);
  - operands, in the order the assembler takes them, each `<access>.<files><dwords>`: access D (written),
    U (read) or X (read and written: both registers of a v_permlane*_swap, the old value of v_writelane's
    destination); files, the first one the usual: v VGPR, a AGPR, s SGPR (vcc/exec/m0 included), i an inline
    constant or literal, k an immediate field (s_nop's count), l a label, h a hardware-register field
    (hwreg(...) of s_setreg / s_getreg); dwords the register width (1 if left out);
  - implicit registers it reads or writes that its operand list does not name: D.scc, U.scc, U.vcc, U.m0,
    U.exec, D.exec ('-': none). Every vector kind also reads EXEC as its lane mask (KINDS: vector);
  - latency class: salu, valu, trans (a transcendental, issued to the TRANS unit: the hazard passes' class),
    xdl (an MFMA; its passes are arch data: arch.MfmaShape), smem, vmem, lds, ctrl;
  - arches: '*' for every supported arch, else the ones that have it.
A row's name may hold brace groups, `v_{add,mul}_f32`, each expanding to one row per word. An LDS DMA is the
load with the `lds` modifier: its row is `<load>+lds` (lookup(op, suffix) picks it); a buffer atomic with `sc0`
returns the old value into its data register: its row is `<atomic>+rtn` (the data operand read and written). Atomics
are of the store kinds (vmem_store, ds_write): they write memory, so the scheduler keeps them in order with every
load and store, and the registers a returning one writes are waited for like a load's. A global load or store's
address is one VGPR (an offset) with an SGPR pair base, or a VGPR pair with `off` in the base's slot (no register:
the roles are the same).

Where the facts come from: the operand orders and implicit operands are LLVM's AMDGPU instruction definitions
(SIInstructions.td / VOP*Instructions.td / SOPInstructions.td: Defs/Uses lists) as llvm-mc-22 assembles them;
the counters are the CDNA3 ISA guide's ("Data dependency resolution": VM_CNT, LGKM_CNT). tests/test_isa_table.py
assembles every row with llvm-mc on each of its arches and checks that the emulator's decoder reads and writes the
registers the row says.
"""
from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass

from ..errors import InternalError
from . import isa

# kind        counter  in_order  vector   (counter: the wait counter an op of the kind increments and that retires
#                                          it; in_order: whether those ops complete in issue order; vector: reads
#                                          EXEC as its lane mask)
_KINDS = """
salu          -        -         no
valu          -        -         yes
mfma          -        -         yes
smem          lgkm     no        no
vmem_load     vm       yes       yes
vmem_store    vm       yes       yes
lds_dma       vm       yes       yes
ds_read       lgkm     yes       yes
ds_write      lgkm     yes       yes
ds_lane       lgkm     yes       yes
sopp          -        -         no
branch        -        -         no
barrier       -        -         no
wait          -        -         no
"""

_SCALAR = """
# opcode                                   kind     operands                 implicit          latency  arches
s_mov_b32                                  salu     D.s U.si                 -                 salu     *
s_mov_b64                                  salu     D.s2 U.si2               -                 salu     *
s_mul_i32                                  salu     D.s U.si U.si            -                 salu     *
s_mul_hi_u32                               salu     D.s U.si U.si            -                 salu     *
s_{add,sub}_u32                            salu     D.s U.si U.si            D.scc             salu     *
s_add_i32                                  salu     D.s U.si U.si            D.scc             salu     *
s_{addc,subb}_u32                          salu     D.s U.si U.si            U.scc,D.scc       salu     *
s_{and,or,xor}_b32                         salu     D.s U.si U.si            D.scc             salu     *
s_{and,or,xor,andn2}_b64                   salu     D.s2 U.si2 U.si2         D.scc             salu     *
s_not_b64                                  salu     D.s2 U.si2               D.scc             salu     *
s_{lshl,lshr}_b32                          salu     D.s U.si U.si            D.scc             salu     *
s_ashr_i32                                 salu     D.s U.si U.si            D.scc             salu     *
s_{lshl,lshr}_b64                          salu     D.s2 U.si2 U.si          D.scc             salu     *
s_{min,max}_{u32,i32}                      salu     D.s U.si U.si            D.scc             salu     *
s_cselect_b32                              salu     D.s U.si U.si            U.scc             salu     *
s_cselect_b64                              salu     D.s2 U.si2 U.si2         U.scc             salu     *
s_cmp_{eq,lg,lt,le,gt,ge}_{u32,i32}        salu     U.si U.si                D.scc             salu     *
s_and_saveexec_b64                         salu     D.s2 U.si2               U.exec,D.exec,D.scc salu   *
# only the emulated device runs these (issue 22: other compilers' code)
s_ff1_i32_b64                              salu     D.s U.si2                -                 salu     *
s_setreg_imm32_b32                         salu     U.h U.i                  -                 salu     *
s_setreg_b32                               salu     U.h U.s                  -                 salu     *
s_getreg_b32                               salu     D.s U.h                  -                 salu     *
s_load_dword                               smem     D.s U.s2 U.si            -                 smem     *
s_load_dwordx2                             smem     D.s2 U.s2 U.si           -                 smem     *
s_load_dwordx4                             smem     D.s4 U.s2 U.si           -                 smem     *
s_nop                                      sopp     U.k                      -                 ctrl     *
s_setprio                                  sopp     U.k                      -                 ctrl     *
s_endpgm                                   sopp     -                        -                 ctrl     *
s_waitcnt                                  wait     U.k                      -                 ctrl     *
s_barrier                                  barrier  -                        -                 ctrl     *
s_branch                                   branch   U.l                      -                 ctrl     *
s_cbranch_scc{0,1}                         branch   U.l                      U.scc             ctrl     *
s_cbranch_vccz                             branch   U.l                      U.vcc             ctrl     *
s_cbranch_vccnz                            branch   U.l                      U.vcc             ctrl     *
s_cbranch_exec{z,nz}                       branch   U.l                      U.exec            ctrl     *
"""

_VECTOR = """
# opcode                                   kind     operands                 implicit          latency  arches
v_mov_b32                                  valu     D.v U.vsi                -                 valu     *
v_{add,sub,subrev,mul,max,min}_f32         valu     D.v U.vsi U.vsi          -                 valu     *
v_{add,sub,subrev}_u32                     valu     D.v U.vsi U.vsi          -                 valu     *
v_{max,min}_{u32,i32}                      valu     D.v U.vsi U.vsi          -                 valu     *
v_{and,or,xor}_b32                         valu     D.v U.vsi U.vsi          -                 valu     *
v_{lshlrev,lshrrev}_b32                    valu     D.v U.vsi U.vsi          -                 valu     *
v_ashrrev_i32                              valu     D.v U.vsi U.vsi          -                 valu     *
v_{lshlrev,lshrrev}_b64                    valu     D.v2 U.vsi U.vsi2        -                 valu     *
v_ldexp_f32                                valu     D.v U.vsi U.vsi          -                 valu     *
v_{mul_lo,mul_hi}_u32                      valu     D.v U.vsi U.vsi          -                 valu     *
v_pack_b32_f16                             valu     D.v U.vsi U.vsi          -                 valu     *
v_mbcnt_{lo,hi}_u32_b32                    valu     D.v U.vsi U.vsi          -                 valu     *
v_cndmask_b32                              valu     D.v U.vsi U.vsi U.s2     -                 valu     *
v_{fma,max3,min3,med3}_f32                 valu     D.v U.vsi U.vsi U.vsi    -                 valu     *
v_{add3,bfe,lshl_add,add_lshl}_u32         valu     D.v U.vsi U.vsi U.vsi    -                 valu     *
v_bfe_i32                                  valu     D.v U.vsi U.vsi U.vsi    -                 valu     *
v_perm_b32                                 valu     D.v U.vsi U.vsi U.vsi    -                 valu     *
v_bfi_b32                                  valu     D.v U.vsi U.vsi U.vsi    -                 valu     *
v_fmaak_f32                                valu     D.v U.vsi U.v U.k        -                 valu     *
v_fmamk_f32                                valu     D.v U.vsi U.k U.v        -                 valu     *
v_div_fixup_f32                            valu     D.v U.vsi U.vsi U.vsi    -                 valu     *
v_div_scale_f32                            valu     D.v D.s2 U.vsi U.vsi U.vsi -               valu     *
v_div_fmas_f32                             valu     D.v U.vsi U.vsi U.vsi    U.vcc             valu     *
v_{maximum3,minimum3}_f32                  valu     D.v U.vsi U.vsi U.vsi    -                 valu     gfx950
v_cvt_pk_bf16_f32                          valu     D.v U.vsi U.vsi          -                 valu     gfx950
v_pk_{mul,add}_f32                         valu     D.v2 U.v2 U.v2           -                 valu     *
v_cvt_pk_f16_f32                           valu     D.v U.vsi U.vsi          -                 valu     gfx950
v_cvt_{f32_f16,f16_f32,f32_i32,i32_f32,f32_u32,u32_f32} valu D.v U.vsi  -                 valu     *
v_cvt_f16_f32_sdwa                         valu     X.v U.vs                 -                 valu     *
v_{rndne,floor,ceil,trunc,fract}_f32       valu     D.v U.vsi                -                 valu     *
v_cvt_f32_{fp8,bf8}                        valu     D.v U.vsi                -                 valu     *
v_cvt_f32_{fp8,bf8}_sdwa                   valu     D.v U.vs                 -                 valu     *
v_cvt_pk_f32_{fp8,bf8}                     valu     D.v2 U.vsi               -                 valu     *
v_cvt_pk_f32_{fp8,bf8}_sdwa                valu     D.v2 U.vs                -                 valu     *
v_cvt_pk_{fp8,bf8}_f32                     valu     X.v U.vsi U.vsi          -                 valu     *
v_{exp,log,rcp,rcp_iflag,rsq,sqrt,sin,cos}_f32 valu D.v U.vsi                -                 trans    *
v_{exp,log,rcp,rsq,sqrt,sin,cos}_f16       valu     D.v U.vsi                -                 trans    *
v_{rcp,rsq,sqrt}_f64                       valu     D.v2 U.vsi2              -                 trans    *
v_cmp_{eq,lt,le,gt,ge,lg,neq,nlt,nle,ngt,nge,u,o}_f32 valu D.s2 U.vsi U.vsi  -                 valu     *
v_cmp_{eq,ne,lt,le,gt,ge}_{i32,u32}        valu     D.s2 U.vsi U.vsi         -                 valu     *
v_cmp_class_f32                            valu     D.s2 U.vsi U.vsi         -                 valu     *
v_cmpx_{eq,ne,lt,le,gt,ge}_{i32,u32}       valu     D.s2 U.vsi U.vsi         D.exec            valu     *
v_accvgpr_read_b32                         valu     D.v U.a                  -                 valu     *
v_accvgpr_write_b32                        valu     D.a U.vi                 -                 valu     *
v_accvgpr_mov_b32                          valu     D.a U.a                  -                 valu     *
v_readfirstlane_b32                        valu     D.s U.v                  -                 valu     *
v_readlane_b32                             valu     D.s U.v U.si             -                 valu     *
v_writelane_b32                            valu     X.v U.si U.is            -                 valu     *
v_permlane{16,32}_swap_b32                 valu     X.v X.v                  -                 valu     gfx950
v_mov_b32_dpp                              valu     D.v U.v                  -                 valu     *
v_{add,sub,mul,max,min}_f32_dpp            valu     D.v U.v U.v              -                 valu     *
v_add_u32_dpp                              valu     D.v U.v U.v              -                 valu     *
v_{max,min}_{u32,i32}_dpp                  valu     D.v U.v U.v              -                 valu     *
v_mfma_f32_32x32x8_{bf16,f16}              mfma     D.av16 U.v2 U.v2 U.avi16 -                 xdl      *
v_mfma_f32_16x16x16_{bf16,f16}             mfma     D.av4 U.v2 U.v2 U.avi4   -                 xdl      *
v_mfma_f32_32x32x16_{bf16,f16}             mfma     D.av16 U.v4 U.v4 U.avi16 -                 xdl      gfx950
v_mfma_f32_16x16x32_{bf16,f16}             mfma     D.av4 U.v4 U.v4 U.avi4   -                 xdl      gfx950
# MFMAs only the emulated device runs (issue 22: other compilers' int8 / fp8 / fp32 / MX kernels; arch.LowpMfma)
# (the f32 ones are no XDL op for LLVM's hazard recognizer: arch.LowpMfma.xdl; their latency class here is the
# MFMA one all the same)
v_mfma_f32_32x32x2_f32                     mfma     D.av16 U.v U.v U.avi16   -                 xdl      *
v_mfma_f32_16x16x4_f32                     mfma     D.av4 U.v U.v U.avi4     -                 xdl      *
v_mfma_i32_32x32x16_i8                     mfma     D.av16 U.v2 U.v2 U.avi16 -                 xdl      *
v_mfma_i32_16x16x32_i8                     mfma     D.av4 U.v2 U.v2 U.avi4   -                 xdl      *
v_mfma_f32_32x32x16_{fp8,bf8}_{fp8,bf8}    mfma     D.av16 U.v2 U.v2 U.avi16 -                 xdl      *
v_mfma_f32_16x16x32_{fp8,bf8}_{fp8,bf8}    mfma     D.av4 U.v2 U.v2 U.avi4   -                 xdl      *
v_mfma_f32_32x32x4_xf32                    mfma     D.av16 U.v2 U.v2 U.avi16 -                 xdl      gfx942
v_mfma_f32_16x16x8_xf32                    mfma     D.av4 U.v2 U.v2 U.avi4   -                 xdl      gfx942
v_mfma_i32_32x32x32_i8                     mfma     D.av16 U.v4 U.v4 U.avi16 -                 xdl      gfx950
v_mfma_i32_16x16x64_i8                     mfma     D.av4 U.v4 U.v4 U.avi4   -                 xdl      gfx950
v_mfma_f32_32x32x64_f8f6f4                 mfma     D.av16 U.v8 U.v8 U.avi16 -                 xdl      gfx950
v_mfma_f32_16x16x128_f8f6f4                mfma     D.av4 U.v8 U.v8 U.avi4   -                 xdl      gfx950
v_mfma_scale_f32_32x32x64_f8f6f4           mfma     D.av16 U.v8 U.v8 U.avi16 U.vs U.vs - xdl     gfx950
v_mfma_scale_f32_16x16x128_f8f6f4          mfma     D.av4 U.v8 U.v8 U.avi4 U.vs U.vs -   xdl      gfx950
v_bitop3_b16                               valu     D.v U.vsi U.vsi U.vsi    -                 valu     gfx950
# other VALU instructions of other compilers' kernels (issue 22): f64, frexp, 16-bit compares, scaled fp8 conversions
v_{add,mul,max,min}_f64                    valu     D.v2 U.vsi2 U.vsi2       -                 valu     *
v_fma_f64                                  valu     D.v2 U.vsi2 U.vsi2 U.vsi2 -                valu     *
v_fmac_f64                                 valu     X.v2 U.vsi2 U.v2         -                 valu     *
v_ldexp_f64                                valu     D.v2 U.vsi2 U.vsi        -                 valu     *
v_{floor,ceil,trunc,rndne,fract,frexp_mant}_f64 valu D.v2 U.vsi2             -                 valu     *
v_frexp_exp_i32_f64                        valu     D.v U.vsi2               -                 valu     *
v_frexp_{mant_f32,exp_i32_f32}             valu     D.v U.vsi                -                 valu     *
v_cvt_f64_{f32,i32,u32}                    valu     D.v2 U.vsi               -                 valu     *
v_cvt_{f32,i32}_f64                        valu     D.v U.vsi2               -                 valu     *
v_div_scale_f64                            valu     D.v2 D.s2 U.vsi2 U.vsi2 U.vsi2 -           valu     *
v_div_fmas_f64                             valu     D.v2 U.vsi2 U.vsi2 U.vsi2 U.vcc            valu     *
v_div_fixup_f64                            valu     D.v2 U.vsi2 U.vsi2 U.vsi2 -                valu     *
v_div_fixup_f16                            valu     D.v U.vsi U.vsi U.vsi    -                 valu     *
v_cmp_{eq,lt,le,gt,ge,lg,neq,nlt,nle,ngt,nge,u,o}_f64 valu D.s2 U.vsi2 U.vsi2 -                valu     *
v_cmp_class_f64                            valu     D.s2 U.vsi2 U.vsi        -                 valu     *
v_cmp_{eq,lt,le,gt,ge,lg,neq,nlt,nle,ngt,nge,u,o}_f16 valu D.s2 U.vsi U.vsi  -                 valu     *
v_cmp_{eq,ne,lt,le,gt,ge}_{i16,u16}        valu     D.s2 U.vsi U.vsi         -                 valu     *
v_sad_u32                                  valu     D.v U.vsi U.vsi U.vsi    -                 valu     *
v_cvt_scalef32_pk_{fp8,bf8}_f32            valu     X.v U.vsi U.vsi U.vsi    -                 valu     gfx950
v_cvt_scalef32_pk_f32_{fp8,bf8,fp4}        valu     D.v2 U.vsi U.vsi         -                 valu     gfx950
v_cvt_scalef32_pk_{f16,bf16}_{fp8,bf8,fp4} valu     D.v U.vsi U.vsi          -                 valu     gfx950
"""

_MEMORY = """
# opcode                                   kind       operands               implicit          latency  arches
buffer_load_{ubyte,sbyte,ushort,sshort}    vmem_load  D.v U.v U.s4 U.si      -                 vmem     *
buffer_load_dword                          vmem_load  D.v U.v U.s4 U.si      -                 vmem     *
buffer_load_dwordx2                        vmem_load  D.v2 U.v U.s4 U.si     -                 vmem     *
buffer_load_dwordx3                        vmem_load  D.v3 U.v U.s4 U.si     -                 vmem     *
buffer_load_dwordx4                        vmem_load  D.v4 U.v U.s4 U.si     -                 vmem     *
buffer_load_dword+lds                      lds_dma    U.v U.s4 U.si          U.m0              vmem     *
buffer_load_dwordx4+lds                    lds_dma    U.v U.s4 U.si          U.m0              vmem     gfx950
buffer_store_{byte,short}                  vmem_store U.v U.v U.s4 U.si      -                 vmem     *
buffer_store_dword                         vmem_store U.v U.v U.s4 U.si      -                 vmem     *
buffer_store_dwordx2                       vmem_store U.v2 U.v U.s4 U.si     -                 vmem     *
buffer_store_dwordx3                       vmem_store U.v3 U.v U.s4 U.si     -                 vmem     *
buffer_store_dwordx4                       vmem_store U.v4 U.v U.s4 U.si     -                 vmem     *
global_load_{ushort,dword}                 vmem_load  D.v U.v U.s2           -                 vmem     *
global_load_dwordx2                        vmem_load  D.v2 U.v U.s2          -                 vmem     *
global_load_dwordx3                        vmem_load  D.v3 U.v U.s2          -                 vmem     *
global_load_dwordx4                        vmem_load  D.v4 U.v U.s2          -                 vmem     *
global_store_{short,dword}                 vmem_store U.v U.v U.s2           -                 vmem     *
global_store_dwordx2                       vmem_store U.v U.v2 U.s2          -                 vmem     *
global_store_dwordx3                       vmem_store U.v U.v3 U.s2          -                 vmem     *
global_store_dwordx4                       vmem_store U.v U.v4 U.s2          -                 vmem     *
ds_read_{b32,u16,u8}                       ds_read    D.v U.v                -                 lds      *
ds_read_b64                                ds_read    D.v2 U.v               -                 lds      *
ds_read_b128                               ds_read    D.v4 U.v               -                 lds      *
ds_read_b64_tr_b{16,8}                     ds_read    D.v2 U.v               -                 lds      gfx950
ds_write_{b8,b16,b16_d16_hi,b32}           ds_write   U.v U.v                -                 lds      *
ds_write_b64                               ds_write   U.v U.v2               -                 lds      *
ds_write_b128                              ds_write   U.v U.v4               -                 lds      *
ds_swizzle_b32                             ds_lane    D.v U.v                -                 lds      *
buffer_atomic_{add_f32,pk_add_f16,add,smax,smin,umax,umin} vmem_store U.v U.v U.s4 U.si -              vmem     *
buffer_atomic_pk_add_bf16                  vmem_store U.v U.v U.s4 U.si      -                 vmem     gfx950
buffer_atomic_{add_f32,pk_add_f16,add,smax,smin,umax,umin}+rtn vmem_store X.v U.v U.s4 U.si -           vmem     *
buffer_atomic_pk_add_bf16+rtn              vmem_store X.v U.v U.s4 U.si      -                 vmem     gfx950
buffer_atomic_cmpswap                      vmem_store U.v2 U.v U.s4 U.si     -                 vmem     *
buffer_atomic_cmpswap+rtn                  vmem_store X.v2 U.v U.s4 U.si     -                 vmem     *
ds_{add_f32,pk_add_f16,pk_add_bf16}       ds_write   U.v U.v                -                 lds      *
ds_{add_u32,max_i32,min_i32,max_u32,min_u32} ds_write U.v U.v              -                 lds      *
ds_{add_rtn_f32,pk_add_rtn_f16,pk_add_rtn_bf16} ds_write D.v U.v U.v       -                 lds      *
ds_{add_rtn_u32,max_rtn_i32,min_rtn_i32}   ds_write   D.v U.v U.v            -                 lds      *
ds_{max_rtn_u32,min_rtn_u32}               ds_write   D.v U.v U.v            -                 lds      *
ds_cmpst_b32                               ds_write   U.v U.v U.v            -                 lds      *
ds_cmpst_rtn_b32                           ds_write   D.v U.v U.v U.v        -                 lds      *
ds_{bpermute,permute}_b32                  ds_lane    D.v U.v U.v            -                 lds      *
"""

# The lane operands of the cross-lane VALU instructions the hazard rules single out (LLVM's isRWLane and the
# V_READLANE / V_READFIRSTLANE cases of GCNHazardRecognizer::checkVALUHazards): which operand (assembler order, 0 =
# the first) is the VGPR one lane of which is read, and which picks the lane (an SGPR, M0 or a constant). Nothing
# else of a row says this, so it is data of its own.
_LANE_OPS = """
# opcode                 lane_source  lane_select
v_readfirstlane_b32      1            -
v_readlane_b32           1            2
v_writelane_b32          -            2
"""

_ACCESS = {"D": (True, False), "U": (False, True), "X": (True, True)}
_IMPLICIT = {"scc": isa.SCC, "vcc": isa.VCC, "exec": isa.EXEC, "m0": isa.M0}
ARCHES = ("gfx942", "gfx950")
LATENCIES = ("salu", "valu", "trans", "xdl", "smem", "vmem", "lds", "ctrl")


@dataclass(frozen=True)
class Operand:
    """One operand slot: whether the instruction writes / reads it, the files it may name (first: the usual one),
    and its width in dwords."""

    writes: bool
    reads: bool
    files: str
    dwords: int


@dataclass(frozen=True)
class HazardRoles:
    """What the hazard rules (tilegcn/amdgcn/hazards.py and the emulator's independent check) ask of an opcode,
    derived from its row (hazard_roles says how) so that no rule looks at an opcode's name. Operand positions are in
    assembler order; None: the opcode has no such operand."""

    trans: bool  # issues to the transcendental unit: latency class trans
    dpp: bool  # the DPP form (a `_dpp` row): reads every VGPR it names, its destination's old value too
    permlane_swap: bool  # a VALU whose operands are all read and written (v_permlane*_swap: both outputs)
    reads_vcc_late: bool  # a VALU reading VCC without naming it (v_div_fmas: checkDivFMasHazards)
    lane_source: int | None  # the VGPR one lane of which it reads (v_readlane, v_readfirstlane: _LANE_OPS)
    lane_select: int | None  # the operand that picks the lane (v_readlane, v_writelane: _LANE_OPS)
    wide_store_data: int | None  # a store's data operand when wider than 8 bytes (12DWordStoreHazard)
    store_soffset: int | None  # that store's SGPR-or-constant offset (MUBUF soffset): the rule holds without a
    # register there

    @property
    def reads_exec_late(self) -> bool:
        """Whether a VALU write of EXEC shortly before it is a hazard (DPP, lane reads / writes, permlane swaps):
        EXEC is none of its listed uses."""
        return self.dpp or self.permlane_swap or self.lane_source is not None or self.lane_select is not None


@dataclass(frozen=True)
class Kind:
    name: str
    counter: str  # "vm", "lgkm" or "" (counts in no wait counter)
    in_order: bool  # its ops complete in issue order (scalar loads do not)
    vector: bool  # reads EXEC as its lane mask


@dataclass(frozen=True)
class OpInfo:
    name: str  # the table's key: the opcode, `+lds` for an LDS DMA
    kind: str
    operands: tuple  # (Operand, ...) in assembler order
    implicit_defs: tuple  # isa.Reg the instruction writes without naming it (SCC, EXEC)
    implicit_uses: tuple  # isa.Reg it reads without naming it (SCC, VCC, M0, EXEC as data)
    latency: str
    arches: tuple
    hazard: HazardRoles | None = None  # filled in by _parse (hazard_roles)

    @property
    def counter(self) -> str:
        return KINDS[self.kind].counter


def _expand(name: str) -> list:
    """`v_{add,mul}_f32` -> ["v_add_f32", "v_mul_f32"] (every brace group, left to right)."""
    m = re.search(r"\{([^}]*)\}", name)
    if not m:
        return [name]
    return [full for word in m.group(1).split(",") for full in _expand(name[:m.start()] + word + name[m.end():])]


def _operand(token: str) -> Operand:
    access, spec = token.split(".")
    m = re.fullmatch(r"([vaisklh]+)(\d*)", spec)
    writes, reads = _ACCESS[access]
    return Operand(writes, reads, m.group(1), int(m.group(2) or 1))


def _implicit(column: str) -> tuple:
    defs, uses = [], []
    for token in ([] if column == "-" else column.split(",")):
        access, name = token.split(".")
        (defs if access == "D" else uses).append(_IMPLICIT[name])
    return tuple(defs), tuple(uses)


def _rows(text: str):
    """(name, kind, operand tokens, implicit, latency, arches) of each row: the operands are the columns between the
    kind and the last three (no column but the operands holds a space)."""
    for line in text.strip().splitlines():
        if line.startswith("#"):
            continue
        cols = line.split()
        operands = cols[2:-3]
        yield cols[0], cols[1], [] if operands == ["-"] else operands, cols[-3], cols[-2], cols[-1]


def _parse_kinds(text: str) -> dict:
    out = {}
    for line in text.strip().splitlines():
        name, counter, in_order, vector = line.split()
        out[name] = Kind(name, "" if counter == "-" else counter, in_order == "yes", vector == "yes")
    return out


def _parse(*texts) -> dict:
    table, lanes = {}, _parse_lane_ops(_LANE_OPS)
    for text in texts:
        for name, kind, operands, implicit, latency, arches in _rows(text):
            assert kind in KINDS and latency in LATENCIES, name
            defs, uses = _implicit(implicit)
            ops = tuple(_operand(t) for t in operands)
            which = ARCHES if arches == "*" else tuple(arches.split(","))
            for full in _expand(name):
                assert full not in table, f"two rows for {full}"
                row = OpInfo(full, kind, ops, defs, uses, latency, which)
                table[full] = dataclasses.replace(row, hazard=hazard_roles(row, lanes.get(full, (None, None))))
    assert set(lanes) <= set(table), set(lanes) - set(table)
    return table


def _parse_lane_ops(text: str) -> dict:
    """opcode -> (lane_source, lane_select) operand positions (None where '-')."""
    out = {}
    for line in text.strip().splitlines():
        if not line.startswith("#"):
            name, source, select = line.split()
            out[name] = tuple(None if c == "-" else int(c) for c in (source, select))
    return out


def hazard_roles(row: OpInfo, lanes: tuple) -> HazardRoles:
    """The hazard roles of `row` from what the row already says (its latency class, its `_dpp` form, its operand
    roles and implicit operands), and `lanes` (its _LANE_OPS entry: (lane_source, lane_select))."""
    valu, ops = row.kind == isa.VALU, row.operands
    data = soffset = None
    if row.kind == isa.VMEM_STORE:
        data = next((i for i, o in enumerate(ops) if o.files == "v" and o.dwords > 2), None)
        if data is not None:  # (a buffer store's soffset is the one slot that takes an SGPR or a constant)
            soffset = next((i for i, o in enumerate(ops) if o.files == "si"), None)
    return HazardRoles(
        trans=row.latency == "trans",
        dpp=valu and row.name.endswith("_dpp"),
        permlane_swap=valu and len(ops) >= 2 and all(o.writes and o.reads and o.files == "v" for o in ops),
        reads_vcc_late=valu and isa.VCC in row.implicit_uses,
        lane_source=lanes[0], lane_select=lanes[1], wide_store_data=data, store_soffset=soffset)


KINDS = _parse_kinds(_KINDS)
TABLE = _parse(_SCALAR, _VECTOR, _MEMORY)
_ENCODING_SUFFIXES = ("_e32", "_e64")
_RETURNS = "sc0"  # a buffer atomic with sc0 (GLC before gfx940) returns the old value into its data register


@functools.lru_cache(maxsize=None)
def lookup(op: str, suffix: str = "") -> OpInfo:
    """The row of opcode `op` (`suffix`: the modifiers printed after the operands; `lds` picks the LDS DMA row);
    an opcode the table lacks is an InternalError naming it. Memoised per (op, suffix): emit() asks it of every
    instruction."""
    words = suffix.split()
    returns = _RETURNS in words and op.startswith("buffer_atomic_")
    key = f"{op}+lds" if "lds" in words else f"{op}+rtn" if returns else op
    row = TABLE.get(key)
    if row is None and op.endswith(_ENCODING_SUFFIXES):  # v_cmp_gt_i32_e64: the VOP3 encoding of the same row
        row = TABLE.get(key.replace(op, op[:-4]))
    if row is None:
        raise InternalError(f"instruction {key!r} is not in tilegcn's instruction table (tilegcn/amdgcn/"
                            f"isa_table.py): the machine layer does not know its operand roles, counters or "
                            f"latency. Add its row there (tests/test_isa_table.py checks it against llvm-mc and the "
                            f"emulator)")
    return row


def check_plain_valu(op: str, arch: str) -> None:
    """Refuse `op` for KernelBuilder.valu's shortcut unless its row is a VALU one of `arch` that writes its first
    operand only and reads the others, with no implicit operand (an InternalError otherwise)."""
    row = lookup(op)
    if arch not in row.arches:
        refuse_on_arch(row, arch)
    first, *rest = row.operands or (None,)
    plain = (row.kind == isa.VALU and first is not None and first.writes and not first.reads
             and all(o.reads and not o.writes for o in rest) and not row.implicit_defs and not row.implicit_uses)
    if not plain:
        raise InternalError(f"{op} is not a plain VALU instruction (one written operand first, the others read, "
                            f"nothing implicit): emit() it instead of KernelBuilder.valu")


def refuse_on_arch(row: OpInfo, arch: str):
    raise InternalError(f"instruction {row.name!r} does not exist on {arch} (tilegcn's instruction table, "
                        f"tilegcn/amdgcn/isa_table.py, lists it for {', '.join(row.arches)}): the lowering must "
                        f"choose another sequence there")


def refuse_operands(row: OpInfo, operands: tuple):
    raise InternalError(f"instruction {row.name!r} takes {len(row.operands)} operands (tilegcn's instruction table, "
                        f"tilegcn/amdgcn/isa_table.py), not {len(operands)}: {', '.join(map(str, operands))}")


def implied_defs_uses(row: OpInfo, operands: tuple) -> tuple:
    """(defs, uses) of an instruction of `row` with `operands` (isa.Reg or constants, in assembler order): the
    registers in written / read slots, then the implicit ones. An operand slot holding a constant is neither."""
    defs, uses = [], []  # plain loops: emit() runs this for most of a kernel's instructions
    for slot, o in zip(row.operands, operands):
        if type(o) is isa.Reg:
            if slot.writes:
                defs.append(o)
            if slot.reads:
                uses.append(o)
    if row.implicit_defs:
        defs += row.implicit_defs
    if row.implicit_uses:
        uses += row.implicit_uses
    return tuple(defs), tuple(uses)


def kinds_counting(counter: str) -> tuple:
    """The kinds whose ops increment wait counter `counter` ("vm" or "lgkm")."""
    return tuple(k.name for k in KINDS.values() if k.counter == counter)


def vector_kinds() -> tuple:
    """The kinds whose ops read EXEC as their lane mask."""
    return tuple(k.name for k in KINDS.values() if k.vector)


def is_trans(op: str) -> bool:
    """Whether `op` issues to the transcendental unit (the hazard passes' forwarding class)."""
    return lookup(op).latency == "trans"


def trans_ops() -> frozenset:
    """Every opcode of the latency class trans."""
    return frozenset(name for name, row in TABLE.items() if row.latency == "trans")


def ops_with_role(role: str) -> frozenset:
    """Every opcode whose HazardRoles field `role` is set (true, or an operand position)."""
    return frozenset(name for name, row in TABLE.items()
                     if getattr(row.hazard, role) is not None and getattr(row.hazard, role) is not False)


@functools.lru_cache(maxsize=None)
def roles_of(op: str) -> HazardRoles:
    """The hazard roles of opcode `op` (as printed: `_e32` / `_e64` forms too); an InternalError if the table lacks
    it. Memoised: the hazard passes ask it per instruction."""
    return lookup(op).hazard
