// The model's matrix products (linear layers, attention), in the run's precision (--precision):
//   fp32  the backend's fp32 GEMM;
//   bf16  Megatron's mixed precision: both inputs rounded to bf16 (to nearest, ties to even), the
//         products accumulated and written in fp32; everything around them stays fp32.
// The precision belongs to the calling thread and is set by a Bf16Products scope for as long as
// it lives, as torch.autocast does: the model's code is the same in both precisions, and whatever
// runs outside a scope (the layer tests, tools) is fp32. Conventions as backends/gemm.hpp.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "backends/gemm.hpp"
#include "core/bf16.hpp"

namespace mpf {

using backend::Op;

// Whether this thread's products run in bf16 (a Bf16Products scope is alive): kernels that do
// their own products (the fused attention) round their operands when it is.
bool products_in_bf16();

void matmul(Op op_a, Op op_b, int M, int N, int K, float alpha, const float* A, int lda,
            const float* B, int ldb, float beta, float* C, int ldc);

void matmul_strided_batched(Op op_a, Op op_b, int M, int N, int K, float alpha, const float* A,
                            int lda, int64_t stride_a, const float* B, int ldb, int64_t stride_b,
                            float beta, float* C, int ldc, int64_t stride_c, int batch);

// The same with one operand already in bf16 (an activation kept rounded, model/activations.hpp):
// the product reads it as it is, as it would have read its rounding. Only in a Bf16Products
// scope.
void matmul(Op op_a, Op op_b, int M, int N, int K, float alpha, const bf16* A, int lda,
            const float* B, int ldb, float beta, float* C, int ldc);
void matmul(Op op_a, Op op_b, int M, int N, int K, float alpha, const float* A, int lda,
            const bf16* B, int ldb, float beta, float* C, int ldc);

// C = op(A)·op(B) accumulated in fp32 and written rounded to bf16 (once, by the library): a
// product whose output only bf16 products and fp32 arithmetic read (the LM head's logits, as
// autocast's bf16 lm_head output). Only in a Bf16Products scope.
void matmul(Op op_a, Op op_b, int M, int N, int K, float alpha, const float* A, int lda,
            const float* B, int ldb, bf16* C, int ldc);
// The same from an A already in bf16 (a mixture of experts' fc product: its input and its
// [gate | up] output both kept in bf16, as autocast's are).
void matmul(Op op_a, Op op_b, int M, int N, int K, float alpha, const bf16* A, int lda,
            const float* B, int ldb, bf16* C, int ldc);

// While alive, this thread's products run in bf16. `weights` (n floats) are the parameters,
// whose bf16 copy `weights16` the owner keeps current (round_to_bf16 after every update): a
// product reading a weight reads its copy, so each weight is rounded once per update. Every other
// input is rounded as the product reads it, into scratch of `scratch_elems` bf16 per operand
// (grown, once, if a product needs more), unless it is already bf16 (the overloads above: the
// activations a set keeps in bf16). Scopes do not nest.
class Bf16Products {
 public:
  Bf16Products(const float* weights, const bf16* weights16, int64_t n, int64_t scratch_elems);
  ~Bf16Products();
  Bf16Products(const Bf16Products&) = delete;
  Bf16Products& operator=(const Bf16Products&) = delete;

  // The bf16 of an operand that spans `n` floats from `p`: the weights' copy, a held tensor's, or
  // a rounding into scratch buffer `which` (0 or 1: the two operands of a product).
  const bf16* operand(const float* p, int64_t n, int which);

 private:
  friend class HeldOperand;
  friend class HeldOnFirstUse;
  struct Copy {
    const float* f32 = nullptr;
    int64_t n = 0;
    const bf16* b16 = nullptr;
    bool pending = false;  // rounded when a product first reads it (HeldOnFirstUse)
  };
  static const bf16* find(const Copy& c, const float* p, int64_t n);

  Copy weights_;
  Bf16Slab scratch_[2];
  // Tensors held by HeldOperand and HeldOnFirstUse scopes (at most kHeld at a time), and their
  // buffers: a block's four output gradients, and within them the chunked attention's three.
  static constexpr int kHeld = 8;
  Copy held_[kHeld];
  Bf16Slab held_buffers_[kHeld];
  int holding_ = 0;
};

// While alive, this thread's products run in fp32 even inside a Bf16Products scope, which resumes
// after it: a mixture of experts' router, whose logits choose the experts (Megatron-LM keeps it
// in fp32, --moe-router-dtype fp32, since a rounding can flip a choice). Not nested in itself.
class Fp32Products {
 public:
  Fp32Products();
  ~Fp32Products();
  Fp32Products(const Fp32Products&) = delete;
  Fp32Products& operator=(const Fp32Products&) = delete;

 private:
  Bf16Products* suspended_;
};

// For as long as it lives, products in bf16 read `n` floats from `p` (an input several products
// read, such as attention's packed QKV) from one rounding made here, instead of rounding them
// per product. The tensor must not change meanwhile. In fp32 it does nothing.
class HeldOperand {
 public:
  HeldOperand(const float* p, int64_t n);
  ~HeldOperand();
  HeldOperand(const HeldOperand&) = delete;
  HeldOperand& operator=(const HeldOperand&) = delete;

 private:
  bool held_ = false;
};

// The same for tensors whose values are not final yet when the scope starts: each is rounded
// once, when a product first reads it, and that rounding serves every later product until the
// scope ends. A block's output gradients (dY of its four linear layers), which its B forms and
// reads and its W, right after, reads again. Each tensor must not change after its first read.
class HeldOnFirstUse {
 public:
  struct Span {
    const float* p;
    int64_t n;
  };
  explicit HeldOnFirstUse(std::initializer_list<Span> tensors);
  ~HeldOnFirstUse();
  HeldOnFirstUse(const HeldOnFirstUse&) = delete;
  HeldOnFirstUse& operator=(const HeldOnFirstUse&) = delete;

 private:
  int held_ = 0;
};

}  // namespace mpf
