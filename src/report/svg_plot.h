#pragma once
// Inline SVG line charts for the post-flight report (no JavaScript, nothing fetched from the network).
#include <string>
#include <vector>

namespace primus::report {

struct Series {
  std::string name;
  std::string color;
  std::vector<double> x, y;
  bool points = false;  // draw markers (sparse series such as validation loss)
};

struct Marker {
  double x = 0;
  std::string label;
  std::string color;
};

// A chart of `series` over a shared x axis with "nice" ticks; markers are vertical lines (guard events).
std::string line_chart(const std::string& title, const std::string& y_label,
                       const std::vector<Series>& series, const std::vector<Marker>& markers = {},
                       int width = 560, int height = 260);

std::string html_escape(const std::string& s);
// Tick positions covering [lo, hi] with about `n` steps of 1, 2 or 5 x 10^k.
std::vector<double> nice_ticks(double lo, double hi, int n);

}  // namespace primus::report
