// Minimal stand-in for ROCm's <hip/hip_runtime.h>: just what HipKittens' device code uses, so that clang can
// compile it without a ROCm install (bench/build_calibration.py). Device-side semantics follow HIP's
// amd_detail headers; host-side entries are declarations only (the build is --cuda-device-only).
#pragma once
#include <stddef.h>
#include <stdint.h>

// HIP's host_defines.h: __launch_bounds__(threads, min_blocks) -> these two attributes (min_blocks is
// passed to amdgpu_waves_per_eu as HIP does).
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds_impl0__(t) __attribute__((amdgpu_flat_work_group_size(1, t)))
#define __launch_bounds_impl1__(t, b) __attribute__((amdgpu_flat_work_group_size(1, t), amdgpu_waves_per_eu(b)))
#define __launch_bounds_select__(_1, _2, name, ...) name
#define __launch_bounds__(...) __launch_bounds_select__(__VA_ARGS__, __launch_bounds_impl1__, __launch_bounds_impl0__, )(__VA_ARGS__)

// Vector types as HIP's amd_hip_vector_types.h lays them out: HIP_vector_type<T, N> is a clang vector (so it
// lives in consecutive registers) with .x/.y/.z/.w members, brace / constructor initialisation and element-wise
// arithmetic.
template <typename T, unsigned N> struct HIP_vector_type;
#define HK_SHIM_VEC(N, ...) \
template <typename T> struct HIP_vector_type<T, N> { \
    typedef T Native_vec_ __attribute__((ext_vector_type(N))); \
    union { Native_vec_ data; struct { T __VA_ARGS__; }; }; \
    __host__ __device__ constexpr HIP_vector_type() : data{} {} \
    __host__ __device__ constexpr HIP_vector_type(Native_vec_ v) : data(v) {} \
    template <typename... U> requires (sizeof...(U) == N && N > 1) \
    __host__ __device__ constexpr HIP_vector_type(U... v) : data{static_cast<T>(v)...} {} \
    __host__ __device__ constexpr explicit HIP_vector_type(T v) requires (N > 1) : data(v) {} \
    __host__ __device__ constexpr HIP_vector_type(T v) requires (N == 1) : data(v) {} \
};
HK_SHIM_VEC(1, x)
HK_SHIM_VEC(2, x, y)
HK_SHIM_VEC(3, x, y, z)
HK_SHIM_VEC(4, x, y, z, w)
#undef HK_SHIM_VEC
#define HK_SHIM_VOP(op) template <typename T, unsigned N> __host__ __device__ inline HIP_vector_type<T, N> \
    operator op(HIP_vector_type<T, N> a, HIP_vector_type<T, N> b) { return HIP_vector_type<T, N>(a.data op b.data); } \
    template <typename T, unsigned N> __host__ __device__ inline HIP_vector_type<T, N> &\
    operator op##=(HIP_vector_type<T, N> &a, HIP_vector_type<T, N> b) { a.data = a.data op b.data; return a; }
HK_SHIM_VOP(+) HK_SHIM_VOP(-) HK_SHIM_VOP(*) HK_SHIM_VOP(/)
#undef HK_SHIM_VOP
#define HK_SHIM_VNAMES(T, name) typedef HIP_vector_type<T, 1> name##1; typedef HIP_vector_type<T, 2> name##2; \
    typedef HIP_vector_type<T, 3> name##3; typedef HIP_vector_type<T, 4> name##4;
HK_SHIM_VNAMES(float, float) HK_SHIM_VNAMES(int, int) HK_SHIM_VNAMES(unsigned int, uint) HK_SHIM_VNAMES(double, double)
HK_SHIM_VNAMES(unsigned short, ushort) HK_SHIM_VNAMES(short, short) HK_SHIM_VNAMES(unsigned char, uchar)
HK_SHIM_VNAMES(long long, longlong) HK_SHIM_VNAMES(unsigned long long, ulonglong)
#undef HK_SHIM_VNAMES
__host__ __device__ constexpr inline float2 make_float2(float a, float b) { return float2(a, b); }
__host__ __device__ constexpr inline float4 make_float4(float a, float b, float c, float d) { return float4(a, b, c, d); }
__host__ __device__ constexpr inline int4 make_int4(int a, int b, int c, int d) { return int4(a, b, c, d); }
__host__ __device__ constexpr inline uint2 make_uint2(unsigned a, unsigned b) { return uint2(a, b); }
__host__ __device__ constexpr inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return uint4(a, b, c, d); }
__host__ __device__ inline float __uint_as_float(unsigned int x) { return __builtin_bit_cast(float, x); }
__host__ __device__ inline unsigned int __float_as_uint(float x) { return __builtin_bit_cast(unsigned int, x); }
__host__ __device__ inline float __int_as_float(int x) { return __builtin_bit_cast(float, x); }
__host__ __device__ inline int __float_as_int(float x) { return __builtin_bit_cast(int, x); }

struct dim3 {
    unsigned int x, y, z;
    __host__ __device__ constexpr dim3(unsigned int a = 1, unsigned int b = 1, unsigned int c = 1) : x(a), y(b), z(c) {}
};

// Work-item ids as HIP's amd_hip_runtime.h reads them (__ockl_get_* reduce to these builtins).
struct __hk_thread_idx {
    __device__ unsigned int __get_x() const { return __builtin_amdgcn_workitem_id_x(); }
    __device__ unsigned int __get_y() const { return __builtin_amdgcn_workitem_id_y(); }
    __device__ unsigned int __get_z() const { return __builtin_amdgcn_workitem_id_z(); }
    __declspec(property(get = __get_x)) unsigned int x;
    __declspec(property(get = __get_y)) unsigned int y;
    __declspec(property(get = __get_z)) unsigned int z;
};
struct __hk_block_idx {
    __device__ unsigned int __get_x() const { return __builtin_amdgcn_workgroup_id_x(); }
    __device__ unsigned int __get_y() const { return __builtin_amdgcn_workgroup_id_y(); }
    __device__ unsigned int __get_z() const { return __builtin_amdgcn_workgroup_id_z(); }
    __declspec(property(get = __get_x)) unsigned int x;
    __declspec(property(get = __get_y)) unsigned int y;
    __declspec(property(get = __get_z)) unsigned int z;
};
// Workgroup size and grid size in workgroups as ROCm's device library (ockl, code object v5) reads them: from
// the hidden kernel arguments hidden_block_count_* (u32 at 0, 4, 8), hidden_group_size_* (u16 at 12, 14, 16)
// and hidden_remainder_* (u16 at 18, 20, 22).
__device__ inline unsigned int __hk_hidden_u32(int i) {
    return reinterpret_cast<const unsigned int *>(__builtin_amdgcn_implicitarg_ptr())[i]; }
__device__ inline unsigned int __hk_hidden_u16(int i) {
    return reinterpret_cast<const unsigned short *>(__builtin_amdgcn_implicitarg_ptr())[i]; }
__device__ inline unsigned int __hk_group_id(int dim) {
    return dim == 0 ? __builtin_amdgcn_workgroup_id_x() : dim == 1 ? __builtin_amdgcn_workgroup_id_y()
                                                                   : __builtin_amdgcn_workgroup_id_z(); }
__device__ inline unsigned int __ockl_get_local_size(int dim) {
    return __hk_group_id(dim) < __hk_hidden_u32(dim) ? __hk_hidden_u16(6 + dim) : __hk_hidden_u16(9 + dim); }
__device__ inline unsigned int __ockl_get_num_groups(int dim) {
    return __hk_hidden_u32(dim) + (__hk_hidden_u16(9 + dim) != 0); }
struct __hk_block_dim {
    __device__ unsigned int __get_x() const { return __ockl_get_local_size(0); }
    __device__ unsigned int __get_y() const { return __ockl_get_local_size(1); }
    __device__ unsigned int __get_z() const { return __ockl_get_local_size(2); }
    __declspec(property(get = __get_x)) unsigned int x;
    __declspec(property(get = __get_y)) unsigned int y;
    __declspec(property(get = __get_z)) unsigned int z;
};
struct __hk_grid_dim {
    __device__ unsigned int __get_x() const { return __ockl_get_num_groups(0); }
    __device__ unsigned int __get_y() const { return __ockl_get_num_groups(1); }
    __device__ unsigned int __get_z() const { return __ockl_get_num_groups(2); }
    __declspec(property(get = __get_x)) unsigned int x;
    __declspec(property(get = __get_y)) unsigned int y;
    __declspec(property(get = __get_z)) unsigned int z;
};
extern const __device__ __attribute__((weak)) __hk_thread_idx threadIdx;
extern const __device__ __attribute__((weak)) __hk_block_idx blockIdx;
extern const __device__ __attribute__((weak)) __hk_block_dim blockDim;
extern const __device__ __attribute__((weak)) __hk_grid_dim gridDim;
#define warpSize 64

__device__ inline void __syncthreads() {
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
    __builtin_amdgcn_s_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
__device__ inline void __threadfence_block() { __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "workgroup"); }

// Lane exchanges as HIP's amd_warp_functions.h does them: ds_bpermute on byte addresses.
__device__ inline int __lane_id() { return __builtin_amdgcn_mbcnt_hi(-1, __builtin_amdgcn_mbcnt_lo(-1, 0)); }
__device__ inline int __shfl(int var, int src, int width = warpSize) {
    int self = __lane_id();
    int index = src + (self & ~(width - 1));
    return __builtin_amdgcn_ds_bpermute(index << 2, var);
}
__device__ inline unsigned int __shfl(unsigned int var, int src, int width = warpSize) {
    return (unsigned int)__shfl((int)var, src, width); }
__device__ inline float __shfl(float var, int src, int width = warpSize) {
    return __builtin_bit_cast(float, __shfl(__builtin_bit_cast(int, var), src, width)); }
__device__ inline int __shfl_down(int var, unsigned int delta, int width = warpSize) {
    int self = __lane_id();
    int index = self + delta;
    index = (int)((self & (width - 1)) + delta) >= width ? self : index;
    return __builtin_amdgcn_ds_bpermute(index << 2, var);
}
__device__ inline unsigned int __shfl_down(unsigned int var, unsigned int delta, int width = warpSize) {
    return (unsigned int)__shfl_down((int)var, delta, width); }
__device__ inline float __shfl_down(float var, unsigned int delta, int width = warpSize) {
    return __builtin_bit_cast(float, __shfl_down(__builtin_bit_cast(int, var), delta, width)); }
template <typename MaskT, typename T>
__device__ inline T __shfl_down_sync(MaskT mask, T var, unsigned int delta, int width = warpSize) {
    return __shfl_down(var, delta, width); }

// Wave votes as ockl's __ockl_wfall_i32 / wfany_i32 do them.
__device__ inline int __all(int p) { return __builtin_amdgcn_ballot_w64(p != 0) == __builtin_amdgcn_read_exec(); }
__device__ inline int __any(int p) { return __builtin_amdgcn_ballot_w64(p != 0) != 0; }
__device__ inline unsigned long long __ballot(int p) { return __builtin_amdgcn_ballot_w64(p != 0); }

// Host API: declarations only (never called in a device-only build).
typedef struct ihipStream_t *hipStream_t;
typedef enum hipError_t { hipSuccess = 0 } hipError_t;
typedef enum hipFuncAttribute { hipFuncAttributeMaxDynamicSharedMemorySize = 8 } hipFuncAttribute;
typedef struct ihipEvent_t *hipEvent_t;
typedef enum hipMemcpyKind { hipMemcpyHostToHost, hipMemcpyHostToDevice, hipMemcpyDeviceToHost,
                             hipMemcpyDeviceToDevice, hipMemcpyDefault } hipMemcpyKind;
hipError_t hipFuncSetAttribute(const void *func, hipFuncAttribute attr, int value);
const char *hipGetErrorString(hipError_t error);
hipError_t hipMalloc(void **ptr, size_t size);
template <typename T> hipError_t hipMalloc(T **ptr, size_t size) { return hipMalloc((void **)ptr, size); }
hipError_t hipFree(void *ptr);
hipError_t hipMemset(void *dst, int value, size_t size);
hipError_t hipMemcpy(void *dst, const void *src, size_t size, hipMemcpyKind kind);
hipError_t hipDeviceSynchronize();
hipError_t hipGetLastError();
hipError_t hipEventCreate(hipEvent_t *event);
hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream = 0);
hipError_t hipEventSynchronize(hipEvent_t event);
hipError_t hipEventElapsedTime(float *ms, hipEvent_t start, hipEvent_t stop);
hipError_t hipEventDestroy(hipEvent_t event);

#include "hip_bf16.h"
#include "hip_fp16.h"
#include "hip_fp8.h"
// Kernel launch syntax (<<<>>>) in host code that a device-only build still parses.
extern "C" hipError_t __hipPushCallConfiguration(dim3 grid, dim3 block, size_t shared = 0, hipStream_t stream = 0);
extern "C" hipError_t __hipPopCallConfiguration(dim3 *grid, dim3 *block, size_t *shared, hipStream_t *stream);
