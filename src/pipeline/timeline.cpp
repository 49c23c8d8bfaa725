// How a simulated step is shown: one timeline string per rank, a character cell per time unit, and
// a Chrome/Perfetto trace (simulator.hpp declares both).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>

#include "pipeline/simulator.hpp"

namespace mpf::pipeline {

namespace {
std::string format_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.12g", v);
  return buf;
}
}  // namespace

std::string event_label(const SimEvent& e, int virtual_stages) {
  const char op = e.op == SimOp::kForward ? 'F' : e.op == SimOp::kBackwardInput ? 'B' : 'W';
  std::string label = op + std::to_string(e.mb);
  if (virtual_stages > 1) label += "c" + std::to_string(e.chunk);
  return label;
}

Timelines render_timelines(const SimulationResult& r) {
  Timelines t;
  const double makespan = r.makespan;
  // The cell: the coarsest simple unit every boundary falls on, else a scaled picture.
  t.exact = false;
  for (double cell : {1.0, 0.5, 0.25, 0.2, 0.1, 0.05, 0.02, 0.01}) {
    bool fits = makespan / cell <= 5000;
    for (const auto& rank : r.events) {
      for (const SimEvent& e : rank) {
        for (double x : {e.start, e.end}) {
          fits = fits && std::fabs(x / cell - std::round(x / cell)) < 1e-6;
        }
      }
    }
    if (fits) {
      t.cell = cell;
      t.exact = true;
      break;
    }
  }
  if (!t.exact) t.cell = makespan > 0 ? makespan / 200 : 1.0;
  const int cells = static_cast<int>(std::ceil(makespan / t.cell - 1e-6));

  size_t width = 1;
  for (const auto& rank : r.events) {
    for (const SimEvent& e : rank)
      width = std::max(width, event_label(e, r.shape.virtual_stages).size());
  }
  auto pad = [&](std::string s) { return s + std::string(width - s.size(), ' '); };

  for (const auto& all : r.events) {
    std::vector<SimEvent> drawn;  // zero-cost ops (W inside B) take no cell
    for (const SimEvent& e : all) {
      if (e.end > e.start) drawn.push_back(e);
    }
    std::string line;
    size_t j = 0;
    for (int i = 0; i < cells; ++i) {
      const double mid = (i + 0.5) * t.cell;
      while (j < drawn.size() && drawn[j].end <= mid) ++j;
      std::string cell = ".";
      if (j < drawn.size() && drawn[j].start <= mid) {
        const bool first = drawn[j].start >= (i - 0.5) * t.cell;
        cell = first ? event_label(drawn[j], r.shape.virtual_stages) : std::string(width, '-');
      }
      line += (i ? " " : "") + pad(cell);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    t.ranks.push_back(line);
  }
  return t;
}

void write_chrome_trace(const SimulationResult& r, std::ostream& out) {
  out << "{\"traceEvents\": [\n";
  bool first = true;
  auto sep = [&] {
    out << (first ? "  " : ",\n  ");
    first = false;
  };
  for (size_t rank = 0; rank < r.events.size(); ++rank) {
    sep();
    out << "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": " << rank
        << ", \"args\": {\"name\": \"rank " << rank << "\"}}";
  }
  for (size_t rank = 0; rank < r.events.size(); ++rank) {
    for (const SimEvent& e : r.events[rank]) {
      if (e.end <= e.start) continue;
      const char op = e.op == SimOp::kForward ? 'F' : e.op == SimOp::kBackwardInput ? 'B' : 'W';
      sep();
      out << "{\"name\": \"" << op << e.mb << ".c" << e.chunk << "\", \"cat\": \"" << op
          << "\", \"ph\": \"X\", \"pid\": 0, \"tid\": " << rank
          << ", \"ts\": " << format_number(e.start)
          << ", \"dur\": " << format_number(e.end - e.start)
          << ", \"args\": {\"microbatch\": " << e.mb << ", \"chunk\": " << e.chunk << "}}";
    }
  }
  out << "\n]}\n";
}

}  // namespace mpf::pipeline
