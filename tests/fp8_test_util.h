#pragma once
// Helpers shared by the FP8 model tests (unit and GPU): a recipe by its config names, and f32 normal noise.
#include <random>

#include "core/tensor.h"
#include "model/fp8_linear.h"

namespace primus::fp8test {

// The recipe `fp8_recipe: name` with `fp8: format` ("hybrid", "e4m3") selects.
inline Fp8Recipe recipe(const char* name, const char* format) {
  Fp8Config c;
  c.enabled = true;
  c.recipe = name;
  c.format = format;
  return *Fp8Recipe::from_config(c);
}

// f32 N(0, scale^2) on the CPU.
inline Tensor randn(std::mt19937& rng, const Shape& shape, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  Tensor t = Tensor::empty(shape, DType::kF32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = d(rng);
  return t;
}

}  // namespace primus::fp8test
