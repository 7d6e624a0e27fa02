// MLA prefill attention with LSE, empty-context masking and attention-state merging.
// CUDA twin of kernels_ref/attention.py.
#include "common.cuh"

#define ATT_BQ 32       // query rows per block (one request, one head)
#define ATT_BK 32       // keys per tile
#define ATT_DC 64       // head-dim chunk for the q.k products
#define ATT_MAX_DV 256  // largest v head dim (host-checked)
#define ATT_THREADS 256

// Varlen attention over a tile table built on the host: tile i covers query rows
// [tiles[2i+1], min(tiles[2i+1] + 32, cu_q[b+1])) of request b = tiles[2i]; grid (tiles, H).
//
// Per row, in fp32: s_j = (q . k_j) * scale with the dot product summed over d in
// order; keys are visited in tiles of 32 with an online softmax (running max m, sum l,
// rescale of the output accumulator by exp(m_old - m_new)), all in a fixed order, so
// results are bit-reproducible.  out = acc / l -> out_dt, lse = m + log(l).
// causal: bottom-right aligned, row i of a request (Tq rows, Sk keys) sees j <= i + Sk - Tq.
// A row that sees no key is "empty": empty_nan=1 (FA2) writes NaN and LSE +inf,
// empty_nan=0 (FA3) writes 0 and LSE -inf.
extern "C" __global__ void __launch_bounds__(ATT_THREADS)
mla_prefill_attention_fwd(const void* q, i64 sqt, i64 sqh, const void* k, i64 skt, i64 skh,
                          const void* v, i64 svt, i64 svh, int in_dt, void* out, int out_dt,
                          float* __restrict__ lse, const int* __restrict__ tiles,
                          const i64* __restrict__ cu_q, const i64* __restrict__ cu_k,
                          int num_tokens, int num_heads, int d_qk, int d_v, float softmax_scale,
                          int causal, int empty_nan) {
  // buf holds the q and k chunks while scoring, then the v tile.
  __shared__ float buf[ATT_BK * ATT_MAX_DV];
  __shared__ float Ps[ATT_BQ][ATT_BK + 1];
  __shared__ float row_alpha[ATT_BQ];
  float (*Qs)[ATT_DC + 1] = reinterpret_cast<float (*)[ATT_DC + 1]>(buf);
  float (*Ks)[ATT_DC + 1] = reinterpret_cast<float (*)[ATT_DC + 1]>(buf + ATT_BQ * (ATT_DC + 1));
  float* Vs = buf;

  const int tid = threadIdx.x;
  const int tx = tid % 16;  // keys tx, tx+16 when scoring; columns tx + 16c when accumulating
  const int ty = tid / 16;  // rows 2ty, 2ty+1
  const int h = blockIdx.y;
  const int b = tiles[2 * blockIdx.x];
  const int q0 = tiles[2 * blockIdx.x + 1];
  const i64 qs = cu_q[b], qe = cu_q[b + 1], ks = cu_k[b], ke = cu_k[b + 1];
  const int tq = (int)(qe - qs), sk = (int)(ke - ks);
  const int nrows = (int)((qe - q0) < ATT_BQ ? (qe - q0) : ATT_BQ);

  // Number of keys each of my two rows may see.
  int lim[2];
  int lim_max = 0;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    int row = 2 * ty + r;
    int ir = q0 - (int)qs + row;  // index within the request
    int l = sk;
    if (causal) {
      int c = ir + sk - tq + 1;
      l = c < 0 ? 0 : (c < sk ? c : sk);
    }
    lim[r] = row < nrows ? l : 0;
  }
  // The block visits keys up to the largest limit of any row (same for all threads).
  {
    int last_row = nrows - 1;
    int ir = q0 - (int)qs + last_row;
    lim_max = sk;
    if (causal) {
      int c = ir + sk - tq + 1;
      lim_max = c < 0 ? 0 : (c < sk ? c : sk);
    }
  }

  const float NEG_INF = -dl_inf();
  float m_run[2] = {NEG_INF, NEG_INF};
  float l_run[2] = {0.0f, 0.0f};
  const int ncol = (d_v + 15) / 16;  // <= 16
  float acc[2][16];
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int c = 0; c < 16; ++c) acc[r][c] = 0.0f;

  for (int j0 = 0; j0 < lim_max; j0 += ATT_BK) {
    // ---- scores for 32 rows x 32 keys, d in chunks of 64, summed in order
    float s[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
    for (int d0 = 0; d0 < d_qk; d0 += ATT_DC) {
      for (int e = tid; e < ATT_BQ * ATT_DC; e += ATT_THREADS) {
        int r = e / ATT_DC, d = e % ATT_DC;
        float qv = 0.0f, kv = 0.0f;
        if (r < nrows && d0 + d < d_qk)
          qv = dl_load(q, (i64)(q0 + r) * sqt + (i64)h * sqh + d0 + d, in_dt);
        if (j0 + r < sk && d0 + d < d_qk)
          kv = dl_load(k, (ks + j0 + r) * skt + (i64)h * skh + d0 + d, in_dt);
        Qs[r][d] = qv;
        Ks[r][d] = kv;
      }
      __syncthreads();
      int dn = d_qk - d0 < ATT_DC ? d_qk - d0 : ATT_DC;
      for (int d = 0; d < dn; ++d) {
        float a0 = Qs[2 * ty][d], a1 = Qs[2 * ty + 1][d];
        float b0 = Ks[tx][d], b1 = Ks[tx + 16][d];
        s[0][0] = __fmaf_rn(a0, b0, s[0][0]);
        s[0][1] = __fmaf_rn(a0, b1, s[0][1]);
        s[1][0] = __fmaf_rn(a1, b0, s[1][0]);
        s[1][1] = __fmaf_rn(a1, b1, s[1][1]);
      }
      __syncthreads();
    }
    // ---- online softmax update, per row; a row lives on the 16 lanes sharing ty
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float x0 = (j0 + tx < lim[r]) ? __fmul_rn(s[r][0], softmax_scale) : NEG_INF;
      float x1 = (j0 + tx + 16 < lim[r]) ? __fmul_rn(s[r][1], softmax_scale) : NEG_INF;
      float tmax = dl_fmaxf(x0, x1);
#pragma unroll
      for (int off = 8; off > 0; off >>= 1) tmax = dl_fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, off));
      float m_new = dl_fmaxf(m_run[r], tmax);
      float p0 = 0.0f, p1 = 0.0f, alpha = 1.0f;
      if (m_new != NEG_INF) {
        p0 = expf(x0 - m_new);
        p1 = expf(x1 - m_new);
        alpha = expf(m_run[r] - m_new);  // 0 when nothing was seen yet
      }
      float psum = __fadd_rn(p0, p1);
#pragma unroll
      for (int off = 8; off > 0; off >>= 1) psum = __fadd_rn(psum, __shfl_xor_sync(0xffffffffu, psum, off));
      l_run[r] = __fadd_rn(__fmul_rn(l_run[r], alpha), psum);
      m_run[r] = m_new;
      Ps[2 * ty + r][tx] = p0;
      Ps[2 * ty + r][tx + 16] = p1;
      if (tx == 0) row_alpha[2 * ty + r] = alpha;
    }
    // ---- v tile [32][d_v] as fp32
    for (int e = tid; e < ATT_BK * d_v; e += ATT_THREADS) {
      int j = e / d_v, d = e % d_v;
      Vs[e] = (j0 + j < sk) ? dl_load(v, (ks + j0 + j) * svt + (i64)h * svh + d, in_dt) : 0.0f;
    }
    __syncthreads();
    int nk = lim_max - j0 < ATT_BK ? lim_max - j0 : ATT_BK;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float al = row_alpha[2 * ty + r];
#pragma unroll
      for (int c = 0; c < 16; ++c) {
        if (c >= ncol) break;
        int col = tx + 16 * c;
        if (col >= d_v) break;
        float a = __fmul_rn(acc[r][c], al);
        for (int j = 0; j < nk; ++j) a = __fmaf_rn(Ps[2 * ty + r][j], Vs[j * d_v + col], a);
        acc[r][c] = a;
      }
    }
    __syncthreads();
  }

  // ---- epilogue
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    int row = 2 * ty + r;
    if (row >= nrows) continue;
    i64 t = q0 + row;
    bool empty = (m_run[r] == NEG_INF);
    float empty_out = empty_nan ? dl_nan() : 0.0f;
#pragma unroll
    for (int c = 0; c < 16; ++c) {
      int col = tx + 16 * c;
      if (c >= ncol || col >= d_v) break;
      float o = empty ? empty_out : __fdiv_rn(acc[r][c], l_run[r]);
      dl_store(out, (t * num_heads + h) * d_v + col, o, out_dt);
    }
    if (tx == 0)
      lse[(i64)h * num_tokens + t] = empty ? (empty_nan ? dl_inf() : NEG_INF) : __fadd_rn(m_run[r], logf(l_run[r]));
  }
}

// In place: for each request r whose context span is empty (cu_ctx[r] == cu_ctx[r+1]),
// output[t] = 0 and lse[:, t] = -inf for its query tokens t in [cu_q[r], cu_q[r+1]).
// One block per token; the request is found by binary search over cu_q.
extern "C" __global__ void mask_empty_context(float* lse, i64 slh, i64 slt, int lse_heads, int lse_tokens,
                                              void* output, i64 so0, i64 so1, i64 so2, int out_dt,
                                              int out_tokens, int out_heads, int out_dim,
                                              const i64* __restrict__ cu_q, const i64* __restrict__ cu_ctx,
                                              int num_reqs) {
  const int t = blockIdx.x;
  // Largest r with cu_q[r] <= t (zero-length requests are skipped over that way).
  int lo = 0, hi = num_reqs;  // search in [0, num_reqs]
  if (num_reqs <= 0 || cu_q[0] > t) return;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (cu_q[mid] <= t) lo = mid; else hi = mid - 1;
  }
  const int r = lo;
  if (r >= num_reqs || t >= cu_q[r + 1] || cu_ctx[r] != cu_ctx[r + 1]) return;
  if (t < out_tokens) {
    for (int e = threadIdx.x; e < out_heads * out_dim; e += blockDim.x) {
      int hh = e / out_dim, d = e % out_dim;
      dl_store(output, (i64)t * so0 + (i64)hh * so1 + (i64)d * so2, 0.0f, out_dt);
    }
  }
  if (t < lse_tokens)
    for (int hh = threadIdx.x; hh < lse_heads; hh += blockDim.x) lse[(i64)hh * slh + (i64)t * slt] = -dl_inf();
}

// merge_attn_states_kernel: grid (tokens, heads), threads over the head dim.
// t >= ptwc copies the suffix; otherwise, in fp32: +inf LSEs read as -inf, m = max,
// ep = exp(p - m), es = exp(s - m), sum = ep + es,
// out = p_out * (ep / sum) + s_out * (es / sum), lse = log(sum) + m; m == -inf gives
// out 0 and lse -inf.  Every thread reads both LSEs before any writes, so output_lse
// may alias an input LSE.
extern "C" __global__ void merge_attn_states(void* output, i64 so0, i64 so1, int out_dt,
                                             const void* p_out, i64 sp0, i64 sp1, int p_dt,
                                             const void* s_out, i64 ss0, i64 ss1, int s_dt,
                                             const float* p_lse, i64 spl0, i64 spl1,
                                             const float* s_lse, i64 ssl0, i64 ssl1,
                                             float* out_lse, i64 sol0, i64 sol1,
                                             int head_dim, int ptwc) {
  const int t = blockIdx.x, h = blockIdx.y;
  const float INF = dl_inf();
  float pl = p_lse[(i64)h * spl0 + (i64)t * spl1];
  float sl = s_lse[(i64)h * ssl0 + (i64)t * ssl1];
  __syncthreads();
  const i64 o_base = (i64)t * so0 + (i64)h * so1;
  const i64 p_base = (i64)t * sp0 + (i64)h * sp1;
  const i64 s_base = (i64)t * ss0 + (i64)h * ss1;
  if (t >= ptwc) {
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x)
      dl_store(output, o_base + d, dl_load(s_out, s_base + d, s_dt), out_dt);
    if (out_lse && threadIdx.x == 0) out_lse[(i64)h * sol0 + (i64)t * sol1] = sl;
    return;
  }
  if (pl == INF) pl = -INF;
  if (sl == INF) sl = -INF;
  float m = dl_fmaxf(pl, sl);
  bool both_empty = (m == -INF);
  float ep = expf(__fsub_rn(pl, m));
  float es = expf(__fsub_rn(sl, m));
  float sum = __fadd_rn(ep, es);
  float ps = __fdiv_rn(ep, sum), ss = __fdiv_rn(es, sum);
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float o = both_empty ? 0.0f
                         : __fadd_rn(__fmul_rn(dl_load(p_out, p_base + d, p_dt), ps),
                                     __fmul_rn(dl_load(s_out, s_base + d, s_dt), ss));
    dl_store(output, o_base + d, o, out_dt);
  }
  if (out_lse && threadIdx.x == 0)
    out_lse[(i64)h * sol0 + (i64)t * sol1] = both_empty ? -INF : __fadd_rn(logf(sum), m);
}
