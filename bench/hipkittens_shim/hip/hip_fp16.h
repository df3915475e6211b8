// Minimal stand-in for ROCm's <hip/hip_fp16.h> (bench/build_calibration.py): __half is clang's _Float16, whose
// conversions round to nearest even as ROCm's amd_hip_fp16.h does.
#pragma once
typedef _Float16 __half;
struct __attribute__((aligned(4))) __half2 { __half x, y; };
__host__ __device__ inline float __half2float(__half a) { return (float)a; }
__host__ __device__ inline __half __float2half(float f) { return (__half)f; }
__host__ __device__ inline unsigned short __half_as_ushort(__half a) { return __builtin_bit_cast(unsigned short, a); }
__host__ __device__ inline float2 __half22float2(__half2 a) { return float2((float)a.x, (float)a.y); }
__host__ __device__ inline __half2 __float22half2_rn(float2 a) { return __half2{(__half)a.x, (__half)a.y}; }
__host__ __device__ inline __half __hadd(__half a, __half b) { return a + b; }
__host__ __device__ inline __half __hsub(__half a, __half b) { return a - b; }
__host__ __device__ inline __half __hmul(__half a, __half b) { return a * b; }
__host__ __device__ inline __half __hdiv(__half a, __half b) { return a / b; }
__host__ __device__ inline __half __hmax(__half a, __half b) { return a > b ? a : b; }
__host__ __device__ inline __half __hmin(__half a, __half b) { return a < b ? a : b; }
__host__ __device__ inline __half __habs(__half a) { return a < 0 ? -a : a; }
#define HK_SHIM_H2(name, op) __host__ __device__ inline __half2 name(__half2 a, __half2 b) { return __half2{op(a.x, b.x), op(a.y, b.y)}; }
HK_SHIM_H2(__hadd2, __hadd) HK_SHIM_H2(__hsub2, __hsub) HK_SHIM_H2(__hmul2, __hmul) HK_SHIM_H2(__h2div, __hdiv)
HK_SHIM_H2(__hmax2, __hmax) HK_SHIM_H2(__hmin2, __hmin)
__host__ __device__ inline __half2 __habs2(__half2 a) { return __half2{__habs(a.x), __habs(a.y)}; }
#define HK_SHIM_H_UNARY(name, fn) __device__ inline __half2 name(__half2 a) { return __half2{(__half)fn((float)a.x), (__half)fn((float)a.y)}; }
HK_SHIM_H_UNARY(h2exp, __builtin_expf) HK_SHIM_H_UNARY(h2exp2, __builtin_exp2f)
HK_SHIM_H_UNARY(h2log, __builtin_logf) HK_SHIM_H_UNARY(h2log2, __builtin_log2f)
__host__ __device__ inline __half __ushort_as_half(unsigned short x) { return __builtin_bit_cast(__half, x); }
#define HK_SHIM_H_UNARY1(name, fn) __device__ inline __half name(__half a) { return (__half)fn((float)a); }
HK_SHIM_H_UNARY1(hexp, __builtin_expf) HK_SHIM_H_UNARY1(hexp2, __builtin_exp2f)
HK_SHIM_H_UNARY1(hlog, __builtin_logf) HK_SHIM_H_UNARY1(hlog2, __builtin_log2f)
