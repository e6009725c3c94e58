#pragma once
// Counter-based random numbers (Philox-4x32-10, Salmon et al. 2011). A value depends only on (key, counter),
// so the same element gets the same number whatever order, device or parallel layout produces it:
// initialisation is identical for any sharding, and resume is bit-exact without saving generator state beyond
// (seed, step).
#include <cmath>
#include <cstdint>
#include <string_view>

#if defined(__CUDACC__)
#define PRIMUS_HD __host__ __device__ __forceinline__
#else
#define PRIMUS_HD inline
#endif

namespace primus {

struct Philox4 {
  uint32_t v[4];
};

PRIMUS_HD uint32_t mulhilo32(uint32_t a, uint32_t b, uint32_t* hi) {
  uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  return static_cast<uint32_t>(p);
}

// key: 64 bits (e.g. seed ^ stream id); counter: 128 bits (e.g. element index, step, ...).
PRIMUS_HD Philox4 philox4x32(uint64_t key, uint64_t ctr_lo, uint64_t ctr_hi) {
  uint32_t c0 = static_cast<uint32_t>(ctr_lo), c1 = static_cast<uint32_t>(ctr_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(ctr_hi), c3 = static_cast<uint32_t>(ctr_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0, hi1;
    uint32_t lo0 = mulhilo32(0xD2511F53u, c0, &hi0);
    uint32_t lo1 = mulhilo32(0xCD9E8D57u, c2, &hi1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// Uniform in (0, 1], 24 bits of mantissa (never 0, so log() is safe).
PRIMUS_HD float uint_to_unit_float(uint32_t x) {
  return (static_cast<float>(x >> 8) + 1.0f) * (1.0f / 16777216.0f);
}

// Standard normal for element `index` of stream `key` (Box-Muller on one Philox draw; computed in double so
// the host result does not depend on libm float rounding).
PRIMUS_HD float philox_normal(uint64_t key, uint64_t index) {
  Philox4 r = philox4x32(key, index, 0);
  double u1 = (static_cast<double>(r.v[0]) + 1.0) * (1.0 / 4294967296.0);
  double u2 = static_cast<double>(r.v[1]) * (1.0 / 4294967296.0);
  // (::log: inside namespace primus, `log` names core/log.h's namespace)
  return static_cast<float>(::sqrt(-2.0 * ::log(u1)) * ::cos(6.283185307179586 * u2));
}

PRIMUS_HD uint32_t philox_u32(uint64_t key, uint64_t index) {
  return philox4x32(key, index, 0).v[0];
}

// A 64-bit mix (splitmix64 finaliser) for deriving stream keys from (seed, name hash, ...).
PRIMUS_HD uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A stable 64-bit hash of a name (FNV-1a: the same on every platform and build), for keying random streams by
// parameter or module name.
inline uint64_t name_hash64(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace primus
