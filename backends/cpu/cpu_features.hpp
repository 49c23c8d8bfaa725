// What this CPU can do, from CPUID and XGETBV (the instructions the OS has enabled), so that the
// backends can say when the kernels they run are narrower than the CPU allows. Never a table of
// CPU models: a new CPU is described by its feature bits.
#pragma once

#include <string>

namespace mpf::backend::cpu {

struct CpuFeatures {
  bool avx2 = false;         // AVX2 and FMA
  bool avx512 = false;       // AVX-512 F, BW, VL and DQ (Skylake-X and later, Zen 4 and later)
  bool avx512_bf16 = false;  // AVX512_BF16: bf16 dot products (Cooper Lake, Zen 4 and later)
  bool amx_bf16 = false;     // AMX-BF16 tiles (Sapphire Rapids and later)
  std::string model;         // the CPUID brand string, e.g. "AMD EPYC 9R45"
  std::string masked;        // features hidden for a test (cpu_features.cpp), else empty

  // The widest vector instruction set: "AVX-512", "AVX2" or "SSE".
  const char* widest_vectors() const;
  // True when bf16 products run natively (AVX512_BF16 or AMX-BF16).
  bool native_bf16() const { return avx512_bf16 || amx_bf16; }
  // For messages: "AVX-512, AVX512_BF16", "AVX2", ...
  std::string summary() const;
};

// Detected once; all false on a CPU this code cannot query (not x86-64).
const CpuFeatures& cpu_features();

}  // namespace mpf::backend::cpu
