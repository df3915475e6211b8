; Every dword of the hidden-argument area (implicitarg.ptr), one per thread: clang's HIP lowering reads
; gridDim / blockDim / the remainders from here on code object v5.
target triple = "amdgcn-amd-amdhsa"
define amdgpu_kernel void @hidden(ptr addrspace(1) %out) {
  %imp = call ptr addrspace(4) @llvm.amdgcn.implicitarg.ptr()
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %p = getelementptr i32, ptr addrspace(4) %imp, i32 %tid
  %v = load i32, ptr addrspace(4) %p
  %q = getelementptr i32, ptr addrspace(1) %out, i32 %tid
  store i32 %v, ptr addrspace(1) %q
  ret void
}
declare ptr addrspace(4) @llvm.amdgcn.implicitarg.ptr()
declare i32 @llvm.amdgcn.workitem.id.x()
