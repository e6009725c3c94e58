#pragma once
// Pictures of pipeline schedules: a timeline per schedule (ranks top to bottom, time left to right; forward,
// backward, input-gradient and weight-gradient passes coloured, micro-batch numbers on the boxes, idle
// grey), and the HTML page of `primus projection pipeline`. Inline SVG, nothing fetched from the network.
// The post-flight report draws a run's measured pipeline timeline with the same function (a SimResult
// filled from the recorded action times, report/run_report.h).
#include <string>
#include <utility>
#include <vector>

#include "parallel/pipeline_projection.h"

namespace primus::report {

// One schedule's timeline; `t_end` > 0 fixes the time axis (so that several charts share one scale).
// x_label: the time axis (default: the simulator's units of F).
std::string pipeline_timeline_svg(const std::string& title, const parallel::Schedule& schedule,
                                  const parallel::SimResult& sim, double t_end = 0, int width = 1000,
                                  const std::string& x_label = "");

// The page: the summary table, notes, the split, and every projected schedule's timeline on one time scale.
std::string pipeline_projection_html(const parallel::PipelineProjection& p, const std::string& title);

// The same timelines as standalone SVG files' contents, (schedule name, svg), on one time scale.
std::vector<std::pair<std::string, std::string>> pipeline_projection_svgs(
    const parallel::PipelineProjection& p);

}  // namespace primus::report
