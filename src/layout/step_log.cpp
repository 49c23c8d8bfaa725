#include "layout/step_log.hpp"

#include <cmath>
#include <cstdio>

#include "core/profile.hpp"
#include "model/tensors.hpp"

namespace mpf {

double flops_per_token(const GPTConfig& cfg, int T) {
  // The position table (GPT-2's; Llama has none) and an untied model's token table are lookups,
  // not products; a tied table is the head's product.
  double n_prime = double(parameter_count(cfg)) - double(tensor_size(TensorId::wpe, cfg));
  if (!cfg.tied) n_prime -= double(tensor_size(TensorId::wte, cfg));
  // A token goes through k of the E experts: only their share of the MLP's weights is active.
  if (cfg.moe()) {
    const double experts =
        double(tensor_size(TensorId::fcw, cfg) + tensor_size(TensorId::fcprojw, cfg));
    n_prime -= experts * (1.0 - double(cfg.experts_per_token) / cfg.experts);
  }
  // Each multi-token prediction depth (its block and eh_proj are in the parameters above) passes
  // its rows through the shared head once more: the head's product again per depth.
  n_prime += double(cfg.mtp) * cfg.padded_vocab * cfg.channels;
  // Attention: per block (the modules' too) and token, Q·Kᵀ and P·V over the keys a query sees,
  // 2·(hs_qk + hs_v) FLOPs a key and head forward, twice that backward (MLA: hs_qk = qk_nope +
  // qk_rope, hs_v = v_head); causally a query sees T/2 keys on average, within a sliding window
  // of W < T positions W − W²/(2T).
  const double W = cfg.sliding_window;
  const double keys = W > 0 && W < T ? W - W * W / (2.0 * T) : T / 2.0;
  const double hs_v = double(cfg.attention_width()) / cfg.heads;
  const double attention = 6.0 * cfg.blocks() * double(cfg.heads) * (cfg.head_size() + hs_v) * keys;
  return 6.0 * n_prime + attention;
}

std::string format_step(const StepRecord& r, double tokens, double flops_per_step,
                        double peak_flops) {
  char buf[360], aux[64] = "", qk[64] = "";
  const double s = r.ms / 1e3;
  int n = 0;
  if (!std::isnan(r.aux)) n = std::snprintf(aux, sizeof aux, " | aux %.6f", r.aux);
  if (!std::isnan(r.mtp)) std::snprintf(aux + n, sizeof aux - size_t(n), " | mtp %.6f", r.mtp);
  if (!std::isnan(r.qk_logit)) {
    std::snprintf(qk, sizeof qk, " | qk logit %.2f, %d clipped", r.qk_logit, r.qk_clipped);
  }
  std::snprintf(
      buf, sizeof buf,
      "step %d/%d | loss %.6f%s | lr %.1e | norm %.4f%s | %.1f ms | %.0f tok/s | MFU %.1f%%",
      r.step, r.steps, r.loss, aux, r.lr, r.norm, qk, r.ms, tokens / s,
      100.0 * flops_per_step / s / peak_flops);
  return buf;
}

std::string profile_table(double step_ms, int steps) {
  std::string text;
  char line[200];
  std::snprintf(line, sizeof line, "profile | per step, mean of %d steps | %.1f ms a step\n", steps,
                step_ms);
  text += line;
  std::snprintf(line, sizeof line, "  %-44s %7s %9s %7s %8s\n", "kernel", "calls", "ms", "%",
                "GFLOP/s");
  text += line;
  double in_kernels = 0.0, gemm = 0.0;
  for (const profile::Entry& e : profile::entries()) {
    const double ms = e.seconds * 1e3 / steps;
    in_kernels += ms;
    if (e.flops > 0) gemm += ms;
    char rate[16] = "";
    if (e.flops > 0) std::snprintf(rate, sizeof rate, "%.0f", e.flops / e.seconds / 1e9);
    std::snprintf(line, sizeof line, "  %-44s %7.1f %9.2f %6.1f%% %8s\n", e.label.c_str(),
                  double(e.calls) / steps, ms, 100.0 * ms / step_ms, rate);
    text += line;
  }
  std::snprintf(
      line, sizeof line,
      "  products %.1f ms (%.1f%%), other kernels %.1f ms (%.1f%%), outside kernels (MPI, "
      "waits, host) %.1f ms (%.1f%%)\n",
      gemm, 100.0 * gemm / step_ms, in_kernels - gemm, 100.0 * (in_kernels - gemm) / step_ms,
      step_ms - in_kernels, 100.0 * (step_ms - in_kernels) / step_ms);
  text += line;
  // Every crossing between the kernels' memory and the host (core/transfer.hpp): in a GPU build
  // these are the PCIe/NVLink copies; in a CPU build the same reads, at memory speed.
  const std::vector<profile::Transfer> transfers = profile::transfers();
  std::snprintf(line, sizeof line, "  %-44s %7s %9s %9s\n", "host <-> kernels' memory", "calls",
                "MB", "ms");
  text += line;
  if (transfers.empty()) text += "  (none)\n";
  for (const profile::Transfer& t : transfers) {
    std::snprintf(line, sizeof line, "  %-44s %7.1f %9.3f %9.2f\n", t.label.c_str(),
                  double(t.calls) / steps, double(t.bytes) / 1e6 / steps, t.seconds * 1e3 / steps);
    text += line;
  }
  return text;
}

}  // namespace mpf
