// Muon (K. Jordan et al. 2024, "Muon: An optimizer for hidden layers in neural networks") for
// the blocks' weight matrices, with the update scaled as Moonlight does (J. Liu et al. 2025,
// "Muon is Scalable for LLM Training", arXiv 2502.16982), so that the run's --lr and weight
// decay suit both Muon's matrices and the AdamW that keeps the rest. For each matrix G (rows x
// cols) with momentum M, clipping factor s, learning rate lr and decay wd:
//   M = μ·M + s·G;  U = s·G + μ·M                                  (Nesterov's form)
//   X = U / (‖U‖_F + 1e-7), transposed when rows > cols (the smaller Gram matrix)
//   5 times:  A = X·Xᵀ;  B = b·A + c·A·A;  X = a·X + B·X        (a, b, c) = (3.4445,
//   −4.7750, 2.0315) P = P·(1 − lr·wd) − lr·0.2·√max(rows, cols)·X
// The Newton–Schulz iteration drives X's singular values towards 1 (the quintic's coefficients are
// Jordan's: fast, not exact); 0.2·√max(rows, cols) gives the update the RMS of AdamW's (Moonlight's
// §2.2). The matrices are those Hugging Face stores: a fused [Q | K | V] or [gate | up] is cut
// into its parts unless the family stores it fused (GPT-2's c_attn, Phi-3's qkv_proj and
// gate_up_proj), each expert's matrices are their own, and deepseek_v3's latent attention's are
// q_a_proj, q_b_proj (or q_proj), kv_a_proj_with_mqa (one matrix), kv_b_proj and o_proj, the down
// projections whole on every TP rank, as is a multi-token prediction module's eh_proj (one
// matrix). Embeddings, the head, norms, biases,
// q/k norms, the router and the shared expert's gate stay with AdamW (optim/adamw.hpp).
//
// The momentum lives in AdamW's first moment at the matrices' places, and AdamW's second moment
// holds its own segments only (optim/adamw.hpp): Muon's state is one moment. The checkpoint's
// optimizer file holds the momentum as it holds m, in the layout-independent order, and zeros
// for v at the matrices' places (the format of an AdamW run's), so a Muon run resumes on any
// layout.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "core/bf16.hpp"
#include "core/types.hpp"
#include "model/parameters.hpp"
#include "model/shard.hpp"
#include "optim/adamw.hpp"

namespace mpf {

struct MuonConfig {
  float momentum = 0.95f;
  float weight_decay = 0.1f;
  bool ns_bf16 = false;  // Newton–Schulz's products in bf16 (accumulated in fp32)
};

// How a matrix is cut over the TP ranks: whole on each, or this rank's block of rows (a
// column-parallel weight) or of columns (a row-parallel one).
enum class MuonSplit { kNone, kRows, kCols };

// One matrix: this rank's `rows` x `cols` block of it, row-major, at slab offset `offset` (its
// gradient and momentum at the same offsets of theirs). Under TP the matrix is the TP ranks'
// blocks side by side (split), each block held by `replicas` consecutive ranks (a kv head
// replicated when there are fewer kv heads than TP ranks), this rank's at block rank / replicas.
struct MuonMatrix {
  int64_t offset = 0;
  int rows = 0, cols = 0;
  MuonSplit split = MuonSplit::kNone;
  int replicas = 1;
  // The whole matrix's sizes.
  int full_rows() const;
  int full_cols() const;
  int blocks = 1;       // distinct blocks over the TP ranks
  bool expert = false;  // an expert's: held by the expert group's replicas (MuonGroups)
};

// The ranks Muon works with: `tp` holds the other blocks of each matrix (a 1-rank communicator
// without TP); `replicas` hold the same parameters (DP x CP) and `expert_replicas` the same
// experts (expert-DP x CP under EP; the same as replicas without it). The matrices are dealt out
// over the replicas: each orthogonalises its share and broadcasts the updated matrix.
struct MuonGroups {
  MPI_Comm tp = MPI_COMM_SELF, replicas = MPI_COMM_SELF, expert_replicas = MPI_COMM_SELF;
};

// Whether the slab's pieces of `tensor` are Muon's (a block's 2-D weights).
bool muon_tensor(TensorId tensor);
// The elements of a slab's Muon matrices (its blocks' pieces of muon_tensor): the momentum that
// has no second moment beside it (the memory plan's).
int64_t muon_floats(const SlabLayout& layout);

// The Muon matrices of a rank's parameters, in slab order: under TP, its blocks of them.
std::vector<MuonMatrix> muon_matrices(const Parameters& params, const TpShard& shard);
// InputError where Muon cannot cut a shard's matrices: a fused Q/K/V whose kv heads are
// replicated over TP.
void check_muon_split(const GPTConfig& cfg, const TpShard& shard);
// The same from the slab's layout alone (the planner's: no parameters allocated).
std::vector<MuonMatrix> muon_matrices(const GPTConfig& cfg, const SlabLayout& layout,
                                      const TpShard& shard);

// Newton-Schulz's FLOPs on a whole rows x cols matrix: 5 x (4m²n + 2m³), m <= n its sides.
double newton_schulz_flops(int rows, int cols);

// Who orthogonalises each matrix: its rank among the `replicas` ranks holding it (an expert's
// among `expert_replicas`), by Newton-Schulz's cost (m²·n), the largest first, each to the least
// loaded rank (the lowest on a tie). The trainer and the planner deal them out with this one
// table.
std::vector<int> muon_owners(const std::vector<MuonMatrix>& matrices, int replicas,
                             int expert_replicas);

// The orthogonalisation alone (the 5 iterations above) of the rows x cols matrix `x`, in place;
// `work` holds muon_work_floats(rows, cols) floats.
void newton_schulz(float* x, int rows, int cols, bool bf16_products, float* work);
int64_t muon_work_floats(int rows, int cols);
// The workspace Muon allocates for a rank holding `shard` (the largest of its matrices'), in
// floats: what the memory plan counts.
int64_t muon_workspace_floats(const TpShard& shard);
// The floats one matrix needs: its block's U, the gathered blocks, the whole X and the iteration
// buffers.
int64_t muon_matrix_floats(const MuonMatrix& a, int tp_size);

class Muon {
 public:
  // Under TP each rank gathers the whole matrix and orthogonalises it (the same bits on every TP
  // rank), then updates its own block: the Newton-Schulz products are repeated on the TP ranks
  // rather than split over them, which for a block's matrices (C up to a few thousand) costs
  // less than the three collectives per iteration a split product would need. Over the replicas
  // each matrix has one owner (the largest first, each to the least loaded), which computes its
  // update and broadcasts it, as Moonlight's distributed Muon deals matrices out: the bits are
  // those every replica would have computed.
  Muon(const MuonConfig& cfg, std::vector<MuonMatrix> matrices, const MuonGroups& groups);

  // One update of every matrix; momentum is laid out as params (AdamW's first moment).
  void step(float* params, const float* grads, float* momentum, float lr, float grad_scale,
            bf16* params16 = nullptr);
  // The same under ZeRO-1, where this rank holds the summed gradients and the momentum of its
  // shard only (`segments`, AdamW's, the matrices' marked by_muon): each rank writes U for its
  // parts at their slab places in `gathered` (slab-sized: the gradient slab, free once its sum was
  // scattered), `gather` brings every rank's parts (ZeRO's all-gather over the buckets), and the
  // owners orthogonalise and broadcast as above. The parameters' bf16 copy is the caller's
  // (after ZeRO's all-gather).
  void step_sharded(float* params, const float* shard_grads, float* shard_momentum,
                    const std::vector<OptimizerSegment>& segments, float* gathered,
                    const std::function<void(float*)>& gather, float lr, float grad_scale);

  // Matrix k from U, this rank's block of M's Nesterov update, to this rank's block of P (public:
  // CUDA's extended lambdas may not live in a private member function).
  void orthogonalise_and_update(size_t k, const float* U, float* params, float lr, bf16* params16);

  const std::vector<MuonMatrix>& matrices() const { return matrices_; }
  // The workspace's bytes (the largest matrix's iteration buffers).
  int64_t work_bytes() const { return int64_t(work_.extent(0)) * int64_t(sizeof(float)); }

 private:
  // Every matrix from its owner to the other replicas.
  void broadcast_updates(float* params, bf16* params16);
  // The replicas a matrix is dealt out over.
  MPI_Comm group_of(const MuonMatrix& a) const {
    return a.expert ? groups_.expert_replicas : groups_.replicas;
  }

  MuonConfig cfg_;
  std::vector<MuonMatrix> matrices_;
  MuonGroups groups_;
  int tp_size_ = 1, tp_rank_ = 0;
  std::vector<int> owner_;  // per matrix: its rank in group_of()
  std::vector<bool> mine_;  // per matrix: this rank computes it
  Slab work_;
};

}  // namespace mpf
