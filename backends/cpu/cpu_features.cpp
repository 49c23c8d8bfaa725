#include "backends/cpu/cpu_features.hpp"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace mpf::backend::cpu {

namespace {

#if defined(__x86_64__) || defined(__i386__)
struct Regs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};

Regs cpuid(unsigned leaf, unsigned subleaf) {
  Regs r;
  if (!__get_cpuid_count(leaf, subleaf, &r.a, &r.b, &r.c, &r.d)) return Regs{};
  return r;
}

// XCR0: which register states the OS saves on a context switch; an instruction set is usable only
// when its registers are among them.
uint64_t xgetbv0() {
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

CpuFeatures detect() {
  CpuFeatures f;
  const Regs basic = cpuid(0, 0);
  if (basic.a < 7) return f;
  const Regs leaf1 = cpuid(1, 0);
  const bool osxsave = leaf1.c & (1u << 27), fma = leaf1.c & (1u << 12);
  const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  const bool ymm_state = (xcr0 & 0x6) == 0x6;           // SSE and AVX registers
  const bool zmm_state = (xcr0 & 0xe6) == 0xe6;         // + opmask and the upper ZMM registers
  const bool tile_state = (xcr0 & 0x60000) == 0x60000;  // AMX tile config and data
  const Regs leaf7 = cpuid(7, 0), leaf7_1 = cpuid(7, 1);
  f.avx2 = ymm_state && fma && (leaf7.b & (1u << 5));
  const unsigned avx512_fdqbwvl = (1u << 16) | (1u << 17) | (1u << 30) | (1u << 31);
  f.avx512 = zmm_state && (leaf7.b & avx512_fdqbwvl) == avx512_fdqbwvl;
  f.avx512_bf16 = f.avx512 && (leaf7_1.a & (1u << 5));
  // Linux also asks a process to request AMX state (arch_prctl); oneDNN does that itself.
  f.amx_bf16 = tile_state && (leaf7.d & (1u << 22));
  if (cpuid(0x80000000u, 0).a >= 0x80000004u) {
    char brand[49] = {};
    for (unsigned i = 0; i < 3; ++i) {
      const Regs r = cpuid(0x80000002u + i, 0);
      std::memcpy(brand + 16 * i, &r, 16);
    }
    f.model = brand;
    const size_t first = f.model.find_first_not_of(' '), last = f.model.find_last_not_of(' ');
    f.model = first == std::string::npos ? "" : f.model.substr(first, last - first + 1);
  }
  return f;
}
#else
CpuFeatures detect() {
  return CpuFeatures{};
}
#endif

}  // namespace

const char* CpuFeatures::widest_vectors() const {
  return avx512 ? "AVX-512" : avx2 ? "AVX2" : "SSE";
}

namespace {
// For tests only: MPIFORMER_TEST_HIDE_CPU_FEATURES=avx512_bf16,amx_bf16 (any of avx512_bf16,
// amx_bf16, avx512, avx2) makes the detected CPU lack those, so that the refusals a CPU without
// them meets can be tested on one that has them. The libraries still run what they detect
// themselves; only this project's checks and messages see the masked CPU.
CpuFeatures masked(CpuFeatures f) {
  const char* hide = std::getenv("MPIFORMER_TEST_HIDE_CPU_FEATURES");
  if (!hide || !*hide) return f;
  const std::string list = "," + std::string(hide) + ",";
  auto hidden = [&](const char* name) {
    return list.find("," + std::string(name) + ",") != list.npos;
  };
  if (hidden("avx2")) f.avx2 = false;
  if (hidden("avx512") || !f.avx2) f.avx512 = false;
  if (hidden("avx512_bf16") || !f.avx512) f.avx512_bf16 = false;
  if (hidden("amx_bf16")) f.amx_bf16 = false;
  f.masked = hide;
  return f;
}
}  // namespace

std::string CpuFeatures::summary() const {
  std::string s = widest_vectors();
  if (avx512_bf16) s += ", AVX512_BF16";
  if (amx_bf16) s += ", AMX-BF16";
  if (!masked.empty()) s += " (MPIFORMER_TEST_HIDE_CPU_FEATURES=" + masked + ")";
  return s;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = masked(detect());
  return f;
}

}  // namespace mpf::backend::cpu
