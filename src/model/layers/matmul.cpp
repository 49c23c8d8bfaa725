#include "model/layers/matmul.hpp"

#include <cstdio>
#include <string>

#include "core/error.hpp"
#include "core/profile.hpp"

namespace mpf {

namespace {
thread_local Bf16Products* active = nullptr;

// Elements from the first to the last of an operand presented as rows x cols (op applied),
// stored with row stride ld, `batch` of them `stride` apart.
int64_t span(Op op, int rows, int cols, int ld, int64_t stride, int batch) {
  const int64_t stored_rows = op == Op::N ? rows : cols, stored_cols = op == Op::N ? cols : rows;
  return int64_t(batch - 1) * stride + (stored_rows - 1) * int64_t(ld) + stored_cols;
}

// The profile's label of a product: precision, transposes and shape.
void record(const Stopwatch& clock, Op op_a, Op op_b, int M, int N, int K, int batch) {
  char label[96];
  std::snprintf(label, sizeof label, "gemm %s %c%c %dx%dx%d%s", active ? "bf16" : "fp32",
                op_a == Op::N ? 'N' : 'T', op_b == Op::N ? 'N' : 'T', M, N, K,
                batch > 1 ? (" x" + std::to_string(batch)).c_str() : "");
  Kokkos::fence();
  profile::add(label, clock.seconds(), 2.0 * M * N * K * batch);
}
}  // namespace

bool products_in_bf16() {
  return active != nullptr;
}

Bf16Products::Bf16Products(const float* weights, const bf16* weights16, int64_t n,
                           int64_t scratch_elems)
    : weights_{weights, n, weights16} {
  if (active) MPF_FATAL("Bf16Products scopes do not nest");
  for (Bf16Slab& s : scratch_) s = Bf16Slab("mpf::matmul::bf16_scratch", scratch_elems);
  active = this;
}

Bf16Products::~Bf16Products() {
  active = nullptr;
}

const bf16* Bf16Products::find(const Copy& c, const float* p, int64_t n) {
  // Compared as addresses: p may lie in another allocation.
  const auto at = reinterpret_cast<uintptr_t>(p), begin = reinterpret_cast<uintptr_t>(c.f32);
  if (!c.f32 || at < begin || at + n * sizeof(float) > begin + c.n * sizeof(float)) return nullptr;
  return c.b16 + (p - c.f32);
}

const bf16* Bf16Products::operand(const float* p, int64_t n, int which) {
  if (const bf16* w = find(weights_, p, n)) return w;
  for (int i = holding_ - 1; i >= 0; --i) {
    Copy& c = held_[i];
    const bf16* h = find(c, p, n);
    if (!h) continue;
    if (c.pending) {
      round_to_bf16(held_buffers_[i].data(), c.f32, c.n);
      c.pending = false;
    }
    return h;
  }
  Bf16Slab& s = scratch_[which];
  if (int64_t(s.extent(0)) < n) s = Bf16Slab("mpf::matmul::bf16_scratch", n);
  round_to_bf16(s.data(), p, n);
  return s.data();
}

Fp32Products::Fp32Products() : suspended_(active) {
  active = nullptr;
}

Fp32Products::~Fp32Products() {
  active = suspended_;
}

HeldOperand::HeldOperand(const float* p, int64_t n) {
  if (!active) return;
  Bf16Products& scope = *active;
  if (scope.holding_ == Bf16Products::kHeld) MPF_FATAL("too many held operands at once");
  Bf16Slab& buffer = scope.held_buffers_[scope.holding_];
  // Allocated by the first step's products, reused by every later one.
  if (int64_t(buffer.extent(0)) < n) buffer = Bf16Slab("mpf::matmul::bf16_held", n);
  round_to_bf16(buffer.data(), p, n);
  scope.held_[scope.holding_++] = {p, n, buffer.data()};
  held_ = true;
}

HeldOperand::~HeldOperand() {
  if (held_ && active) --active->holding_;
}

HeldOnFirstUse::HeldOnFirstUse(std::initializer_list<Span> tensors) {
  if (!active) return;
  Bf16Products& scope = *active;
  for (const Span& t : tensors) {
    if (!t.p || t.n == 0) continue;
    if (scope.holding_ == Bf16Products::kHeld) MPF_FATAL("too many held operands at once");
    Bf16Slab& buffer = scope.held_buffers_[scope.holding_];
    if (int64_t(buffer.extent(0)) < t.n) buffer = Bf16Slab("mpf::matmul::bf16_held", t.n);
    scope.held_[scope.holding_++] = {t.p, t.n, buffer.data(), true};
    ++held_;
  }
}

HeldOnFirstUse::~HeldOnFirstUse() {
  if (active) active->holding_ -= held_;
}

namespace {
// A product whose operands are fp32 (A, B) or, given, already bf16 (A16, B16).
void run_product(Op op_a, Op op_b, int M, int N, int K, float alpha, const float* A,
                 const bf16* A16, int lda, int64_t stride_a, const float* B, const bf16* B16,
                 int ldb, int64_t stride_b, float beta, float* C, int ldc, int64_t stride_c,
                 int batch) {
  if ((A16 || B16) && !active) MPF_FATAL("a bf16 operand of a product outside a bf16 scope");
  if (active) {
    if (!A16) A16 = active->operand(A, span(op_a, M, K, lda, stride_a, batch), 0);
    if (!B16) B16 = active->operand(B, span(op_b, K, N, ldb, stride_b, batch), 1);
  }
  const Stopwatch clock;
  if (batch == 1) {
    if (active) {
      backend::gemm_bf16(op_a, op_b, M, N, K, alpha, A16, lda, B16, ldb, beta, C, ldc);
    } else {
      backend::gemm(op_a, op_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    }
  } else if (active) {
    backend::gemm_strided_batched_bf16(op_a, op_b, M, N, K, alpha, A16, lda, stride_a, B16, ldb,
                                       stride_b, beta, C, ldc, stride_c, batch);
  } else {
    backend::gemm_strided_batched(op_a, op_b, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b,
                                  beta, C, ldc, stride_c, batch);
  }
  if (profile::enabled()) record(clock, op_a, op_b, M, N, K, batch);
}
}  // namespace

void matmul(Op op_a, Op op_b, int M, int N, int K, float alpha, const float* A, int lda,
            const float* B, int ldb, float beta, float* C, int ldc) {
  run_product(op_a, op_b, M, N, K, alpha, A, nullptr, lda, 0, B, nullptr, ldb, 0, beta, C, ldc, 0,
              1);
}

void matmul(Op op_a, Op op_b, int M, int N, int K, float alpha, const bf16* A, int lda,
            const float* B, int ldb, float beta, float* C, int ldc) {
  run_product(op_a, op_b, M, N, K, alpha, nullptr, A, lda, 0, B, nullptr, ldb, 0, beta, C, ldc, 0,
              1);
}

void matmul(Op op_a, Op op_b, int M, int N, int K, float alpha, const float* A, int lda,
            const bf16* B, int ldb, float beta, float* C, int ldc) {
  run_product(op_a, op_b, M, N, K, alpha, A, nullptr, lda, 0, nullptr, B, ldb, 0, beta, C, ldc, 0,
              1);
}

void matmul(Op op_a, Op op_b, int M, int N, int K, float alpha, const float* A, int lda,
            const float* B, int ldb, bf16* C, int ldc) {
  if (!active) MPF_FATAL("a product with a bf16 output outside a bf16 scope");
  const bf16* A16 = active->operand(A, span(op_a, M, K, lda, 0, 1), 0);
  matmul(op_a, op_b, M, N, K, alpha, A16, lda, B, ldb, C, ldc);
}

void matmul(Op op_a, Op op_b, int M, int N, int K, float alpha, const bf16* A, int lda,
            const float* B, int ldb, bf16* C, int ldc) {
  if (!active) MPF_FATAL("a product with a bf16 output outside a bf16 scope");
  const bf16* B16 = active->operand(B, span(op_b, K, N, ldb, 0, 1), 1);
  const Stopwatch clock;
  backend::gemm_bf16_out(op_a, op_b, M, N, K, alpha, A, lda, B16, ldb, C, ldc);
  if (profile::enabled()) record(clock, op_a, op_b, M, N, K, 1);
}

void matmul_strided_batched(Op op_a, Op op_b, int M, int N, int K, float alpha, const float* A,
                            int lda, int64_t stride_a, const float* B, int ldb, int64_t stride_b,
                            float beta, float* C, int ldc, int64_t stride_c, int batch) {
  run_product(op_a, op_b, M, N, K, alpha, A, nullptr, lda, stride_a, B, nullptr, ldb, stride_b,
              beta, C, ldc, stride_c, batch);
}

}  // namespace mpf
