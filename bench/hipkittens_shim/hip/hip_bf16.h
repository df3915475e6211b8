// Minimal stand-in for ROCm's <hip/hip_bf16.h> (bench/build_calibration.py): a 2-byte bfloat16 holding its bits,
// conversions as ROCm's amd_hip_bf16.h defines them (float -> bf16 rounds to nearest even), and the packed
// pair. Arithmetic goes through float, as ROCm's does on targets without bf16 ALU instructions.
#pragma once
#include <stdint.h>
struct __attribute__((aligned(2))) __hip_bfloat16 {
    unsigned short data;
    __host__ __device__ inline operator float() const { return __builtin_bit_cast(float, (unsigned int)data << 16); }
};
struct __attribute__((aligned(4))) __hip_bfloat162 { __hip_bfloat16 x, y; };
__host__ __device__ inline float __bfloat162float(__hip_bfloat16 a) {
    return __builtin_bit_cast(float, (unsigned int)a.data << 16); }
__host__ __device__ inline __hip_bfloat16 __float2bfloat16(float f) {
    unsigned int u = __builtin_bit_cast(unsigned int, f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return __hip_bfloat16{(unsigned short)((u >> 16) | 0x40)};  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return __hip_bfloat16{(unsigned short)(u >> 16)};
}
__host__ __device__ inline __hip_bfloat16 __float2bf16_rn(float f) { return __float2bfloat16(f); }
__host__ __device__ inline unsigned short __bfloat16_as_ushort(__hip_bfloat16 a) { return a.data; }
__host__ __device__ inline float2 __bfloat1622float2(__hip_bfloat162 a) {
    return float2(__bfloat162float(a.x), __bfloat162float(a.y)); }
__host__ __device__ inline __hip_bfloat162 __float22bfloat162_rn(float2 a) {
    return __hip_bfloat162{__float2bfloat16(a.x), __float2bfloat16(a.y)}; }
#define HK_SHIM_BF_BINARY(name, expr) \
    __host__ __device__ inline __hip_bfloat16 name(__hip_bfloat16 a, __hip_bfloat16 b) { \
        float x = __bfloat162float(a), y = __bfloat162float(b); return __float2bfloat16(expr); } \
    __host__ __device__ inline __hip_bfloat162 name##2(__hip_bfloat162 a, __hip_bfloat162 b) { \
        return __hip_bfloat162{name(a.x, b.x), name(a.y, b.y)}; }
HK_SHIM_BF_BINARY(__hadd, x + y) HK_SHIM_BF_BINARY(__hsub, x - y) HK_SHIM_BF_BINARY(__hmul, x * y)
HK_SHIM_BF_BINARY(__hmax, x > y ? x : y) HK_SHIM_BF_BINARY(__hmin, x < y ? x : y)
__host__ __device__ inline __hip_bfloat16 __hdiv(__hip_bfloat16 a, __hip_bfloat16 b) {
    return __float2bfloat16(__bfloat162float(a) / __bfloat162float(b)); }
__host__ __device__ inline __hip_bfloat162 __h2div(__hip_bfloat162 a, __hip_bfloat162 b) {
    return __hip_bfloat162{__hdiv(a.x, b.x), __hdiv(a.y, b.y)}; }
__host__ __device__ inline __hip_bfloat16 __habs(__hip_bfloat16 a) { return __hip_bfloat16{(unsigned short)(a.data & 0x7fff)}; }
__host__ __device__ inline __hip_bfloat162 __habs2(__hip_bfloat162 a) { return __hip_bfloat162{__habs(a.x), __habs(a.y)}; }
#define HK_SHIM_BF_UNARY(name, fn) __device__ inline __hip_bfloat162 name(__hip_bfloat162 a) { \
    return __hip_bfloat162{__float2bfloat16(fn(__bfloat162float(a.x))), __float2bfloat16(fn(__bfloat162float(a.y)))}; }
HK_SHIM_BF_UNARY(h2exp, __builtin_expf) HK_SHIM_BF_UNARY(h2exp2, __builtin_exp2f)
HK_SHIM_BF_UNARY(h2log, __builtin_logf) HK_SHIM_BF_UNARY(h2log2, __builtin_log2f)
__host__ __device__ inline __hip_bfloat16 __ushort_as_bfloat16(unsigned short x) { return __hip_bfloat16{x}; }
#define HK_SHIM_BF_UNARY1(name, fn) __device__ inline __hip_bfloat16 name(__hip_bfloat16 a) { \
    return __float2bfloat16(fn(__bfloat162float(a))); }
HK_SHIM_BF_UNARY1(hexp, __builtin_expf) HK_SHIM_BF_UNARY1(hexp2, __builtin_exp2f)
HK_SHIM_BF_UNARY1(hlog, __builtin_logf) HK_SHIM_BF_UNARY1(hlog2, __builtin_log2f)
