#include "train/step_trace.hpp"

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <Kokkos_Core.hpp>

#include "core/error.hpp"
#include "pipeline/stage_program.hpp"

namespace mpf {

namespace {
// Event names travel between ranks as their index in this table: the compute ops as a schedule
// table writes them, the P2P verbs (OpKind's order: they follow the compute kinds), then the
// phases after the schedule.
const std::vector<std::string>& names() {
  static const std::vector<std::string> table = [] {
    std::vector<std::string> n = {"F", "B", "W"};
    for (int k = int(pipeline::OpKind::kRecvForward); k <= int(pipeline::OpKind::kPostRecvBackward);
         ++k) {
      n.push_back(pipeline::op_name(pipeline::OpKind(k)));
    }
    n.insert(n.end(), {"grad sync", "optimizer"});
    return n;
  }();
  return table;
}

int name_index(const char* name) {
  for (size_t i = 0; i < names().size(); ++i) {
    if (names()[i] == name) return int(i);
  }
  MPF_FATAL(std::string("trace event '") + name + "' has no entry in the trace's name table");
}

bool is_compute(int name) {
  return name <= 2;  // F, B, W
}

const char* category(int name) {
  if (is_compute(name)) return names()[name].c_str();
  return names()[name] == "optimizer" ? "optimizer" : "comm";
}
}  // namespace

void StepTrace::entered(StepPhase phase, int step, double /*min_seconds*/) {
  if (phase == StepPhase::kStep && traces(step)) {
    MPF_MPI_CHECK(MPI_Barrier(grid_.world_comm()));
    events_.clear();
    clock_.reset();
    stage_.record(&events_, [this] { return now(); });
    tracing_ = true;
  } else if (phase == StepPhase::kGradNorm && tracing_) {
    Kokkos::fence();  // the span ends when the reductions' kernels have
    optimizer_start_ = now();
  }
}

void StepTrace::left(StepPhase phase) {
  if (!tracing_) return;
  if (phase == StepPhase::kCompute) {
    Kokkos::fence();
    sync_start_ = now();
  } else if (phase == StepPhase::kUpdate) {
    Kokkos::fence();
    // Spans outside the schedule, named by string literals (the names() table).
    events_.push_back({"grad sync", -1, -1, sync_start_, optimizer_start_});
    events_.push_back({"optimizer", -1, -1, optimizer_start_, now()});
  } else if (phase == StepPhase::kStep) {
    stage_.record(nullptr, {});
    tracing_ = false;
  }
}

void StepTrace::write(const std::string& path) const {
  const Grid& grid = grid_;
  // Five doubles per event: name index, microbatch, chunk, start, end.
  std::vector<double> mine;
  for (const StageEvent& e : events_) {
    mine.insert(mine.end(),
                {double(name_index(e.name)), double(e.mb), double(e.chunk), e.start, e.end});
  }
  const int n = int(mine.size()), world = grid.world_size();
  const bool root = grid.world_rank() == 0;
  std::vector<int> counts(root ? world : 0), offsets(root ? world : 0);
  MPF_MPI_CHECK(MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, grid.world_comm()));
  int total = 0;
  for (int r = 0; r < int(counts.size()); ++r) {
    offsets[r] = total;
    total += counts[r];
  }
  std::vector<double> all(total);
  MPF_MPI_CHECK(MPI_Gatherv(mine.data(), n, MPI_DOUBLE, all.data(), counts.data(), offsets.data(),
                            MPI_DOUBLE, 0, grid.world_comm()));
  if (!root) return;
  // "x": create, failing if the file exists (C11), so nothing is ever replaced.
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wx"), &std::fclose);
  if (!f) {
    std::fprintf(stderr, "warning: --trace %s: cannot create it (exists or unwritable); no trace\n",
                 path.c_str());
    return;
  }
  const int T = grid.tp_size(), D = grid.dp_size(), CP = grid.cp_size();
  std::fprintf(f.get(), "{\"traceEvents\": [\n");
  bool first = true;
  for (int r = 0; r < world; ++r) {
    std::fprintf(
        f.get(),
        "%s  {\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, \"args\": "
        "{\"name\": \"rank %d (tp %d, cp %d, dp %d, pp %d)\"}}",
        first ? "" : ",\n", r, r, r % T, (r / T) % CP, (r / (T * CP)) % D, r / (T * CP * D));
    first = false;
  }
  for (int r = 0; r < world; ++r) {
    for (int i = offsets[r]; i < offsets[r] + counts[r]; i += 5) {
      const int name = int(all[i]), mb = int(all[i + 1]), chunk = int(all[i + 2]);
      const double ts = all[i + 3] * 1e6, dur = (all[i + 4] - all[i + 3]) * 1e6;
      std::string label = names()[name];
      if (mb >= 0) {
        label += is_compute(name) ? std::to_string(mb) : " mb " + std::to_string(mb);
        label += ".c" + std::to_string(chunk);
      }
      std::fprintf(
          f.get(),
          ",\n  {\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": 0, \"tid\": "
          "%d, \"ts\": %.3f, \"dur\": %.3f, \"args\": {\"microbatch\": %d, \"chunk\": %d}}",
          label.c_str(), category(name), r, ts, dur, mb, chunk);
    }
  }
  std::fprintf(f.get(), "\n]}\n");
  std::printf("trace of step written to %s\n", path.c_str());
}

}  // namespace mpf
