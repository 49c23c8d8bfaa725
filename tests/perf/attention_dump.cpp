// Each attention path's results on one shape, written as raw float32 files for a check against
// another implementation (ci/gpu/attention_check.py holds them to PyTorch's attention on the same
// inputs): the inputs (the packed qkv and the output gradient), then per path the output, the
// logsumexp and the input gradients. Causal grouped-query attention over B sequences of T
// positions, as the model calls it.
//
//   attention_dump DIR [--batch B] [--heads NH] [--kv-heads KVH] [--head-size hs] [--seq-len T]
//                      [--precision fp32|bf16]
// writes DIR/shape.txt ("B T NH KVH hs precision"), DIR/qkv.f32 (B,T,(NH + 2·KVH)·hs),
// DIR/dout.f32 (B,T,NH·hs), DIR/paths.txt (the paths run: fused, chunked, and in a CUDA build
// in bf16 mma, whose backward is the fused kernel's), and for each path P: DIR/P.out.f32
// (B,T,NH·hs), DIR/P.lse.f32 (B,NH,T), DIR/P.dqkv.f32 (like qkv).
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/types.hpp"
#include "model/layers/attention.hpp"
#include "model/layers/attention_path.hpp"
#include "model/layers/matmul.hpp"
#include "perf/attention_inputs.hpp"

namespace {

using mpf::perf::view;

bool write(const std::string& path, const mpf::Slab& s) {
  auto h = Kokkos::create_mirror_view(s);
  Kokkos::deep_copy(h, s);
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  const size_t n = size_t(h.extent(0));
  const bool ok = std::fwrite(h.data(), sizeof(float), n, f) == n;
  return std::fclose(f) == 0 && ok;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  Kokkos::initialize(argc, argv);
  int status = 0;
  {
    mpf::perf::AttentionShape shape;
    shape.NH = 4;
    shape.KVH = 2;
    int T = 1000;
    std::string dir;
    for (int i = 1; i < argc; ++i) {
      if (shape.take(argc, argv, i)) continue;
      const std::string a = argv[i];
      if (a == "--seq-len")
        T = i + 1 < argc ? std::atoi(argv[++i]) : 0;
      else
        dir = a;
    }
    const int B = shape.B, NH = shape.NH, KVH = shape.KVH, hs = shape.hs;
    const bool bf16 = shape.bf16;
    if (dir.empty() || B < 1 || NH < 1 || KVH < 1 || NH % KVH != 0 || hs < 1 || T < 1) {
      std::fprintf(stderr,
                   "usage: attention_dump DIR [--batch B] [--heads NH] [--kv-heads KVH (divides "
                   "NH)] [--head-size hs] [--seq-len T] [--precision fp32|bf16]\n");
      status = 2;
    } else {
      const int W = (NH + 2 * KVH) * hs, Cq = NH * hs;
      const int64_t rows = int64_t(B) * T;
      mpf::Slab qkv = mpf::perf::filled("qkv", rows * W, 7),
                dout = mpf::perf::filled("dout", rows * Cq, 8);
      std::unique_ptr<mpf::Bf16Products> scope;
      if (bf16) scope = std::make_unique<mpf::Bf16Products>(nullptr, nullptr, 0, 1);
      const mpf::AttentionInputs x =
          mpf::packed_attention(view(qkv), B, NH, KVH, hs, mpf::PositionRuns::contiguous(T));
      bool ok = write(dir + "/qkv.f32", qkv) && write(dir + "/dout.f32", dout);
      std::vector<std::string> paths = {"fused", "chunked"};
      // The tensor-core forward exists only in a CUDA build, and only in bf16.
      if (mpf::kDeviceMemory && bf16) paths.push_back("mma");
      std::string names;
      for (const std::string& name : paths) {
        const mpf::AttentionPath path = mpf::attention_path_named(name);
        mpf::Slab out("out", rows * Cq), lse("lse", int64_t(B) * NH * T),
            delta("delta", int64_t(B) * NH * T), dqkv("dqkv", rows * W);
        mpf::attention_forward(path, view(out), view(lse), x);
        mpf::attention_backward_delta(view(delta), view(out), view(dout), B, T, NH, hs);
        float* dq = dqkv.data();
        mpf::attention_backward(path, dq, W, false, dq + Cq, dq + Cq + KVH * hs, W, false,
                                view(dout), view(lse), view(delta), x);
        ok = ok && write(dir + "/" + name + ".out.f32", out) &&
             write(dir + "/" + name + ".lse.f32", lse) &&
             write(dir + "/" + name + ".dqkv.f32", dqkv);
        names += name + "\n";
      }
      FILE* list = std::fopen((dir + "/paths.txt").c_str(), "w");
      ok = ok && list && std::fputs(names.c_str(), list) >= 0;
      if (list) ok = std::fclose(list) == 0 && ok;
      FILE* f = std::fopen((dir + "/shape.txt").c_str(), "w");
      ok = ok && f &&
           std::fprintf(f, "%d %d %d %d %d %s\n", B, T, NH, KVH, hs, bf16 ? "bf16" : "fp32") > 0;
      if (f) ok = std::fclose(f) == 0 && ok;
      if (!ok) {
        std::fprintf(stderr, "attention_dump: cannot write into %s\n", dir.c_str());
        status = 1;
      }
    }
  }
  Kokkos::finalize();
  MPI_Finalize();
  return status;
}
