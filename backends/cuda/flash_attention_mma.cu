// FlashAttention-2's forward (Dao 2023) on tensor cores: a block of 4 warps owns 64 query rows of
// one (sequence, head), a warp 16 of them; key tiles of 64 rows pass through shared memory. Per
// key tile a warp computes its 16 x 64 scores with mma.sync m16n8k16 (bf16 Q and K, fp32
// accumulation), masks them, updates the online softmax in its registers and adds P·V with P
// taken straight from the score registers as the next product's A operand. Which lane holds
// which element is mma_fragments.hpp's; the softmax steps are flash_attention_mma_tile.hpp's;
// both are the ones the host emulation tests (tests/unit/test_mma_fragments.cpp). The backward
// (FlashAttention-2's, without its atomic additions to dQ) is two kernels below: dK and dV per
// key tile, dQ per query tile, each recomputing P.
//
// A first version, for measuring: operands are read from shared memory with 32-bit loads (no
// ldmatrix), global tiles with scalar loads and no copy/compute overlap (cp.async) — the known
// next steps once a GPU has measured it (docs/gpu.md).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "backends/cuda/flash_attention_mma.hpp"
#include "backends/cuda/flash_attention_mma_tile.hpp"

namespace mpf::backend {
namespace {

using namespace mpf::mma;

constexpr int kRows = 64;           // queries per block
constexpr int kKeys = 64;           // keys per tile
constexpr int kWarps = kRows / kM;  // a warp per 16 query rows
constexpr int kThreads = kWarps * kWarp;
constexpr int kPad = 8;  // bf16 after each shared row: 16 bytes, so the rows' lanes
                         // fall in different banks

__device__ inline uint16_t bf16_bits(float x) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

// Two bf16 in one register, the lower-indexed element in the low half (as mma.sync reads them).
__device__ inline uint32_t pack(uint16_t lo, uint16_t hi) {
  return uint32_t(lo) | (uint32_t(hi) << 16);
}

// d += a·b for one m16n8k16 tile.
__device__ inline void mma_bf16(float (&d)[kCElems], const uint32_t (&a)[4],
                                const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  // bf16 mma.sync needs sm_80; mma_attention_supports keeps older GPUs from launching this.
  __trap();
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// A (16 x 16) from a row-major bf16 tile: A elements 2r and 2r + 1 are neighbours in a row, one
// 32-bit load each.
__device__ inline void load_a(uint32_t (&a)[4], const uint16_t* tile, int ld, int lane) {
#pragma unroll
  for (int r = 0; r < 4; ++r)
    a[r] = *reinterpret_cast<const uint32_t*>(tile + a_row(lane, 2 * r) * ld + a_col(lane, 2 * r));
}

// B (16 x 8) where B(k, n) = tile[n][k] (K's rows, for Q·Kᵀ): B elements 2r and 2r + 1 are
// neighbours in a row of the tile.
__device__ inline void load_b_transposed(uint32_t (&b)[2], const uint16_t* tile, int ld, int lane) {
#pragma unroll
  for (int r = 0; r < 2; ++r)
    b[r] = *reinterpret_cast<const uint32_t*>(tile + b_col(lane, 2 * r) * ld + b_row(lane, 2 * r));
}

// B (16 x 8) where B(k, n) = tile[k][n] (V's rows, for P·V): two 16-bit loads a register.
__device__ inline void load_b(uint32_t (&b)[2], const uint16_t* tile, int ld, int lane) {
#pragma unroll
  for (int r = 0; r < 2; ++r)
    b[r] = pack(tile[b_row(lane, 2 * r) * ld + b_col(lane, 2 * r)],
                tile[b_row(lane, 2 * r + 1) * ld + b_col(lane, 2 * r + 1)]);
}

// rows x HS floats (row stride ld_src, rows past `valid` as zeros) into bf16 shared rows.
template <int HS>
__device__ inline void load_tile(uint16_t* dst, const float* src, int64_t ld_src, int first,
                                 int valid) {
  constexpr int ld = HS + kPad;
  for (int e = threadIdx.x; e < kRows * HS; e += kThreads) {
    const int r = e / HS, c = e % HS;
    const int t = first + r;
    dst[r * ld + c] = bf16_bits(t < valid ? src[int64_t(t) * ld_src + c] : 0.0f);
  }
}

// Thread 0: the smallest and largest position of rows [first, first + 64) below `rows`, into
// shared lo and hi (what a block's tiles are skipped by); the caller's barrier publishes them.
__device__ inline void position_range(const MmaRuns& runs, int first, int rows, int& lo, int& hi) {
  if (threadIdx.x != 0) return;
  int a = INT_MAX, z = INT_MIN;
  for (int r = 0; r < kRows && first + r < rows; ++r) {
    const int p = runs.position(first + r);
    a = min(a, p);
    z = max(z, p);
  }
  lo = a;
  hi = z;
}

// Whether some query of the block (positions q_lo..q_hi) sees a key of the tile at row k0 (causal
// and window; documents are left to the masks): a tile none can see is skipped (causal: about
// half). A barrier, which also keeps the last tile in place until every warp is done with it.
__device__ inline bool key_tile_seen(const MmaAttentionArgs& x, int k0, int q_lo, int q_hi) {
  bool useful = false;
  if (threadIdx.x < kKeys && k0 + int(threadIdx.x) < x.rows_k) {
    const int kp = x.keys.position(k0 + threadIdx.x);
    useful = kp <= q_hi && (x.window == 0 || q_lo - kp < x.window);
  }
  return __syncthreads_or(useful);
}

// A lane's two query rows of the warp's 16 from row0: C rows group and group + 8.
struct LaneRows {
  int t[2], pos[2], doc[2];
  bool valid[2];
  __device__ LaneRows(const MmaAttentionArgs& x, int b, int row0, int lane) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      t[r] = row0 + c_row(lane, 2 * r);
      valid[r] = t[r] < x.rows_q;
      pos[r] = valid[r] ? x.queries.position(t[r]) : 0;
      doc[r] = valid[r] && x.doc_start ? x.doc_start[int64_t(b) * x.rows_q + t[r]] : 0;
    }
  }
};

// c[j] += A·B_jᵀ over HS columns: A the warp's 16 rows of a shared tile (from `a`), B_j rows
// 8j..8j + 7 of another (from `b`): a 16 x (8·NT) block of scores (or of dP).
template <int HS, int NT>
__device__ inline void rows_times_rows(float (&c)[NT][kCElems], const uint16_t* a,
                                       const uint16_t* b, int ld, int lane) {
#pragma unroll
  for (int kk = 0; kk < HS; kk += kK) {
    uint32_t aa[4];
    load_a(aa, a + kk, ld, lane);
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      uint32_t bb[2];
      load_b_transposed(bb, b + j * kN * ld + kk, ld, lane);
      mma_bf16(c[j], aa, bb);
    }
  }
}

template <int HS>
__global__ void __launch_bounds__(kThreads) flash_forward(MmaAttentionArgs x) {
  static_assert(kKeys == kRows, "load_tile copies kRows rows for K and V too");
  constexpr int ld = HS + kPad;
  constexpr int NT = kKeys / kN;  // score tiles of 8 keys
  constexpr int DT = HS / kN;     // output tiles of 8 dimensions
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  uint16_t* Qs = reinterpret_cast<uint16_t*>(shared_bytes);
  uint16_t* Ks = Qs + kRows * ld;
  uint16_t* Vs = Ks + kKeys * ld;
  __shared__ int q_lo, q_hi;

  const int q0 = blockIdx.x * kRows, h = blockIdx.y, b = blockIdx.z;
  const int kvh = h / (x.NH / x.KVH);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;

  load_tile<HS>(Qs, x.q + int64_t(b) * x.rows_q * x.ldq + int64_t(h) * HS, x.ldq, q0, x.rows_q);
  position_range(x.queries, q0, x.rows_q, q_lo, q_hi);

  const LaneRows rows(x, b, q0 + warp * kM, lane);
  const int(&t_row)[2] = rows.t, (&qpos)[2] = rows.pos, (&doc)[2] = rows.doc;
  const bool(&valid)[2] = rows.valid;
  float o[DT][kCElems] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const float scale = 1.0f / sqrtf(float(HS)) * kLog2e;
  const float* kb = x.k + int64_t(b) * x.rows_k * x.ldkv + int64_t(kvh) * HS;
  const float* vb = x.v + int64_t(b) * x.rows_k * x.ldkv + int64_t(kvh) * HS;
  __syncthreads();

  for (int k0 = 0; k0 < x.rows_k; k0 += kKeys) {
    if (!key_tile_seen(x, k0, q_lo, q_hi)) continue;
    load_tile<HS>(Ks, kb, x.ldkv, k0, x.rows_k);
    load_tile<HS>(Vs, vb, x.ldkv, k0, x.rows_k);
    __syncthreads();

    float s[NT][kCElems] = {};
    rows_times_rows<HS>(s, Qs + warp * kM * ld, Ks, ld, lane);
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int i = 0; i < kCElems; ++i) {
        const int r = i >> 1, key = k0 + j * kN + c_col(lane, i);
        const bool seen = valid[r] && key < x.rows_k &&
                          key_visible(qpos[r], x.keys.position(key), doc[r], x.window);
        s[j][i] = seen ? s[j][i] * scale : -INFINITY;
      }
    float mx[2];
    row_max_partial(s, mx);
#pragma unroll
    for (int step = 1; step < 4; step *= 2)
#pragma unroll
      for (int r = 0; r < 2; ++r) mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], step));
    row_softmax_step(s, mx, m, l, o);

    // O += P·V, P (rounded to bf16) read from the score registers as A.
#pragma unroll
    for (int kk = 0; kk < kKeys / kK; ++kk) {
      uint32_t a[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int i = 2 * r;
        a[r] = pack(bf16_bits(s[2 * kk + c_tile_for_a(i)][c_index_for_a(i)]),
                    bf16_bits(s[2 * kk + c_tile_for_a(i + 1)][c_index_for_a(i + 1)]));
      }
#pragma unroll
      for (int d = 0; d < DT; ++d) {
        uint32_t bb[2];
        load_b(bb, Vs + kk * kK * ld + d * kN, ld, lane);
        mma_bf16(o[d], a, bb);
      }
    }
  }

  const int64_t ldo = int64_t(x.NH) * HS;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    float inv, lse;
    row_finish(m[r], l[r], inv, lse);
    if (!valid[r]) continue;
    float* out = x.out + (int64_t(b) * x.rows_q + t_row[r]) * ldo + int64_t(h) * HS;
#pragma unroll
    for (int d = 0; d < DT; ++d) {
      out[d * kN + c_col(lane, 2 * r)] = o[d][2 * r] * inv;
      out[d * kN + c_col(lane, 2 * r + 1)] = o[d][2 * r + 1] * inv;
    }
    if (quad_lane_of(lane) == 0) x.lse[(int64_t(b) * x.NH + h) * x.rows_q + t_row[r]] = lse;
  }
}

// The backward's A operand for rows of 16 from C tiles 2kk and 2kk + 1 (P·V's reuse of the score
// registers, for Pᵀ·dO, dSᵀ·Q and dS·K), rounded to bf16.
template <int NT>
__device__ inline void a_from_c(uint32_t (&a)[4], const float (&c)[NT][kCElems], int kk) {
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int i = 2 * r;
    a[r] = pack(bf16_bits(c[2 * kk + c_tile_for_a(i)][c_index_for_a(i)]),
                bf16_bits(c[2 * kk + c_tile_for_a(i + 1)][c_index_for_a(i + 1)]));
  }
}

// dK and dV of 64 keys of one (sequence, kv head), a warp 16 of them: for each query head of the
// group in turn and each query tile that can see the keys, Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ (keys as
// rows), P and dS recomputed from lse and delta (backward_element), then dV += Pᵀ·dO and
// dK += dSᵀ·Q with Pᵀ and dSᵀ taken from the registers as A.
template <int HS>
__global__ void __launch_bounds__(kThreads) flash_backward_kv(MmaAttentionGrads g) {
  const MmaAttentionArgs& x = g.in;
  constexpr int ld = HS + kPad;
  constexpr int NT = kRows / kN;  // tiles of 8 queries
  constexpr int DT = HS / kN;     // tiles of 8 dimensions
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  uint16_t* Ks = reinterpret_cast<uint16_t*>(shared_bytes);
  uint16_t* Vs = Ks + kKeys * ld;
  uint16_t* Qs = Vs + kKeys * ld;
  uint16_t* dOs = Qs + kRows * ld;
  __shared__ float lse_s[kRows], delta_s[kRows];
  __shared__ int qpos_s[kRows], doc_s[kRows];
  __shared__ int k_lo, k_hi;

  const int k0 = blockIdx.x * kKeys, kvh = blockIdx.y, b = blockIdx.z;
  const int G = x.NH / x.KVH;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  load_tile<HS>(Ks, x.k + int64_t(b) * x.rows_k * x.ldkv + int64_t(kvh) * HS, x.ldkv, k0, x.rows_k);
  load_tile<HS>(Vs, x.v + int64_t(b) * x.rows_k * x.ldkv + int64_t(kvh) * HS, x.ldkv, k0, x.rows_k);
  position_range(x.keys, k0, x.rows_k, k_lo, k_hi);
  // This lane's two key rows.
  int kpos[2];
  bool kvalid[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = k0 + warp * kM + c_row(lane, 2 * r);
    kvalid[r] = key < x.rows_k;
    kpos[r] = kvalid[r] ? x.keys.position(key) : 0;
  }
  float dk[DT][kCElems] = {}, dv[DT][kCElems] = {};
  const float scale = 1.0f / sqrtf(float(HS));
  const int64_t ldo = int64_t(x.NH) * HS;
  __syncthreads();

  for (int gi = 0; gi < G; ++gi) {
    const int h = kvh * G + gi;
    const float* qb = x.q + int64_t(b) * x.rows_q * x.ldq + int64_t(h) * HS;
    const float* ob = g.dout + int64_t(b) * x.rows_q * ldo + int64_t(h) * HS;
    const int64_t row_stats = (int64_t(b) * x.NH + h) * x.rows_q;
    for (int q0 = 0; q0 < x.rows_q; q0 += kRows) {
      // A query tile that sees none of these keys is skipped (causal: about half); the barrier
      // also keeps the last tile in place until every warp is done with it.
      bool useful = false;
      if (threadIdx.x < kRows && q0 + int(threadIdx.x) < x.rows_q) {
        const int qp = x.queries.position(q0 + threadIdx.x);
        useful = qp >= k_lo && (x.window == 0 || qp - k_hi < x.window);
      }
      if (!__syncthreads_or(useful)) continue;
      load_tile<HS>(Qs, qb, x.ldq, q0, x.rows_q);
      load_tile<HS>(dOs, ob, ldo, q0, x.rows_q);
      if (threadIdx.x < kRows) {
        const int t = q0 + threadIdx.x;
        const bool v = t < x.rows_q;
        lse_s[threadIdx.x] = v ? x.lse[row_stats + t] : -INFINITY;
        delta_s[threadIdx.x] = v ? g.delta[row_stats + t] : 0.0f;
        qpos_s[threadIdx.x] = v ? x.queries.position(t) : 0;
        doc_s[threadIdx.x] = v && x.doc_start ? x.doc_start[int64_t(b) * x.rows_q + t] : 0;
      }
      __syncthreads();

      float st[NT][kCElems] = {}, dpt[NT][kCElems] = {};
      rows_times_rows<HS>(st, Ks + warp * kM * ld, Qs, ld, lane);
      rows_times_rows<HS>(dpt, Vs + warp * kM * ld, dOs, ld, lane);
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int i = 0; i < kCElems; ++i) {
          const int r = i >> 1, qi = j * kN + c_col(lane, i);
          const bool seen = kvalid[r] && q0 + qi < x.rows_q &&
                            key_visible(qpos_s[qi], kpos[r], doc_s[qi], x.window);
          float p, ds;
          backward_element(st[j][i], dpt[j][i], lse_s[qi], delta_s[qi], scale, seen, p, ds);
          st[j][i] = p;
          dpt[j][i] = ds;
        }
#pragma unroll
      for (int kk = 0; kk < kRows / kK; ++kk) {
        uint32_t ap[4], ad[4];
        a_from_c(ap, st, kk);
        a_from_c(ad, dpt, kk);
#pragma unroll
        for (int d = 0; d < DT; ++d) {
          uint32_t bo[2], bq[2];
          load_b(bo, dOs + kk * kK * ld + d * kN, ld, lane);
          load_b(bq, Qs + kk * kK * ld + d * kN, ld, lane);
          mma_bf16(dv[d], ap, bo);
          mma_bf16(dk[d], ad, bq);
        }
      }
    }
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (!kvalid[r]) continue;
    const int64_t row = int64_t(b) * x.rows_k + k0 + warp * kM + c_row(lane, 2 * r);
    float* dkr = g.dk + row * g.lddkv + int64_t(kvh) * HS;
    float* dvr = g.dv + row * g.lddkv + int64_t(kvh) * HS;
#pragma unroll
    for (int d = 0; d < DT; ++d)
#pragma unroll
      for (int i = 2 * r; i < 2 * r + 2; ++i) {
        const int c = d * kN + c_col(lane, i);
        dkr[c] = g.accumulate_dkv ? dkr[c] + dk[d][i] : dk[d][i];
        dvr[c] = g.accumulate_dkv ? dvr[c] + dv[d][i] : dv[d][i];
      }
  }
}

// dQ of 64 query rows of one (sequence, head), a warp 16 of them, as the forward walks its key
// tiles: S = Q·Kᵀ and dP = dO·Vᵀ, dS recomputed (backward_element), dQ += dS·K with dS taken
// from the registers as A.
template <int HS>
__global__ void __launch_bounds__(kThreads) flash_backward_q(MmaAttentionGrads g) {
  const MmaAttentionArgs& x = g.in;
  constexpr int ld = HS + kPad;
  constexpr int NT = kKeys / kN;  // tiles of 8 keys
  constexpr int DT = HS / kN;
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  uint16_t* Qs = reinterpret_cast<uint16_t*>(shared_bytes);
  uint16_t* dOs = Qs + kRows * ld;
  uint16_t* Ks = dOs + kRows * ld;
  uint16_t* Vs = Ks + kKeys * ld;
  __shared__ int q_lo, q_hi;

  const int q0 = blockIdx.x * kRows, h = blockIdx.y, b = blockIdx.z;
  const int kvh = h / (x.NH / x.KVH);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t ldo = int64_t(x.NH) * HS;
  load_tile<HS>(Qs, x.q + int64_t(b) * x.rows_q * x.ldq + int64_t(h) * HS, x.ldq, q0, x.rows_q);
  load_tile<HS>(dOs, g.dout + int64_t(b) * x.rows_q * ldo + int64_t(h) * HS, ldo, q0, x.rows_q);
  position_range(x.queries, q0, x.rows_q, q_lo, q_hi);
  const LaneRows rows(x, b, q0 + warp * kM, lane);
  const int(&t_row)[2] = rows.t, (&qpos)[2] = rows.pos, (&doc)[2] = rows.doc;
  const bool(&valid)[2] = rows.valid;
  float lse[2], delta[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t at = (int64_t(b) * x.NH + h) * x.rows_q + t_row[r];
    lse[r] = valid[r] ? x.lse[at] : -INFINITY;
    delta[r] = valid[r] ? g.delta[at] : 0.0f;
  }
  float dq[DT][kCElems] = {};
  const float scale = 1.0f / sqrtf(float(HS));
  const float* kb = x.k + int64_t(b) * x.rows_k * x.ldkv + int64_t(kvh) * HS;
  const float* vb = x.v + int64_t(b) * x.rows_k * x.ldkv + int64_t(kvh) * HS;
  __syncthreads();

  for (int k0 = 0; k0 < x.rows_k; k0 += kKeys) {
    if (!key_tile_seen(x, k0, q_lo, q_hi)) continue;
    load_tile<HS>(Ks, kb, x.ldkv, k0, x.rows_k);
    load_tile<HS>(Vs, vb, x.ldkv, k0, x.rows_k);
    __syncthreads();

    float s[NT][kCElems] = {}, dp[NT][kCElems] = {};
    rows_times_rows<HS>(s, Qs + warp * kM * ld, Ks, ld, lane);
    rows_times_rows<HS>(dp, dOs + warp * kM * ld, Vs, ld, lane);
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int i = 0; i < kCElems; ++i) {
        const int r = i >> 1, key = k0 + j * kN + c_col(lane, i);
        const bool seen = valid[r] && key < x.rows_k &&
                          key_visible(qpos[r], x.keys.position(key), doc[r], x.window);
        float p, ds;
        backward_element(s[j][i], dp[j][i], lse[r], delta[r], scale, seen, p, ds);
        s[j][i] = ds;
      }
#pragma unroll
    for (int kk = 0; kk < kKeys / kK; ++kk) {
      uint32_t a[4];
      a_from_c(a, s, kk);
#pragma unroll
      for (int d = 0; d < DT; ++d) {
        uint32_t bk[2];
        load_b(bk, Ks + kk * kK * ld + d * kN, ld, lane);
        mma_bf16(dq[d], a, bk);
      }
    }
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (!valid[r]) continue;
    float* dqr = g.dq + (int64_t(b) * x.rows_q + t_row[r]) * g.lddq + int64_t(h) * HS;
#pragma unroll
    for (int d = 0; d < DT; ++d)
#pragma unroll
      for (int i = 2 * r; i < 2 * r + 2; ++i) {
        const int c = d * kN + c_col(lane, i);
        dqr[c] = g.accumulate_dq ? dqr[c] + dq[d][i] : dq[d][i];
      }
  }
}

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "fatal: %s failed: %s\n", what, cudaGetErrorString(err));
    std::abort();
  }
}

// Lets `kernel` take `bytes` of dynamic shared memory, once: hs 128 needs more than the 48 KiB a
// launch gets by default.
template <class Kernel>
void allow_shared(Kernel kernel, int bytes) {
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
        "cudaFuncSetAttribute (flash attention's shared memory)");
}

template <int HS>
void launch(const MmaAttentionArgs& x, cudaStream_t stream) {
  const int bytes = (kRows + 2 * kKeys) * (HS + kPad) * int(sizeof(uint16_t));
  static const bool allowed = (allow_shared(flash_forward<HS>, bytes), true);
  (void)allowed;
  const dim3 grid((x.rows_q + kRows - 1) / kRows, x.NH, x.B);
  flash_forward<HS><<<grid, kThreads, bytes, stream>>>(x);
  check(cudaGetLastError(), "the tensor-core attention's launch");
}

template <int HS>
void launch_backward(const MmaAttentionGrads& g, cudaStream_t stream) {
  const MmaAttentionArgs& x = g.in;
  // Each kernel holds two tiles of keys and two of queries (K, V, Q, dO).
  const int bytes = 2 * (kRows + kKeys) * (HS + kPad) * int(sizeof(uint16_t));
  static const bool allowed =
      (allow_shared(flash_backward_kv<HS>, bytes), allow_shared(flash_backward_q<HS>, bytes), true);
  (void)allowed;
  if (x.rows_k > 0) {
    const dim3 grid((x.rows_k + kKeys - 1) / kKeys, x.KVH, x.B);
    flash_backward_kv<HS><<<grid, kThreads, bytes, stream>>>(g);
    check(cudaGetLastError(), "the tensor-core attention backward's launch (dK, dV)");
  }
  if (x.rows_q > 0) {
    const dim3 grid((x.rows_q + kRows - 1) / kRows, x.NH, x.B);
    flash_backward_q<HS><<<grid, kThreads, bytes, stream>>>(g);
    check(cudaGetLastError(), "the tensor-core attention backward's launch (dQ)");
  }
}

void check_shape(const MmaAttentionArgs& x) {
  if (!mma_attention_supports(x.hs) || x.KVH <= 0 || x.NH % x.KVH != 0) {
    std::fprintf(stderr,
                 "fatal: the tensor-core attention takes head sizes 64 and 128 and NH a "
                 "multiple of KVH (hs %d, NH %d, KVH %d)\n",
                 x.hs, x.NH, x.KVH);
    std::abort();
  }
}

}  // namespace

bool mma_attention_supports(int hs) {
  // bf16 mma.sync: compute capability 8.0 (A100) and later.
  static const bool capable = [] {
    int device = 0, major = 0;
    return cudaGetDevice(&device) == cudaSuccess &&
           cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) ==
               cudaSuccess &&
           major >= 8;
  }();
  return capable && (hs == 64 || hs == 128);
}

void mma_attention_forward(const MmaAttentionArgs& x, void* cuda_stream) {
  check_shape(x);
  if (x.rows_q == 0 || x.B == 0) return;
  const auto stream = static_cast<cudaStream_t>(cuda_stream);
  if (x.hs == 64) {
    launch<64>(x, stream);
  } else {
    launch<128>(x, stream);
  }
}

void mma_attention_backward(const MmaAttentionGrads& g, void* cuda_stream) {
  check_shape(g.in);
  if (g.in.B == 0 || (g.in.rows_q == 0 && g.in.rows_k == 0)) return;
  const auto stream = static_cast<cudaStream_t>(cuda_stream);
  if (g.in.hs == 64) {
    launch_backward<64>(g, stream);
  } else {
    launch_backward<128>(g, stream);
  }
}

}  // namespace mpf::backend
