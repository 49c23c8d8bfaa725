#include "train/trainer.hpp"

#include <sched.h>

#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "backends/gemm.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"
#include "io/llmc_checkpoint.hpp"
#include "model/gpt.hpp"
#include "model/shard.hpp"
#include "mpiformer/config.hpp"
#include "optim/grad_norm.hpp"
#include "train/step_log.hpp"

namespace mpf {

namespace {

GPTConfig model_config(const TrainOptions& o) {
  if (!o.init_from.empty()) return read_checkpoint_config(o.init_from);
  GPTConfig cfg;
  cfg.layers = o.layers;
  cfg.heads = o.heads;
  cfg.channels = o.dim;
  cfg.vocab = o.vocab;
  cfg.max_seq_len = o.max_seq_len;
  cfg.padded_vocab = pad_vocab(o.vocab);
  validate(cfg, "flags");
  return cfg;
}

std::string default_val_data(const TrainOptions& o) {
  if (o.val_data == "none") return "";
  if (!o.val_data.empty()) return o.val_data;
  return o.data == "builtin:train" ? "builtin:val" : "";
}

std::string megabytes(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB", double(bytes) / 1e6);
  return buf;
}

}  // namespace

int choose_threads(int requested, MPI_Comm world) {
  MPI_Comm node;
  MPF_MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int ranks_on_node = 1;
  MPI_Comm_size(node, &ranks_on_node);
  MPI_Comm_free(&node);
  cpu_set_t set;
  const int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  int threads = cores / ranks_on_node > 0 ? cores / ranks_on_node : 1;
  if (requested > 0) {
    threads = requested;
  } else if (const char* env = std::getenv("OMP_NUM_THREADS"); env && std::atoi(env) > 0) {
    threads = std::atoi(env);
  }
  // More busy threads than cores makes every step wait on preempted threads (measured 40x here);
  // say so once, with the fix.
  int world_rank = 0;
  MPI_Comm_rank(world, &world_rank);
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const bool passive = policy && (policy[0] == 'p' || policy[0] == 'P');
  if (world_rank == 0 && ranks_on_node * threads > cores && !passive) {
    std::fprintf(stderr,
                 "warning: %d ranks x %d threads on a node where this process may use %d cores: "
                 "use fewer threads (--threads) or set OMP_WAIT_POLICY=PASSIVE\n",
                 ranks_on_node, threads, cores);
  }
  return threads;
}

RunInputs load_inputs(const TrainOptions& opts, int world_rank) {
  RunInputs in;
  in.opts = opts;
  in.cfg = model_config(opts);
  const GPTConfig& cfg = in.cfg;
  require(opts.seq_len <= cfg.max_seq_len,
          "--seq-len " + std::to_string(opts.seq_len) + " exceeds the model's max_seq_len " +
              std::to_string(cfg.max_seq_len) +
              "; use --seq-len <= " + std::to_string(cfg.max_seq_len) +
              (opts.init_from.empty() ? " or raise --max-seq-len" : ""));
  in.schedule.kind = parse_schedule_kind(opts.lr_schedule);
  in.schedule.lr = opts.lr;
  in.schedule.warmup = opts.warmup;
  in.schedule.steps = opts.steps;
  in.schedule.final_lr_frac = opts.final_lr_frac;
  in.train_data = std::make_unique<DataLoader>(opts.data, opts.batch, opts.seq_len, cfg.vocab);
  in.val_name = default_val_data(opts);
  if (!in.val_name.empty()) {
    in.val_data = std::make_unique<DataLoader>(in.val_name, opts.batch, opts.seq_len, cfg.vocab);
  }
  if (!opts.init_from.empty()) read_checkpoint_params(opts.init_from, cfg, in.init_params);
  if (world_rank == 0 && !opts.save_llmc.empty()) check_checkpoint_writable(opts.save_llmc);
  return in;
}

TrainingRun::TrainingRun(RunInputs in, MPI_Comm world)
    : opts_(in.opts),
      cfg_(in.cfg),
      schedule_(in.schedule),
      train_data_(std::move(in.train_data)),
      val_data_(std::move(in.val_data)),
      val_name_(in.val_name) {
  const TrainOptions& opts = opts_;
  std::vector<float>& loaded = in.init_params;
  grid_ = std::make_unique<Grid>(world, opts.tp, opts.pp, opts.dp);
  require(opts.pp == 1, "--pp " + std::to_string(opts.pp) +
                            ": pipeline parallelism is not available yet; use --pp 1");
  shard_ = make_tp_shard(cfg_, grid_->tp_rank(), grid_->tp_size());
  require(opts.batch % grid_->dp_size() == 0,
          "--batch " + std::to_string(opts.batch) + " does not split over " +
              std::to_string(grid_->dp_size()) + " data-parallel ranks; use a multiple of " +
              std::to_string(grid_->dp_size()));
  local_batch_ = opts.batch / grid_->dp_size();

  // Padded to a multiple of the DP size so ZeRO's buckets split evenly.
  params_ = Parameters::allocate(shard_, "mpf::params", grid_->dp_size());
  grads_ = Parameters::allocate(shard_, "mpf::grads", grid_->dp_size());
  if (loaded.empty()) {
    initialize(params_, shard_, opts.seed);
  } else {
    std::vector<float> local;
    extract_shard(shard_, loaded, local);
    Kokkos::View<float*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> host(local.data(),
                                                                                  local.size());
    Kokkos::deep_copy(params_.slab, host);
  }
  AdamWConfig adam;
  adam.beta1 = opts.beta1;
  adam.beta2 = opts.beta2;
  adam.eps = opts.eps;
  adam.weight_decay = opts.weight_decay;
  const bool zero = opts.zero == 1 && grid_->dp_size() > 1;
  const int64_t bucket_elems = static_cast<int64_t>(opts.dp_bucket_mb * 1e6 / sizeof(float));
  dp_grads_ = std::make_unique<DataParallelGrads>(grads_, grid_->dp_comm(), bucket_elems, zero);
  if (zero) {
    optimizer_ =
        std::make_unique<AdamW>(adam, cfg_, dp_grads_->zero_segments(), dp_grads_->shard_size());
  } else {
    optimizer_ = std::make_unique<AdamW>(adam, cfg_, whole_tensor_segments(params_), params_.count);
  }
  const int M = opts.microbatches;
  require(local_batch_ % M == 0,
          "the " + std::to_string(local_batch_) +
              " rows of a DP rank's batch do not split into --microbatches " + std::to_string(M) +
              "; use a --batch that is a multiple of dp x microbatches");
  micro_batch_ = local_batch_ / M;
  pp_schedule_ = pipeline::parse_schedule(opts.schedule);
  pipeline::validate({1, 0, 1, M}, pp_schedule_);
  require(!opts.sequence_parallel || (int64_t(micro_batch_) * opts.seq_len) % grid_->tp_size() == 0,
          "--sequence-parallel splits the " + std::to_string(micro_batch_ * opts.seq_len) +
              " rows of a microbatch over " + std::to_string(grid_->tp_size()) +
              " TP ranks, which does not divide; choose --batch/--seq-len so "
              "B*T/(dp*microbatches) divides by tp");
  stage_ = std::make_unique<ModelStage>(shard_, micro_batch_, opts.seq_len, opts.sequence_parallel,
                                        grid_->tp_comm());
  const int64_t mb_tokens = int64_t(micro_batch_) * opts.seq_len;
  for (int mb = 0; mb < M; ++mb) {
    inputs_.emplace_back("mpf::inputs", mb_tokens);
    targets_.emplace_back("mpf::targets", mb_tokens);
  }
  host_inputs_ = HostTokens("mpf::host_inputs", mb_tokens * M);
  host_targets_ = HostTokens("mpf::host_targets", mb_tokens * M);
}

void TrainingRun::load_batch(DataLoader& loader) {
  loader.next_batch(grid_->dp_rank() * local_batch_, local_batch_, host_inputs_.data(),
                    host_targets_.data());
  // Microbatch mb is rows [mb·b, (mb+1)·b) of this rank's part of the batch.
  const int64_t n = int64_t(micro_batch_) * opts_.seq_len;
  for (size_t mb = 0; mb < inputs_.size(); ++mb) {
    const auto rows = std::make_pair(int64_t(mb) * n, int64_t(mb + 1) * n);
    Kokkos::deep_copy(inputs_[mb], Kokkos::subview(host_inputs_, rows));
    Kokkos::deep_copy(targets_[mb], Kokkos::subview(host_targets_, rows));
  }
}

double TrainingRun::global_mean_loss(double local_sum) const {
  return allreduce_sum(local_sum, grid_->dp_comm()) / (double(opts_.batch) * opts_.seq_len);
}

double TrainingRun::validate() {
  val_data_->reset();
  double total = 0.0;
  for (int i = 0; i < opts_.val_steps; ++i) {
    load_batch(*val_data_);
    double local = 0.0;
    for (size_t mb = 0; mb < inputs_.size(); ++mb) {
      local += stage_->evaluate(params_.t, inputs_[mb], targets_[mb]);
    }
    total += global_mean_loss(local);
  }
  return total / opts_.val_steps;
}

double TrainingRun::global_grad_norm() const {
  // Every element counted once: a tensor split over TP on each TP rank, a replicated one on TP
  // rank 0; under ZeRO each DP rank holds a distinct part of the summed gradient, without ZeRO
  // every DP rank holds all of it.
  const float* grads = dp_grads_->zero() ? dp_grads_->shard_grads() : grads_.slab.data();
  double local = 0.0;
  for (const OptimizerSegment& s : optimizer_->segments()) {
    if (shard_.is_split(s.tensor) || grid_->tp_rank() == 0) {
      local += sum_of_squares(grads + s.grad, s.length);
    }
  }
  if (dp_grads_->zero()) local = allreduce_sum(local, grid_->dp_comm());
  return std::sqrt(allreduce_sum(local, grid_->tp_comm()));
}

void TrainingRun::save_checkpoint() const {
  // DP replicas are identical: the TP group of DP rank 0 gathers its shards to its TP rank 0,
  // which is world rank 0, and that rank writes.
  if (opts_.save_llmc.empty() || grid_->dp_rank() != 0) return;
  std::vector<float> local(params_.count);
  Kokkos::View<float*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> view(local.data(),
                                                                                local.size());
  Kokkos::deep_copy(view, params_.slab);
  const int T = grid_->tp_size();
  std::vector<float> shards(is_root() ? local.size() * T : 0);
  require(local.size() <= size_t(INT_MAX),
          "a tensor-parallel shard over 2^31 floats cannot be saved");
  MPF_MPI_CHECK(MPI_Gather(local.data(), int(local.size()), MPI_FLOAT, shards.data(),
                           int(local.size()), MPI_FLOAT, 0, grid_->tp_comm()));
  if (!is_root()) return;
  std::vector<float> full(parameter_count(cfg_), 0.0f);
  for (int r = 0; r < T; ++r) {
    place_shard(make_tp_shard(cfg_, r, T), shards.data() + r * local.size(), full);
  }
  write_checkpoint(opts_.save_llmc, cfg_, full);
  std::printf("saved %s\n", opts_.save_llmc.c_str());
}

void TrainingRun::print_banner(double peak_gflops) const {
  if (!is_root()) return;
  const char* kernels = kSplitOverOpenMP ? "Kokkos Serial, kernels split over OpenMP threads"
                                         : "Kokkos default execution space";
  std::printf("mpiformer %s | %d threads/rank | %s | BLAS: %s\n", MPIFORMER_VERSION,
              host_thread_count(), kernels, backend::describe());
  std::printf("grid: %s\n", grid_->describe().c_str());
  std::printf("model: %s | %.2fM parameters | %s\n", describe(cfg_).c_str(), params_.count / 1e6,
              opts_.init_from.empty() ? ("init seed " + std::to_string(opts_.seed)).c_str()
                                      : ("from " + opts_.init_from).c_str());
  std::printf("data: %s (%lld tokens)", opts_.data.c_str(),
              static_cast<long long>(train_data_->total_tokens()));
  if (val_data_) {
    std::printf(" | val %s (%lld tokens)", val_name_.c_str(),
                static_cast<long long>(val_data_->total_tokens()));
  }
  std::printf(" | batch %d x %d = %d tokens/step, %d row(s) per DP rank\n", opts_.batch,
              opts_.seq_len, opts_.batch * opts_.seq_len, local_batch_);
  std::printf(
      "memory/rank: parameters %s | gradients %s | optimizer %s | activations %s\n",
      megabytes(bytes_of(params_.slab)).c_str(), megabytes(bytes_of(grads_.slab)).c_str(),
      megabytes(optimizer_->state_bytes()).c_str(),
      megabytes(Activations::bytes(shard_, micro_batch_, opts_.seq_len, opts_.sequence_parallel) +
                stage_->buffer_bytes())
          .c_str());
  std::printf("microbatches: %zu of %d row(s) per DP rank | schedule %s\n", inputs_.size(),
              micro_batch_, pipeline::schedule_name(pp_schedule_));
  std::printf("data parallel: %d rank(s) | %zu bucket(s) of <= %g MB | overlap %s | %s\n",
              grid_->dp_size(), dp_grads_->buckets().size(), opts_.dp_bucket_mb,
              opts_.overlap_grad_reduce ? "on" : "off",
              dp_grads_->zero() ? "ZeRO-1: optimizer state sharded over DP"
              : opts_.zero == 1 ? "ZeRO-1 requested but dp is 1: nothing to shard"
                                : "optimizer state replicated");
  std::printf(
      "optimizer: AdamW lr %.1e betas %g/%g eps %g wd %g (matrices) | clip %g | %s, warmup %d, "
      "final frac %g\n",
      opts_.lr, opts_.beta1, opts_.beta2, opts_.eps, opts_.weight_decay, opts_.grad_clip,
      opts_.lr_schedule.c_str(), opts_.warmup, opts_.final_lr_frac);
  std::printf("MFU: (6N' + 12LTC) x tokens = %.2f GFLOP/step vs peak %.1f GFLOP/s/rank (%s)\n",
              flops_per_token(cfg_, opts_.seq_len) * opts_.batch * opts_.seq_len / 1e9, peak_gflops,
              opts_.peak_gflops > 0 ? "--peak-gflops" : "sgemm, measured");
  std::fflush(stdout);
}

std::vector<double> TrainingRun::train() {
  const double peak_gflops = opts_.peak_gflops > 0 ? opts_.peak_gflops : measure_peak_gflops();
  const double peak_flops = allreduce_sum(peak_gflops * 1e9, grid_->world_comm());
  const double tokens = double(opts_.batch) * opts_.seq_len;
  const double flops_per_step = flops_per_token(cfg_, opts_.seq_len) * tokens;
  // Each token's loss enters the global mean with weight 1/(B·T); summing the DP ranks' gradients
  // then gives the gradient of the global mean.
  const float dloss = static_cast<float>(1.0 / tokens);
  if (opts_.verbose) print_banner(peak_gflops);
  std::vector<double> step_ms;

  auto report_val = [&](int step) {
    if (!val_data_) return;
    const double loss = validate();
    if (is_root() && opts_.verbose) std::printf("val step %d | loss %.6f\n", step, loss);
  };
  if (opts_.val_every > 0) report_val(0);

  double time_after_first = 0.0, last_loss = 0.0;
  PhaseTimers phases;
  for (int step = 1; step <= opts_.steps; ++step) {
    Stopwatch sw;
    phases.set_enabled(step > 1);
    phases.start();
    load_batch(*train_data_);
    phases.mark(PhaseTimers::kData);
    fill(grads_.slab.data(), grads_.count, 0.0f);
    phases.mark(PhaseTimers::kZeroGrad);
    std::function<void(int)> overlap;
    if (opts_.overlap_grad_reduce) overlap = [this](int event) { dp_grads_->start_ready(event); };
    stage_->begin_step(&inputs_, &targets_, &params_.t, &grads_.t, dloss, overlap);
    pipeline::run_schedule(pp_schedule_, *stage_, {1, 0, 1, int(inputs_.size())});
    last_loss = global_mean_loss(stage_->loss_sum());
    phases.mark(PhaseTimers::kSchedule);
    dp_grads_->finish();
    phases.mark(PhaseTimers::kDpComm);
    const double norm = global_grad_norm();
    const float lr = learning_rate(schedule_, step - 1);
    const float* grads = dp_grads_->zero() ? dp_grads_->shard_grads() : grads_.slab.data();
    optimizer_->step(params_.slab.data(), grads, lr, clip_scale(norm, opts_.grad_clip));
    if (dp_grads_->zero()) dp_grads_->allgather_params(params_.slab.data());
    phases.mark(PhaseTimers::kOptimizer);
    const double ms = sw.seconds() * 1e3;
    step_ms.push_back(ms);
    if (step > 1) time_after_first += ms;
    if (is_root() && opts_.verbose &&
        (step % opts_.log_every == 0 || step == opts_.steps || step == 1)) {
      std::printf("%s\n", format_step({step, opts_.steps, last_loss, norm, ms, lr}, tokens,
                                      flops_per_step, peak_flops)
                              .c_str());
      std::fflush(stdout);
    }
    if (opts_.val_every > 0 && (step % opts_.val_every == 0 || step == opts_.steps)) {
      report_val(step);
    }
  }
  if (is_root() && opts_.verbose) {
    const int timed = opts_.steps > 1 ? opts_.steps - 1 : 1;
    const double ms = opts_.steps > 1 ? time_after_first / timed : 0.0;
    std::printf(
        "summary | steps %d | final loss %.6f | %.1f ms/step (steps 2..%d) | %.0f tok/s | "
        "MFU %.1f%%\n",
        opts_.steps, last_loss, ms, opts_.steps, ms > 0 ? tokens / (ms / 1e3) : 0.0,
        ms > 0 ? 100.0 * flops_per_step / (ms / 1e3) / peak_flops : 0.0);
    std::printf("%s\n", phases.summary().c_str());
    std::printf("peak activations in flight: %s (%.0f microbatch(es))\n",
                megabytes(stage_->peak_activation_bytes()).c_str(),
                double(stage_->peak_activation_bytes()) /
                    double(Activations::bytes(shard_, micro_batch_, opts_.seq_len,
                                              opts_.sequence_parallel)));
  }
  save_checkpoint();
  return step_ms;
}

}  // namespace mpf
