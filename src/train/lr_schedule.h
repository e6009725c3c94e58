#pragma once
// Learning-rate schedule with Megatron's names: linear warmup from 0 over lr_warmup_iters, then constant,
// linear or cosine decay from lr to min_lr until lr_decay_iters (default train_iters), then min_lr; or WSD
// (warmup-stable-decay): the peak lr until the last wsd_iters iterations before lr_decay_iters, which anneal
// to min_lr as Megatron's lr_wsd_decay_style says (exponential: 2 * 0.5^r - 1, linear, cosine, minus_sqrt:
// 1 - sqrt(r), r the fraction of the anneal done).
#include <cstdint>
#include <string>

namespace primus {

class LrSchedule {
 public:
  LrSchedule(double lr, double min_lr, int64_t warmup_iters, int64_t decay_iters, std::string style,
             int64_t wsd_iters = 0, std::string wsd_style = "exponential");
  // Learning rate for the update of iteration `iter` (1-based: the first update is iteration 1, so warmup
  // never wastes a step at lr 0).
  double at(int64_t iter) const;

 private:
  double lr_, min_lr_;
  int64_t warmup_, decay_, wsd_;
  std::string style_, wsd_style_;
};

}  // namespace primus
