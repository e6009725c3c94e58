#include "ops/op_dispatch.h"

namespace primus::ops {

// A null pointer in the list stands for an optional tensor that was not given and is skipped.
void check_same_device(const char* op, Device dev, std::initializer_list<const Tensor*> tensors) {
  int index = 0;
  for (const Tensor* t : tensors) {
    ++index;
    if (t == nullptr) continue;
    PRIMUS_CHECK(t->defined(), "{}: tensor argument {} is undefined", op, index);
    PRIMUS_CHECK(t->device() == dev, "{}: tensor argument {} ({}) is not on {} like the first one", op, index,
                 t->describe(), dev.str());
    PRIMUS_CHECK(t->is_contiguous(), "{}: tensor argument {} ({}) must be contiguous, has strides {}", op,
                 index, t->describe(), shape_str(t->strides()));
  }
}

}  // namespace primus::ops
