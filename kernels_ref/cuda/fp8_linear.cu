// Native FP8 W8A8 linear: dynamic per-token activation
// quantization and the scaled fp8 GEMM.  CUDA twin of kernels_ref/fp8_linear.py.
#include "common.cuh"
#include "gemm_tile.cuh"

#define PT_THREADS 256

// One block per row, in fp32 as the reference does:
//   s = max(amax_row / 448, min_scale); inv = 1 / s; xq = fp8(clamp(x * inv, +-448)).
// min_scale comes from the host (formats.FP8_MIN_SCALE) so both sides use the same fp32.
extern "C" __global__ void __launch_bounds__(PT_THREADS)
fp8_quant_per_token(const void* x, i64 sxm, i64 sxk, int x_dt, u8* __restrict__ xq,
                    float* __restrict__ scale, int size_m, int size_k, float min_scale) {
  __shared__ float red[PT_THREADS];
  int m = blockIdx.x;
  if (m >= size_m) return;
  const i64 row = (i64)m * sxm;
  float amax = 0.0f;
  for (int k = threadIdx.x; k < size_k; k += PT_THREADS)
    amax = dl_fmaxf(amax, dl_fabsf(dl_load(x, row + (i64)k * sxk, x_dt)));
  red[threadIdx.x] = amax;
  __syncthreads();
  for (int s = PT_THREADS / 2; s > 0; s >>= 1) {  // max is exact in any order
    if (threadIdx.x < s) red[threadIdx.x] = dl_fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  float sc = dl_fmaxf(__fdiv_rn(red[0], FP8_MAX), min_scale);
  float inv = __fdiv_rn(1.0f, sc);
  for (int k = threadIdx.x; k < size_k; k += PT_THREADS) {
    float v = __fmul_rn(dl_load(x, row + (i64)k * sxk, x_dt), inv);
    v = v < -FP8_MAX ? -FP8_MAX : (v > FP8_MAX ? FP8_MAX : v);
    xq[(i64)m * size_k + k] = f32_to_e4m3(v);
  }
  if (threadIdx.x == 0) scale[m] = sc;
}

// y[m,n] = ((sum_k a[m,k] * b[k,n]) * scale_a[m]) * scale_b[n] -> out_dt.
// A scale with one element is passed with stride 0.
extern "C" __global__ void __launch_bounds__(GT_THREADS)
fp8_scaled_mm(const u8* a, i64 sam, i64 sak, const u8* b, i64 sbk, i64 sbn,
              const float* scale_a, i64 sa_stride, const float* scale_b, i64 sb_stride,
              void* out, int out_dt, int size_m, int size_n, int size_k) {
  StridedLoad A{a, sam, sak, DT_E4M3};
  StridedLoad B{b, sbk, sbn, DT_E4M3};
  ScaledStore E{out, (i64)size_n, out_dt, scale_a, sa_stride, scale_b, sb_stride, nullptr};
  tile_gemm(A, B, E, size_m, size_n, size_k);
}
