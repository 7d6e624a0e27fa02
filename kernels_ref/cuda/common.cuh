// Shared helpers for the CUDA reference kernels.
//
// Every file under kernels_ref/cuda/ is plain CUDA C++ that both NVRTC (through
// kernels_ref/build.py, which splices this header in textually) and
// `nvcc -c -arch=sm_90` (the CI compile check) accept: no torch headers, no CUDA
// headers, no standard library.  16-bit and fp8 values travel as raw bits and are
// converted here with explicit round-to-nearest-even, so the results do not depend
// on which cuda_fp16.h / cuda_bf16.h / cuda_fp8.h an image ships.
//
// The conversion helpers are __host__ __device__ so that
// tests/kernels/test_cuda_compile.py can check them exhaustively against torch's
// own conversions on a machine without a GPU.
//
// Rules: no device asserts, no fast math, fp32
// accumulation in a fixed order, no atomics, launch shapes from problem shapes.
// build.py compiles with --fmad=false so that a*b+c is never contracted and the
// device rounds exactly as the host-side PyTorch reference does.
#pragma once

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

#define DL_HD __host__ __device__ __forceinline__

// Dtype codes shared with kernels_ref/build.py (DTYPE_CODES).
#define DT_F32 0
#define DT_F16 1
#define DT_BF16 2
#define DT_E4M3 3

#define FP8_MAX 448.0f

DL_HD u32 dl_f2u(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  u32 u;
  __builtin_memcpy(&u, &f, 4);
  return u;
#endif
}

DL_HD float dl_u2f(u32 u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
#endif
}

DL_HD float dl_inf() { return dl_u2f(0x7f800000u); }
DL_HD float dl_nan() { return dl_u2f(0x7fc00000u); }
DL_HD bool dl_isnan(float f) { return (dl_f2u(f) & 0x7fffffffu) > 0x7f800000u; }
DL_HD bool dl_isinf(float f) { return (dl_f2u(f) & 0x7fffffffu) == 0x7f800000u; }
DL_HD float dl_fmaxf(float a, float b) { return a > b ? a : b; }  // callers never pass NaN
DL_HD float dl_fabsf(float f) { return dl_u2f(dl_f2u(f) & 0x7fffffffu); }

// Round-half-to-even right shift of a significand, used for subnormal targets.
DL_HD u32 dl_shift_rne(u32 m, int s) {
  if (s <= 0) return m;
  if (s >= 32) return 0u;
  u32 r = m >> s;
  u32 rem = m & ((1u << s) - 1u);
  u32 half = 1u << (s - 1);
  if (rem > half || (rem == half && (r & 1u))) r += 1u;
  return r;
}

// ---- bfloat16 ---------------------------------------------------------------
DL_HD float bf16_to_f32(u16 h) { return dl_u2f(((u32)h) << 16); }

DL_HD u16 f32_to_bf16(float f) {
  u32 x = dl_f2u(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (u16)((x >> 16) | 0x0040u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return (u16)(x >> 16);
}

// ---- float16 ----------------------------------------------------------------
DL_HD float f16_to_f32(u16 h) {
  u32 sign = ((u32)(h & 0x8000u)) << 16;
  u32 e = (h >> 10) & 0x1fu;
  u32 m = h & 0x3ffu;
  if (e == 0x1fu) return dl_u2f(sign | 0x7f800000u | (m << 13));
  if (e == 0u) {
    // m * 2^-24: both factors exact, the product is a normal fp32.
    float v = (float)m * 5.9604644775390625e-08f;
    return dl_u2f(sign | dl_f2u(v));
  }
  return dl_u2f(sign | ((e + 112u) << 23) | (m << 13));
}

DL_HD u16 f32_to_f16(float f) {
  u32 x = dl_f2u(f);
  u32 sign = (x >> 16) & 0x8000u;
  u32 ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return (u16)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  if (ax >= 0x477ff000u) return (u16)(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (ax >= 0x38800000u) {                              // normal half (>= 2^-14)
    u32 r = ax + 0xfffu + ((ax >> 13) & 1u);
    return (u16)(sign | ((r >> 13) - (112u << 10)));
  }
  if (ax < 0x00800000u) return (u16)sign;  // fp32 subnormal or zero: far below 2^-25
  int e = (int)(ax >> 23) - 127;
  u32 m = (ax & 0x7fffffu) | 0x800000u;
  // value * 2^24 = m * 2^(e+1); e <= -15 here, so the shift is >= 14.
  return (u16)(sign | dl_shift_rne(m, -(e + 1)));
}

// ---- float8 e4m3fn ------------------------------------------------------------
DL_HD float e4m3_to_f32(u8 b) {
  u32 sign = ((u32)(b & 0x80u)) << 24;
  u32 e = (b >> 3) & 0xfu;
  u32 m = b & 0x7u;
  if (e == 0xfu && m == 0x7u) return dl_u2f(sign | 0x7fc00000u);
  if (e == 0u) {
    float v = (float)m * 0.001953125f;  // m * 2^-9, exact
    return dl_u2f(sign | dl_f2u(v));
  }
  return dl_u2f(sign | ((e + 120u) << 23) | (m << 20));
}

// Round to nearest even.  Callers clamp to +-448 first (spec section 1); a larger
// finite value saturates to 448, as the satfinite conversion on the GPU does.
DL_HD u8 f32_to_e4m3(float f) {
  u32 x = dl_f2u(f);
  u32 sign = (x >> 24) & 0x80u;
  u32 ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return (u8)(sign | 0x7fu);
  if (ax >= 0x43e00000u) return (u8)(sign | 0x7eu);  // >= 448
  if (ax >= 0x3c800000u) {                            // normal e4m3 (>= 2^-6)
    u32 r = ax + 0x7ffffu + ((ax >> 20) & 1u);
    return (u8)(sign | ((r >> 20) - (120u << 3)));
  }
  if (ax < 0x00800000u) return (u8)sign;
  int e = (int)(ax >> 23) - 127;
  u32 m = (ax & 0x7fffffu) | 0x800000u;
  // value * 2^9 = m * 2^(e-14); e <= -7 here, so the shift is >= 21.
  return (u8)(sign | dl_shift_rne(m, 14 - e));
}

// ---- e2m1 (NVFP4) ---------------------------------------------------------------
DL_HD float e2m1_to_f32(u32 nib) {
  u32 i = nib & 7u;
  float mag = i < 4u ? 0.5f * (float)i : (i == 4u ? 2.0f : (i == 5u ? 3.0f : (i == 6u ? 4.0f : 6.0f)));
  return (nib & 8u) ? -mag : mag;
}

// Thresholds of vLLM's cast_to_fp4 (nvfp4_emulation_utils.py); v is already clamped
// to +-6.  The sign bit is set iff v < 0.
DL_HD u32 f32_to_e2m1(float v) {
  float a = dl_fabsf(v);
  u32 i;
  if (a <= 0.25f) i = 0u;
  else if (a < 0.75f) i = 1u;
  else if (a <= 1.25f) i = 2u;
  else if (a < 1.75f) i = 3u;
  else if (a <= 2.5f) i = 4u;
  else if (a < 3.5f) i = 5u;
  else if (a <= 5.0f) i = 6u;
  else i = 7u;
  return (v < 0.0f ? 8u : 0u) | i;
}

// ---- dtype-generic loads and stores (dtype is a launch argument) ------------------
DL_HD float dl_load(const void* p, i64 idx, int dt) {
  if (dt == DT_BF16) return bf16_to_f32(((const u16*)p)[idx]);
  if (dt == DT_F16) return f16_to_f32(((const u16*)p)[idx]);
  if (dt == DT_E4M3) return e4m3_to_f32(((const u8*)p)[idx]);
  return ((const float*)p)[idx];
}

DL_HD void dl_store(void* p, i64 idx, float v, int dt) {
  if (dt == DT_BF16) ((u16*)p)[idx] = f32_to_bf16(v);
  else if (dt == DT_F16) ((u16*)p)[idx] = f32_to_f16(v);
  else if (dt == DT_E4M3) ((u8*)p)[idx] = f32_to_e4m3(v);
  else ((float*)p)[idx] = v;
}

// Round an fp32 value to dtype dt and back (the value a store then load would give).
DL_HD float dl_round_to(float v, int dt) {
  if (dt == DT_BF16) return bf16_to_f32(f32_to_bf16(v));
  if (dt == DT_F16) return f16_to_f32(f32_to_f16(v));
  if (dt == DT_E4M3) return e4m3_to_f32(f32_to_e4m3(v));
  return v;
}
