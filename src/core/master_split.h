#pragma once
// An f32 master weight stored as two 16-bit halves: `hi`, the bf16 compute weight the GEMMs read, and `rem`,
// a signed 16-bit remainder. The f32 master then costs 2 bytes beyond the bf16 copy that training keeps
// anyway, instead of 4 (Transformer Engine's FusedAdam calls this layout `store_param_remainders`; this is
// our own code). Used by ParamStore (model/param_store.h) and the optimizer ops (ops/optimizer.h).
//
// On the bit pattern b (uint32) of the master:
//   split: hi  = (b + 0x8000) >> 16                 (uint32 arithmetic)
//          rem = int16(b - (hi << 16))
//   join:  b   = (hi << 16) + int32(rem)            (uint32 wraparound)
//
// Why the join is exact for every 32-bit pattern: let t = (b + 2^15) mod 2^32, so hi = floor(t / 2^16) and
// hi * 2^16 = t - r with r = t mod 2^16 in [0, 2^16). Then b - hi * 2^16 = b - t + r = r - 2^15 (mod 2^32),
// and r - 2^15 lies in [-2^15, 2^15): exactly the int16 range, so rem holds it without loss, and
// hi * 2^16 + rem = t - r + r - 2^15 = t - 2^15 = b (mod 2^32).
//
// What hi is: adding 0x8000 to the pattern and truncating rounds the magnitude bits to the nearest bf16, ties
// (low half exactly 0x8000) away from zero. A carry out of the mantissa into the exponent is the correct
// rounding up (to the next binade, or to infinity from above the largest bf16, as RNE does too); the carry
// can reach the sign bit only from a NaN pattern, and NaNs are made canonical first (below). So hi equals the
// round-to-nearest-even cast (float_to_bf16, cvt.rn.bf16.f32) except on exact ties, where RNE rounds to the
// even neighbour: with the low half of the pattern uniformly spread, 1 update in 2^16 gives a bf16 weight one
// unit in the last place away from the RNE cast. An RNE hi cannot be stored losslessly at all: the 2^16 + 1
// offsets from an RNE hi (-2^15 .. +2^15) do not fit in 16 bits.
//
// One rounding for every mode: wherever the bf16 compute copy is made from an f32 master (the optimizer's
// fused copy, sync_compute_copy, initialisation, ZeRO-1 / FSDP shards), it is this hi (compute_bits), so a
// store with remainders and one with an f32 master hold bitwise the same bf16 weights, and data-parallel
// modes with and without remainders stay bitwise equal.
//
// NaN: the split first replaces a NaN by the canonical quiet NaN of its sign (0x7fc00000 / 0xffc00000).
// Without it the GPU's default NaN 0x7fffffff would give hi = 0x8000 (-0.0): a NaN master would hide behind a
// finite weight. NaN payloads are therefore not preserved (nothing reads them); every other pattern (finite
// values, +-0, subnormals, +-inf) splits and joins back bit for bit.
#include <cstdint>

#include "core/dtype.h"

#if defined(__CUDACC__)
#define PRIMUS_SPLIT_HD __host__ __device__ __forceinline__
#else
#define PRIMUS_SPLIT_HD inline
#endif

namespace primus {

// A NaN pattern becomes the canonical quiet NaN of its sign; anything else is returned unchanged.
PRIMUS_SPLIT_HD uint32_t master_canonical_bits(uint32_t b) {
  return (b & 0x7fffffffu) > 0x7f800000u ? (b & 0x80000000u) | 0x7fc00000u : b;
}

// The bf16 compute weight of an f32 master pattern (hi of the split).
PRIMUS_SPLIT_HD uint16_t compute_bits(uint32_t b) {
  return static_cast<uint16_t>((master_canonical_bits(b) + 0x8000u) >> 16);
}

// The remainder that goes with hi = compute_bits(b).
PRIMUS_SPLIT_HD int16_t remainder_bits(uint32_t b, uint16_t hi) {
  return static_cast<int16_t>(
      static_cast<uint16_t>(master_canonical_bits(b) - (static_cast<uint32_t>(hi) << 16)));
}

// The f32 master pattern of a (hi, rem) pair.
PRIMUS_SPLIT_HD uint32_t join_bits(uint16_t hi, int16_t rem) {
  return (static_cast<uint32_t>(hi) << 16) + static_cast<uint32_t>(static_cast<int32_t>(rem));
}

// Host conveniences on floats.
inline bf16_t compute_round(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return bf16_t{compute_bits(b)};
}
inline float join_float(uint16_t hi, int16_t rem) {
  const uint32_t b = join_bits(hi, rem);
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// The one rule for where masters live in remainders: bf16 compute from an f32 master on CUDA with whole-model
// buffers (one GPU, DDP). Not on the CPU (the compute copy is the f32/f64 master itself) and not for ZeRO-1 /
// FSDP shards (their master chunks and compute buffers are laid out differently). PRIMUS_MASTER_REMAINDERS=0
// turns it off everywhere (an A/B switch; default 1).
bool use_master_remainders(bool cuda, DType compute, DType master, bool sharded);

}  // namespace primus
