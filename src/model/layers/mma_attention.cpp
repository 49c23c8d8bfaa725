#include "model/layers/mma_attention.hpp"

#ifdef KOKKOS_ENABLE_CUDA
#include "backends/cuda/flash_attention_mma.hpp"
#endif

namespace mpf {

#ifdef KOKKOS_ENABLE_CUDA
namespace {

backend::MmaRuns runs_of(const PositionRuns& r) {
  backend::MmaRuns m;
  m.count = r.count;
  m.row1 = r.run[1].row;
  m.pos0 = r.run[0].pos;
  m.pos1 = r.run[1].pos;
  return m;
}

backend::MmaAttentionArgs args_of(const AttentionInputs& x) {
  backend::MmaAttentionArgs a;
  a.B = x.B;
  a.NH = x.NH;
  a.KVH = x.KVH;
  a.hs = x.hs;
  a.q = x.q;
  a.ldq = x.ldq;
  a.k = x.k;
  a.v = x.v;
  a.ldkv = x.ldkv;
  a.rows_q = x.queries.rows;
  a.rows_k = x.keys.rows;
  a.queries = runs_of(x.queries);
  a.keys = runs_of(x.keys);
  a.doc_start = x.doc_start;
  a.window = x.window;
  return a;
}

}  // namespace
#endif

bool mma_attention_built() {
#ifdef KOKKOS_ENABLE_CUDA
  return true;
#else
  return false;
#endif
}

bool mma_attention_runs(const AttentionInputs& x) {
#ifdef KOKKOS_ENABLE_CUDA
  return backend::mma_attention_supports(x.hs) && x.KVH > 0 && x.NH % x.KVH == 0;
#else
  (void)x;
  return false;
#endif
}

bool mma_attention_forward(Tensor out, Tensor lse, const AttentionInputs& x) {
  if (!mma_attention_runs(x)) return false;
#ifdef KOKKOS_ENABLE_CUDA
  backend::MmaAttentionArgs a = args_of(x);
  a.out = out.data();
  a.lse = lse.data();
  // Kokkos' stream, so the launch is ordered with the kernels before and after it.
  backend::mma_attention_forward(a, ExecSpace().cuda_stream());
  return true;
#else
  (void)out;
  (void)lse;
  return false;
#endif
}

bool mma_attention_backward(float* dq, int64_t lddq, bool accumulate_dq, float* dk, float* dv,
                            int64_t lddkv, bool accumulate_dkv, Tensor dout, Tensor lse,
                            Tensor delta, const AttentionInputs& x) {
  if (!mma_attention_runs(x)) return false;
#ifdef KOKKOS_ENABLE_CUDA
  backend::MmaAttentionGrads g;
  g.in = args_of(x);
  g.in.lse = lse.data();
  g.dout = dout.data();
  g.delta = delta.data();
  g.dq = dq;
  g.lddq = lddq;
  g.accumulate_dq = accumulate_dq;
  g.dk = dk;
  g.dv = dv;
  g.lddkv = lddkv;
  g.accumulate_dkv = accumulate_dkv;
  backend::mma_attention_backward(g, ExecSpace().cuda_stream());
  return true;
#else
  (void)dq, (void)lddq, (void)accumulate_dq, (void)dk, (void)dv, (void)lddkv;
  (void)accumulate_dkv, (void)dout, (void)lse, (void)delta;
  return false;
#endif
}

}  // namespace mpf
