#include "core/master_split.h"

#include "core/env.h"

namespace primus {

bool use_master_remainders(bool cuda, DType compute, DType master, bool sharded) {
  if (!cuda || compute != DType::kBF16 || master != DType::kF32 || sharded) return false;
  return env_int("PRIMUS_MASTER_REMAINDERS", 1, 0, 1) == 1;
}

}  // namespace primus
