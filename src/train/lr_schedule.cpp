#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace primus {

LrSchedule::LrSchedule(double lr, double min_lr, int64_t warmup_iters, int64_t decay_iters, std::string style)
    : lr_(lr), min_lr_(min_lr), warmup_(warmup_iters), decay_(decay_iters), style_(std::move(style)) {
  if (style_ != "constant" && style_ != "linear" && style_ != "cosine")
    throw ConfigError("lr_decay_style: '" + style_ + "' (expected constant, linear or cosine)");
}

double LrSchedule::at(int64_t iter) const {
  if (warmup_ > 0 && iter <= warmup_) return lr_ * static_cast<double>(iter) / static_cast<double>(warmup_);
  if (style_ == "constant") return lr_;
  if (iter > decay_) return min_lr_;
  const double span = static_cast<double>(std::max<int64_t>(decay_ - warmup_, 1));
  const double ratio = std::clamp(static_cast<double>(iter - warmup_) / span, 0.0, 1.0);
  const double coeff = style_ == "linear" ? 1.0 - ratio : 0.5 * (std::cos(M_PI * ratio) + 1.0);
  return min_lr_ + coeff * (lr_ - min_lr_);
}

}  // namespace primus
