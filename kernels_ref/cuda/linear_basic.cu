// Unquantized and AWQ-like linears.  CUDA twin of
// kernels_ref/linear_basic.py.
#include "common.cuh"
#include "gemm_tile.cuh"

// y[m,n] = sum_k x[m,k] * w[n,k] in fp32 -> out_dt (UnquantizedLinear: x @ W.T).
extern "C" __global__ void __launch_bounds__(GT_THREADS)
unquantized_linear(const void* x, i64 sxm, i64 sxk, const void* w, i64 swn, i64 swk, int dt,
                   void* out, int out_dt, int size_m, int size_n, int size_k) {
  StridedLoad A{x, sxm, sxk, dt};
  StridedLoad B{w, swk, swn, dt};  // B(k, n) = w[n, k]
  ScaledStore E{out, (i64)size_n, out_dt, nullptr, 0, nullptr, 0, nullptr};
  tile_gemm(A, B, E, size_m, size_n, size_k);
}

// Nibble of column n in an AWQ-packed int32 row [N/8]: nibble i of word j holds column
// 8j + [0,2,4,6,1,3,5,7][i].
__device__ __forceinline__ int awq_nibble(const u32* row, int n) {
  int o = n & 7;
  int i = (o & 1) ? 4 + (o >> 1) : (o >> 1);
  return (int)((row[n >> 3] >> (4 * i)) & 0xfu);
}

// round_act((q - z) * s): the product in fp32 (exact: 5 x 11 significant bits at
// most), one rounding to the scales' dtype.
struct AwqDequant {
  const u32* qweight;  // [K, N/8]
  const u32* qzeros;   // [K/G, N/8]
  const void* scales;  // [K/G, N]
  int size_n, group_size, dt;
  __device__ float operator()(int k, int n) const {
    int g = k / group_size;
    int q = awq_nibble(qweight + (i64)k * (size_n / 8), n);
    int z = awq_nibble(qzeros + (i64)g * (size_n / 8), n);
    float s = dl_load(scales, (i64)g * size_n + n, dt);
    return dl_round_to(__fmul_rn((float)(q - z), s), dt);
  }
};

extern "C" __global__ void awq_dequant(const u32* __restrict__ qweight, const u32* __restrict__ qzeros,
                                       const void* scales, void* out, int size_k, int size_n,
                                       int group_size, int dt) {
  i64 idx = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (i64)size_k * size_n) return;
  AwqDequant deq{qweight, qzeros, scales, size_n, group_size, dt};
  dl_store(out, idx, deq((int)(idx / size_n), (int)(idx % size_n)), dt);
}

// y[m,n] = x[m,:] @ deq[:,n] in fp32 -> the scales' dtype.
extern "C" __global__ void __launch_bounds__(GT_THREADS)
awq_gemm(const void* x, i64 sxm, i64 sxk, const u32* __restrict__ qweight,
         const u32* __restrict__ qzeros, const void* scales, void* out, int size_m, int size_n,
         int size_k, int group_size, int dt) {
  StridedLoad A{x, sxm, sxk, dt};
  AwqDequant B{qweight, qzeros, scales, size_n, group_size, dt};
  ScaledStore E{out, (i64)size_n, dt, nullptr, 0, nullptr, 0, nullptr};
  tile_gemm(A, B, E, size_m, size_n, size_k);
}
