// One SIMT tile GEMM shared by every linear kernel (Marlin, FP8, NVFP4, AWQ,
// unquantized).  The quantization formats differ only in how an element of A or B
// is decoded, so each kernel passes small loader functors and an epilogue.
//
// Reproducibility: each output is one thread's fp32
// sum over k = 0, 1, ..., K-1 in that order (explicit fused multiply-adds, which
// --fmad=false leaves alone), no split-K and no atomics.  The grid is
// (ceil(N/128), ceil(M/128)) and nothing else.  Decoders round exactly like the
// PyTorch reference, so only the summation differs from it (section 5 bounds).
#pragma once
#include "common.cuh"

#define GT_BM 128
#define GT_BN 128
#define GT_BK 8
#define GT_THREADS 256

// C(m, n) = epi(m, n, sum_k A(m, k) * B(k, n)).
// ALoad: float operator()(int m, int k) const; BLoad: float operator()(int k, int n) const;
// Epi: void operator()(int m, int n, float acc) const.
// Thread (tx, ty) owns rows ty + 16*i and columns tx + 16*j, i, j < 8, so that the
// shared-memory reads of a half-warp hit 16 consecutive words.
template <class ALoad, class BLoad, class Epi>
__device__ __forceinline__ void tile_gemm(const ALoad& A, const BLoad& B, const Epi& epi,
                                          int M, int N, int K) {
  __shared__ float As[GT_BK][GT_BM + 4];
  __shared__ float Bs[GT_BK][GT_BN + 4];
  const int tid = threadIdx.x;
  const int tx = tid % 16;
  const int ty = tid / 16;
  const int m0 = blockIdx.y * GT_BM;
  const int n0 = blockIdx.x * GT_BN;

  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

  for (int k0 = 0; k0 < K; k0 += GT_BK) {
    // 128x8 A tile and 8x128 B tile, 4 elements of each per thread.
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      int e = tid + r * GT_THREADS;  // 0..1023
      int am = e / GT_BK, ak = e % GT_BK;
      int gm = m0 + am, gk = k0 + ak;
      As[ak][am] = (gm < M && gk < K) ? A(gm, gk) : 0.0f;
      int bk = e / GT_BN, bn = e % GT_BN;
      int gk2 = k0 + bk, gn = n0 + bn;
      Bs[bk][bn] = (gk2 < K && gn < N) ? B(gk2, gn) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < GT_BK; ++kk) {
      float a[8], b[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) a[i] = As[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 8; ++j) b[j] = Bs[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = __fmaf_rn(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < 8; ++i) {
    int gm = m0 + ty + 16 * i;
    if (gm >= M) continue;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      int gn = n0 + tx + 16 * j;
      if (gn < N) epi(gm, gn, acc[i][j]);
    }
  }
}

// A strided tensor of any supported dtype, read as fp32.
struct StridedLoad {
  const void* p;
  i64 s0, s1;
  int dt;
  __device__ float operator()(int i, int j) const { return dl_load(p, (i64)i * s0 + (i64)j * s1, dt); }
};

// Store acc as dtype dt, after multiplying, left to right and each product rounded to
// fp32, by an optional per-row scale, an optional per-column scale and an optional alpha.
struct ScaledStore {
  void* out;
  i64 ldo;
  int dt;
  const float* row_scale;  // nullptr: none
  i64 row_scale_stride;
  const float* col_scale;  // nullptr: none
  i64 col_scale_stride;
  const float* alpha;  // nullptr: none (a device scalar, e.g. NVFP4's alpha)
  // Not inlined: the epilogue runs 64 times per thread, once, and inlining the dtype switch
  // into the unrolled loop multiplies code size and compile time for no speed.
  __device__ __noinline__ void operator()(int m, int n, float acc) const {
    float v = acc;
    if (row_scale) v = __fmul_rn(v, row_scale[(i64)m * row_scale_stride]);
    if (col_scale) v = __fmul_rn(v, col_scale[(i64)n * col_scale_stride]);
    if (alpha) v = __fmul_rn(v, alpha[0]);
    dl_store(out, (i64)m * ldo + n, v, dt);
  }
};
