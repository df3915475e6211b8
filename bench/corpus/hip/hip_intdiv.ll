; What hipcc makes of:  out_q[i] = a[i] / b[i]; out_r[i] = a[i] % b[i]; out_u[i] = (unsigned)a[i] / d;
; with i = blockIdx.x * blockDim.x + threadIdx.x (blockDim from the hidden arguments, code object v5).
target triple = "amdgcn-amd-amdhsa"
define amdgpu_kernel void @intdiv(ptr addrspace(1) noalias %a, ptr addrspace(1) noalias %b,
                                  ptr addrspace(1) noalias %out_q, ptr addrspace(1) noalias %out_r,
                                  ptr addrspace(1) noalias %out_u, i32 %d, i32 %n) {
  %imp = call ptr addrspace(4) @llvm.amdgcn.implicitarg.ptr()
  %bdp = getelementptr i8, ptr addrspace(4) %imp, i64 12
  %bd16 = load i16, ptr addrspace(4) %bdp, align 4
  %bd = zext i16 %bd16 to i32
  %bid = call i32 @llvm.amdgcn.workgroup.id.x()
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %base = mul i32 %bid, %bd
  %i = add i32 %base, %tid
  %in = icmp slt i32 %i, %n
  br i1 %in, label %body, label %done
body:
  %i64 = sext i32 %i to i64
  %pa = getelementptr i32, ptr addrspace(1) %a, i64 %i64
  %pb = getelementptr i32, ptr addrspace(1) %b, i64 %i64
  %x = load i32, ptr addrspace(1) %pa
  %y = load i32, ptr addrspace(1) %pb
  %q = sdiv i32 %x, %y
  %r = srem i32 %x, %y
  %u = udiv i32 %x, %d
  %pq = getelementptr i32, ptr addrspace(1) %out_q, i64 %i64
  %pr = getelementptr i32, ptr addrspace(1) %out_r, i64 %i64
  %pu = getelementptr i32, ptr addrspace(1) %out_u, i64 %i64
  store i32 %q, ptr addrspace(1) %pq
  store i32 %r, ptr addrspace(1) %pr
  store i32 %u, ptr addrspace(1) %pu
  br label %done
done:
  ret void
}
declare ptr addrspace(4) @llvm.amdgcn.implicitarg.ptr()
declare i32 @llvm.amdgcn.workgroup.id.x()
declare i32 @llvm.amdgcn.workitem.id.x()
