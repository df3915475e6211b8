// Minimal stand-in for ROCm's <hip/hip_fp8.h> (bench/build_calibration.py): one-byte E4M3 values (OCP on gfx950,
// FNUZ on gfx942: the byte is the same, the hardware conversion differs) and their packed pairs / quads.
// Conversions use the gfx942/gfx950 conversion instructions, as ROCm's amd_hip_fp8.h does on those targets.
#pragma once
#define HK_SHIM_FP8(name) \
struct __attribute__((aligned(1))) name { unsigned char __x; \
    __host__ __device__ name() = default; \
    __host__ __device__ explicit name(float f) : __x((unsigned char)__builtin_amdgcn_cvt_pk_fp8_f32(f, f, 0, false)) {} \
    __host__ __device__ operator float() const { return __builtin_amdgcn_cvt_f32_fp8((int)__x, 0); } }; \
struct __attribute__((aligned(2))) name##x2 { unsigned short __x; \
    __host__ __device__ name##x2() = default; \
    __host__ __device__ explicit name##x2(float2 v) : __x((unsigned short)__builtin_amdgcn_cvt_pk_fp8_f32(v.x, v.y, 0, false)) {} }; \
struct __attribute__((aligned(4))) name##x4 { unsigned int __x; \
    __host__ __device__ name##x4() = default; \
    __host__ __device__ explicit name##x4(float4 v) : __x((unsigned int)__builtin_amdgcn_cvt_pk_fp8_f32(v.z, v.w, \
        __builtin_amdgcn_cvt_pk_fp8_f32(v.x, v.y, 0, false), true)) {} };
HK_SHIM_FP8(__hip_fp8_e4m3)
HK_SHIM_FP8(__hip_fp8_e4m3_fnuz)
#undef HK_SHIM_FP8
typedef __hip_fp8_e4m3x2 __hip_fp8x2_e4m3; typedef __hip_fp8_e4m3x4 __hip_fp8x4_e4m3;
typedef __hip_fp8_e4m3_fnuzx2 __hip_fp8x2_e4m3_fnuz; typedef __hip_fp8_e4m3_fnuzx4 __hip_fp8x4_e4m3_fnuz;
