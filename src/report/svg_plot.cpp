#include "report/svg_plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace primus::report {

std::string html_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      default:
        o += c;
    }
  }
  return o;
}

std::vector<double> nice_ticks(double lo, double hi, int n) {
  std::vector<double> t;
  if (!(hi > lo) || n < 1) return {lo};
  const double raw = (hi - lo) / n;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) {
      step = m * mag;
      break;
    }
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step)
    t.push_back(std::fabs(v) < step * 1e-9 ? 0 : v);
  return t;
}

namespace {
std::string fmt_tick(double v) {
  const double a = std::fabs(v);
  if (a >= 1e6) return fmt::format("{:.3g}M", v / 1e6);
  if (a >= 1e4) return fmt::format("{:.3g}k", v / 1e3);
  if (a >= 100 || a == 0) return fmt::format("{:.0f}", v);
  return fmt::format("{:.3g}", v);
}
}  // namespace

std::string line_chart(const std::string& title, const std::string& y_label,
                       const std::vector<Series>& series, const std::vector<Marker>& markers, int width,
                       int height, const std::string& x_label) {
  const double ml = 58, mr = 12, mt = 28, mb = 34;
  const double pw = width - ml - mr, ph = height - mt - mb;
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const Series& s : series)
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.y[i])) continue;
      x0 = std::min(x0, s.x[i]);
      x1 = std::max(x1, s.x[i]);
      y0 = std::min(y0, s.y[i]);
      y1 = std::max(y1, s.y[i]);
    }
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "class=\"chart\" font-family=\"sans-serif\" font-size=\"11\">\n<text x=\"{}\" y=\"16\" "
      "font-size=\"13\" "
      "font-weight=\"bold\">{}</text>\n",
      width, height, width, height, ml, html_escape(title));
  if (!std::isfinite(x0)) {
    svg +=
        fmt::format("<text x=\"{}\" y=\"{}\" fill=\"#888\">no data</text>\n</svg>\n", ml + 10, mt + ph / 2);
    return svg;
  }
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) {
    y0 -= std::max(1e-9, std::fabs(y0) * 0.05);
    y1 += std::max(1e-9, std::fabs(y1) * 0.05);
  }
  const double pad = (y1 - y0) * 0.05;
  y0 -= pad;
  y1 += pad;
  auto X = [&](double x) { return ml + (x - x0) / (x1 - x0) * pw; };
  auto Y = [&](double y) { return mt + (1 - (y - y0) / (y1 - y0)) * ph; };
  svg +=
      fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#fafafa\" stroke=\"#ccc\"/>\n",
                  ml, mt, pw, ph);
  for (double t : nice_ticks(y0, y1, 5)) {
    svg += fmt::format("<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#e4e4e4\"/>",
                       ml, ml + pw, Y(t), Y(t));
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", ml - 4, Y(t) + 4,
                       fmt_tick(t));
  }
  for (double t : nice_ticks(x0, x1, 6))
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", X(t),
                       mt + ph + 14, fmt_tick(t));
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" fill=\"#555\">{}</text>\n",
                     ml + pw / 2, mt + ph + 28, html_escape(x_label));
  svg += fmt::format(
      "<text x=\"12\" y=\"{:.1f}\" fill=\"#555\" transform=\"rotate(-90 12 {:.1f})\" "
      "text-anchor=\"middle\">{}</text>\n",
      mt + ph / 2, mt + ph / 2, html_escape(y_label));
  for (const Marker& m : markers) {
    if (m.x < x0 || m.x > x1) continue;
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1:.1f}\" y2=\"{2:.1f}\" stroke=\"{3}\" "
        "stroke-dasharray=\"4 3\">"
        "<title>{4}</title></line>\n",
        X(m.x), mt, mt + ph, m.color, html_escape(m.label));
  }
  double lx = ml + 8;
  for (const Series& s : series) {
    std::string pts;
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
      if (std::isfinite(s.y[i])) pts += fmt::format("{:.1f},{:.1f} ", X(s.x[i]), Y(s.y[i]));
    if (s.points) {
      for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
        if (std::isfinite(s.y[i]))
          svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>", X(s.x[i]),
                             Y(s.y[i]), s.color);
    }
    if (!pts.empty())
      svg += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"/>\n",
                         s.color, pts);
    svg += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"10\" height=\"3\" fill=\"{}\"/><text x=\"{:.1f}\" "
        "y=\"{:.1f}\">{}</text>\n",
        lx, mt + 8, s.color, lx + 13, mt + 12, html_escape(s.name));
    lx += 20 + 7.0 * static_cast<double>(s.name.size());
  }
  svg += "</svg>\n";
  return svg;
}

std::string gantt_chart(const std::string& title, const std::vector<std::string>& lanes,
                        const std::vector<GanttBox>& boxes, const std::vector<LegendEntry>& legend,
                        const std::string& x_label, double t_end, int width, int lane_height) {
  const double ml = 64, mr = 12, mt = 44, mb = 34;
  for (const GanttBox& b : boxes) t_end = std::max(t_end, b.end);
  if (!(t_end > 0)) t_end = 1;
  const double pw = width - ml - mr;
  const double ph = static_cast<double>(lane_height) * static_cast<double>(lanes.size());
  const double height = mt + ph + mb;
  auto X = [&](double t) { return ml + t / t_end * pw; };
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1:.0f}\" viewBox=\"0 0 {0} "
      "{1:.0f}\" "
      "class=\"chart\" font-family=\"sans-serif\" font-size=\"10\">\n<text x=\"{2}\" y=\"16\" "
      "font-size=\"13\" font-weight=\"bold\">{3}</text>\n",
      width, height, ml, html_escape(title));
  double lx = ml;
  for (const LegendEntry& e : legend) {
    svg += fmt::format(
        "<rect x=\"{:.1f}\" y=\"24\" width=\"12\" height=\"10\" fill=\"{}\" stroke=\"#999\" "
        "stroke-width=\"0.5\"/><text x=\"{:.1f}\" y=\"33\">{}</text>\n",
        lx, e.color, lx + 15, html_escape(e.name));
    lx += 24 + 6.0 * static_cast<double>(e.name.size());
  }
  for (size_t i = 0; i < lanes.size(); ++i) {
    const double y = mt + static_cast<double>(i) * lane_height;
    svg += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{}\" fill=\"#e8e8e8\"/><text x=\"{:.1f}\" "
        "y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n",
        ml, y + 1, pw, lane_height - 2, ml - 6, y + lane_height / 2.0 + 4, html_escape(lanes[i]));
  }
  for (const GanttBox& b : boxes) {
    if (b.lane < 0 || b.lane >= static_cast<int>(lanes.size()) || !(b.end > b.start)) continue;
    const double x0 = X(b.start), x1 = X(b.end), y = mt + static_cast<double>(b.lane) * lane_height;
    svg += fmt::format(
        "<rect x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{}\" fill=\"{}\" stroke=\"#fff\" "
        "stroke-width=\"0.5\"><title>{}</title></rect>",
        x0, y + 1, x1 - x0, lane_height - 2, b.fill, html_escape(b.tooltip));
    // A label needs about 6 px per character.
    if (!b.label.empty() && x1 - x0 >= 6.0 * static_cast<double>(b.label.size()) + 2)
      svg += fmt::format(
          "<text x=\"{:.2f}\" y=\"{:.1f}\" text-anchor=\"middle\" fill=\"#fff\" "
          "pointer-events=\"none\">{}</text>",
          (x0 + x1) / 2, y + lane_height / 2.0 + 4, html_escape(b.label));
    svg += "\n";
  }
  for (double t : nice_ticks(0, t_end, 10)) {
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1:.1f}\" y2=\"{2:.1f}\" stroke=\"#888\"/><text "
        "x=\"{0:.1f}\" "
        "y=\"{3:.1f}\" text-anchor=\"middle\">{4}</text>\n",
        X(t), mt + ph, mt + ph + 4, mt + ph + 15, fmt_tick(t));
  }
  svg +=
      fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" fill=\"#555\">{}</text>\n</svg>\n",
                  ml + pw / 2, mt + ph + 29, html_escape(x_label));
  return svg;
}

std::string stacked_bar_chart(const std::string& title, const std::string& y_label,
                              const std::vector<std::string>& bars, const std::vector<BarSegment>& segments,
                              double limit, const std::string& limit_label, int width, int height) {
  const double ml = 58, mr = 12, mt = 28;
  const double legend_rows = (static_cast<double>(segments.size()) + 2) / 3;
  const double mb = 30 + 16 * legend_rows;
  const double pw = width - ml - mr, ph = height - mt - mb;
  double top = limit;
  for (size_t b = 0; b < bars.size(); ++b) {
    double sum = 0;
    for (const BarSegment& seg : segments) sum += b < seg.values.size() ? std::max(0.0, seg.values[b]) : 0;
    top = std::max(top, sum);
  }
  if (top <= 0) top = 1;
  const std::vector<double> ticks = nice_ticks(0, top * 1.05, 5);
  const double y1 = std::max(top * 1.05, ticks.empty() ? top : ticks.back());
  auto Y = [&](double y) { return mt + (1 - y / y1) * ph; };
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "class=\"chart\" font-family=\"sans-serif\" font-size=\"11\">\n<text x=\"{}\" y=\"16\" "
      "font-size=\"13\" "
      "font-weight=\"bold\">{}</text>\n",
      width, height, width, height, ml, html_escape(title));
  svg +=
      fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#fafafa\" stroke=\"#ccc\"/>\n",
                  ml, mt, pw, ph);
  for (double t : ticks) {
    if (t > y1) continue;
    svg += fmt::format(
        "<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#e4e4e4\"/><text "
        "x=\"{:.1f}\" "
        "y=\"{:.1f}\" text-anchor=\"end\">{:g}</text>\n",
        ml, ml + pw, Y(t), Y(t), ml - 4, Y(t) + 4, t);
  }
  svg +=
      fmt::format("<text transform=\"translate(12,{:.1f}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
                  mt + ph / 2, html_escape(y_label));
  const double slot = bars.empty() ? pw : pw / static_cast<double>(bars.size());
  const double bw = std::min(80.0, slot * 0.6);
  for (size_t b = 0; b < bars.size(); ++b) {
    const double x = ml + slot * (static_cast<double>(b) + 0.5) - bw / 2;
    double base = 0;
    for (const BarSegment& seg : segments) {
      const double v = b < seg.values.size() ? std::max(0.0, seg.values[b]) : 0;
      if (v <= 0) continue;
      svg += fmt::format(
          "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"><title>{}: {:.3g} "
          "{}</title></rect>\n",
          x, Y(base + v), bw, Y(base) - Y(base + v), seg.color, html_escape(seg.name), v,
          html_escape(y_label));
      base += v;
    }
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", x + bw / 2,
                       mt + ph + 14, html_escape(bars[b]));
  }
  if (limit > 0)
    svg += fmt::format(
        "<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#c00\" "
        "stroke-dasharray=\"5,3\"/>"
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\" fill=\"#c00\">{}</text>\n",
        ml, ml + pw, Y(limit), Y(limit), ml + pw - 4, Y(limit) - 4, html_escape(limit_label));
  for (size_t i = 0; i < segments.size(); ++i) {
    const double lx = ml + static_cast<double>(i % 3) * (pw / 3),
                 ly = mt + ph + 32 + 16 * static_cast<double>(i / 3);
    svg += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{:.1f}\" "
        "y=\"{:.1f}\">{}</text>\n",
        lx, ly - 9, segments[i].color, lx + 14, ly, html_escape(segments[i].name));
  }
  return svg + "</svg>\n";
}

std::string horizontal_bar_chart(const std::string& title, const std::string& x_label,
                                 const std::vector<std::string>& labels, const std::vector<double>& values,
                                 const std::string& color, int width, int bar_height) {
  // Labels sit left of the axis: about 6 px per character of the longest.
  size_t longest = 0;
  for (const std::string& l : labels) longest = std::max(longest, l.size());
  const double ml = std::min(260.0, 12 + 6.0 * static_cast<double>(longest)), mr = 70, mt = 28, mb = 34;
  const double pw = width - ml - mr,
               ph = static_cast<double>(bar_height) * static_cast<double>(labels.size());
  double top = 0;
  for (double v : values) top = std::max(top, v);
  if (!(top > 0)) top = 1;
  const std::vector<double> ticks = nice_ticks(0, top, 5);
  const double x1 = std::max(top, ticks.empty() ? top : ticks.back());
  auto X = [&](double v) { return ml + v / x1 * pw; };
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1:.0f}\" viewBox=\"0 0 {0} "
      "{1:.0f}\" class=\"chart\" font-family=\"sans-serif\" font-size=\"11\">\n<text x=\"{2:.1f}\" "
      "y=\"16\" font-size=\"13\" font-weight=\"bold\">{3}</text>\n",
      width, mt + ph + mb, ml, html_escape(title));
  for (double t : ticks)
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1:.1f}\" y2=\"{2:.1f}\" stroke=\"#e4e4e4\"/><text "
        "x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\">{4}</text>\n",
        X(t), mt, mt + ph, mt + ph + 14, fmt_tick(t));
  for (size_t i = 0; i < labels.size() && i < values.size(); ++i) {
    const double y = mt + static_cast<double>(i) * bar_height, v = std::max(0.0, values[i]);
    svg += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text><rect x=\"{:.1f}\" y=\"{:.1f}\" "
        "width=\"{:.1f}\" height=\"{}\" fill=\"{}\"><title>{}: {:.4g}</title></rect><text x=\"{:.1f}\" "
        "y=\"{:.1f}\">{:.3g}</text>\n",
        ml - 6, y + bar_height / 2.0 + 4, html_escape(labels[i]), ml, y + 2, X(v) - ml, bar_height - 4, color,
        html_escape(labels[i]), v, X(v) + 4, y + bar_height / 2.0 + 4, v);
  }
  svg += fmt::format(
      "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1:.1f}\" y2=\"{2:.1f}\" stroke=\"#888\"/><text "
      "x=\"{3:.1f}\" y=\"{4:.1f}\" text-anchor=\"middle\" fill=\"#555\">{5}</text>\n</svg>\n",
      ml, mt, mt + ph, ml + pw / 2, mt + ph + 28, html_escape(x_label));
  return svg;
}

}  // namespace primus::report
