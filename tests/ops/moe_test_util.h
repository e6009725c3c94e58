#pragma once
// Shared by the MoE router op tests: a router configuration from its four knobs.
#include <cstdint>

#include "ops/moe_router.h"

namespace primus::test {

inline ops::MoeRouterConfig make_cfg(int64_t k, ops::MoeScoreFunction score, bool pre = false,
                                     bool normalize = true) {
  ops::MoeRouterConfig c;
  c.topk = k;
  c.score = score;
  c.pre_softmax = pre;
  c.normalize = normalize;
  return c;
}

}  // namespace primus::test
