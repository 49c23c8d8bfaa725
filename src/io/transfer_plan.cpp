#include "io/transfer_plan.hpp"

#include <algorithm>

namespace mpf {

namespace {
// Floats in a staging buffer, at most (32 MiB).
constexpr int64_t kMaxStaging = int64_t(1) << 23;
// MPI counts and block lengths are int: longer runs are cut.
constexpr int64_t kMaxBlock = int64_t(1) << 30;
}  // namespace

int TransferPlan::count(int64_t round) const {
  return int(std::max<int64_t>(0, std::min(staging, total - round * staging)));
}

TransferPlan plan_transfer(int64_t body, std::vector<FileRun> runs, size_t sections) {
  TransferPlan plan;
  plan.body = body;
  // A file view must visit the file in ascending order.
  std::sort(runs.begin(), runs.end(),
            [](const FileRun& a, const FileRun& b) { return a.file < b.file; });
  int64_t largest_section = 0;
  std::vector<int64_t> per_section(sections + 1, 0);  // the last: runs not counted
  for (const FileRun& r : runs) {
    for (int64_t done = 0; done < r.length; done += kMaxBlock) {
      FileRun p = r;
      p.memory = r.memory ? r.memory + done : nullptr;
      p.file = r.file + done;
      p.length = std::min(kMaxBlock, r.length - done);
      plan.pieces.push_back(p);
      plan.view_lengths.push_back(int(p.length));
      plan.view_offsets.push_back(MPI_Aint(p.file) * MPI_Aint(sizeof(float)));
    }
    plan.total += r.length;
    int64_t& s = per_section[r.section < 0 ? sections : size_t(r.section)];
    s += r.length;
    largest_section = std::max(largest_section, s);
  }
  plan.staging = std::max<int64_t>(1, std::min(kMaxStaging, (largest_section + 1) / 2));
  plan.rounds = (plan.total + plan.staging - 1) / plan.staging;
  return plan;
}

}  // namespace mpf
