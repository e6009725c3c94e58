#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/error.h"

namespace primus {

LrSchedule::LrSchedule(double lr, double min_lr, int64_t warmup_iters, int64_t decay_iters, std::string style,
                       int64_t wsd_iters, std::string wsd_style)
    : lr_(lr),
      min_lr_(min_lr),
      warmup_(warmup_iters),
      decay_(decay_iters),
      wsd_(wsd_iters),
      style_(std::move(style)),
      wsd_style_(std::move(wsd_style)) {
  if (style_ != "constant" && style_ != "linear" && style_ != "cosine" && style_ != "WSD")
    throw ConfigError("lr_decay_style: '" + style_ + "' (expected constant, linear, cosine or WSD)");
  if (style_ == "WSD") {
    if (wsd_style_ != "exponential" && wsd_style_ != "linear" && wsd_style_ != "cosine" &&
        wsd_style_ != "minus_sqrt")
      throw ConfigError("lr_wsd_decay_style: '" + wsd_style_ +
                        "' (expected exponential, linear, cosine or minus_sqrt)");
    if (wsd_ < 1 || wsd_ > decay_ - warmup_)
      throw ConfigError(fmt::format(
          "lr_wsd_decay_iters {} must lie in [1, lr_decay_iters {} - lr_warmup_iters {}]: the anneal comes "
          "after the warm-up",
          wsd_, decay_, warmup_));
  }
}

double LrSchedule::at(int64_t iter) const {
  if (warmup_ > 0 && iter <= warmup_) return lr_ * static_cast<double>(iter) / static_cast<double>(warmup_);
  if (style_ == "constant") return lr_;
  if (iter > decay_) return min_lr_;
  if (style_ == "WSD") {
    const int64_t anneal_start = decay_ - wsd_;
    if (iter <= anneal_start) return lr_;
    const double r = static_cast<double>(iter - anneal_start) / static_cast<double>(wsd_);
    const double coeff = wsd_style_ == "linear"       ? 1.0 - r
                         : wsd_style_ == "cosine"     ? 0.5 * (std::cos(M_PI * r) + 1.0)
                         : wsd_style_ == "minus_sqrt" ? 1.0 - std::sqrt(r)
                                                      : 2.0 * std::pow(0.5, r) - 1.0;  // exponential
    return min_lr_ + coeff * (lr_ - min_lr_);
  }
  const double span = static_cast<double>(std::max<int64_t>(decay_ - warmup_, 1));
  const double ratio = std::clamp(static_cast<double>(iter - warmup_) / span, 0.0, 1.0);
  const double coeff = style_ == "linear" ? 1.0 - ratio : 0.5 * (std::cos(M_PI * ratio) + 1.0);
  return min_lr_ + coeff * (lr_ - min_lr_);
}

}  // namespace primus
