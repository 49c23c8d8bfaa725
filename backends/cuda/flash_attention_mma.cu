// FlashAttention-2's forward (Dao 2023) on tensor cores: a block of 4 warps owns 64 query rows of
// one (sequence, head), a warp 16 of them; key tiles of 64 rows pass through shared memory. Per
// key tile a warp computes its 16 x 64 scores with mma.sync m16n8k16 (bf16 Q and K, fp32
// accumulation), masks them, updates the online softmax in its registers and adds P·V with P
// taken straight from the score registers as the next product's A operand. Which lane holds
// which element is mma_fragments.hpp's; the softmax steps are flash_attention_mma_tile.hpp's;
// both are the ones the host emulation tests (tests/unit/test_mma_fragments.cpp).
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
  if (threadIdx.x == 0) {
    int lo = INT_MAX, hi = INT_MIN;
    for (int r = 0; r < kRows && q0 + r < x.rows_q; ++r) {
      const int p = x.queries.position(q0 + r);
      lo = min(lo, p);
      hi = max(hi, p);
    }
    q_lo = lo;
    q_hi = hi;
  }

  // This lane's two query rows.
  int t_row[2], qpos[2], doc[2];
  bool valid[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    t_row[r] = q0 + warp * kM + c_row(lane, 2 * r);
    valid[r] = t_row[r] < x.rows_q;
    qpos[r] = valid[r] ? x.queries.position(t_row[r]) : 0;
    doc[r] = valid[r] && x.doc_start ? x.doc_start[int64_t(b) * x.rows_q + t_row[r]] : 0;
  }
  float o[DT][kCElems] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const float scale = 1.0f / sqrtf(float(HS)) * kLog2e;
  const float* kb = x.k + int64_t(b) * x.rows_k * x.ldkv + int64_t(kvh) * HS;
  const float* vb = x.v + int64_t(b) * x.rows_k * x.ldkv + int64_t(kvh) * HS;
  __syncthreads();

  for (int k0 = 0; k0 < x.rows_k; k0 += kKeys) {
    // A tile none of the block's queries can see is skipped (causal: about half of them). The
    // barrier also keeps the previous tile in place until every warp is done with it.
    bool useful = false;
    if (threadIdx.x < kKeys && k0 + int(threadIdx.x) < x.rows_k) {
      const int kp = x.keys.position(k0 + threadIdx.x);
      useful = kp <= q_hi && (x.window == 0 || q_lo - kp < x.window);
    }
    if (!__syncthreads_or(useful)) continue;
    load_tile<HS>(Ks, kb, x.ldkv, k0, x.rows_k);
    load_tile<HS>(Vs, vb, x.ldkv, k0, x.rows_k);
    __syncthreads();

    float s[NT][kCElems] = {};
#pragma unroll
    for (int kk = 0; kk < HS; kk += kK) {
      uint32_t a[4];
      load_a(a, Qs + warp * kM * ld + kk, ld, lane);
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        uint32_t bb[2];
        load_b_transposed(bb, Ks + j * kN * ld + kk, ld, lane);
        mma_bf16(s[j], a, bb);
      }
    }
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

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "fatal: %s failed: %s\n", what, cudaGetErrorString(err));
    std::abort();
  }
}

template <int HS>
void launch(const MmaAttentionArgs& x, cudaStream_t stream) {
  const int bytes = (kRows + 2 * kKeys) * (HS + kPad) * int(sizeof(uint16_t));
  // hs 128 needs more than the 48 KiB a launch gets by default.
  static const bool allowed = [bytes] {
    check(
        cudaFuncSetAttribute(flash_forward<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
        "cudaFuncSetAttribute (flash attention's shared memory)");
    return true;
  }();
  (void)allowed;
  const dim3 grid((x.rows_q + kRows - 1) / kRows, x.NH, x.B);
  flash_forward<HS><<<grid, kThreads, bytes, stream>>>(x);
  check(cudaGetLastError(), "the tensor-core attention's launch");
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
  if (!mma_attention_supports(x.hs) || x.KVH <= 0 || x.NH % x.KVH != 0) {
    std::fprintf(stderr,
                 "fatal: the tensor-core attention takes head sizes 64 and 128 and NH a "
                 "multiple of KVH (hs %d, NH %d, KVH %d)\n",
                 x.hs, x.NH, x.KVH);
    std::abort();
  }
  if (x.rows_q == 0 || x.B == 0) return;
  const auto stream = static_cast<cudaStream_t>(cuda_stream);
  if (x.hs == 64) {
    launch<64>(x, stream);
  } else {
    launch<128>(x, stream);
  }
}

}  // namespace mpf::backend
