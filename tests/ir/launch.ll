target triple = "amdgcn-amd-amdhsa"
%struct.Args = type { ptr addrspace(1), ptr addrspace(1), i32, float, [3 x i64] }
@dyn = external addrspace(3) global [0 x i32], align 4

define amdgpu_kernel void @dispatch_info(ptr addrspace(1) %out) {
  %d = call ptr addrspace(4) @llvm.amdgcn.dispatch.ptr()
  %wgp = getelementptr i8, ptr addrspace(4) %d, i64 4
  %wg = load i16, ptr addrspace(4) %wgp
  %wg32 = zext i16 %wg to i32
  %gp = getelementptr i8, ptr addrspace(4) %d, i64 12
  %g = load i32, ptr addrspace(4) %gp
  %id = call i64 @llvm.amdgcn.dispatch.id()
  %id32 = trunc i64 %id to i32
  store i32 %wg32, ptr addrspace(1) %out
  %o1 = getelementptr i32, ptr addrspace(1) %out, i32 1
  store i32 %g, ptr addrspace(1) %o1
  %o2 = getelementptr i32, ptr addrspace(1) %out, i32 2
  store i32 %id32, ptr addrspace(1) %o2
  ret void
}

define amdgpu_kernel void @dynamic_lds(ptr addrspace(1) %out, i32 %n) {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %p = getelementptr i32, ptr addrspace(3) @dyn, i32 %tid
  %v = mul i32 %tid, 3
  store i32 %v, ptr addrspace(3) %p
  fence syncscope("workgroup") release
  call void @llvm.amdgcn.s.barrier()
  fence syncscope("workgroup") acquire
  %r = sub i32 %n, %tid
  %r1 = sub i32 %r, 1
  %q = getelementptr i32, ptr addrspace(3) @dyn, i32 %r1
  %w = load i32, ptr addrspace(3) %q
  %o = getelementptr i32, ptr addrspace(1) %out, i32 %tid
  store i32 %w, ptr addrspace(1) %o
  ret void
}

define amdgpu_kernel void @struct_arg(%struct.Args %a) {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %x = extractvalue %struct.Args %a, 0
  %y = extractvalue %struct.Args %a, 1
  %n = extractvalue %struct.Args %a, 2
  %s = extractvalue %struct.Args %a, 3
  %e = extractvalue %struct.Args %a, 4, 2
  %in = icmp slt i32 %tid, %n
  br i1 %in, label %body, label %done
body:
  %px = getelementptr float, ptr addrspace(1) %x, i32 %tid
  %vx = load float, ptr addrspace(1) %px
  %e32 = trunc i64 %e to i32
  %ef = sitofp i32 %e32 to float
  %m = fmul float %vx, %s
  %r = fadd float %m, %ef
  %py = getelementptr float, ptr addrspace(1) %y, i32 %tid
  store float %r, ptr addrspace(1) %py
  br label %done
done:
  ret void
}

declare ptr addrspace(4) @llvm.amdgcn.dispatch.ptr()
declare i64 @llvm.amdgcn.dispatch.id()
declare i32 @llvm.amdgcn.workitem.id.x()
declare void @llvm.amdgcn.s.barrier()

; The LDS aperture three ways: the high word of a generic pointer to LDS (src_shared_base on gfx9), and the
; LDS / private aperture words of the queue (amd_queue_t at 0x40 / 0x44, read by older code objects).
@lds_word = internal addrspace(3) global i32 poison, align 4
define amdgpu_kernel void @apertures(ptr addrspace(1) %out) {
  %flat = addrspacecast ptr addrspace(3) @lds_word to ptr
  %bits = ptrtoint ptr %flat to i64
  %hi64 = lshr i64 %bits, 32
  %hi = trunc i64 %hi64 to i32
  store i32 %hi, ptr addrspace(1) %out
  %q = call ptr addrspace(4) @llvm.amdgcn.queue.ptr()
  %qs = getelementptr i8, ptr addrspace(4) %q, i64 64
  %qp = getelementptr i8, ptr addrspace(4) %q, i64 68
  %s = load i32, ptr addrspace(4) %qs
  %p = load i32, ptr addrspace(4) %qp
  %o1 = getelementptr i32, ptr addrspace(1) %out, i32 1
  store i32 %s, ptr addrspace(1) %o1
  %o2 = getelementptr i32, ptr addrspace(1) %out, i32 2
  store i32 %p, ptr addrspace(1) %o2
  ret void
}
declare ptr addrspace(4) @llvm.amdgcn.queue.ptr()
