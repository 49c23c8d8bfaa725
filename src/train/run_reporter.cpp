#include "train/run_reporter.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "backends/gemm.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/profile.hpp"
#include "io/output_file.hpp"
#include "layout/settings.hpp"
#include "model/gpt.hpp"
#include "mpiformer/config.hpp"
#include "parallel/device_mpi.hpp"
#include "parallel/rank_device.hpp"
#include "train/exit_status.hpp"
#include "train/step_rerun.hpp"
#include "train/stop_signals.hpp"
#include "train/trainer.hpp"

namespace mpf {

namespace {

// The data-parallel line's ZeRO part: the stage in force (0: none), the one asked for.
std::string zero_line(int stage, int asked, bool cp) {
  const std::string over = cp ? " over DP x CP" : " over DP";
  if (stage == 1) return "ZeRO-1: optimizer state sharded" + over;
  if (stage == 2) return "ZeRO-2: optimizer state and blocks' gradients sharded" + over;
  if (stage == 3) {
    return "ZeRO-3: optimizer state, blocks' gradients and parameters sharded" + over +
           ", gathered block by block";
  }
  if (asked > 0) {
    return "ZeRO-" + std::to_string(asked) + " requested but dp x cp is 1: nothing to shard";
  }
  return "optimizer state replicated";
}

std::string megabytes(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB", double(bytes) / 1e6);
  return buf;
}

}  // namespace

RunReporter::RunReporter(const TrainingRun& run) : run_(run) {
  const TrainingRun& r = run_;
  if (r.metrics_start_) metrics_ = std::make_unique<MetricsLog>(r.opts_.metrics, *r.metrics_start_);
  if (r.is_root() && !r.opts_.tensorboard.empty()) {
    events_ = std::make_unique<EventFile>(r.opts_.tensorboard);
    if (r.first_step_ > 1) events_->restart(r.first_step_);
  }
}

bool RunReporter::speaks() const {
  return run_.is_root() && run_.opts_.verbose;
}

void RunReporter::record(const MetricsRecord& m) const {
  if (metrics_) metrics_->write(m);
}

void RunReporter::scalars(int64_t step,
                          const std::vector<std::pair<std::string, double>>& v) const {
  if (events_) events_->scalars(step, v);
}

void RunReporter::start() const {
  const TrainingRun& r = run_;
  if (speaks()) {
    print_environment();
    print_layout();
    print_plan();
    std::fflush(stdout);
  }
  record(MetricsRecord("run")
             .integer("step", r.first_step_ - 1)
             .text("save", r.opts_.save.empty() ? "" : resolved_path(r.opts_.save))
             .text("arch", arch_name(r.cfg_.arch))
             .integer("layers", r.cfg_.layers)
             .integer("dim", r.cfg_.channels)
             .integer("heads", r.cfg_.heads)
             .integer("batch", r.opts_.batch)
             .integer("seq_len", r.opts_.seq_len)
             .integer("tp", r.grid_->tp_size())
             .integer("cp", r.grid_->cp_size())
             .integer("dp", r.grid_->dp_size())
             .integer("pp", r.grid_->pp_size())
             .text("precision", precision_name(r.opts_.precision))
             .number("peak_gflops", r.peak_flops_->flops() / 1e9));
}

void RunReporter::print_environment() const {
  const TrainingRun& r = run_;
  const TrainOptions& o = r.opts_;
  for (const std::string& w : r.warnings_) std::fprintf(stderr, "warning: %s\n", w.c_str());
  for (const std::string& n : r.notes_) std::printf("note: %s\n", n.c_str());
  std::printf("mpiformer %s | %d threads/rank | %s\n", MPIFORMER_VERSION, host_thread_count(),
              describe_execution_space().c_str());
  // Kokkos' OpenMP threads, the GEMM libraries' and the split kernels' are one OpenMP pool of
  // host_thread_count() threads; a Kokkos told otherwise (--kokkos-num-threads) oversubscribes.
  if (!kSplitOverOpenMP && !kDeviceMemory && ExecSpace().concurrency() != host_thread_count()) {
    std::fprintf(stderr,
                 "warning: Kokkos runs %d threads but the GEMM library %d: drop "
                 "--kokkos-num-threads and use --threads\n",
                 int(ExecSpace().concurrency()), host_thread_count());
  }
  const backend::Kernels gemm = backend::kernels();
  std::printf("gemm: %s %s | %s | products in %s%s\n", gemm.library.c_str(), gemm.isa.c_str(),
              gemm.cpu.c_str(), precision_name(o.precision),
              o.precision == Precision::bf16 ? " (fp32 accumulation, fp32 master weights)" : "");
  if (!gemm.narrower.empty()) {
    std::fprintf(stderr, "warning: GEMM kernels narrower than this CPU allows: %s\n",
                 gemm.narrower.c_str());
  }
  std::printf("mpi: %s\n", describe_mpi_memory().c_str());
  std::printf("grid: %s", describe_placement(*r.grid_, r.placement_, false).c_str());
  std::printf("model: %s | %.2fM parameters | %s\n", describe(r.cfg_).c_str(),
              r.params_.count / 1e6,
              o.init_from.empty() ? ("init seed " + std::to_string(o.seed)).c_str()
                                  : ("from " + o.init_from).c_str());
  if (r.cfg_.moe()) {
    // The experts' weights on this rank (its blocks, its TP share of each expert's width), and
    // the share of a token's MLP FLOPs they stand for.
    const double bytes =
        double(r.params_.sizes[TensorId::fcw] + r.params_.sizes[TensorId::fcprojw]) * sizeof(float);
    const TpShard& s = r.shard_;
    const std::string held = s.ep_size > 1
                                 ? " (experts " + std::to_string(s.expert_begin) + "-" +
                                       std::to_string(s.expert_begin + s.experts - 1) +
                                       " of each block, ep " + std::to_string(s.ep_size) + ")"
                                 : std::string();
    std::printf(
        "experts: %d per block, top-%d, gates %s, balance coefficient %g | %.1f MB of "
        "expert weights on this rank%s, %d of %d active per token\n",
        r.cfg_.experts, r.cfg_.experts_per_token,
        r.cfg_.moe_renormalize ? "renormalised" : "the router's probabilities",
        double(r.cfg_.moe_aux_coef), bytes / 1e6, held.c_str(), r.cfg_.experts_per_token,
        r.cfg_.experts);
  }
  std::printf("data: %s (%lld tokens)", o.data.c_str(),
              static_cast<long long>(r.train_data_->total_tokens()));
  if (r.val_data_) {
    std::printf(" | val %s (%lld tokens)", r.val_name_.c_str(),
                static_cast<long long>(r.val_data_->total_tokens()));
  }
  if (r.eval_task_) {
    std::printf(" | eval %s (%zu examples)", r.eval_task_->name.c_str(),
                r.eval_task_->examples.size());
  }
  std::printf(" | batch %d x %d = %d tokens/step, %d row(s) per DP rank\n", o.batch, o.seq_len,
              o.batch * o.seq_len, r.local_batch_);
  std::printf("memory/rank: %s\n", r.memory_.summary().c_str());
}

void RunReporter::print_layout() const {
  const TrainingRun& r = run_;
  const TrainOptions& o = r.opts_;
  const Grid& g = *r.grid_;
  std::printf("microbatches: %d of %d row(s) per DP rank | schedule %s%s%s",
              r.batch_.microbatches(), r.micro_batch_, pipeline::schedule_name(r.pp_schedule_),
              r.pp_schedule_ == pipeline::Schedule::kZbAuto
                  ? (std::string(" (planned for F = B = W until step ") +
                     std::to_string(r.first_step_ + 1) + " has timed the ops)")
                        .c_str()
                  : "",
              o.recompute == "none" ? "" : (" | " + o.recompute + " recomputation").c_str());
  if (g.pp_size() > 1 || r.shape_.virtual_stages > 1) {
    std::printf(" | pipeline %d stage(s) x %d chunk(s)%s: %s", g.pp_size(), r.shape_.virtual_stages,
                r.shape_.placement == pipeline::ChunkPlacement::kV ? " in a V" : "",
                describe_layout(r.layer_ranges_, g.pp_size(), r.shape_.placement).c_str());
  }
  std::printf("\n");
  if (g.cp_size() > 1) {
    const PositionRuns& p = r.stage_->positions();
    std::printf(
        "context parallel: %d rank(s) | this rank's positions %d-%d and %d-%d of each sequence "
        "(chunks %d and %d of %d) | ring attention, K/V of %d kv head(s) x %d per step\n",
        g.cp_size(), p.run[0].pos, p.run[0].pos + p.run[0].len - 1, p.run[1].pos,
        p.run[1].pos + p.run[1].len - 1, g.cp_rank(), 2 * g.cp_size() - 1 - g.cp_rank(),
        2 * g.cp_size(), r.shard_.kv_heads, r.shard_.head_size);
  }
  std::printf("data parallel: %d rank(s)%s | %zu bucket(s) of <= %g MB | overlap %s | %s\n",
              g.dp_size(), g.cp_size() > 1 ? " (gradients summed over DP x CP)" : "",
              r.dp_grads_->buckets().size(), o.dp_bucket_mb, o.overlap_grad_reduce ? "on" : "off",
              zero_line(r.dp_grads_->stage(), o.zero, g.cp_size() > 1).c_str());
  if (r.zero_nodes_ && r.dp_grads_->zero()) {
    int within = 1;
    MPI_Comm_size(r.zero_nodes_->within, &within);
    std::printf(
        "data parallel: --zero-group node: shards over the %d rank(s) of each node, replicated "
        "on %d nodes (the shard's sums added across them)\n",
        within, r.zero_nodes_->nodes);
  }
  std::printf(
      "optimizer: AdamW lr %.1e betas %g/%g eps %g wd %g (matrices) | clip %g | %s, warmup %d, "
      "final frac %g\n",
      o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.grad_clip, o.lr_schedule.c_str(), o.warmup,
      o.final_lr_frac);
  if (r.muon_) {
    std::printf(
        "optimizer: Muon on %zu block matrices | momentum %g (Nesterov) | Newton-Schulz 5 "
        "steps, %s products | update x 0.2 sqrt(max(rows, cols)) | AdamW the rest\n",
        r.muon_->matrices().size(), o.muon_momentum, o.muon_ns_precision.c_str());
  }
}

void RunReporter::print_plan() const {
  const TrainingRun& r = run_;
  const TrainOptions& o = r.opts_;
  if (r.resume_) {
    const CheckpointInfo& c = r.resume_->info;
    const double gb =
        double(r.state_files_->model_bytes() + r.state_files_->optimizer_bytes()) / 1e9;
    auto saved = [&](const char* key) { return setting(c, key).value_or("?"); };
    std::printf(
        "resumed: %s, step %lld of %d, %lld tokens trained on | saved by tp %s x dp %s x pp %s "
        "(%s, V %s, ZeRO %s%s) | read %.2f GB in %.2f s = %.2f GB/s\n",
        (r.resumed_from_.empty() ? r.saver_->newest() : r.resumed_from_).c_str(),
        static_cast<long long>(c.step), o.steps, static_cast<long long>(c.tokens_seen),
        saved("layout.tp").c_str(), saved("layout.dp").c_str(), saved("layout.pp").c_str(),
        saved("layout.schedule").c_str(), saved("layout.virtual_stages").c_str(),
        saved("layout.zero").c_str(),
        saved("layout.sequence_parallel") == "true" ? ", sequence parallel" : "", gb,
        r.load_seconds_, r.load_seconds_ > 0 ? gb / r.load_seconds_ : 0.0);
  }
  if (!o.save.empty()) {
    std::string when = "at the end";
    if (o.save_every > 0) when = "every " + std::to_string(o.save_every) + " steps and " + when;
    if (o.keep_last > 0) when += ", keeping the newest " + std::to_string(o.keep_last);
    if (!o.save_local.empty()) {
      when += "; each rank's shard into " + o.save_local + " on its node every " +
              std::to_string(o.save_local_every) + " steps";
    }
    std::printf("checkpoints: %s, %s\n", o.save.c_str(), when.c_str());
  }
  const PeakRate& peak = r.peak_;
  std::printf(
      "MFU: (6N' + 6LTC, causal attention) x tokens = %.2f GFLOP/step vs peak %.1f GFLOP/s/rank "
      "(%s)\n",
      r.flops_per_step() / 1e9, peak.gflops,
      o.peak_gflops > 0
          ? "--peak-gflops"
          : (std::string(precision_name(o.precision)) + " GEMM, measured: the best of " +
             std::to_string(backend::available().size()) + " librar" +
             (backend::available().size() > 1 ? "ies, " : "y, ") + peak.library)
                .c_str());
}

void RunReporter::step(const StepRecord& s, const PeakCheck& peak) const {
  const TrainingRun& r = run_;
  if (speaks()) {
    if (!peak.note.empty()) std::printf("%s\n", peak.note.c_str());
    if (!peak.warning.empty()) std::fprintf(stderr, "warning: %s\n", peak.warning.c_str());
  }
  if (!peak.note.empty()) {
    record(MetricsRecord("peak")
               .integer("step", s.step)
               .number("gflops", r.peak_flops_->flops() / 1e9));
  }
  const double seconds = s.ms / 1e3;
  const double tok_s = r.tokens_per_step() / seconds,
               mfu = 100.0 * r.flops_per_step() / seconds / r.peak_flops_->flops();
  MetricsRecord step = MetricsRecord("step").integer("step", s.step).number("loss", s.loss);
  if (!std::isnan(s.aux)) step.number("aux", s.aux);
  if (!std::isnan(s.mtp)) step.number("mtp", s.mtp);
  if (!std::isnan(s.qk_logit))
    step.number("qk_logit", s.qk_logit).integer("qk_clipped", s.qk_clipped);
  record(step.number("lr", s.lr)
             .number("norm", s.norm)
             .number("ms", s.ms)
             .number("tok_s", tok_s)
             .number("mfu", mfu)
             .integer("tokens", r.tokens_seen_));
  scalars(s.step, {{"train/loss", s.loss},
                   {"train/lr", s.lr},
                   {"train/grad_norm", s.norm},
                   {"train/tok_s", tok_s},
                   {"train/mfu", mfu}});
  if (!speaks() || !logs_step(s.step)) return;
  std::printf(
      "%s\n",
      format_step(s, r.tokens_per_step(), r.flops_per_step(), r.peak_flops_->flops()).c_str());
  std::fflush(stdout);
}

bool RunReporter::logs_step(int s) const {
  const TrainOptions& o = run_.opts_;
  return s % o.log_every == 0 || s == o.steps || s == run_.first_step_;
}

void RunReporter::expert_load(int step, const std::vector<double>& load) const {
  // Balanced, each of E experts takes the mean of the choices: 1.00; a collapsed router, up to E.
  const int E = run_.cfg_.experts, L = run_.cfg_.blocks();  // the MTP modules' blocks last
  std::string text;
  double worst = 0.0;
  for (int l = 0; l < L; ++l) {
    if (run_.cfg_.dense_block(l)) {  // no experts (first_k_dense_replace)
      text += " -";
      continue;
    }
    double most = 0.0, sum = 0.0;
    for (int e = 0; e < E; ++e) {
      most = std::max(most, load[size_t(l) * E + e]);
      sum += load[size_t(l) * E + e];
    }
    const double ratio = sum > 0 ? most / (sum / E) : 0.0;
    worst = std::max(worst, ratio);
    char one[16];
    std::snprintf(one, sizeof one, " %.2f", ratio);
    text += one;
  }
  record(MetricsRecord("experts").integer("step", step).number("load_max", worst));
  scalars(step, {{"train/expert_load_max", worst}});
  if (!speaks()) return;
  std::printf("experts step %d | load (busiest expert / mean) by block:%s\n", step, text.c_str());
  std::fflush(stdout);
}

void RunReporter::rerun(const StepOutcome& s) const {
  record(MetricsRecord("rerun").integer("step", s.log.step).number("loss", s.log.loss));
  if (!speaks()) return;
  std::printf(
      "step %d: computed again from the same state: the same bits on every rank, so its "
      "loss %.6f and gradient norm %.6g are the data's\n",
      s.log.step, s.log.loss, s.log.norm);
}

int RunReporter::suspect(const StepOutcome& s) const {
  // The placement table, the log and --metrics are rank 0's.
  if (!run_.is_root()) return kExitSuspect;
  const std::string line = suspect_line(s.log.step, s.suspect, run_.placement_);
  record(MetricsRecord("suspect").integer("step", s.log.step).text("verdict", line));
  print_error("%s", line.c_str());
  return kExitSuspect;
}

void RunReporter::skip(const StepOutcome& s) const {
  const TrainingRun& r = run_;
  const TrainOptions& o = r.opts_;
  const bool loss = s.loss_z > o.skip_outliers;
  record(MetricsRecord("outlier")
             .integer("step", s.log.step)
             .number("loss", s.log.loss)
             .number("norm", s.log.norm)
             .number("loss_z", s.loss_z)
             .number("norm_z", s.norm_z)
             .integer("skipped", r.skipped_updates_));
  scalars(s.log.step, {{"train/skipped_updates", double(r.skipped_updates_)}});
  if (!speaks()) return;
  std::printf(
      "step %d: update skipped: its %s %.6g is %.1f standard deviations above the last %d steps' "
      "(--skip-outliers %g; %lld skipped so far)\n",
      s.log.step, loss ? "loss" : "gradient norm", loss ? s.log.loss : s.log.norm,
      loss ? s.loss_z : s.norm_z, o.outlier_window, o.skip_outliers,
      static_cast<long long>(r.skipped_updates_));
}

int RunReporter::divergence(const StepRecord& s, const std::string& newest) const {
  record(MetricsRecord("diverged")
             .integer("step", s.step)
             .number("loss", s.loss)
             .number("norm", s.norm));
  if (run_.is_root()) {
    print_error(
        "step %d: loss %g, gradient norm %g: training diverged; the update was "
        "not applied and nothing was saved. %s",
        s.step, s.loss, s.norm,
        newest.empty()
            ? "There is no checkpoint of this run (--save DIR keeps them)."
            : ("The newest checkpoint is " + newest + ": resume from it (with a lower --lr, say)")
                  .c_str());
  }
  return kExitDiverged;
}

void RunReporter::validation(int step, double loss) const {
  if (speaks()) std::printf("val step %d | loss %.6f\n", step, loss);
  record(MetricsRecord("val").integer("step", step).number("loss", loss));
  scalars(step, {{"val/loss", loss}});
}

void RunReporter::checkpoint(int step, double stall, double write, double waited, int64_t bytes,
                             bool background, bool ok) const {
  record(MetricsRecord("save")
             .integer("step", step)
             .text("mode", background ? "background" : "synchronous")
             .number("stall_s", stall)
             .number("write_s", write)
             .number("wait_s", waited)
             .number("overlap", save_overlap(write, waited, background))
             .number("gb", double(bytes) / 1e9)
             .text("status", ok ? "saved" : "failed"));
}

void RunReporter::task(int step, const TaskResult& t) const {
  if (speaks()) {
    std::printf("%s\n", t.line(step).c_str());
    std::fflush(stdout);
  }
  record(MetricsRecord("eval")
             .integer("step", step)
             .text("task", t.name)
             .integer("examples", t.examples)
             .number("acc", t.acc())
             .number("acc_norm", t.acc_norm())
             .number("seconds", t.seconds));
  scalars(step, {{"eval/acc", t.acc()}, {"eval/acc_norm", t.acc_norm()}});
}

void RunReporter::cut_short(const std::string& what, int step, int done, int total,
                            const char* units) const {
  if (!speaks()) return;
  std::printf(
      "%s at step %d cut short by %s after %d of %d %s; its partial result is not reported\n",
      what.c_str(), step, signal_name(run_.stop_signal_), done, total, units);
  std::fflush(stdout);
}

void RunReporter::zb_plan(int step, const pipeline::OpCosts& costs, int limit) const {
  if (!speaks()) return;
  std::string f, b, w;
  for (int p = 0; p < run_.grid_->pp_size(); ++p) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%.2f", p ? "," : "", costs.forward_by_rank[p]);
    f += buf;
    std::snprintf(buf, sizeof buf, "%s%.2f", p ? "," : "", costs.backward_by_rank[p]);
    b += buf;
    std::snprintf(buf, sizeof buf, "%s%.2f", p ? "," : "", costs.weight_by_rank[p]);
    w += buf;
  }
  std::printf(
      "zb-auto: planned from step %d's ms per op: --f %s --b %s --w %s, at most %d "
      "microbatches in flight\n",
      step, f.c_str(), b.c_str(), w.c_str(), limit);
  std::fflush(stdout);
}

void RunReporter::summary(int last, int status) const {
  const TrainingRun& r = run_;
  const TrainOptions& o = r.opts_;
  const int timed_steps = last - r.first_step_;
  const double ms = timed_steps > 0 ? r.tally_.timed_ms / timed_steps : 0.0;
  const double tok_s = ms > 0 ? r.tokens_per_step() / (ms / 1e3) : 0.0;
  const double mfu =
      ms > 0 ? 100.0 * r.flops_per_step() / (ms / 1e3) / r.peak_flops_->flops() : 0.0;
  if (status != kExitDiverged) {
    if (speaks()) {
      std::printf(
          "summary | steps %d | final loss %.6f | %.1f ms/step (steps %d..%d) | %.0f tok/s | "
          "MFU %.1f%% | %s\n",
          last, r.tally_.last_loss, ms, std::min(r.first_step_ + 1, last), last, tok_s, mfu,
          r.peak_flops_->describe().c_str());
      std::printf("%s\n", r.timers_->summary().c_str());
    }
    record(MetricsRecord("summary")
               .integer("step", last)
               .integer("status", status)
               .number("loss", r.tally_.last_loss)
               .number("ms_per_step", ms)
               .number("tok_s", tok_s)
               .number("mfu", mfu)
               .text("peak", r.peak_flops_->describe())
               .integer("skipped", r.skipped_updates_));
  }
  if (speaks() && o.skip_outliers > 0) {
    std::printf(
        "outliers: %lld update(s) skipped in the run so far (--skip-outliers %g over %d "
        "steps)\n",
        static_cast<long long>(r.skipped_updates_), o.skip_outliers, o.outlier_window);
  }
  memory(last);
  if (r.is_root() && o.profile && timed_steps > 0) {
    std::printf("%s", profile_table(r.tally_.timed_ms / timed_steps, timed_steps).c_str());
  }
}

void RunReporter::memory(int last) const {
  // Every rank's peak resident set against its prediction; the line names the rank whose
  // prediction is furthest off. (In a GPU build the model lives in device memory: not shown.)
  if (kDeviceMemory) return;
  const TrainingRun& r = run_;
  const Grid& g = *r.grid_;
  const double mine[2] = {double(peak_resident_bytes()), double(r.memory_.total())};
  std::vector<double> all(r.is_root() ? 2 * g.world_size() : 0);
  MPF_MPI_CHECK(MPI_Gather(mine, 2, MPI_DOUBLE, all.data(), 2, MPI_DOUBLE, 0, g.world_comm()));
  if (!speaks()) return;
  auto off = [&](int k) { return std::fabs(all[2 * k + 1] / all[2 * k] - 1.0); };
  int worst = 0;
  for (int k = 0; k < g.world_size(); ++k) {
    if (off(k) > off(worst)) worst = k;
  }
  std::printf("memory: peak resident %.2f GB on rank %d, predicted %.2f GB (%+.1f%%)\n",
              all[2 * worst] / 1e9, worst, all[2 * worst + 1] / 1e9,
              100.0 * (all[2 * worst + 1] / all[2 * worst] - 1.0));
  record(MetricsRecord("memory")
             .integer("step", last)
             .integer("rank", worst)
             .number("peak_gb", all[2 * worst] / 1e9)
             .number("predicted_gb", all[2 * worst + 1] / 1e9));
}

void RunReporter::stages(const StageTimes& timed) const {
  // Per rank: peak bytes (activations and W sets), most (mb, chunk)s held, one microbatch's
  // activation and W-set bytes, mean F, B and W ms per (mb, chunk).
  const TrainingRun& r = run_;
  const Grid& g = *r.grid_;
  const ModelStage& st = *r.stage_;
  auto mean = [](double ms, int ops) { return ops ? ms / ops : 0.0; };
  const double mine[8] = {
      double(st.peak_activation_bytes()),  double(st.peak_held()),
      double(st.microbatch_bytes()),       double(st.weight_input_bytes()),
      mean(timed.forward, timed.forwards), mean(timed.backward, timed.backwards),
      mean(timed.weight, timed.weights),   double(timed.forwards + timed.backwards)};
  std::vector<double> all(r.is_root() ? 8 * g.world_size() : 0);
  MPF_MPI_CHECK(MPI_Gather(mine, 8, MPI_DOUBLE, all.data(), 8, MPI_DOUBLE, 0, g.world_comm()));
  if (!speaks()) return;
  // One line per stage, from its (tp 0, dp 0) rank: world rank T·D·p. Held microbatches count a
  // stage's activations (V chunks make one); the bytes include what waits for W.
  for (int p = 0; p < g.pp_size(); ++p) {
    const double* v = all.data() + 8 * p * g.tp_size() * g.cp_size() * g.dp_size();
    char times[96] = "F, B and W not timed (on a GPU only with --profile)";
    if (v[7] > 0) {
      std::snprintf(times, sizeof times, "F %.2f ms, B %.2f ms, W %.2f ms per (microbatch, chunk)",
                    v[4], v[5], v[6]);
    }
    std::printf(
        "stage %d | peak in flight %g microbatches, %s (a microbatch: %s activations + %s kept "
        "for W) | %s\n",
        p, v[1] / r.shape_.virtual_stages, megabytes(int64_t(v[0])).c_str(),
        megabytes(int64_t(v[2])).c_str(), megabytes(int64_t(v[3])).c_str(), times);
  }
}

}  // namespace mpf
