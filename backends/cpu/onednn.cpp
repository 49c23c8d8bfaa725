// CPU library: oneDNN (the OpenMP build, so its threads are the kernels' threads). It picks its
// kernels by the instruction sets the CPU reports (and ignores OPENBLAS_CORETYPE).
//   fp32 products: dnnl_sgemm, the C API of oneDNN 2.x and 3.x alike.
//   bf16 products and every batched product: matmul primitives, one per shape, created on first
//   use and cached (a training step repeats a few dozen shapes). The primitive API differs
//   between oneDNN 2.x and 3.x; the two spellings are kept side by side below.
#include <oneapi/dnnl/dnnl.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <tuple>
#include <unordered_map>

#include "backends/cpu/library.hpp"

namespace mpf::backend::cpu {

namespace {

using dnnl::memory;
using dt = memory::data_type;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fatal: oneDNN: %s\n", what.c_str());
  std::abort();
}

// One (non-)transposed row-major operand of `rows` x `cols` (as op() presents it), batched.
memory::desc matrix(dt type, int batch, int rows, int cols, Op op, int ld, int64_t stride) {
  // Op::N: stored rows x cols with row stride ld; Op::T: stored cols x rows, so consecutive
  // elements of a presented row are ld apart.
  const memory::dim r = op == Op::N ? ld : 1, c = op == Op::N ? 1 : ld;
  // A single product is described in 2D: oneDNN 2.6 sends a batch of one with a zero batch
  // stride to its reference kernel.
  if (batch == 1) return memory::desc({rows, cols}, type, {r, c});
  return memory::desc({batch, rows, cols}, type, {stride, r, c});
}

// A matmul primitive for one shape, with its memory objects (pointers are set per call) and
// its argument map, built once so that a call allocates nothing.
struct Product {
  dnnl::matmul primitive;
  memory a, b, c, scale;
  std::unordered_map<int, memory> args;
};

class OneDnn final : public Library {
 public:
  OneDnn() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}

  const char* name() const override { return "onednn"; }

  void gemm(Op op_a, Op op_b, int M, int N, int K, float alpha, const float* A, int lda,
            const float* B, int ldb, float beta, float* C, int ldc) override {
    const dnnl_status_t status = dnnl_sgemm(op_a == Op::N ? 'N' : 'T', op_b == Op::N ? 'N' : 'T', M,
                                            N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    if (status != dnnl_success) fail("dnnl_sgemm failed with status " + std::to_string(status));
  }

  void gemm_strided_batched(Op op_a, Op op_b, int M, int N, int K, float alpha, const float* A,
                            int lda, int64_t stride_a, const float* B, int ldb, int64_t stride_b,
                            float beta, float* C, int ldc, int64_t stride_c, int batch) override {
    run(dt::f32, op_a, op_b, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b, beta, C, ldc,
        stride_c, batch);
  }

  void gemm_bf16(Op op_a, Op op_b, int M, int N, int K, float alpha, const bf16* A, int lda,
                 const bf16* B, int ldb, float beta, float* C, int ldc) override {
    run(dt::bf16, op_a, op_b, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
  }

  void gemm_strided_batched_bf16(Op op_a, Op op_b, int M, int N, int K, float alpha, const bf16* A,
                                 int lda, int64_t stride_a, const bf16* B, int ldb,
                                 int64_t stride_b, float beta, float* C, int ldc, int64_t stride_c,
                                 int batch) override {
    run(dt::bf16, op_a, op_b, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b, beta, C, ldc,
        stride_c, batch);
  }

  void gemm_bf16_out(Op op_a, Op op_b, int M, int N, int K, float alpha, const bf16* A, int lda,
                     const bf16* B, int ldb, bf16* C, int ldc) override {
    run(dt::bf16, op_a, op_b, M, N, K, alpha, A, lda, 0, B, ldb, 0, 0.0f, C, ldc, 0, 1, dt::bf16);
  }

  // dnnl_sgemm with one column (op N) or one row (op T: y as the row xᵀ·A, so A is read in its
  // stored order); oneDNN runs its matrix-vector kernels for such shapes.
  void gemv(Op op_a, int M, int N, float alpha, const float* A, int lda, const float* x, float beta,
            float* y) override {
    const dnnl_status_t status =
        op_a == Op::N ? dnnl_sgemm('N', 'N', M, 1, N, alpha, A, lda, x, 1, beta, y, 1)
                      : dnnl_sgemm('N', 'N', 1, N, M, alpha, x, M, A, lda, beta, y, N);
    if (status != dnnl_success)
      fail("dnnl_sgemm (gemv) failed with status " + std::to_string(status));
  }

  // oneDNN's OpenMP build runs on omp_get_max_threads(), which the caller has set.
  void set_num_threads(int) override {}

  std::string describe() const override {
    const dnnl_version_t* v = dnnl_version();
    return "oneDNN " + version() + " (" +
           (v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "not OpenMP") + ", " +
           isa_name(dnnl_get_effective_cpu_isa()) + ")";
  }

  Kernels kernels(const CpuFeatures& cpu) const override {
    Kernels k;
    const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    k.library = "oneDNN " + version();
    k.isa = isa_name(isa);
    // The widest kernel family this CPU could run, and whether oneDNN runs it.
    const char* missing = nullptr;
    if (cpu.amx_bf16 && !has(isa, dnnl_cpu_isa_avx512_core_amx)) {
      missing = "AMX";
    } else if (cpu.avx512_bf16 && !has(isa, dnnl_cpu_isa_avx512_core_bf16)) {
      missing = "AVX512_BF16";
    } else if (cpu.avx512 && !has(isa, dnnl_cpu_isa_avx512_core)) {
      missing = "AVX-512";
    } else if (cpu.avx2 && !has(isa, dnnl_cpu_isa_avx2)) {
      missing = "AVX2";
    }
    if (missing) {
      std::string cap;
      for (const char* var : {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"}) {
        const char* value = std::getenv(var);
        if (value && *value && cap.empty()) cap = std::string(var) + "=" + value;
      }
      k.narrower = cap.empty()
                       ? "oneDNN " + version() + " runs " + k.isa + " kernels without this CPU's " +
                             missing + ": use a newer oneDNN"
                       : cap + " caps oneDNN at " + k.isa + " on a CPU with " + cpu.summary() +
                             ": unset " + cap.substr(0, cap.find('='));
    }
    k.bf16_missing = missing_bf16_instructions(cpu);
    if (k.bf16_missing.empty() && !has(isa, dnnl_cpu_isa_avx512_core_bf16)) {
      k.bf16_missing = "oneDNN " + version() + " runs " + k.isa + " kernels, without bf16 (" +
                       (k.narrower.empty() ? "a newer oneDNN has them" : k.narrower) + ")";
    }
    return k;
  }

 private:
  // The ISA values are bit sets, each including the ones it extends, in oneDNN 2.x and 3.x.
  static bool has(dnnl_cpu_isa_t isa, dnnl_cpu_isa_t family) { return (isa & family) == family; }

  static std::string isa_name(dnnl_cpu_isa_t isa) {
    const std::pair<dnnl_cpu_isa_t, const char*> names[] = {
        {dnnl_cpu_isa_avx512_core_amx, "avx512_core_amx"},
        {dnnl_cpu_isa_avx512_core_bf16, "avx512_core_bf16"},
        {dnnl_cpu_isa_avx512_core_vnni, "avx512_core_vnni"},
        {dnnl_cpu_isa_avx512_core, "avx512_core"},
        {dnnl_cpu_isa_avx2, "avx2"},
        {dnnl_cpu_isa_avx, "avx"},
        {dnnl_cpu_isa_sse41, "sse41"}};
    for (const auto& [family, name] : names) {
      if (has(isa, family)) return name;
    }
    return "no vector ISA";
  }

  static std::string version() {
    const dnnl_version_t* v = dnnl_version();
    return std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
           std::to_string(v->patch);
  }

  using Key = std::tuple<dt, Op, Op, int, int, int, int, int, int, int64_t, int64_t, int64_t, int,
                         float, float, dt>;

  // C (batch x M x N, fp32, or bf16 rounded from the fp32 sums) = alpha·op(A)·op(B) + beta·C
  // through a cached matmul primitive.
  void run(dt type, Op op_a, Op op_b, int M, int N, int K, float alpha, const void* A, int lda,
           int64_t stride_a, const void* B, int ldb, int64_t stride_b, float beta, void* C, int ldc,
           int64_t stride_c, int batch, dt c_type = dt::f32) {
    const Key key{type, op_a,     op_b,     M,        N,     K,     lda,  ldb,
                  ldc,  stride_a, stride_b, stride_c, batch, alpha, beta, c_type};
    auto it = products_.find(key);
    if (it == products_.end()) it = products_.emplace(key, create(key)).first;
    Product& p = it->second;
    p.a.set_data_handle(const_cast<void*>(A));
    p.b.set_data_handle(const_cast<void*>(B));
    p.c.set_data_handle(C);
    try {
      p.primitive.execute(stream_, p.args);
      stream_.wait();
    } catch (const dnnl::error& e) {
      fail(std::string("matmul failed: ") + e.what());
    }
  }

  Product create(const Key& key) {
    const auto& [type, op_a, op_b, M, N, K, lda, ldb, ldc, stride_a, stride_b, stride_c, batch,
                 alpha, beta, c_type] = key;
    const memory::desc a = matrix(type, batch, M, K, op_a, lda, stride_a);
    const memory::desc b = matrix(type, batch, K, N, op_b, ldb, stride_b);
    const memory::desc c = matrix(c_type, batch, M, N, Op::N, ldc, stride_c);
    dnnl::primitive_attr attr;
    if (beta != 0.0f) {  // C = ... + beta·C: the sum post-op
      dnnl::post_ops ops;
      ops.append_sum(beta);
      attr.set_post_ops(ops);
    }
    Product p;
    try {
#if DNNL_VERSION_MAJOR >= 3
      if (alpha != 1.0f) attr.set_scales_mask(DNNL_ARG_WEIGHTS, 0);
      const dnnl::matmul::primitive_desc pd(engine_, a, b, c, attr);
      if (alpha != 1.0f) {
        p.scale = memory(memory::desc({1}, dt::f32, memory::dims{1}), engine_);
        *static_cast<float*>(p.scale.get_data_handle()) = alpha;
      }
#else
      if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, engine_);
#endif
      // A reference kernel is correct but ~100x slower: say so once per shape.
      if (std::string(pd.impl_info_str()).rfind("ref", 0) == 0) {
        std::fprintf(stderr,
                     "warning: oneDNN runs a %dx%dx%d (x%d) product with its slow reference "
                     "kernel\n",
                     M, N, K, batch);
      }
      p.primitive = dnnl::matmul(pd);
      p.a = memory(a, engine_, DNNL_MEMORY_NONE);
      p.b = memory(b, engine_, DNNL_MEMORY_NONE);
      p.c = memory(c, engine_, DNNL_MEMORY_NONE);
      p.args = {{DNNL_ARG_SRC, p.a}, {DNNL_ARG_WEIGHTS, p.b}, {DNNL_ARG_DST, p.c}};
#if DNNL_VERSION_MAJOR >= 3
      if (alpha != 1.0f) p.args.emplace(DNNL_ARG_ATTR_SCALES | DNNL_ARG_WEIGHTS, p.scale);
#endif
    } catch (const dnnl::error& e) {
      fail(std::string("cannot create a matmul primitive: ") + e.what());
    }
    return p;
  }

  dnnl::engine engine_;
  dnnl::stream stream_;
  std::map<Key, Product> products_;
};
}  // namespace

Library& onednn() {
  static OneDnn library;
  return library;
}

}  // namespace mpf::backend::cpu
