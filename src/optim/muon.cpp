#include "optim/muon.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "backends/gemm.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"
#include "optim/grad_norm.hpp"

namespace mpf {

namespace {

// Jordan's quintic: a steep first step that pushes small singular values up fast.
constexpr float kA = 3.4445f, kB = -4.7750f, kC = 2.0315f;
constexpr int kIterations = 5;
constexpr double kNormEps = 1e-7;

// The parts a block's tensor is cut into, as (row offset, rows) within one (rows x cols) matrix
// of the slab piece, for a matrix Hugging Face stores as several.
void add_parts(std::vector<MuonMatrix>& out, int64_t offset, int cols,
               std::initializer_list<int> part_rows) {
  for (int rows : part_rows) {
    if (rows == 0) continue;
    out.push_back({offset, rows, cols});
    offset += int64_t(rows) * cols;
  }
}

// dst[0, n) = src[0, n) in the kernels' memory.
void copy_floats(float* dst, const float* src, int64_t n) {
  for_each(
      "mpf::muon_copy", n, KOKKOS_LAMBDA(int64_t i) { dst[i] = src[i]; });
}

}  // namespace

bool muon_tensor(TensorId t) {
  return t == TensorId::qkvw || t == TensorId::attprojw || t == TensorId::fcw ||
         t == TensorId::fcprojw || t == TensorId::sfcw || t == TensorId::sfcprojw;
}

std::vector<MuonMatrix> muon_matrices(const Parameters& params, const TpShard& shard) {
  require(shard.size == 1, "Muon needs whole matrices on each rank (one TP rank)");
  const GPTConfig& cfg = params.cfg;
  const ModelFeatures f = cfg.features();
  const int C = cfg.channels;
  // GPT-2's c_attn and Phi-3's qkv_proj are one matrix in Hugging Face's files; the other
  // families store q_proj, k_proj and v_proj, and gate_proj and up_proj, apart.
  const bool split_qkv = cfg.llama() && !f.fused_hf_projections;
  const bool split_gate_up = cfg.swiglu() && !f.fused_hf_projections;
  std::vector<MuonMatrix> out;
  for (const SlabPiece& p : params.layout.pieces()) {
    if (p.block < 0 || !muon_tensor(p.tensor)) continue;
    switch (p.tensor) {
      case TensorId::qkvw:
        if (split_qkv) {
          add_parts(out, p.offset, C, {shard.attn, shard.kv, shard.kv});
        } else {
          add_parts(out, p.offset, C, {shard.qkv});
        }
        break;
      case TensorId::attprojw:
        add_parts(out, p.offset, shard.attn, {C});
        break;
      case TensorId::fcw: {
        // A dense MLP's one matrix, or each expert's in turn.
        const int64_t per = int64_t(shard.mlp_in) * C;
        for (int64_t at = 0; at < p.length; at += per) {
          if (split_gate_up) {
            add_parts(out, p.offset + at, C, {shard.fc, shard.fc});
          } else {
            add_parts(out, p.offset + at, C, {shard.mlp_in});
          }
        }
        break;
      }
      case TensorId::fcprojw: {
        const int64_t per = int64_t(C) * shard.fc;
        for (int64_t at = 0; at < p.length; at += per) add_parts(out, p.offset + at, shard.fc, {C});
        break;
      }
      case TensorId::sfcw:
        add_parts(out, p.offset, C, {shard.shared_fc, shard.shared_fc});
        break;
      case TensorId::sfcprojw:
        add_parts(out, p.offset, shard.shared_fc, {C});
        break;
      default:
        break;
    }
  }
  return out;
}

int64_t muon_work_floats(int rows, int cols) {
  const int64_t m = std::min(rows, cols), n = std::max(rows, cols);
  // X and the next X (m x n), A and B (m x m) in fp32; their bf16 roundings (X, A, B) in halves.
  return 2 * m * n + 2 * m * m + (m * n + 2 * m * m + 1) / 2 + 1;
}

void newton_schulz(float* x, int rows, int cols, bool bf16_products, float* work) {
  using backend::Op;
  const int m = std::min(rows, cols), n = std::max(rows, cols);
  // x is (m x n) here: the caller transposed a tall matrix.
  float* X = x;
  float* Y = work;
  float* A = Y + int64_t(m) * n;
  float* B = A + int64_t(m) * m;
  bf16* X16 = reinterpret_cast<bf16*>(B + int64_t(m) * m);
  bf16* A16 = X16 + int64_t(m) * n;
  bf16* B16 = A16 + int64_t(m) * m;
  const int64_t mn = int64_t(m) * n, mm = int64_t(m) * m;
  for (int it = 0; it < kIterations; ++it) {
    if (bf16_products) round_to_bf16(X16, X, mn);
    // A = X·Xᵀ
    if (bf16_products) {
      backend::gemm_bf16(Op::N, Op::T, m, m, n, 1.0f, X16, n, X16, n, 0.0f, A, m);
    } else {
      backend::gemm(Op::N, Op::T, m, m, n, 1.0f, X, n, X, n, 0.0f, A, m);
    }
    // B = b·A + c·A·A
    copy_floats(B, A, mm);
    if (bf16_products) {
      round_to_bf16(A16, A, mm);
      backend::gemm_bf16(Op::N, Op::N, m, m, m, kC, A16, m, A16, m, kB, B, m);
    } else {
      backend::gemm(Op::N, Op::N, m, m, m, kC, A, m, A, m, kB, B, m);
    }
    // Y = a·X + B·X
    copy_floats(Y, X, mn);
    if (bf16_products) {
      round_to_bf16(B16, B, mm);
      backend::gemm_bf16(Op::N, Op::N, m, n, m, 1.0f, B16, m, X16, n, kA, Y, n);
    } else {
      backend::gemm(Op::N, Op::N, m, n, m, 1.0f, B, m, X, n, kA, Y, n);
    }
    std::swap(X, Y);
  }
  // An odd number of iterations leaves the result in the workspace.
  if (X != x) copy_floats(x, X, mn);
}

int64_t muon_workspace_floats(const TpShard& shard) {
  if (shard.local_layers() == 0) return 0;
  const GPTConfig& cfg = shard.cfg;
  const int C = cfg.channels;
  const bool fused = cfg.features().fused_hf_projections;
  // One block's matrix shapes, cut as muon_matrices() cuts them.
  std::vector<std::pair<int, int>> shapes = {{C, shard.attn}, {C, shard.fc}};
  if (cfg.llama() && !fused) {
    shapes.insert(shapes.end(), {{shard.attn, C}, {shard.kv, C}});
  } else {
    shapes.push_back({shard.qkv, C});
  }
  shapes.push_back({cfg.swiglu() && !fused ? shard.fc : shard.mlp_in, C});
  if (shard.shared_fc > 0)
    shapes.insert(shapes.end(), {{shard.shared_fc, C}, {C, shard.shared_fc}});
  int64_t work = 0;
  for (const auto& [rows, cols] : shapes) {
    if (rows > 0 && cols > 0) {
      work = std::max(work, int64_t(rows) * cols + muon_work_floats(rows, cols));
    }
  }
  return work;
}

Muon::Muon(const MuonConfig& cfg, std::vector<MuonMatrix> matrices)
    : cfg_(cfg), matrices_(std::move(matrices)) {
  int64_t work = 0;
  for (const MuonMatrix& a : matrices_) {
    // The matrix itself (momentum-updated, maybe transposed) and its iteration buffers.
    work = std::max(work, int64_t(a.rows) * a.cols + muon_work_floats(a.rows, a.cols));
  }
  work_ = Slab("mpf::muon::work", work);
}

void Muon::step(float* params, const float* grads, float* momentum, float lr, float grad_scale,
                bf16* params16) {
  const float mu = cfg_.momentum, decay = 1.0f - lr * cfg_.weight_decay;
  for (const MuonMatrix& a : matrices_) {
    const int rows = a.rows, cols = a.cols;
    const int64_t n = int64_t(rows) * cols;
    const bool tall = rows > cols;  // worked on transposed: X·Xᵀ is then cols x cols
    float* p = params + a.offset;
    const float* g = grads + a.offset;
    float* mom = momentum + a.offset;
    float* X = work_.data();
    // M = μ·M + s·G;  U = s·G + μ·M, written as X (transposed for a tall matrix).
    for_each(
        "mpf::muon_momentum", n, KOKKOS_LAMBDA(int64_t i) {
          const float gi = g[i] * grad_scale;
          const float mi = mu * mom[i] + gi;
          mom[i] = mi;
          const int64_t r = i / cols, c = i % cols;
          X[tall ? c * rows + r : i] = gi + mu * mi;
        });
    const float inv = float(1.0 / (std::sqrt(sum_of_squares(X, n)) + kNormEps));
    for_each(
        "mpf::muon_normalize", n, KOKKOS_LAMBDA(int64_t i) { X[i] *= inv; });
    newton_schulz(X, rows, cols, cfg_.ns_bf16, X + n);
    // Moonlight's scale: the update's RMS is AdamW's (about 0.2).
    const float step = lr * 0.2f * std::sqrt(float(std::max(rows, cols)));
    for_each(
        "mpf::muon_update", n, KOKKOS_LAMBDA(int64_t i) {
          const int64_t r = i / cols, c = i % cols;
          const float pi = p[i] * decay - step * X[tall ? c * rows + r : i];
          p[i] = pi;
          if (params16) params16[a.offset + i] = to_bf16(pi);
        });
  }
}

}  // namespace mpf
