#pragma once
// A standard normal from Philox that is bitwise the same on the host and on the GPU.
//
// philox_normal (core/philox.h) calls libm's log and cos, whose last bit differs between glibc and CUDA's
// math library, so a value computed on the GPU may be one f32 ulp off the host's. Values that choose
// something (forced MoE balancing's random router logits pick experts) must agree exactly between the CPU
// reference and the GPU. portable_normal is Box-Muller on the same two 32-bit Philox draws as philox_normal,
// with ln and cos evaluated by fixed polynomials in IEEE double using only correctly rounded operations
// (+ - * / sqrt, fma) and the exact frexp. Every product that meets a sum is an explicit fma; the remaining
// products (one of them exact) feed only multiplications, a sqrt or an fma's multiplicand, so no
// multiply-then-add is left for a compiler to contract (nvcc contracts by default, and --use_fast_math
// keeps it so). The double result is within ~1e-15 (relative) of the exact Box-Muller value before its
// rounding to f32, and it is the same double on both devices, hence the same f32.
#include <cmath>
#include <cstdint>

#include "core/philox.h"

namespace primus {
namespace portable_math {

PRIMUS_HD double fma_rn(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
  return __fma_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

PRIMUS_HD double mul_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

PRIMUS_HD double div_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}

PRIMUS_HD double sqrt_rn(double a) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

// ln(v / 2^32) for an integer v in [1, 2^32]: v = f 2^e with f in [sqrt(1/2), sqrt(2)) (exact), then
// ln f = 2 atanh(z) = 2 z sum_i z^(2i) / (2i + 1), z = (f - 1) / (f + 1), |z| <= 0.1716: eleven terms leave
// < 1e-17 relative.
PRIMUS_HD double log_fraction_u32(uint64_t v) {
  int e = 0;
  double f = frexp(static_cast<double>(v), &e);  // f in [0.5, 1), exact
  if (f < 0x1.6a09e667f3bcdp-1) {                // below sqrt(1/2): into [sqrt(1/2), 1)
    f = mul_rn(f, 2.0);                          // exact
    e -= 1;
  }
  const double z = div_rn(f - 1.0, f + 1.0);  // f - 1 is exact (Sterbenz)
  const double z2 = mul_rn(z, z);
  double p = 0x1.8618618618618p-5;  // 1/21
  p = fma_rn(p, z2, 0x1.af286bca1af28p-5);
  p = fma_rn(p, z2, 0x1.e1e1e1e1e1e1ep-5);
  p = fma_rn(p, z2, 0x1.1111111111111p-4);
  p = fma_rn(p, z2, 0x1.3b13b13b13b14p-4);
  p = fma_rn(p, z2, 0x1.745d1745d1746p-4);
  p = fma_rn(p, z2, 0x1.c71c71c71c71cp-4);
  p = fma_rn(p, z2, 0x1.2492492492492p-3);
  p = fma_rn(p, z2, 0x1.999999999999ap-3);
  p = fma_rn(p, z2, 0x1.5555555555555p-2);  // 1/3
  p = fma_rn(p, z2, 1.0);
  const double ln_f = mul_rn(mul_rn(2.0, z), p);
  return fma_rn(static_cast<double>(e - 32), 0x1.62e42fefa39efp-1, ln_f);  // + (e - 32) ln 2
}

// cos(2 pi r / 2^32) for a 32-bit r: the quadrant from the top two bits, the angle within it reduced to
// theta in [0, pi/4] exactly in integers, then Taylor series of cos and sin in theta^2 (nine terms each:
// < 1e-17 at pi/4).
PRIMUS_HD double cos_fraction_u32(uint32_t r) {
  const uint32_t q = r >> 30, m = r & 0x3FFFFFFFu;
  const bool swap = m > (1u << 29);  // angle in (pi/4, pi/2): use its complement
  const double th = mul_rn(static_cast<double>(swap ? (1u << 30) - m : m), 0x1.921fb54442d18p-30);  // pi/2^31
  const double t2 = mul_rn(th, th);
  double c = 0x1.ae7f3e733b81fp-45;  // 1/16!
  c = fma_rn(c, t2, -0x1.93974a8c07c9dp-37);
  c = fma_rn(c, t2, 0x1.1eed8eff8d898p-29);
  c = fma_rn(c, t2, -0x1.27e4fb7789f5cp-22);
  c = fma_rn(c, t2, 0x1.a01a01a01a01ap-16);
  c = fma_rn(c, t2, -0x1.6c16c16c16c17p-10);
  c = fma_rn(c, t2, 0x1.5555555555555p-5);
  c = fma_rn(c, t2, -0.5);
  c = fma_rn(c, t2, 1.0);
  double s = 0x1.952c77030ad4ap-49;  // 1/17!
  s = fma_rn(s, t2, -0x1.ae7f3e733b81fp-41);
  s = fma_rn(s, t2, 0x1.6124613a86d09p-33);
  s = fma_rn(s, t2, -0x1.ae64567f544e4p-26);
  s = fma_rn(s, t2, 0x1.71de3a556c734p-19);
  s = fma_rn(s, t2, -0x1.a01a01a01a01ap-13);
  s = fma_rn(s, t2, 0x1.1111111111111p-7);
  s = fma_rn(s, t2, -0x1.5555555555555p-3);
  s = fma_rn(s, t2, 1.0);
  s = mul_rn(th, s);
  const double cos_phi = swap ? s : c, sin_phi = swap ? c : s;  // phi: the angle within the quadrant
  switch (q) {
    case 0:
      return cos_phi;
    case 1:
      return -sin_phi;
    case 2:
      return -cos_phi;
    default:
      return sin_phi;
  }
}

}  // namespace portable_math

// Standard normal for the 128-bit counter (ctr_lo, ctr_hi) of stream `key`: sqrt(-2 ln u1) cos(2 pi u2)
// with u1 = (x0 + 1) / 2^32 in (0, 1] and u2 = x1 / 2^32 from the first two words of one Philox block (the
// same draws as philox_normal(key, ctr_lo) when ctr_hi = 0). |value| <= 6.67.
PRIMUS_HD float portable_normal(uint64_t key, uint64_t ctr_lo, uint64_t ctr_hi) {
  const Philox4 r = philox4x32(key, ctr_lo, ctr_hi);
  const double ln_u1 = portable_math::log_fraction_u32(static_cast<uint64_t>(r.v[0]) + 1);
  const double radius = portable_math::sqrt_rn(portable_math::mul_rn(-2.0, ln_u1));
  const double v = portable_math::mul_rn(radius, portable_math::cos_fraction_u32(r.v[1]));
#if defined(__CUDA_ARCH__)
  return __double2float_rn(v);
#else
  return static_cast<float>(v);
#endif
}

}  // namespace primus
