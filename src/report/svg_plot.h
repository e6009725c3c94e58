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
                       int width = 560, int height = 260, const std::string& x_label = "step");

// A timeline ("Gantt") chart: one lane per row, top to bottom, boxes placed by time on a shared axis from 0
// to `t_end` (0: the last box's end); the lane's grey shows through where nothing runs. Labels are drawn
// inside boxes wide enough for them; tooltips on hover.
struct GanttBox {
  int lane = 0;
  double start = 0, end = 0;
  std::string fill;
  std::string label;
  std::string tooltip;
};
struct LegendEntry {
  std::string name;
  std::string color;
};
std::string gantt_chart(const std::string& title, const std::vector<std::string>& lanes,
                        const std::vector<GanttBox>& boxes, const std::vector<LegendEntry>& legend,
                        const std::string& x_label, double t_end = 0, int width = 1000, int lane_height = 20);

// A stacked bar chart: one bar per label, each made of the segments' values at that bar (bottom to top in
// segment order), a dashed horizontal line at `limit` when > 0 (a GPU's memory), a legend below.
struct BarSegment {
  std::string name;
  std::string color;
  std::vector<double> values;  // one per bar
};
std::string stacked_bar_chart(const std::string& title, const std::string& y_label,
                              const std::vector<std::string>& bars, const std::vector<BarSegment>& segments,
                              double limit = 0, const std::string& limit_label = "", int width = 640,
                              int height = 300);

// One horizontal bar per label, top to bottom, on an axis from 0; each bar's value is written beside it.
std::string horizontal_bar_chart(const std::string& title, const std::string& x_label,
                                 const std::vector<std::string>& labels, const std::vector<double>& values,
                                 const std::string& color, int width = 640, int bar_height = 18);

std::string html_escape(const std::string& s);
// Tick positions covering [lo, hi] with about `n` steps of 1, 2 or 5 x 10^k.
std::vector<double> nice_ticks(double lo, double hi, int n);

}  // namespace primus::report
