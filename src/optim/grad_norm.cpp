#include "optim/grad_norm.hpp"

#include <string>

#include "core/parallel.hpp"
#include "core/transfer.hpp"

namespace mpf {

SumOfSquares::SumOfSquares(int sums) : total_("mpf::grad_norm::total", sums) {}

void SumOfSquares::reset() {
  pieces_.clear();
}

void SumOfSquares::add(const float* g, int64_t n, int sum) {
  pieces_.push_back({g, n, sum});
}

double SumOfSquares::read() {
  return read_all()[0];
}

std::vector<double> SumOfSquares::read_all() {
  if (pieces_ != tabled_) {
    // Indices from the lowest piece: the pieces are parts of one gradient buffer.
    base_ = nullptr;
    for (const Piece& p : pieces_) {
      if (p.n > 0 && (!base_ || p.g < base_)) base_ = p.g;
    }
    std::vector<SumBlock> blocks;
    for (const Piece& p : pieces_) {
      if (p.n > 0) append_sum_blocks(blocks, p.g - base_, p.n, p.sum);
    }
    blocks_ = Kokkos::View<SumBlock*, MemSpace>(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("mpf::grad_norm::blocks")),
        blocks.size());
    copy_from_host(blocks_.data(), blocks.data(), blocks.size() * sizeof(SumBlock),
                   "h2d gradient norm blocks");
    tabled_ = pieces_;
  }
  const float* g = base_;
  sum_pieces_into(
      "mpf::sum_of_squares", blocks_.data(), int64_t(blocks_.extent(0)),
      KOKKOS_LAMBDA(int64_t i) { return double(g[i]) * double(g[i]); }, total_.data(),
      int(total_.extent(0)));
  std::vector<double> out(total_.extent(0));
  copy_to_host(out.data(), total_.data(), out.size() * sizeof(double), "d2h gradient norm");
  return out;
}

double sum_of_squares(const float* g, int64_t n) {
  SumOfSquares s;
  s.add(g, n);
  return s.read();
}

float clip_scale(double norm, float clip) {
  if (clip <= 0.0f) return 1.0f;
  const double scale = clip / (norm + 1e-6);
  return scale < 1.0 ? static_cast<float>(scale) : 1.0f;
}

}  // namespace mpf
