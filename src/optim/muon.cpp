#include "optim/muon.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>

#include "backends/gemm.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/profile.hpp"
#include "optim/grad_norm.hpp"
#include "parallel/device_mpi.hpp"

namespace mpf {

namespace {

// Jordan's quintic: a steep first step that pushes small singular values up fast.
constexpr float kA = 3.4445f, kB = -4.7750f, kC = 2.0315f;
constexpr int kIterations = 5;
constexpr double kNormEps = 1e-7;

// The parts of a block's tensor, one after another in the slab: each (rows x cols), cut over TP
// as `split` says, with its replicas (a kv head's rows). A fused tensor that Hugging Face stores
// apart is several parts.
struct Part {
  int rows;
  int replicas = 1;
};
void add_parts(std::vector<MuonMatrix>& out, int64_t offset, int cols, MuonSplit split, int tp_size,
               std::initializer_list<Part> parts) {
  for (const Part& p : parts) {
    if (p.rows == 0) continue;
    MuonMatrix a;
    a.offset = offset;
    a.rows = p.rows;
    a.cols = cols;
    a.split = tp_size > 1 ? split : MuonSplit::kNone;
    a.replicas = p.replicas;
    a.blocks = tp_size > 1 ? tp_size / p.replicas : 1;
    out.push_back(a);
    offset += int64_t(p.rows) * cols;
  }
}

// dst[0, n) = src[0, n) in the kernels' memory.
void copy_floats(float* dst, const float* src, int64_t n) {
  for_each(
      "mpf::muon_copy", n, KOKKOS_LAMBDA(int64_t i) { dst[i] = src[i]; });
}

// GPT-2's c_attn and Phi-3's qkv_proj and gate_up_proj are one matrix in Hugging Face's files;
// the other families store q_proj, k_proj, v_proj, and gate_proj, up_proj apart.
bool hf_splits_qkv(const GPTConfig& cfg) {
  return cfg.llama() && !cfg.features().fused_hf_projections;
}
bool hf_splits_gate_up(const GPTConfig& cfg) {
  return cfg.swiglu() && !cfg.features().fused_hf_projections;
}

}  // namespace

bool muon_tensor(TensorId t) {
  switch (t) {
    case TensorId::qkvw:
    case TensorId::attprojw:
    case TensorId::fcw:
    case TensorId::fcprojw:
    case TensorId::sfcw:
    case TensorId::sfcprojw:
    case TensorId::dfcw:
    case TensorId::dfcprojw:
    case TensorId::qaw:
    case TensorId::qbw:
    case TensorId::kvaw:
    case TensorId::kvbw:
    case TensorId::mtpehw:
      return true;
    default:
      return false;
  }
}

int64_t muon_floats(const SlabLayout& layout) {
  int64_t n = 0;
  for (const SlabPiece& p : layout.pieces()) {
    if (p.block >= 0 && muon_tensor(p.tensor)) n += p.length;
  }
  return n;
}

int MuonMatrix::full_rows() const {
  return split == MuonSplit::kRows ? rows * blocks : rows;
}
int MuonMatrix::full_cols() const {
  return split == MuonSplit::kCols ? cols * blocks : cols;
}

void check_muon_split(const GPTConfig& cfg, const TpShard& shard) {
  require(hf_splits_qkv(cfg) || shard.kv_replicas == 1,
          "--optimizer muon with a fused Q/K/V whose kv heads are replicated over --tp " +
              std::to_string(shard.size) + ": use --tp " +
              std::to_string(shard.size / shard.kv_replicas) + " or less");
}

std::vector<MuonMatrix> muon_matrices(const Parameters& params, const TpShard& shard) {
  return muon_matrices(params.cfg, params.layout, shard);
}

std::vector<MuonMatrix> muon_matrices(const GPTConfig& cfg, const SlabLayout& layout,
                                      const TpShard& shard) {
  const int C = cfg.channels, T = shard.size;
  // A fused tensor's TP blocks interleave its parts' rows, which Muon does not mind:
  // orthogonalisation commutes with a permutation of the rows, so the blocks side by side are the
  // matrix, reordered.
  const bool split_qkv = hf_splits_qkv(cfg), split_gate_up = hf_splits_gate_up(cfg);
  check_muon_split(cfg, shard);
  std::vector<MuonMatrix> out;
  const MuonSplit rows = MuonSplit::kRows, cols = MuonSplit::kCols;
  for (const SlabPiece& p : layout.pieces()) {
    if (p.block < 0 || !muon_tensor(p.tensor)) continue;
    switch (p.tensor) {
      case TensorId::qkvw:
        if (split_qkv) {
          add_parts(out, p.offset, C, rows, T,
                    {{shard.attn}, {shard.kv, shard.kv_replicas}, {shard.kv, shard.kv_replicas}});
        } else {
          add_parts(out, p.offset, C, rows, T, {{shard.qkv}});
        }
        break;
      case TensorId::attprojw:  // latent attention's o_proj reads NH·v_head, not the QK width
        add_parts(out, p.offset, cfg.mla() ? shard.heads * cfg.v_head_dim : shard.attn, cols, T,
                  {{C}});
        break;
      // Latent attention (model/mla_block.hpp): the down projections q_a_proj and
      // kv_a_proj_with_mqa (its latent and rotary key one matrix, as Hugging Face stores it) are
      // whole on every TP rank; q_b_proj (or q_proj) and kv_b_proj are cut by heads.
      case TensorId::qaw:
        add_parts(out, p.offset, C, MuonSplit::kNone, 1, {{cfg.q_lora_rank}});
        break;
      case TensorId::qbw:
        add_parts(out, p.offset, cfg.q_lora_rank > 0 ? cfg.q_lora_rank : C, rows, T,
                  {{shard.heads * cfg.head_size()}});
        break;
      case TensorId::kvaw:
        add_parts(out, p.offset, C, MuonSplit::kNone, 1, {{cfg.kv_lora_rank + cfg.qk_rope_dim}});
        break;
      case TensorId::kvbw:
        add_parts(out, p.offset, cfg.kv_lora_rank, rows, T,
                  {{shard.heads * (cfg.qk_nope_dim + cfg.v_head_dim)}});
        break;
      // A multi-token prediction module's eh_proj (C x 2C, whole on every TP rank): one matrix.
      case TensorId::mtpehw:
        add_parts(out, p.offset, 2 * C, MuonSplit::kNone, 1, {{C}});
        break;
      // A mixed stack's dense blocks (GPTConfig::mixed): their SwiGLU, gate and up apart.
      case TensorId::dfcw: {
        const int fc = int(p.length / (2 * int64_t(C)));
        add_parts(out, p.offset, C, rows, T, {{fc}, {fc}});
        break;
      }
      case TensorId::dfcprojw:
        add_parts(out, p.offset, int(p.length / C), cols, T, {{C}});
        break;
      case TensorId::fcw: {
        // A dense MLP's one matrix, or each expert's in turn.
        const size_t first = out.size();
        const int64_t per = int64_t(shard.mlp_in) * C;
        for (int64_t at = 0; at < p.length; at += per) {
          if (split_gate_up) {
            add_parts(out, p.offset + at, C, rows, T, {{shard.fc}, {shard.fc}});
          } else {
            add_parts(out, p.offset + at, C, rows, T, {{shard.mlp_in}});
          }
        }
        for (size_t k = first; k < out.size(); ++k) out[k].expert = cfg.moe();
        break;
      }
      case TensorId::fcprojw: {
        const size_t first = out.size();
        const int64_t per = int64_t(C) * shard.fc;
        for (int64_t at = 0; at < p.length; at += per) {
          add_parts(out, p.offset + at, shard.fc, cols, T, {{C}});
        }
        for (size_t k = first; k < out.size(); ++k) out[k].expert = cfg.moe();
        break;
      }
      case TensorId::sfcw:
        add_parts(out, p.offset, C, rows, T, {{shard.shared_fc}, {shard.shared_fc}});
        break;
      case TensorId::sfcprojw:
        add_parts(out, p.offset, shard.shared_fc, cols, T, {{C}});
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

int64_t muon_matrix_floats(const MuonMatrix& a, int tp_size) {
  const int64_t block = int64_t(a.rows) * a.cols;
  const int64_t gathered = a.split == MuonSplit::kNone ? 0 : block * tp_size;
  return block + gathered + int64_t(a.full_rows()) * a.full_cols() +
         muon_work_floats(a.full_rows(), a.full_cols());
}

int64_t muon_workspace_floats(const TpShard& shard) {
  if (shard.local_layers() == 0) return 0;
  const GPTConfig& cfg = shard.cfg;
  const int C = cfg.channels, T = shard.size;
  // One block's matrices, cut as muon_matrices() cuts them (an expert's are a dense MLP's).
  std::vector<MuonMatrix> one;
  const MuonSplit rows = MuonSplit::kRows, cols = MuonSplit::kCols;
  if (hf_splits_qkv(cfg)) {
    add_parts(one, 0, C, rows, T, {{shard.attn}, {shard.kv, shard.kv_replicas}});
  } else {
    add_parts(one, 0, C, rows, T, {{shard.qkv}});
  }
  add_parts(one, 0, shard.attn, cols, T, {{C}});
  add_parts(one, 0, C, rows, T, {{hf_splits_gate_up(cfg) ? shard.fc : shard.mlp_in}});
  add_parts(one, 0, shard.fc, cols, T, {{C}});
  add_parts(one, 0, C, rows, T, {{shard.shared_fc}});
  add_parts(one, 0, shard.shared_fc, cols, T, {{C}});
  int64_t work = 0;
  for (const MuonMatrix& a : one) work = std::max(work, muon_matrix_floats(a, T));
  return work;
}

Muon::Muon(const MuonConfig& cfg, std::vector<MuonMatrix> matrices, const MuonGroups& groups)
    : cfg_(cfg), matrices_(std::move(matrices)), groups_(groups) {
  MPF_MPI_CHECK(MPI_Comm_size(groups_.tp, &tp_size_));
  MPF_MPI_CHECK(MPI_Comm_rank(groups_.tp, &tp_rank_));
  int64_t work = 0;
  for (const MuonMatrix& a : matrices_) work = std::max(work, muon_matrix_floats(a, tp_size_));
  work_ = Slab("mpf::muon::work", work);
  // Deal the matrices out; every rank computes the same table.
  int size = 1, rank = 0, expert_size = 1, expert_rank = 0;
  MPF_MPI_CHECK(MPI_Comm_size(groups_.replicas, &size));
  MPF_MPI_CHECK(MPI_Comm_rank(groups_.replicas, &rank));
  MPF_MPI_CHECK(MPI_Comm_size(groups_.expert_replicas, &expert_size));
  MPF_MPI_CHECK(MPI_Comm_rank(groups_.expert_replicas, &expert_rank));
  owner_ = muon_owners(matrices_, size, expert_size);
  mine_.assign(matrices_.size(), true);
  for (size_t k = 0; k < matrices_.size(); ++k) {
    mine_[k] = owner_[k] == (matrices_[k].expert ? expert_rank : rank);
  }
}

double newton_schulz_flops(int rows, int cols) {
  const double m = std::min(rows, cols), n = std::max(rows, cols);
  return kIterations * (4 * m * m * n + 2 * m * m * m);
}

std::vector<int> muon_owners(const std::vector<MuonMatrix>& matrices, int replicas,
                             int expert_replicas) {
  const size_t count = matrices.size();
  std::vector<int> owner(count, 0);
  std::vector<size_t> order(count);
  for (size_t k = 0; k < count; ++k) order[k] = k;
  auto cost = [&](size_t k) {
    const MuonMatrix& a = matrices[k];
    const double m = std::min(a.full_rows(), a.full_cols());
    const double n = std::max(a.full_rows(), a.full_cols());
    return m * m * n;
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return cost(x) > cost(y); });
  for (bool expert : {false, true}) {
    std::vector<double> load(size_t(expert ? expert_replicas : replicas), 0.0);
    for (size_t k : order) {
      if (matrices[k].expert != expert) continue;
      const int least = int(std::min_element(load.begin(), load.end()) - load.begin());
      owner[k] = least;
      load[size_t(least)] += cost(k);
    }
  }
  return owner;
}

void Muon::step(float* params, const float* grads, float* momentum, float lr, float grad_scale,
                bf16* params16) {
  const float mu = cfg_.momentum;
  for (size_t k = 0; k < matrices_.size(); ++k) {
    const MuonMatrix& a = matrices_[k];
    const int64_t n = int64_t(a.rows) * a.cols;
    const float* g = grads + a.offset;
    float* mom = momentum + a.offset;
    // M = μ·M + s·G on every replica (the momentum stays replicated); U = s·G + μ·M, this
    // rank's block, where this rank computes the update.
    float* U = mine_[k] ? work_.data() : nullptr;
    for_each(
        "mpf::muon_momentum", n, KOKKOS_LAMBDA(int64_t i) {
          const float gi = g[i] * grad_scale;
          const float mi = mu * mom[i] + gi;
          mom[i] = mi;
          if (U) U[i] = gi + mu * mi;
        });
    if (mine_[k]) orthogonalise_and_update(k, U, params, lr, params16);
  }
  broadcast_updates(params, params16);
}

void Muon::step_sharded(float* params, const float* shard_grads, float* shard_momentum,
                        const std::vector<OptimizerSegment>& segments, float* gathered,
                        const std::function<void(float*)>& gather, float lr, float grad_scale) {
  const float mu = cfg_.momentum;
  // Each rank's parts of the matrices: the momentum in its shard, U at the slab's places.
  for (const OptimizerSegment& s : segments) {
    if (!s.by_muon) continue;
    const float* g = shard_grads + s.grad;
    float* mom = shard_momentum + s.state;
    float* U = gathered + s.param;
    for_each(
        "mpf::muon_momentum", s.length, KOKKOS_LAMBDA(int64_t i) {
          const float gi = g[i] * grad_scale;
          const float mi = mu * mom[i] + gi;
          mom[i] = mi;
          U[i] = gi + mu * mi;
        });
  }
  gather(gathered);
  for (size_t k = 0; k < matrices_.size(); ++k) {
    if (mine_[k]) orthogonalise_and_update(k, gathered + matrices_[k].offset, params, lr, nullptr);
  }
  broadcast_updates(params, nullptr);
}

void Muon::orthogonalise_and_update(size_t k, const float* U, float* params, float lr,
                                    bf16* params16) {
  const MuonMatrix& a = matrices_[k];
  const int rows = a.rows, cols = a.cols, R = a.full_rows(), Cf = a.full_cols();
  const int64_t n = int64_t(rows) * cols, N = int64_t(R) * Cf;
  const bool tall = R > Cf;  // worked on transposed: X·Xᵀ is then Cf x Cf
  const bool by_rows = a.split == MuonSplit::kRows;
  const int replicas = a.replicas;
  float* p = params + a.offset;
  // The workspace: U's blocks from every TP rank (when split), the whole X, Newton-Schulz's.
  const float* G = U;
  float* X = work_.data() + n;
  if (a.split != MuonSplit::kNone) {
    float* gathered = work_.data() + n;
    allgather(U, gathered, n, groups_.tp);
    G = gathered;
    X = gathered + n * tp_size_;
  }
  // The whole matrix from the blocks (a replicated block once), transposed when tall.
  for_each(
      "mpf::muon_assemble", N, KOKKOS_LAMBDA(int64_t e) {
        const int64_t I = e / Cf, J = e % Cf;
        const int64_t b = by_rows ? I / rows : J / cols;  // 0 without a split
        const int64_t i = by_rows ? I % rows : I, j = by_rows ? J : J % cols;
        X[tall ? J * R + I : e] = G[(b * replicas) * n + i * cols + j];
      });
  const float inv = float(1.0 / (std::sqrt(sum_of_squares(X, N)) + kNormEps));
  for_each(
      "mpf::muon_normalize", N, KOKKOS_LAMBDA(int64_t i) { X[i] *= inv; });
  {
    // --profile: the iterations' rate against the products' (5 x (4m²n + 2m³) FLOPs).
    profile::Scope timed("mpf::muon_newton_schulz", newton_schulz_flops(R, Cf));
    newton_schulz(X, R, Cf, cfg_.ns_bf16, X + N);
  }
  // Moonlight's scale: the update's RMS is AdamW's (about 0.2). This rank's block of X.
  const float step = lr * 0.2f * std::sqrt(float(std::max(R, Cf)));
  const float decay = 1.0f - lr * cfg_.weight_decay;
  const int64_t block = a.split == MuonSplit::kNone ? 0 : tp_rank_ / replicas;
  const int64_t offset = a.offset;
  for_each(
      "mpf::muon_update", n, KOKKOS_LAMBDA(int64_t e) {
        const int64_t i = e / cols, j = e % cols;
        const int64_t I = by_rows ? block * rows + i : i, J = by_rows ? j : block * cols + j;
        const float pi = p[e] * decay - step * X[tall ? J * R + I : I * Cf + J];
        p[e] = pi;
        if (params16) params16[offset + e] = to_bf16(pi);
      });
}

void Muon::broadcast_updates(float* params, bf16* params16) {
  // The owners' updates to the other replicas, in the same order on every rank.
  for (size_t k = 0; k < matrices_.size(); ++k) {
    const MuonMatrix& a = matrices_[k];
    MPI_Comm group = group_of(a);
    int size = 1;
    MPF_MPI_CHECK(MPI_Comm_size(group, &size));
    if (size == 1) continue;
    const int64_t n = int64_t(a.rows) * a.cols;
    broadcast(params + a.offset, n, owner_[k], group);
    if (params16 && !mine_[k]) round_to_bf16(params16 + a.offset, params + a.offset, n);
  }
}

}  // namespace mpf
