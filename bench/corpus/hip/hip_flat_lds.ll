; What hipcc makes of a kernel that reaches __shared__ memory through a generic pointer (a helper taking
; `float*`), reversing each block's 256 values:
;   __shared__ float tile[256]; float *t = tile;   // generic (flat) pointer into the LDS aperture
;   t[threadIdx.x] = in[i] * 2; __syncthreads(); out[i] = t[255 - threadIdx.x];
target triple = "amdgcn-amd-amdhsa"
@tile = internal addrspace(3) global [256 x float] poison, align 4
define amdgpu_kernel void @flat_lds(ptr addrspace(1) noalias %in, ptr addrspace(1) noalias %out) {
  %bid = call i32 @llvm.amdgcn.workgroup.id.x()
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %b = shl i32 %bid, 8
  %i = add i32 %b, %tid
  %i64 = zext i32 %i to i64
  %flat = addrspacecast ptr addrspace(3) @tile to ptr
  %opaque = call ptr @llvm.launder.invariant.group.p0(ptr %flat)
  %pin = getelementptr float, ptr addrspace(1) %in, i64 %i64
  %v = load float, ptr addrspace(1) %pin
  %v2 = fmul float %v, 2.0
  %t64 = zext i32 %tid to i64
  %pw = getelementptr float, ptr %opaque, i64 %t64
  store volatile float %v2, ptr %pw
  fence syncscope("workgroup") release
  call void @llvm.amdgcn.s.barrier()
  fence syncscope("workgroup") acquire
  %rt = sub i32 255, %tid
  %rt64 = zext i32 %rt to i64
  %pr = getelementptr float, ptr %opaque, i64 %rt64
  %w = load volatile float, ptr %pr
  %pout = getelementptr float, ptr addrspace(1) %out, i64 %i64
  store float %w, ptr addrspace(1) %pout
  ret void
}
declare i32 @llvm.amdgcn.workgroup.id.x()
declare i32 @llvm.amdgcn.workitem.id.x()
declare void @llvm.amdgcn.s.barrier()
declare ptr @llvm.launder.invariant.group.p0(ptr)
