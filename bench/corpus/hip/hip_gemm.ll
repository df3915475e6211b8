; What hipcc makes of a naive fp32 GEMM, one thread per C element, 64-bit pointer arithmetic:
;   int col = blockIdx.x * blockDim.x + threadIdx.x, row = blockIdx.y * blockDim.y + threadIdx.y;
;   if (row < M && col < N) { float acc = 0; for (long k = 0; k < K; ++k) acc += A[row*lda + k] * B[k*ldb + col];
;                             C[row*ldc + col] = alpha * acc; }
target triple = "amdgcn-amd-amdhsa"
define amdgpu_kernel void @gemm(ptr addrspace(1) noalias %A, ptr addrspace(1) noalias %B, ptr addrspace(1) noalias %C,
                                i32 %M, i32 %N, i64 %K, i64 %lda, i64 %ldb, i64 %ldc, float %alpha) {
entry:
  %imp = call ptr addrspace(4) @llvm.amdgcn.implicitarg.ptr()
  %bxp = getelementptr i8, ptr addrspace(4) %imp, i64 12
  %byp = getelementptr i8, ptr addrspace(4) %imp, i64 14
  %bx16 = load i16, ptr addrspace(4) %bxp, align 4
  %by16 = load i16, ptr addrspace(4) %byp, align 2
  %bx = zext i16 %bx16 to i32
  %by = zext i16 %by16 to i32
  %gx = call i32 @llvm.amdgcn.workgroup.id.x()
  %gy = call i32 @llvm.amdgcn.workgroup.id.y()
  %tx = call i32 @llvm.amdgcn.workitem.id.x()
  %ty = call i32 @llvm.amdgcn.workitem.id.y()
  %c0 = mul i32 %gx, %bx
  %col = add i32 %c0, %tx
  %r0 = mul i32 %gy, %by
  %row = add i32 %r0, %ty
  %okr = icmp slt i32 %row, %M
  %okc = icmp slt i32 %col, %N
  %ok = and i1 %okr, %okc
  br i1 %ok, label %pre, label %exit
pre:
  %row64 = sext i32 %row to i64
  %col64 = sext i32 %col to i64
  %arow = mul i64 %row64, %lda
  %haveK = icmp sgt i64 %K, 0
  br i1 %haveK, label %loop, label %store
loop:
  %k = phi i64 [ 0, %pre ], [ %k1, %loop ]
  %acc = phi float [ 0.0, %pre ], [ %acc1, %loop ]
  %ai = add i64 %arow, %k
  %pa = getelementptr float, ptr addrspace(1) %A, i64 %ai
  %bk = mul i64 %k, %ldb
  %bi = add i64 %bk, %col64
  %pb = getelementptr float, ptr addrspace(1) %B, i64 %bi
  %va = load float, ptr addrspace(1) %pa
  %vb = load float, ptr addrspace(1) %pb
  %acc1 = call float @llvm.fma.f32(float %va, float %vb, float %acc)
  %k1 = add nsw i64 %k, 1
  %more = icmp slt i64 %k1, %K
  br i1 %more, label %loop, label %store
store:
  %accf = phi float [ 0.0, %pre ], [ %acc1, %loop ]
  %res = fmul float %accf, %alpha
  %crow = mul i64 %row64, %ldc
  %ci = add i64 %crow, %col64
  %pc = getelementptr float, ptr addrspace(1) %C, i64 %ci
  store float %res, ptr addrspace(1) %pc
  br label %exit
exit:
  ret void
}
declare ptr addrspace(4) @llvm.amdgcn.implicitarg.ptr()
declare i32 @llvm.amdgcn.workgroup.id.x()
declare i32 @llvm.amdgcn.workgroup.id.y()
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workitem.id.y()
declare float @llvm.fma.f32(float, float, float)
