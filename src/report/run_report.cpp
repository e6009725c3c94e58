#include "report/run_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "report/pipeline_page.h"
#include "report/svg_plot.h"
#include "train/metrics.h"

namespace primus::report {

namespace fs = std::filesystem;

namespace {

// Records of a JSONL file (train/metrics.h): an unterminated last line (a run still writing it, or torn by a
// kill) is left out silently; a malformed complete line is skipped with a warning.
void read_jsonl(const std::string& path, RunData& run, std::vector<nlohmann::json>* all) {
  for (nlohmann::json& j : read_jsonl_records(path, &run.warnings)) all->push_back(std::move(j));
}

double num(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_number()) return std::nan("");
  return j[key].get<double>();
}

Series series_of(const std::vector<nlohmann::json>& recs, const char* key, const std::string& name,
                 const std::string& color, double scale = 1) {
  Series s{name, color, {}, {}, false};
  for (const nlohmann::json& r : recs) {
    const double v = num(r, key);
    if (!std::isfinite(v)) continue;
    s.x.push_back(num(r, "step"));
    s.y.push_back(v * scale);
  }
  return s;
}

std::string event_color(const std::string& kind) {
  if (kind == "nan_skip" || kind == "nan_halt" || kind == "hang") return "#d62728";
  if (kind == "loss_spike") return "#ff7f0e";
  if (kind == "straggler") return "#9467bd";
  return "#8c564b";
}

std::string fmt_num(double v) {
  if (!std::isfinite(v)) return "-";
  return fmt::format("{:.4g}", v);
}

// The "device memory" counter samples of a Chrome trace (the trainer writes them while it profiles).
void read_memory_timeline(const nlohmann::json& trace, RunData& run) {
  // A trace of another shape is reported once, by the GPU timeline's reader.
  if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array()) return;
  double t0 = INFINITY;
  std::vector<std::pair<double, double>> samples;  // (ts us, GB)
  for (const nlohmann::json& e : trace["traceEvents"]) {
    const double ts = num(e, "ts");
    if (!std::isfinite(ts)) continue;
    t0 = std::min(t0, ts);
    if (e.value("ph", "") != "C" || e.value("name", "") != "device memory" || !e.contains("args")) continue;
    const double gb = num(e["args"], "allocated_gb");
    if (std::isfinite(gb)) samples.emplace_back(ts, gb);
  }
  std::stable_sort(samples.begin(), samples.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [ts, gb] : samples) {
    run.memory_ms.push_back((ts - t0) / 1e3);
    run.memory_gb.push_back(gb);
  }
}

}  // namespace

RunData load_run(const std::string& dir) {
  RunData run;
  run.dir = dir;
  const std::string metrics = dir + "/metrics.jsonl";
  if (!fs::exists(metrics))
    throw Error(ErrorKind::kRuntime,
                fmt::format("report: {} not found: {} is not a training run directory", metrics, dir), {},
                "pass the run directory of `primus train` (it holds metrics.jsonl)");
  std::vector<nlohmann::json> recs;
  read_jsonl(metrics, run, &recs);
  for (nlohmann::json& r : recs) {
    if (r.contains("loss")) {
      run.steps.push_back(std::move(r));
    } else if (r.contains("val_loss")) {
      run.validation.push_back(std::move(r));
    }
  }
  if (fs::exists(dir + "/events.jsonl")) read_jsonl(dir + "/events.jsonl", run, &run.events);
  std::error_code ec;
  if (fs::is_directory(dir + "/heartbeat", ec))
    for (const auto& e : fs::directory_iterator(dir + "/heartbeat", ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("hang-rank-", 0) != 0) continue;
      std::ifstream f(e.path());
      nlohmann::json h = nlohmann::json::parse(f, nullptr, false);
      if (h.is_discarded()) continue;
      run.events.push_back({{"step", nullptr},
                            {"kind", "hang"},
                            {"rank", h.value("rank", -1)},
                            {"detail", h.value("message", "")}});
    }
  // Guard decisions that only left a flag in metrics.jsonl (runs written before events.jsonl existed).
  if (run.events.empty())
    for (const nlohmann::json& s : run.steps)
      if (s.value("skipped", false))
        run.events.push_back({{"step", s["step"]},
                              {"kind", "skipped_update"},
                              {"rank", 0},
                              {"detail", "a guard did not apply this step's update"}});
  if (fs::exists(dir + "/summary.json")) {
    std::ifstream f(dir + "/summary.json");
    run.summary = nlohmann::json::parse(f, nullptr, false);
    if (run.summary.is_discarded()) {
      run.warnings.push_back(dir + "/summary.json is not valid JSON");
      run.summary = nullptr;
    }
  }
  if (fs::exists(dir + "/config.yaml")) {
    std::ifstream f(dir + "/config.yaml");
    std::stringstream ss;
    ss << f.rdbuf();
    run.config_yaml = ss.str();
  }
  if (fs::exists(dir + "/pipeline_timeline.json")) {
    std::ifstream f(dir + "/pipeline_timeline.json");
    run.pipeline = nlohmann::json::parse(f, nullptr, false);
    if (run.pipeline.is_discarded() || !run.pipeline.contains("measured")) {
      run.warnings.push_back(dir + "/pipeline_timeline.json is not a pipeline timeline");
      run.pipeline = nullptr;
    }
  }
  if (fs::is_directory(dir + "/trace", ec)) {
    std::vector<std::string> traces;
    for (const auto& e : fs::directory_iterator(dir + "/trace", ec))
      if (e.path().extension() == ".json") traces.push_back(e.path().string());
    std::sort(traces.begin(), traces.end());
    for (const std::string& t : traces) {
      try {
        // Parsed once for both readers: a profiled trace can be tens of MB.
        const nlohmann::json trace = profile::read_trace_file(t);
        if (fs::path(t).filename() == "rank0.json") read_memory_timeline(trace, run);
        for (auto& r : profile::analyse_trace(trace, t)) run.timelines.push_back(std::move(r));
      } catch (const Error& e) {
        run.warnings.push_back(e.what());
      }
    }
  }
  return run;
}

// The pipeline's measured step and the simulator's prediction from the measured per-chunk times, drawn by
// the projection's timeline function on one time scale (ms).
std::string pipeline_section(const nlohmann::json& p) {
  using parallel::ActionKind;
  parallel::Schedule s;
  s.topo = parallel::PipelineTopology{p.value("pp", 1), p.value("vpp", 1), p.value("v_shape", false)};
  s.microbatches = p.value("microbatches", 1);
  auto sim_of = [&](const nlohmann::json& ranks) {
    parallel::SimResult r;
    for (const auto& list : ranks) {
      std::vector<parallel::TimedAction> acts;
      for (const auto& a : list) {
        const std::string k = a.at(0).get<std::string>();
        const ActionKind kind = k == "F"    ? ActionKind::kF
                                : k == "B"  ? ActionKind::kB
                                : k == "BI" ? ActionKind::kBI
                                            : ActionKind::kBW;
        const parallel::Action act{kind, a.at(1).get<int>(), a.at(2).get<int>()};
        acts.push_back({act, a.at(3).get<double>(), a.at(4).get<double>()});
        r.step_time = std::max(r.step_time, acts.back().end);
      }
      r.ranks.push_back(std::move(acts));
    }
    return r;
  };
  const parallel::SimResult measured = sim_of(p.at("measured")), predicted = sim_of(p.at("predicted"));
  s.ranks.clear();
  for (const auto& list : measured.ranks) {
    std::vector<parallel::Action> acts;
    for (const auto& a : list) acts.push_back(a.action);
    s.ranks.push_back(std::move(acts));
  }
  if (static_cast<int>(s.ranks.size()) != s.topo.pp)
    return "<p class=\"warn\">pipeline_timeline.json: rank count differs</p>\n";
  const double t_end = std::max(measured.step_time, predicted.step_time);
  std::string busy;
  for (const auto& b : p.value("busy_ms", nlohmann::json::array()))
    busy += (busy.empty() ? "" : " / ") + fmt_num(b.get<double>());
  std::string h = "<h2>Pipeline timeline (latest measured step)</h2>\n";
  h += fmt::format(
      "<p style=\"font-size:12px;color:#555\">Schedule {} over {} micro-batches, {} rank(s) x {} chunk(s): "
      "step {} "
      "ms, busy per rank {} ms, measured bubble {:.1f}%. The simulator, fed the measured per-chunk forward / "
      "backward times, predicts {} ms and {:.1f}%. Times from each rank's step start (CUDA events).</p>\n",
      html_escape(p.value("schedule", "?")), s.microbatches, s.topo.pp, s.topo.vpp,
      fmt_num(p.value("step_ms", 0.0)), busy, 100 * p.value("bubble", 0.0),
      fmt_num(p.value("predicted_step_ms", 0.0)), 100 * p.value("predicted_bubble", 0.0));
  h += pipeline_timeline_svg("measured", s, measured, t_end, 1000, "time (ms from the step's start)");
  h += pipeline_timeline_svg("simulated from the measured times", s, predicted, t_end, 1000, "time (ms)");
  return h;
}

namespace {

// The mean of the last n values of `key` (a smoother end point than the last step alone).
double tail_mean(const std::vector<nlohmann::json>& recs, const char* key, size_t n) {
  double sum = 0;
  size_t k = 0;
  for (size_t i = recs.size(); i-- > 0 && k < n;) {
    const double v = num(recs[i], key);
    if (!std::isfinite(v)) continue;
    sum += v;
    ++k;
  }
  return k ? sum / static_cast<double>(k) : NAN;
}

// This run's loss beside the compared runs': one chart of the training losses (each a 20-step moving average,
// so that recipes a few per cent apart stay distinguishable), one of the validation losses, and a table of
// the end points with each run's difference to this one.
std::string compared_section(const RunData& run) {
  static const char* colors[] = {"#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"};
  auto smoothed = [](const std::vector<nlohmann::json>& recs, const std::string& name, const char* color) {
    Series s = series_of(recs, "loss", name, color);
    Series out{name, color, {}, {}, false};
    double sum = 0;
    constexpr size_t kWindow = 20;
    for (size_t i = 0; i < s.y.size(); ++i) {
      sum += s.y[i];
      if (i >= kWindow) sum -= s.y[i - kWindow];
      if (i + 1 < kWindow && s.y.size() >= kWindow) continue;
      out.x.push_back(s.x[i]);
      out.y.push_back(sum / static_cast<double>(std::min(i + 1, kWindow)));
    }
    return out;
  };
  const std::string self = fs::path(run.dir).lexically_normal().filename().string();
  std::vector<Series> train = {smoothed(run.steps, self + " (this run)", "#1f77b4")};
  std::vector<Series> val;
  Series v0 = series_of(run.validation, "val_loss", self + " (this run)", "#1f77b4");
  v0.points = true;
  val.push_back(v0);
  for (size_t i = 0; i < run.compared.size(); ++i) {
    const RunData::Compared& c = run.compared[i];
    const char* color = colors[i % (sizeof(colors) / sizeof(colors[0]))];
    train.push_back(smoothed(c.steps, c.name, color));
    Series v = series_of(c.validation, "val_loss", c.name, color);
    v.points = true;
    val.push_back(v);
  }
  std::string h = "<h2>Compared runs</h2>\n<div class=\"grid\">\n";
  h += line_chart("Training loss (20-step mean)", "loss", train);
  if (!run.validation.empty()) h += line_chart("Validation loss", "loss", val);
  h += "</div>\n<table><tr><th>run</th><th>precision</th><th>train loss (last 50 steps)</th><th>vs this run"
       "</th><th>last validation loss</th><th>vs this run</th></tr>\n";
  const double t0 = tail_mean(run.steps, "loss", 50), v_0 = tail_mean(run.validation, "val_loss", 1);
  auto row = [&](const std::string& name, const std::vector<nlohmann::json>& steps,
                 const std::vector<nlohmann::json>& validation) {
    const double t = tail_mean(steps, "loss", 50), v = tail_mean(validation, "val_loss", 1);
    const std::string prec = !steps.empty() && steps.back().contains("fp8_recipe")
                                 ? "FP8 " + steps.back().value("fp8_recipe", "?")
                                 : "BF16 / FP32";
    auto rel = [](double a, double b) {
      return std::isfinite(a) && std::isfinite(b) && b != 0 ? fmt::format("{:+.2f}%", 100.0 * (a - b) / b)
                                                            : std::string("-");
    };
    h += fmt::format(
        "<tr><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>"
        "<td class=\"n\">{}</td></tr>\n",
        html_escape(name), html_escape(prec), fmt_num(t), rel(t, t0), fmt_num(v), rel(v, v_0));
  };
  row(self + " (this run)", run.steps, run.validation);
  for (const RunData::Compared& c : run.compared) row(c.name, c.steps, c.validation);
  h += "</table>\n";
  return h;
}

// Who held the memory at the run's peak (summary.json's memory_at_peak, core/memory_owner.h) and, for a
// profiled run, the allocated bytes over the profiled steps.
std::string memory_section(const RunData& run) {
  constexpr size_t kRows = 12;
  std::string h = "<h2>Memory</h2>\n";
  const nlohmann::json holders =
      run.summary.is_object() ? run.summary.value("memory_at_peak", nlohmann::json()) : nlohmann::json();
  double peak = 0;
  std::vector<std::pair<std::string, double>> rows;  // (owner, bytes), largest first, the tail summed
  if (holders.is_array()) {
    for (const nlohmann::json& x : holders) {
      const double bytes = num(x, "bytes");
      if (!std::isfinite(bytes)) continue;
      peak += bytes;
      if (rows.size() < kRows)
        rows.emplace_back(x.value("owner", "?"), bytes);
      else if (rows.size() == kRows)
        rows.emplace_back("others", bytes);
      else
        rows.back().second += bytes;
    }
  }
  if (rows.empty()) {
    h += "<p>summary.json records no holders of the peak (a run that did not finish, or one written before "
         "memory_at_peak existed).</p>\n";
  } else {
    h += fmt::format(
        "<p style=\"font-size:12px;color:#555\">Peak allocated: {:.3f} GB. An allocation belongs to the "
        "innermost owner open when it was made, so the activations a layer keeps for its backward count as "
        "<i>layer N forward</i>; <i>other</i> is memory allocated outside every owner (another thread, "
        "say).</p>\n<div class=\"grid\"><table><tr><th>owner</th><th>GB</th><th>% of peak</th></tr>\n",
        peak / 1e9);
    std::vector<std::string> labels;
    std::vector<double> gb;
    for (const auto& [owner, bytes] : rows) {
      h += fmt::format("<tr><td>{}</td><td class=\"n\">{:.3f}</td><td class=\"n\">{:.1f}%</td></tr>\n",
                       html_escape(owner), bytes / 1e9, peak > 0 ? 100 * bytes / peak : 0.0);
      labels.push_back(owner);
      gb.push_back(bytes / 1e9);
    }
    h += "</table>\n" + horizontal_bar_chart("Memory at the peak", "GB", labels, gb, "#8c564b") + "</div>\n";
  }
  if (run.memory_ms.empty()) {
    h += "<p>No memory timeline: it is drawn from a profiled run's trace (<code>profile: true</code>).</p>\n";
    return h;
  }
  const size_t top = static_cast<size_t>(std::max_element(run.memory_gb.begin(), run.memory_gb.end()) -
                                         run.memory_gb.begin());
  // The x axis is the samples' order, not their time: the allocator is stream-ordered, so allocations are
  // counted when the host enqueues the work, which on a GPU runs far ahead of it (an 8B-4L step's allocations
  // all fall in the ~3.5 ms the host takes to enqueue it, then nothing for ~130 ms). Their order is the order
  // the stream meets them. A counter holds its value until the next sample: drawn as steps.
  Series s{"allocated", "#8c564b", {}, {}, false};
  for (size_t i = 0; i < run.memory_gb.size(); ++i) {
    if (i > 0) {
      s.x.push_back(static_cast<double>(i));
      s.y.push_back(run.memory_gb[i - 1]);
    }
    s.x.push_back(static_cast<double>(i));
    s.y.push_back(run.memory_gb[i]);
  }
  const Marker peak_mark{static_cast<double>(top),
                         fmt::format("peak of the profiled steps: {:.3f} GB (sample {}, {:.3f} ms host time)",
                                     run.memory_gb[top], top, run.memory_ms[top]),
                         "#d62728"};
  h += fmt::format(
      "<p style=\"font-size:12px;color:#555\">Allocated memory over the profiled steps (rank 0's trace, "
      "{} samples of the allocations and frees, in the order the work was enqueued: the host enqueues a "
      "step's "
      "allocations ahead of the GPU, so their host times bunch up); the dashed line marks the peak, {:.3f} "
      "GB at "
      "sample {}.</p>\n",
      run.memory_gb.size(), run.memory_gb[top], top);
  h += line_chart("Memory timeline", "GB", {s}, {peak_mark}, 1000, 280,
                  "allocation and free samples, in the order they were enqueued");
  return h;
}

}  // namespace

std::string render_html(const RunData& run) {
  std::string h =
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Primus run report</title>\n<style>\n"
      "body{font-family:sans-serif;margin:24px;color:#222;max-width:1200px}h1{font-size:22px}"
      "h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}"
      "table{border-collapse:collapse;font-size:13px;margin:8px 0}td,th{border:1px solid #ddd;padding:3px "
      "8px}"
      "th{background:#f0f0f0}td.n{text-align:right}.grid{display:flex;flex-wrap:wrap;gap:12px}"
      ".warn{color:#b35900}.kind{font-weight:bold}pre{background:#f6f6f6;padding:8px;font-size:12px;"
      "max-height:300px;overflow:auto}\n</style></head><body>\n";
  h += fmt::format("<h1>Primus run report</h1>\n<p>Run directory: <code>{}</code></p>\n",
                   html_escape(run.dir));

  // Summary.
  h += "<h2>Summary</h2>\n<table>";
  if (!run.summary.is_null())
    for (auto it = run.summary.begin(); it != run.summary.end(); ++it) {
      if (it.key() == "memory_at_peak") continue;  // the Memory section's table
      h += fmt::format(
          "<tr><th>{}</th><td>{}</td></tr>", html_escape(it.key()),
          html_escape(it.value().is_string() ? it.value().get<std::string>() : it.value().dump()));
    }
  if (!run.steps.empty() && run.steps.back().contains("fp8_recipe"))
    h += fmt::format("<tr><th>precision</th><td>FP8 {} ({:.1f}% of the step's GEMM FLOPs)</td></tr>",
                     html_escape(run.steps.back().value("fp8_recipe", "?")),
                     100.0 * run.steps.back().value("fp8_gemm_share", 0.0));
  h += fmt::format(
      "<tr><th>steps recorded</th><td>{}</td></tr><tr><th>validation points</th><td>{}</td></tr>"
      "<tr><th>guard events</th><td>{}</td></tr></table>\n",
      run.steps.size(), run.validation.size(), run.events.size());
  for (const std::string& w : run.warnings) h += "<p class=\"warn\">" + html_escape(w) + "</p>\n";

  // Plots.
  std::vector<Marker> markers;
  for (const nlohmann::json& e : run.events)
    if (e.contains("step") && e["step"].is_number())
      markers.push_back({e["step"].get<double>(), e.value("kind", "?") + ": " + e.value("detail", ""),
                         event_color(e.value("kind", ""))});
  Series val = series_of(run.validation, "val_loss", "validation loss", "#2ca02c");
  val.points = true;
  h += "<h2>Training curves</h2>\n<p style=\"font-size:12px;color:#555\">Dashed lines mark guard events: "
       "<span style=\"color:#d62728\">NaN/Inf or hang</span>, <span style=\"color:#ff7f0e\">loss "
       "spike</span>, "
       "<span style=\"color:#9467bd\">straggler</span>, <span style=\"color:#8c564b\">slow step</span>. MFU "
       "is "
       "reported for GPU runs only.</p>\n<div class=\"grid\">\n";
  h += line_chart("Loss", "loss", {series_of(run.steps, "loss", "train loss", "#1f77b4"), val}, markers);
  h += line_chart("Throughput", "tokens/s/GPU",
                  {series_of(run.steps, "tok_s_gpu", "tokens/s/GPU", "#ff7f0e")}, markers);
  h += line_chart("MFU", "MFU %", {series_of(run.steps, "mfu", "MFU", "#9467bd", 100)}, markers);
  h += line_chart("Memory", "GB", {series_of(run.steps, "mem_gb", "peak allocated", "#8c564b")}, markers);
  h += line_chart("Step time", "ms", {series_of(run.steps, "iter_ms", "iteration", "#17becf")}, markers);
  h += line_chart("Gradient norm", "grad norm", {series_of(run.steps, "grad_norm", "grad norm", "#7f7f7f")},
                  markers);
  h += "</div>\n";
  h += memory_section(run);
  if (!run.compared.empty()) h += compared_section(run);

  // Guard events.
  h += "<h2>Guard events</h2>\n";
  if (run.events.empty()) {
    h += "<p>None: no NaN/Inf skips, loss spikes, slow steps, stragglers or hangs were recorded.</p>\n";
  } else {
    h += "<table><tr><th>step</th><th>kind</th><th>rank</th><th>detail</th></tr>\n";
    for (const nlohmann::json& e : run.events)
      h += fmt::format(
          "<tr><td class=\"n\">{}</td><td class=\"kind\" style=\"color:{}\">{}</td><td class=\"n\">{}</td>"
          "<td>{}</td></tr>\n",
          e.contains("step") && e["step"].is_number() ? std::to_string(e["step"].get<int64_t>()) : "-",
          event_color(e.value("kind", "")), html_escape(e.value("kind", "?")),
          e.contains("rank") ? e["rank"].dump() : "-", html_escape(e.value("detail", "")));
    h += "</table>\n";
  }

  // Timelines.
  if (!run.pipeline.is_null()) h += pipeline_section(run.pipeline);
  h += "<h2>GPU timeline (profiled steps)</h2>\n";
  if (run.timelines.empty())
    h += "<p>No trace in <code>trace/</code> (set <code>profile: true</code> with profile_step_start / "
         "profile_step_end).</p>\n";
  for (const profile::TimelineReport& r : run.timelines) {
    const profile::TimelineBreakdown& t = r.timeline;
    h += fmt::format(
        "<h3>{} (pid {}, {} events; basis: {})</h3>\n<div class=\"grid\"><table><tr><th>type</th><th>time "
        "ms</th><th>percent</th></tr>\n",
        html_escape(r.source), r.pid, r.events, html_escape(r.basis));
    for (const auto& [name, ms] : profile::timeline_rows(t))
      h += fmt::format("<tr><td>{}</td><td class=\"n\">{:.3f}</td><td class=\"n\">{:.2f}%</td></tr>\n", name,
                       ms, t.pct(ms));
    h += "</table>\n";
    if (r.steps > 0) h += "<p>" + html_escape(profile::per_step_line(r)) + "</p>\n";
    h += "<table><tr><th>op family</th><th>count</th><th>total ms</th><th>%</th><th>cumulative "
         "%</th></tr>\n";
    for (const profile::OpRow& o : r.ops)
      h += fmt::format(
          "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{:.3f}</td><td class=\"n\">{:.2f}</td>"
          "<td class=\"n\">{:.2f}</td></tr>\n",
          html_escape(o.family), o.count, o.total_ms, o.pct, o.cum_pct);
    h += "</table></div>\n<details><summary>Top "
         "kernels</summary><table><tr><th>kernel</th><th>count</th><th>total "
         "ms</th><th>%</th></tr>\n";
    for (const profile::OpRow& o : r.kernels)
      h += fmt::format(
          "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{:.3f}</td><td "
          "class=\"n\">{:.2f}</td></tr>\n",
          html_escape(o.family.size() > 120 ? o.family.substr(0, 117) + "..." : o.family), o.count,
          o.total_ms, o.pct);
    h += "</table></details>\n";
    if (r.gaps.empty()) continue;
    h +=
        "<details><summary>Longest idle gaps (what the GPU waited for)</summary><table><tr><th>at ms</th><th>"
        "length ms</th><th>GPU before</th><th>GPU after</th><th>host</th></tr>\n";
    auto cut = [](const std::string& s) { return s.size() > 60 ? s.substr(0, 57) + "..." : s; };
    for (const profile::IdleGap& g : r.gaps) {
      std::string host;
      for (const std::string& x : g.host) host += (host.empty() ? "" : " &gt; ") + html_escape(x);
      h += fmt::format(
          "<tr><td class=\"n\">{:.3f}</td><td "
          "class=\"n\">{:.3f}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
          g.start_ms, g.ms, html_escape(cut(g.before)), html_escape(cut(g.after)), host.empty() ? "-" : host);
    }
    h += "</table></details>\n";
  }

  // Last steps and configuration.
  if (!run.steps.empty()) {
    h += "<h2>Last steps</h2>\n<table><tr><th>step</th><th>loss</th><th>lr</th><th>grad norm</th><th>ms</th>"
         "<th>tok/s/GPU</th><th>MFU %</th><th>mem GB</th></tr>\n";
    const size_t from = run.steps.size() > 10 ? run.steps.size() - 10 : 0;
    for (size_t i = from; i < run.steps.size(); ++i) {
      const nlohmann::json& s = run.steps[i];
      h += fmt::format(
          "<tr><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>"
          "<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td "
          "class=\"n\">{}</td></tr>\n",
          fmt_num(num(s, "step")), fmt_num(num(s, "loss")), fmt_num(num(s, "lr")),
          fmt_num(num(s, "grad_norm")), fmt_num(num(s, "iter_ms")), fmt_num(num(s, "tok_s_gpu")),
          fmt_num(num(s, "mfu") * 100), fmt_num(num(s, "mem_gb")));
    }
    h += "</table>\n";
  }
  if (!run.config_yaml.empty())
    h += "<h2>Configuration</h2>\n<details><summary>config.yaml</summary><pre>" +
         html_escape(run.config_yaml) + "</pre></details>\n";
  h += "<p style=\"color:#888;font-size:12px\">Generated by primus " PRIMUS_VERSION
       " (primus report).</p>\n</body></html>\n";
  return h;
}

std::string write_run_report(const std::string& dir, const std::string& output,
                             const std::vector<std::string>& compare) {
  RunData run = load_run(dir);
  for (const std::string& c : compare) {
    RunData other = load_run(c);
    std::string name = fs::path(c).lexically_normal().filename().string();
    if (name.empty()) name = fs::path(c).lexically_normal().parent_path().filename().string();
    run.compared.push_back({name, std::move(other.steps), std::move(other.validation)});
  }
  const std::string path = output.empty() ? dir + "/report.html" : output;
  std::ofstream f(path);
  if (!f) throw Error(ErrorKind::kRuntime, "report: cannot write " + path);
  f << render_html(run);
  if (!f) throw Error(ErrorKind::kRuntime, "report: writing " + path + " failed");
  return path;
}

}  // namespace primus::report
