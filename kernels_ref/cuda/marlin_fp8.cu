// Marlin W8A16 FP8: pack, repack, dequantize, GEMM.
//
// CUDA twin of kernels_ref/marlin_fp8.py.  The stored layout is Marlin's real one
// (gptq_marlin_repack.cu, 8-bit, is_a_8bit=False); the compute is a plain SIMT
// dequantize-then-multiply.  Host-side dtype and shape checks live in
// kernels_ref/build.py's wrappers, in the reference's order.
#include "common.cuh"
#include "gemm_tile.cuh"

// C[K,N] fp8 codes -> q[K/4,N]: little-endian byte j of word (i,n) is C[4i+j, n].
extern "C" __global__ void marlin_pack_fp8_to_int32(const u8* __restrict__ codes,
                                                    u32* __restrict__ q, int size_k, int size_n) {
  i64 idx = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  i64 total = (i64)(size_k / 4) * size_n;
  if (idx >= total) return;
  i64 i = idx / size_n, n = idx % size_n;
  u32 w = 0u;
  for (int j = 0; j < 4; ++j) w |= ((u32)codes[(4 * i + j) * size_n + n]) << (8 * j);
  q[idx] = w;
}

// The fp8 code of element (k,n) inside a Marlin-repacked int32[K/16, 4N] tensor:
//   kk=k%16; nn=n%64; w=nn/16; c=nn%16; half=c/8; t=4*(c%8)+(kk%8)/2; i=(kk%2)+2*(kk/8)
//   row=k/16; col=(n/64)*256+t*8+w*2+half; byte=[0,2,1,3][i]
__device__ __forceinline__ u32 marlin_code_at(const u32* __restrict__ bq, int k, int n, int size_n) {
  int kk = k & 15, nn = n & 63;
  int w = nn >> 4, c = nn & 15, half = c >> 3;
  int t = 4 * (c & 7) + ((kk & 7) >> 1);
  int i = (kk & 1) + 2 * (kk >> 3);
  int row = k >> 4;
  int col = (n >> 6) * 256 + t * 8 + w * 2 + half;
  int byte = (i == 0) ? 0 : (i == 1 ? 2 : (i == 2 ? 1 : 3));
  return (bq[(i64)row * (4 * (i64)size_n) + col] >> (8 * byte)) & 0xffu;
}

// q[K/4,N] -> int32[K/16,4N].  One thread per output word gathers its four bytes
// (the inverse of the formula above), so every word is written exactly once.
extern "C" __global__ void marlin_repack_fp8(const u32* __restrict__ q, u32* __restrict__ out,
                                             int size_k, int size_n) {
  i64 idx = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  i64 cols = 4 * (i64)size_n;
  i64 total = (i64)(size_k / 16) * cols;
  if (idx >= total) return;
  int row = (int)(idx / cols);
  int col = (int)(idx % cols);
  int nb = col / 256, r = col % 256;
  int t = r / 8, w = (r % 8) / 2, half = r % 2;
  u32 word = 0u;
  for (int byte = 0; byte < 4; ++byte) {
    int i = (byte == 0) ? 0 : (byte == 1 ? 2 : (byte == 2 ? 1 : 3));  // [0,2,1,3] is an involution
    int kk = 8 * (i / 2) + 2 * (t % 4) + (i % 2);
    int c = 8 * half + t / 4;
    int k = 16 * row + kk;
    int n = 64 * nb + 16 * w + c;
    u32 code = (q[(i64)(k / 4) * size_n + n] >> (8 * (k % 4))) & 0xffu;
    word |= code << (8 * byte);
  }
  out[idx] = word;
}

// Value of an fp8 code as Marlin's bit placement sees it, with the exponent bias put
// back: ((b&0x7F) placed into a 16-bit float) * 2^bias.  Equal to the e4m3 value for
// every finite code; 0x7F reads as 480, not NaN, exactly as the placement does.
__device__ __forceinline__ float marlin_fp8_value(u32 b) {
  u32 e = (b >> 3) & 0xfu, m = b & 0x7u;
  float mag = (e == 0u) ? (float)m * 0.001953125f : dl_u2f(((e + 120u) << 23) | (m << 20));
  return (b & 0x80u) ? -mag : mag;
}

// Scale of (group g, column n) from Marlin-permuted scales.  marlin_permute_scales
// gathers each run of L entries of the flat [G*N] array through scale_perm (L=64, a
// transposed 8x8) or scale_perm_single (L=32, G==1); this is the inverse gather.
__device__ __forceinline__ i64 marlin_scale_index(int g, int n, int size_n, int num_groups) {
  i64 flat = (i64)g * size_n + n;
  if (num_groups == 1) {
    i64 base = flat - (flat & 31);
    int x = (int)(flat & 31);
    return base + 8 * ((x & 7) >> 1) + 2 * (x >> 3) + (x & 1);
  }
  i64 base = flat - (flat & 63);
  int x = (int)(flat & 63);
  return base + 8 * (x & 7) + (x >> 3);
}

struct MarlinDequant {
  const u32* bq;
  const void* scales;
  int size_n, size_k, num_groups, dt;
  float inv_bias;  // 2^-8 (fp16) or 2^-120 (bf16)
  // placed_bits * fused_scale in fp32, rounded once to dt.  The reference multiplies
  // (fp8 * 2^-bias) by (s * 2^bias); here fp8 * s: the same exact product (<= 15
  // significant bits), without an fp32-subnormal intermediate for small codes.
  __device__ float operator()(int k, int n) const {
    int g = k / (size_k / num_groups);
    float s = __fmul_rn(dl_load(scales, marlin_scale_index(g, n, size_n, num_groups), dt), inv_bias);
    float v = __fmul_rn(marlin_fp8_value(marlin_code_at(bq, k, n, size_n)), s);
    return dl_round_to(v, dt);
  }
};

extern "C" __global__ void marlin_dequant_fp8(const u32* __restrict__ bq, const void* scales,
                                              void* out, int size_k, int size_n, int num_groups,
                                              int dt, float inv_bias) {
  i64 idx = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (i64)size_k * size_n) return;
  MarlinDequant deq{bq, scales, size_n, size_k, num_groups, dt, inv_bias};
  int k = (int)(idx / size_n), n = (int)(idx % size_n);
  dl_store(out, idx, deq(k, n), dt);
}

// c[M,N] = a[M,K] @ deq[K,N], fp32 accumulation, output in a's dtype.
extern "C" __global__ void __launch_bounds__(GT_THREADS)
marlin_gemm_fp8(const void* a, i64 sam, i64 sak, const u32* __restrict__ bq, const void* scales,
                void* c, int size_m, int size_n, int size_k, int num_groups, int dt, float inv_bias) {
  StridedLoad A{a, sam, sak, dt};
  MarlinDequant B{bq, scales, size_n, size_k, num_groups, dt, inv_bias};
  ScaledStore E{c, (i64)size_n, dt, nullptr, 0, nullptr, 0, nullptr};
  tile_gemm(A, B, E, size_m, size_n, size_k);
}
