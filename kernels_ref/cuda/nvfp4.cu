// NVFP4 W4A4: block quantizer and the block-scaled GEMM.
// CUDA twin of kernels_ref/nvfp4.py (linear [rows, K/16] block-scale layout).
#include "common.cuh"
#include "gemm_tile.cuh"

#define NVFP4_BLOCK 16

// One thread per 16-element block of x[M,K] (row stride sxm, unit column stride), in
// fp32 and in the reference's order:
//   vmax = max|x|; sf = fp8(clamp(gs * (vmax * sixth), +-448))
//   osc = 0 if sf == 0 else 1 / (sf * (1 / gs)); v = clamp(x * osc, +-6) -> e2m1
// gs (the quantizer's global scale, vLLM's input_global_scale) is a device scalar;
// sixth is fp32(1/6) from the host.
extern "C" __global__ void nvfp4_quant(const void* x, i64 sxm, int x_dt, const float* gs_ptr,
                                       u8* __restrict__ packed, u8* __restrict__ sf_out,
                                       int size_m, int size_k, float sixth) {
  i64 idx = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  int blocks_per_row = size_k / NVFP4_BLOCK;
  if (idx >= (i64)size_m * blocks_per_row) return;
  int m = (int)(idx / blocks_per_row), blk = (int)(idx % blocks_per_row);
  const i64 base = (i64)m * sxm + (i64)blk * NVFP4_BLOCK;
  float v[NVFP4_BLOCK];
  float vmax = 0.0f;
#pragma unroll
  for (int j = 0; j < NVFP4_BLOCK; ++j) {
    v[j] = dl_load(x, base + j, x_dt);
    vmax = dl_fmaxf(vmax, dl_fabsf(v[j]));
  }
  const float gs = gs_ptr[0];
  float s = __fmul_rn(gs, __fmul_rn(vmax, sixth));
  s = s < -FP8_MAX ? -FP8_MAX : (s > FP8_MAX ? FP8_MAX : s);
  u8 sf = f32_to_e4m3(s);
  float sf32 = e4m3_to_f32(sf);
  float inv_gs = __fdiv_rn(1.0f, gs);
  float osc = (sf32 == 0.0f) ? 0.0f : __fdiv_rn(1.0f, __fmul_rn(sf32, inv_gs));
  u8* prow = packed + (i64)m * (size_k / 2) + (i64)blk * (NVFP4_BLOCK / 2);
#pragma unroll
  for (int j = 0; j < NVFP4_BLOCK; j += 2) {
    float a = __fmul_rn(v[j], osc), b = __fmul_rn(v[j + 1], osc);
    a = a < -6.0f ? -6.0f : (a > 6.0f ? 6.0f : a);
    b = b < -6.0f ? -6.0f : (b > 6.0f ? 6.0f : b);
    prow[j / 2] = (u8)(f32_to_e2m1(a) | (f32_to_e2m1(b) << 4));
  }
  sf_out[(i64)m * blocks_per_row + blk] = sf;
}

// Element (r, k) of a packed NVFP4 matrix [rows, K/2] with block scales [rows, K/16]:
// e2m1 * sf in fp32 (exact: at most 2 + 4 significant bits).
struct Nvfp4Load {
  const u8* packed;
  const u8* sf;
  int size_k;
  __device__ float at(int r, int k) const {
    u32 byte = packed[(i64)r * (size_k / 2) + k / 2];
    u32 nib = (k & 1) ? (byte >> 4) : (byte & 0xfu);
    return __fmul_rn(e2m1_to_f32(nib), e4m3_to_f32(sf[(i64)r * (size_k / NVFP4_BLOCK) + k / NVFP4_BLOCK]));
  }
};
struct Nvfp4RowLoad {  // A(m, k) from the activation
  Nvfp4Load L;
  __device__ float operator()(int m, int k) const { return L.at(m, k); }
};
struct Nvfp4ColLoad {  // B(k, n) from the weight [N, K/2]
  Nvfp4Load L;
  __device__ float operator()(int k, int n) const { return L.at(n, k); }
};

// y[m,n] = (sum_k xd[m,k] * wd[n,k]) * alpha -> out_dt.
extern "C" __global__ void __launch_bounds__(GT_THREADS)
nvfp4_mm(const u8* aq, const u8* a_sf, const u8* wq, const u8* w_sf, const float* alpha,
         void* out, int out_dt, int size_m, int size_n, int size_k) {
  Nvfp4RowLoad A{{aq, a_sf, size_k}};
  Nvfp4ColLoad B{{wq, w_sf, size_k}};
  ScaledStore E{out, (i64)size_n, out_dt, nullptr, 0, nullptr, 0, alpha};
  tile_gemm(A, B, E, size_m, size_n, size_k);
}
