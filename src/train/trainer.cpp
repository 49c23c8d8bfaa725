#include "train/trainer.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "backends/gemm.hpp"
#include "checkpoint/checkpoint_dir.hpp"
#include "checkpoint/hf_checkpoint.hpp"
#include "checkpoint/hf_config.hpp"
#include "checkpoint/llmc_checkpoint.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/profile.hpp"
#include "core/stopwatch.hpp"
#include "core/transfer.hpp"
#include "data/batch_layout.hpp"
#include "generate/tokenizer_file.hpp"
#include "io/output_file.hpp"
#include "model/gpt.hpp"
#include "model/layers/matmul.hpp"
#include "model/shard.hpp"
#include "mpiformer/config.hpp"
#include "optim/grad_norm.hpp"
#include "parallel/device_mpi.hpp"
#include "parallel/rank_device.hpp"
#include "pipeline/p2p.hpp"
#include "pipeline/simulator.hpp"
#include "pipeline/stage_costs.hpp"
#include "train/exit_status.hpp"
#include "train/model_options.hpp"
#include "train/resume.hpp"
#include "train/settings.hpp"
#include "train/step_log.hpp"
#include "train/step_trace.hpp"
#include "train/stop_signals.hpp"

namespace mpf {

namespace {

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

// M, from --microbatches or --micro-batch-size; InputError unless it splits the DP rank's rows.
int microbatch_count(const TrainOptions& o, int local_batch) {
  if (o.micro_batch_size > 0) {
    require(local_batch % o.micro_batch_size == 0,
            "--micro-batch-size " + std::to_string(o.micro_batch_size) + " does not divide the " +
                std::to_string(local_batch) + " rows of a DP rank's batch; use a divisor of " +
                std::to_string(local_batch));
    return local_batch / o.micro_batch_size;
  }
  const int M = o.microbatches > 0 ? o.microbatches : 1;
  require(local_batch % M == 0, "the " + std::to_string(local_batch) +
                                    " rows of a DP rank's batch do not split into --microbatches " +
                                    std::to_string(M) +
                                    "; use a --batch that is a multiple of dp x microbatches");
  return M;
}

}  // namespace

int choose_threads(int requested, const NodePlacement& place, MPI_Comm world) {
  const int ranks_on_node = place.local_size;
  const int cores = usable_cpus();
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

StartPoint decide_start(const TrainOptions& opts, std::optional<checkpoint::SaveLock>& lock) {
  StartPoint start;
  if (!opts.save.empty() && opts.dry_run) {
    // A dry run takes no lock and removes nothing: it says what a run would find.
    if (std::string lock = checkpoint::inspect_lock(opts.save); !lock.empty()) {
      start.notes.push_back("--save: " + lock);
    }
  } else if (!opts.save.empty()) {
    check_save_writable(opts.save);  // a refusal as clear as at the first save, but before it
    std::vector<std::string> notes;
    lock.emplace(opts.save, notes);
    const std::optional<checkpoint::Writer>& gone = lock->taken_over();
    for (const std::string& n :
         checkpoint::remove_dead_partials(lock->root(), gone ? &*gone : nullptr, false)) {
      notes.push_back(n);
    }
    // Now: an input error later must not hide that the lock was taken over or files removed.
    for (const std::string& n : notes) std::printf("note: %s\n", n.c_str());
    std::fflush(stdout);
  }
  start.resume_step = choose_checkpoint(opts.load, opts.load_step, start.notes);
  check_save_directory(opts.save, opts.load, start.resume_step >= 0 ? start.resume_step + 1 : 1);
  return start;
}

RunInputs load_inputs(const TrainOptions& given, const StartPoint& start, int world_rank) {
  RunInputs in;
  in.opts = given;
  in.notes = start.notes;
  if (start.resume_step >= 0) in.resume = open_checkpoint(given.load, start.resume_step);
  if (in.resume) {
    adopt_checkpoint_options(in.opts, in.resume->info,
                             checkpoint::state_file(in.resume->root, in.resume->info.step),
                             in.warnings);
    if (!given.init_from.empty()) {
      in.notes.push_back("--init-from " + given.init_from + " is not used: the run resumes from " +
                         checkpoint::path(in.resume->root, in.resume->info.step));
      in.opts.init_from.clear();
    }
  }
  const TrainOptions& opts = in.opts;
  if (opts.precision == Precision::bf16) {
    const std::string missing = backend::kernels().bf16_missing;
    require(missing.empty(), "--precision bf16 needs native bf16 products, but " + missing +
                                 "; use --precision fp32");
  }
  if (!in.resume && opts.init_from.empty()) {
    // A fresh model holds the ids its tokenized data may hold.
    const std::string note = adopt_data_vocab(in.opts);
    if (!note.empty()) in.notes.push_back(note);
  }
  in.cfg = in.resume ? in.resume->info.model : model_config(opts);
  const GPTConfig& cfg = in.cfg;
  require(opts.seq_len <= cfg.max_seq_len,
          "--seq-len " + std::to_string(opts.seq_len) + " exceeds the model's max_seq_len " +
              std::to_string(cfg.max_seq_len) +
              "; use --seq-len <= " + std::to_string(cfg.max_seq_len) +
              (opts.init_from.empty() && !in.resume ? " or raise --max-seq-len" : ""));
  in.schedule.kind = parse_schedule_kind(opts.lr_schedule);
  in.schedule.lr = opts.lr;
  in.schedule.warmup = opts.warmup;
  in.schedule.steps = opts.lr_decay_steps > 0 ? opts.lr_decay_steps : opts.steps;
  in.schedule.final_lr_frac = opts.final_lr_frac;
  in.train_data = std::make_unique<DataLoader>(opts.data, opts.batch, opts.seq_len, cfg.vocab);
  in.val_name = default_val_data(opts);
  if (!in.val_name.empty()) {
    in.val_data = std::make_unique<DataLoader>(in.val_name, opts.batch, opts.seq_len, cfg.vocab);
  }
  if (in.resume) {
    // Validation restarts at the beginning of its stream each time (llm.c's rule), so only the
    // training stream's position matters.
    const CheckpointInfo& c = in.resume->info;
    in.train_data->seek({c.train_file, c.train_position});
    const std::string saved_data = setting(c, "data.train").value_or("");
    if (in.train_data->total_tokens() != c.train_data_tokens || opts.data != saved_data) {
      in.warnings.push_back("--data " + opts.data + " (" +
                            std::to_string(in.train_data->total_tokens()) +
                            " tokens) is not the checkpoint's " + saved_data + " (" +
                            std::to_string(c.train_data_tokens) +
                            " tokens): the run continues at the same file and token position");
    }
  }
  if (opts.sample_every > 0) {
    require(opts.pp == 1,
            "--sample-every needs --pp 1: a pipeline stage holds only its blocks. "
            "Sample the saved model with mpiformer-generate (any layout loads it)");
    if (!opts.tokenizer.empty()) in.tokenizer = read_tokenizer_file(opts.tokenizer).decoder;
    require(!in.tokenizer || in.tokenizer->vocab() == cfg.vocab,
            "--tokenizer " + opts.tokenizer + " has " +
                std::to_string(in.tokenizer ? in.tokenizer->vocab() : 0) +
                " tokens but the model's vocabulary is " + std::to_string(cfg.vocab));
  }
  if (opts.doc_mask) {
    std::optional<int> token;
    std::string from;
    if (opts.doc_token >= 0) {
      token = opts.doc_token;
      from = "--doc-token";
    } else if (!opts.init_from.empty() && is_hf_source(opts.init_from) &&
               (token = hf_bos_token(opts.init_from))) {
      from = "config.json's bos_token_id";
    } else if ((token = known_bos_token(cfg))) {
      from = "the vocabulary's begin-of-document token";
    }
    require(token.has_value(),
            "--doc-mask needs the token that starts a document, and this model names none "
            "(no bos_token_id in a config.json, not GPT-2's or Llama 3's vocabulary): pass "
            "--doc-token ID");
    require(*token < cfg.vocab, "--doc-token " + std::to_string(*token) +
                                    " is outside the model's vocabulary of " +
                                    std::to_string(cfg.vocab) + " tokens");
    in.doc_token = *token;
    in.notes.push_back("--doc-mask: a document starts at each token " + std::to_string(*token) +
                       " (" + from + ")");
  }
  // A finished run resumed again writes nothing: a job chain's later parts must end with 0.
  const bool complete = in.resume && in.resume->info.step >= opts.steps;
  if (complete) return in;
  if (world_rank == 0 && !opts.save_llmc.empty()) check_checkpoint_writable(opts.save_llmc);
  if (world_rank == 0 && !opts.save_hf.empty()) {
    check_hf_output(opts.save_hf);
    if (!opts.tokenizer.empty()) {
      // Read now, not found wanting at the end of the run: the copy must encode for the model.
      const int vocab = in.tokenizer ? in.tokenizer->vocab()
                                     : read_tokenizer_file(opts.tokenizer).decoder.vocab();
      if (!is_tokenizer_json(opts.tokenizer)) {
        in.notes.push_back("--tokenizer " + opts.tokenizer +
                           " is llm.c's tokenizer .bin, not a tokenizer.json: " + opts.save_hf +
                           " gets no tokenizer (pass mpiformer-generate a --tokenizer)");
      }
      require(!is_tokenizer_json(opts.tokenizer) || vocab <= cfg.vocab,
              "--tokenizer " + opts.tokenizer + " has " + std::to_string(vocab) +
                  " tokens but the model's vocabulary is " + std::to_string(cfg.vocab) +
                  "; raise --vocab or pass the data's tokenizer");
    }
  }
  if (world_rank == 0 && !opts.trace.empty()) {
    check_new_output(opts.trace, "--trace " + opts.trace);
  }
  if (world_rank == 0 && !opts.metrics.empty()) {
    in.metrics =
        plan_metrics(opts.metrics, in.resume ? int(in.resume->info.step) + 1 : 1, opts.save);
    if (!in.metrics->note.empty()) in.notes.push_back(in.metrics->note);
  }
  return in;
}

TrainingRun::TrainingRun(RunInputs in, MPI_Comm world)
    : opts_(in.opts),
      cfg_(in.cfg),
      doc_token_(in.doc_token),
      schedule_(in.schedule),
      train_data_(std::move(in.train_data)),
      val_data_(std::move(in.val_data)),
      val_name_(in.val_name),
      resume_(in.resume),
      notes_(in.notes),
      warnings_(in.warnings),
      metrics_start_(std::move(in.metrics)) {
  loss_window_ = OutlierWindow(opts_.outlier_window);
  norm_window_ = OutlierWindow(opts_.outlier_window);
  test_fault_ = test_fault_from_environment();
  set_up_grid(world);
  plan_pipeline();
  plan_stages();
  if (!opts_.dry_run) {
    // Before the memory plan reads what the process holds: the GEMM libraries' own buffers, which
    // their first products allocate, are then part of it.
    if (opts_.peak_gflops > 0) {
      peak_ = PeakRate{opts_.peak_gflops, "--peak-gflops"};
      warm_gemm_libraries(opts_.precision);
    } else {
      peak_ = measure_startup_peak(opts_.precision);
    }
  }
  plan_memory_use();
  if (opts_.dry_run) return;  // the layout is checked; the rest allocates, loads and initialises
  shard_model();
  set_up_optimizer();
  load_state();
  set_up_stage();
  set_up_sample(std::move(in.tokenizer));
  set_up_batch();
  observe_phases();
  // Last, after every collective here: an error on rank 0 alone is then agreed on by the caller.
  if (metrics_start_) metrics_ = std::make_unique<MetricsLog>(opts_.metrics, *metrics_start_);
  if (is_root() && !opts_.tensorboard.empty()) {
    events_ = std::make_unique<EventFile>(opts_.tensorboard);
    if (first_step_ > 1) events_->restart(first_step_);
  }
}

void TrainingRun::record_scalars(int64_t step,
                                 const std::vector<std::pair<std::string, double>>& v) const {
  if (events_) events_->scalars(step, v);
}

void TrainingRun::record(const MetricsRecord& r) const {
  if (metrics_) metrics_->write(r);
}

void TrainingRun::set_up_grid(MPI_Comm world) {
  grid_ = std::make_unique<Grid>(world, opts_.tp, opts_.pp, opts_.dp, opts_.cp);
  require(opts_.batch % grid_->dp_size() == 0,
          "--batch " + std::to_string(opts_.batch) + " does not split over " +
              std::to_string(grid_->dp_size()) + " data-parallel ranks; use a multiple of " +
              std::to_string(grid_->dp_size()));
  local_batch_ = opts_.batch / grid_->dp_size();
  local_seq_len_ = opts_.seq_len / grid_->cp_size();  // options.cpp checked it divides
  // Where the ranks run, for the banner; a TP group across nodes is slow enough to warn about.
  const NodePlacement node = node_placement(world);
  node_ranks_ = node.local_size;
  const std::vector<RankPlace> places =
      gather_places(world, node, host_thread_count(), current_device());
  if (is_root()) {
    placement_ = placement_rows(places, grid_->tp_size(), grid_->dp_size(), grid_->pp_size(),
                                grid_->cp_size());
    const std::string span = tp_span_warning(tp_groups_spanning_nodes(placement_, grid_->tp_size()),
                                             grid_->world_size() / grid_->tp_size());
    if (!span.empty()) warnings_.push_back(span);
  }
}

void TrainingRun::plan_pipeline() {
  const TrainOptions& opts = opts_;
  pp_schedule_ = pipeline::parse_schedule(opts.schedule);
  const int M = microbatch_count(opts, local_batch_);
  micro_batch_ = local_batch_ / M;
  const int V = opts.virtual_stages > 0 ? opts.virtual_stages
                                        : pipeline::default_virtual_stages(pp_schedule_);
  shape_ = {grid_->pp_size(), grid_->pp_rank(), V, M, pipeline::placement_of(pp_schedule_, V)};
  pipeline::validate(shape_, pp_schedule_);
  // zb-auto's first step runs its search under F = B = W (the paper's assumption), within the
  // memory limit like every later step, and times the ops the next plan uses.
  pipeline::OpCosts unit;
  unit.forward = unit.backward_input = unit.backward_weight = 1.0;
  plan_ = std::make_unique<pipeline::SchedulePlan>(pp_schedule_, shape_, unit, zb_auto_limit());
  if (opts.max_in_flight > 0 && pp_schedule_ != pipeline::Schedule::kZbAuto) {
    pipeline::require_within_memory(*plan_, opts.max_in_flight);
  }
}

void TrainingRun::plan_stages() {
  const int chunks = grid_->pp_size() * shape_.virtual_stages;
  layer_ranges_ = opts_.pp_layout.empty()
                      ? distribute_layers(cfg_.layers, chunks)
                      : parse_layer_layout(opts_.pp_layout, cfg_.layers, chunks);
  const int cp = grid_->cp_size(), tp = grid_->tp_size();
  require(!opts_.sequence_parallel || (int64_t(micro_batch_) * local_seq_len_) % tp == 0 || cp == 1,
          "--sequence-parallel splits a microbatch's " + std::to_string(micro_batch_) + " x " +
              std::to_string(local_seq_len_) + " rows of each CP rank over " + std::to_string(tp) +
              " TP ranks, which does not divide; use --seq-len " +
              nearest_multiples(opts_.seq_len, 2 * cp * tp) + " (a multiple of 2 x cp x tp)");
  require(
      !opts_.sequence_parallel || (int64_t(micro_batch_) * opts_.seq_len) % grid_->tp_size() == 0,
      "--sequence-parallel splits the " + std::to_string(micro_batch_ * opts_.seq_len) +
          " rows of a microbatch over " + std::to_string(grid_->tp_size()) +
          " TP ranks, which does not divide; choose --batch/--seq-len so "
          "B*T/(dp*microbatches) divides by tp");
  const int64_t most = pipeline_max_microbatches(tag_upper_bound(grid_->pp_comm()),
                                                 grid_->pp_size(), shape_.virtual_stages);
  require(shape_.microbatches <= most,
          std::to_string(shape_.microbatches) + " microbatches x " + std::to_string(chunks) +
              " chunks need more message tags than this MPI's MPI_TAG_UB allows; use at most " +
              std::to_string(most) + " microbatches");
}

void TrainingRun::plan_memory_use() {
  MemoryShape m;
  m.shard = stage_shard(grid_->tp_rank(), grid_->pp_rank());
  const StageOwnership own =
      stage_ownership(layer_ranges_, grid_->pp_rank(), grid_->pp_size(), shape_.placement);
  m.chunks = own.chunks;
  for (ChunkPieces& c : m.chunks) {
    c.recompute = opts_.recompute;
    // As ModelStage::set_weight_with_input sets them.
    if (!pipeline::is_zero_bubble(pp_schedule_)) {
      c.logit_rows =
          head_chunk_rows(m.shard, c, micro_batch_, local_seq_len_, opts_.sequence_parallel);
    }
  }
  m.micro_batch = micro_batch_;
  m.seq_len = local_seq_len_;
  m.cp = grid_->cp_size();
  m.sequence_parallel = opts_.sequence_parallel;
  m.recompute = opts_.recompute;
  m.weight_with_input = !pipeline::is_zero_bubble(pp_schedule_);
  {
    const pipeline::SimulationResult sim = pipeline::simulate(*plan_);
    int acts = 0, w = 0;
    for (const pipeline::SimEvent& e : sim.events[size_t(grid_->pp_rank())]) {
      if (e.op == pipeline::SimOp::kForward) ++acts;
      if (e.op == pipeline::SimOp::kBackwardInput) ++w;
      if (e.op == pipeline::SimOp::kBackwardWeight) --acts, --w;
      m.held.push_back({acts, w});
    }
  }
  m.bf16 = opts_.precision == Precision::bf16;
  m.bf16_scratch = largest_operand(m.shard);
  m.dp_cp = grid_->dp_cp_size();
  m.zero = opts_.zero == 1 && grid_->dp_cp_size() > 1;
  m.staged_mpi = staged();
  m.pipeline_stages = grid_->pp_size();
  m.threads = host_thread_count();
  for (const DataLoader* d : {train_data_.get(), val_data_.get()}) {
    if (!d) continue;
    for (const TokenStream& f : d->files()) m.data_bytes += f.size() * f.width();
  }
  m.process_bytes = resident_bytes();
  memory_ = plan_memory(m);
  // What the rank may still take: --memory-per-rank, or this node's available memory shared by
  // its ranks (on a GPU the model lives in device memory: only --memory-per-rank applies).
  const int64_t held = m.process_bytes + m.data_bytes, need = memory_.total();
  int64_t may = 0;
  std::string whose;
  if (opts_.memory_per_rank > 0) {
    may = int64_t(opts_.memory_per_rank * 1e9);
    whose = "--memory-per-rank";
  } else if (!kDeviceMemory && available_bytes() > 0) {
    may = held + available_bytes() / node_ranks_;
    whose = "its share of the node's MemAvailable (" + gigabytes(available_bytes()) + " over " +
            std::to_string(node_ranks_) + " rank(s)) with what it holds already";
  }
  if (may > 0 && need > may) {
    const MemoryTerm& big = memory_.largest();
    throw InputError("rank " + std::to_string(grid_->world_rank()) + " needs " + gigabytes(need) +
                     " at its peak, more than the " + gigabytes(may) + " it may use (" + whose +
                     "); the largest term is " + big.name + ", " + gigabytes(big.bytes) + " (" +
                     big.detail + "): shrink it with " + big.shrink + " (" + memory_.summary() +
                     ")");
  }
}

void TrainingRun::shard_model() {
  shard_ = stage_shard(grid_->tp_rank(), grid_->pp_rank());
  if (shard_.kv_replicas > 1) shard_.kv_group = grid_->kv_group(shard_.kv_replicas);
  // Padded to a multiple of the DP x CP size so ZeRO's buckets split evenly.
  params_ = Parameters::allocate(shard_, "mpf::params", grid_->dp_cp_size());
  grads_ = Parameters::allocate(shard_, "mpf::grads", grid_->dp_cp_size());
}

void TrainingRun::set_up_optimizer() {
  const TrainOptions& opts = opts_;
  AdamWConfig adam;
  adam.beta1 = opts.beta1;
  adam.beta2 = opts.beta2;
  adam.eps = opts.eps;
  adam.weight_decay = opts.weight_decay;
  // The ranks holding the same parameters are DP x CP: gradients are summed, and ZeRO shards, over
  // them together.
  const bool zero = opts.zero == 1 && grid_->dp_cp_size() > 1;
  const int64_t bucket_elems = static_cast<int64_t>(opts.dp_bucket_mb * 1e6 / sizeof(float));
  // Under PP the tied wte is completed over the embedding group after the schedule: its DP
  // buckets wait for that (unless one rank holds both ends, as in a V).
  dp_grads_ = std::make_unique<DataParallelGrads>(grads_, shard_, grid_->dp_cp_comm(), bucket_elems,
                                                  zero, /*tied_wte=*/tied_across_stages());
  if (zero) {
    optimizer_ =
        std::make_unique<AdamW>(adam, cfg_, dp_grads_->zero_segments(), dp_grads_->shard_size());
  } else {
    optimizer_ = std::make_unique<AdamW>(adam, cfg_, piece_segments(params_), params_.count);
  }
  grad_squares_ = std::make_unique<SumOfSquares>();
  state_files_ = std::make_unique<StateFiles>(*grid_, shard_, params_, *optimizer_, zero);
}

void TrainingRun::load_state() {
  if (resume_) {
    Stopwatch load_clock;
    load_checkpoint(*state_files_, *resume_);
    load_seconds_ = load_clock.seconds();
    const CheckpointInfo& c = resume_->info;
    optimizer_->set_steps_taken(c.step);
    first_step_ = int(c.step) + 1;
    tokens_seen_ = c.tokens_seen;
    loss_window_.restore(c.loss_window);
    norm_window_.restore(c.norm_window);
    skipped_updates_ = c.skipped_updates;
    newest_checkpoint_ = checkpoint::path(resume_->root, c.step);
  } else if (!opts_.init_from.empty() && is_hf_source(opts_.init_from)) {
    load_hf_model(opts_.init_from, cfg_, shard_, params_, grid_->world_comm());
  } else if (!opts_.init_from.empty()) {
    load_model_file(*state_files_, opts_.init_from);
  } else {
    initialize(params_, shard_, opts_.seed);
  }
  if (opts_.precision == Precision::bf16) {
    weights16_ = Bf16Slab("mpf::weights16", params_.count);
    round_to_bf16(weights16_.data(), params_.slab.data(), params_.count);
  }
}

void TrainingRun::set_up_stage() {
  const TrainOptions& opts = opts_;
  const StageOwnership own =
      stage_ownership(layer_ranges_, grid_->pp_rank(), grid_->pp_size(), shape_.placement);
  stage_ = std::make_unique<ModelStage>(shard_, own.chunks, micro_batch_, local_seq_len_,
                                        opts.sequence_parallel, grid_->tp_comm(), grid_->pp_comm(),
                                        opts.recompute, shape_.placement, grid_->cp_comm());
  // The classic schedules run each W right after its B: W then goes with B, block by block, and
  // a microbatch keeps two blocks' W inputs instead of its chunk's.
  stage_->set_weight_with_input(!pipeline::is_zero_bubble(pp_schedule_));
}

void TrainingRun::set_up_sample(std::optional<Tokenizer> tokenizer) {
  if (opts_.sample_every <= 0) return;
  sample_ =
      std::make_unique<TrainingSample>(shard_, params_.t, opts_.sample_tokens, std::move(tokenizer),
                                       grid_->tp_comm(), grid_->dp_cp_rank() == 0, is_root());
}

void TrainingRun::set_up_batch() {
  // A rank's batch is one buffer, its inputs then its targets (then, with --doc-mask, where each
  // position's document starts), filled on the host and copied in one transfer; each
  // microbatch's are views into it. With CP a rank holds its chunks of each row: the loader's
  // whole rows land in whole_rows_ first.
  const int M = shape_.microbatches;
  const int64_t mb_tokens = int64_t(micro_batch_) * local_seq_len_, tokens = mb_tokens * M;
  const int parts = doc_token_ >= 0 ? 3 : 2;
  batch_ = Tokens("mpf::batch", parts * tokens);
  host_batch_ = HostTokens("mpf::host_batch", parts * tokens);
  if (grid_->cp_size() > 1 || doc_token_ >= 0) {
    whole_rows_ = HostTokens("mpf::whole_rows", 3 * int64_t(local_batch_) * opts_.seq_len);
  }
  auto part = [&](int p, int mb) {
    return Kokkos::subview(
        batch_, std::make_pair(p * tokens + mb * mb_tokens, p * tokens + (mb + 1) * mb_tokens));
  };
  for (int mb = 0; mb < M; ++mb) {
    inputs_.push_back(part(0, mb));
    targets_.push_back(part(1, mb));
    if (parts == 3) doc_starts_.push_back(part(2, mb));
  }
}

void TrainingRun::observe_phases() {
  // In this order: the trace's barrier starts the traced step before the timers' clocks do, and
  // the timers' fences end a part before the trace reads its clock (step_phases.hpp).
  watchdog_ = std::make_unique<Watchdog>(opts_.step_timeout, grid_->world_rank());
  trace_ = std::make_unique<StepTrace>(*grid_, *stage_, opts_.trace.empty() ? 0 : opts_.steps);
  timers_ = std::make_unique<PhaseTimers>(first_step_ + 1);
  phases_.observe(*watchdog_);
  phases_.observe(*trace_);
  phases_.observe(*timers_);
  stage_->on_op([this](const char* name, int mb, int chunk) { phases_.op(name, mb, chunk); });
}

TpShard TrainingRun::stage_shard(int tp_rank, int pp_rank) const {
  const StageOwnership own =
      stage_ownership(layer_ranges_, pp_rank, grid_->pp_size(), shape_.placement);
  return restrict_to_stage(make_tp_shard(cfg_, tp_rank, grid_->tp_size()), own.layers,
                           own.embedding, own.head);
}

int TrainingRun::zb_auto_limit() const {
  return opts_.max_in_flight > 0 ? opts_.max_in_flight : grid_->pp_size();
}

bool TrainingRun::tied_across_stages() const {
  return cfg_.tied && grid_->pp_size() > 1 && shape_.placement == pipeline::ChunkPlacement::kLooped;
}

int64_t TrainingRun::largest_operand() const {
  return largest_operand(shard_);
}

int64_t TrainingRun::largest_operand(const TpShard& shard) const {
  // A microbatch's rows times the widest activation a product reads (the logits' vocabulary
  // shard, the MLP, QKV); the fused attention rounds its own tiles.
  const int64_t R = int64_t(micro_batch_) * local_seq_len_;
  const int64_t width =
      std::max<int64_t>({shard.vocab_shard, shard.mlp_in, shard.qkv, int64_t(cfg_.channels)});
  return R * width;
}

void TrainingRun::allreduce_tied_embedding() {
  // The first stage's wte gradient comes from the embedding, the last stage's from the LM head;
  // the serial model's is their sum, and both copies must take the same update. In a V, rank 0
  // holds both and has the sum already.
  if (grid_->embedding_comm() == MPI_COMM_NULL || !tied_across_stages()) return;
  allreduce_sum(grads_.t.wte.data(), int64_t(grads_.t.wte.extent(0)), grid_->embedding_comm());
}

void TrainingRun::load_batch(DataLoader& loader) {
  // Microbatch mb is rows [mb·b, (mb+1)·b) of this rank's part of the batch.
  const int64_t tokens = int64_t(local_batch_) * local_seq_len_;
  const int parts = doc_token_ >= 0 ? 3 : 2;
  int32_t* host = host_batch_.data();
  if (whole_rows_.extent(0) == 0) {
    loader.next_batch(grid_->dp_rank() * local_batch_, local_batch_, host, host + tokens);
  } else {
    // The DP rank's whole rows, their document starts, then this CP rank's positions of each.
    const int T = opts_.seq_len;
    const int64_t whole = int64_t(local_batch_) * T;
    int32_t *in = whole_rows_.data(), *tg = in + whole, *docs = tg + whole;
    loader.next_batch(grid_->dp_rank() * local_batch_, local_batch_, in, tg);
    const PositionRuns& mine = stage_->positions();
    take_positions(in, local_batch_, T, mine, host);
    take_positions(tg, local_batch_, T, mine, host + tokens);
    if (parts == 3) {
      document_starts(in, local_batch_, T, doc_token_, docs);
      take_positions(docs, local_batch_, T, mine, host + 2 * tokens);
    }
  }
  copy_from_host(batch_.data(), host, size_t(parts * tokens) * sizeof(int32_t), "h2d batch");
}

double TrainingRun::global_mean_loss(double local_sum) const {
  // Only the last pipeline stage computes losses (the others contribute 0); each DP x CP rank
  // holds its rows' tokens.
  const double dp_sum = allreduce_sum(local_sum, grid_->dp_cp_comm());
  return allreduce_sum(dp_sum, grid_->pp_comm()) / (double(opts_.batch) * opts_.seq_len);
}

double TrainingRun::validate() {
  val_data_->reset();
  double total = 0.0;
  for (int i = 0; i < opts_.val_steps; ++i) {
    load_batch(*val_data_);
    total += global_mean_loss(stage_->evaluate(params_.t, inputs_, targets_,
                                               doc_starts_.empty() ? nullptr : &doc_starts_));
  }
  return total / opts_.val_steps;
}

double TrainingRun::global_grad_norm() const {
  // Every element counted once: a tensor split over TP on each TP rank, a replicated one on TP
  // rank 0; under ZeRO each DP rank holds a distinct part of the summed gradient, without ZeRO
  // every DP rank holds all of it. Pipeline stages hold distinct blocks, except the tied wte,
  // counted on the first stage only.
  const float* grads = dp_grads_->zero() ? dp_grads_->shard_grads() : grads_.slab.data();
  SumOfSquares& squares = *grad_squares_;
  squares.reset();
  for (const OptimizerSegment& s : optimizer_->segments()) {
    if (shard_.is_tied_copy(s.tensor)) continue;
    if (!shard_.is_split(s.tensor) && grid_->tp_rank() != 0) continue;
    if (!shard_.kv_owner() && s.tensor == TensorId::qkvw) {
      add_unreplicated(squares, grads, s);
      continue;
    }
    squares.add(grads + s.grad, s.length);
  }
  double local = squares.read();
  if (dp_grads_->zero()) local = allreduce_sum(local, grid_->dp_cp_comm());
  local = allreduce_sum(local, grid_->tp_comm());
  return std::sqrt(allreduce_sum(local, grid_->pp_comm()));
}

void TrainingRun::add_unreplicated(SumOfSquares& squares, const float* grads,
                                   const OptimizerSegment& s) const {
  // A segment of qkvw lies within one block's [Q | K | V] rows; a replicated kv head's K and V
  // rows are counted by their owner only, so this rank adds the parts outside them.
  const SlabPiece& piece = params_.layout.piece_at(s.param);
  const int64_t C = cfg_.channels, begin = s.param - piece.offset, end = begin + s.length;
  const int64_t kv_begin = int64_t(shard_.attn) * C, kv_end = int64_t(shard_.qkv) * C;
  if (begin < kv_begin) squares.add(grads + s.grad, std::min(end, kv_begin) - begin);
  if (end > kv_end) {
    const int64_t from = std::max(begin, kv_end);
    squares.add(grads + s.grad + (from - begin), end - from);
  }
}

bool TrainingRun::save_llmc() const {
  if (opts_.save_llmc.empty()) return true;
  const std::string error = save_model_file(*state_files_, grid_->world_comm(), opts_.save_llmc);
  if (is_root()) {
    if (error.empty()) {
      std::printf("saved %s\n", opts_.save_llmc.c_str());
    } else {
      print_error("--save-llmc %s", error.c_str());
    }
  }
  return error.empty();
}

bool TrainingRun::save_hf() const {
  if (opts_.save_hf.empty()) return true;
  const std::string error =
      save_hf_model(opts_.save_hf, *grid_, shard_, params_, parse_hf_dtype(opts_.save_hf_dtype),
                    is_tokenizer_json(opts_.tokenizer) ? opts_.tokenizer : "");
  if (is_root()) {
    if (error.empty()) {
      std::printf("saved %s\n", opts_.save_hf.c_str());
    } else {
      print_error("--save-hf %s", error.c_str());
    }
  }
  return error.empty();
}

CheckpointInfo TrainingRun::checkpoint_info(int step) const {
  // The settings as this run resolved them: the layout, the validation data, the schedule's length.
  TrainOptions resolved = opts_;
  resolved.lr_decay_steps = schedule_.steps;
  resolved.val_data = val_name_;
  resolved.tp = grid_->tp_size();
  resolved.pp = grid_->pp_size();
  resolved.dp = grid_->dp_size();
  resolved.cp = grid_->cp_size();
  resolved.virtual_stages = shape_.virtual_stages;
  resolved.schedule = pipeline::schedule_name(pp_schedule_);
  resolved.microbatches = shape_.microbatches;
  resolved.pp_layout.clear();
  for (const LayerRange& r : layer_ranges_) {
    resolved.pp_layout += (resolved.pp_layout.empty() ? "" : ",") + std::to_string(r.size());
  }
  resolved.zero = dp_grads_->zero() ? 1 : 0;

  CheckpointInfo c;
  c.step = step;
  c.model = cfg_;
  c.settings = saved_settings(resolved);
  c.train_data_tokens = train_data_->total_tokens();
  c.train_file = train_data_->position().file;
  c.train_position = train_data_->position().token;
  c.tokens_seen = tokens_seen_;
  c.loss_window = loss_window_.values();
  c.norm_window = norm_window_.values();
  c.skipped_updates = skipped_updates_;
  if (val_data_) {
    c.val_file = val_data_->position().file;
    c.val_position = val_data_->position().token;
  }
  return c;
}

bool TrainingRun::save(int step) {
  // A save may take longer than a step: the watchdog gives it at least its size at 20 MB/s.
  const double bytes = double(state_files_->model_bytes() + state_files_->optimizer_bytes());
  PhaseScope phase(phases_, StepPhase::kSave, step, bytes / 20e6);
  const SaveReport r = save_checkpoint(*state_files_, grid_->world_comm(), opts_.save,
                                       checkpoint_info(step), opts_.keep_last);
  if (is_root()) {
    for (const std::string& note : r.notes) std::printf("checkpoint: %s\n", note.c_str());
    if (r.error.empty()) {
      std::printf("checkpoint: saved step %d to %s | %.2f GB in %.2f s = %.2f GB/s\n", step,
                  r.path.c_str(), r.bytes / 1e9, r.seconds, r.bytes / 1e9 / r.seconds);
    } else {
      print_error(
          "saving the checkpoint of step %d failed: %s. Nothing of it is visible; "
          "%s",
          step, r.error.c_str(),
          newest_checkpoint_.empty()
              ? "there is no earlier checkpoint"
              : (newest_checkpoint_ + " and " + opts_.save + "/latest are intact").c_str());
    }
    std::fflush(stdout);
  }
  if (r.error.empty()) newest_checkpoint_ = r.path;
  return r.error.empty();
}

void TrainingRun::report_stages(const StageTimes& timed) const {
  // Per rank: peak bytes (activations and W sets), most (mb, chunk)s held, one microbatch's
  // activation and W-set bytes, mean F, B and W ms per (mb, chunk).
  auto mean = [](double ms, int ops) { return ops ? ms / ops : 0.0; };
  const double mine[8] = {
      double(stage_->peak_activation_bytes()), double(stage_->peak_held()),
      double(stage_->microbatch_bytes()),      double(stage_->weight_input_bytes()),
      mean(timed.forward, timed.forwards),     mean(timed.backward, timed.backwards),
      mean(timed.weight, timed.weights),       double(timed.forwards + timed.backwards)};
  std::vector<double> all(is_root() ? 8 * grid_->world_size() : 0);
  MPF_MPI_CHECK(MPI_Gather(mine, 8, MPI_DOUBLE, all.data(), 8, MPI_DOUBLE, 0, grid_->world_comm()));
  if (!is_root() || !opts_.verbose) return;
  // One line per stage, from its (tp 0, dp 0) rank: world rank T·D·p. Held microbatches count a
  // stage's activations (V chunks make one); the bytes include what waits for W.
  for (int p = 0; p < grid_->pp_size(); ++p) {
    const double* r = all.data() + 8 * p * grid_->tp_size() * grid_->cp_size() * grid_->dp_size();
    char times[96] = "F, B and W not timed (on a GPU only with --profile)";
    if (r[7] > 0) {
      std::snprintf(times, sizeof times, "F %.2f ms, B %.2f ms, W %.2f ms per (microbatch, chunk)",
                    r[4], r[5], r[6]);
    }
    std::printf(
        "stage %d | peak in flight %g microbatches, %s (a microbatch: %s activations + %s kept "
        "for W) | %s\n",
        p, r[1] / shape_.virtual_stages, megabytes(int64_t(r[0])).c_str(),
        megabytes(int64_t(r[2])).c_str(), megabytes(int64_t(r[3])).c_str(), times);
  }
}

void TrainingRun::plan_zb_auto(int step) {
  PhaseScope phase(phases_, StepPhase::kZbPlanning);
  const pipeline::OpCosts costs =
      stage_costs(stage_->times(), grid_->pp_rank(), grid_->pp_size(), grid_->world_comm());
  const int limit = zb_auto_limit();
  plan_ =
      std::make_unique<pipeline::SchedulePlan>(pipeline::Schedule::kZbAuto, shape_, costs, limit);
  auto_planned_ = true;
  if (!is_root() || !opts_.verbose) return;
  std::string f, b, w;
  for (int p = 0; p < grid_->pp_size(); ++p) {
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

void TrainingRun::print_banner(const PeakRate& peak) const {
  if (!is_root()) return;
  for (const std::string& w : warnings_) std::fprintf(stderr, "warning: %s\n", w.c_str());
  for (const std::string& n : notes_) std::printf("note: %s\n", n.c_str());
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
  std::printf(
      "gemm: %s %s | %s | products in %s%s\n", gemm.library.c_str(), gemm.isa.c_str(),
      gemm.cpu.c_str(), precision_name(opts_.precision),
      opts_.precision == Precision::bf16 ? " (fp32 accumulation, fp32 master weights)" : "");
  if (!gemm.narrower.empty()) {
    std::fprintf(stderr, "warning: GEMM kernels narrower than this CPU allows: %s\n",
                 gemm.narrower.c_str());
  }
  std::printf("mpi: %s\n", describe_mpi_memory().c_str());
  std::printf("grid: %s", describe_placement(*grid_, placement_, false).c_str());
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
  std::printf("memory/rank: %s\n", memory_.summary().c_str());
  std::printf("microbatches: %zu of %d row(s) per DP rank | schedule %s%s%s", inputs_.size(),
              micro_batch_, pipeline::schedule_name(pp_schedule_),
              pp_schedule_ == pipeline::Schedule::kZbAuto
                  ? (std::string(" (planned for F = B = W until step ") +
                     std::to_string(first_step_ + 1) + " has timed the ops)")
                        .c_str()
                  : "",
              opts_.recompute ? " | full recomputation" : "");
  if (grid_->pp_size() > 1 || shape_.virtual_stages > 1) {
    std::printf(" | pipeline %d stage(s) x %d chunk(s)%s: %s", grid_->pp_size(),
                shape_.virtual_stages,
                shape_.placement == pipeline::ChunkPlacement::kV ? " in a V" : "",
                describe_layout(layer_ranges_, grid_->pp_size(), shape_.placement).c_str());
  }
  std::printf("\n");
  if (grid_->cp_size() > 1) {
    const PositionRuns& p = stage_->positions();
    std::printf(
        "context parallel: %d rank(s) | this rank's positions %d-%d and %d-%d of each sequence "
        "(chunks %d and %d of %d) | ring attention, K/V of %d kv head(s) x %d per step\n",
        grid_->cp_size(), p.run[0].pos, p.run[0].pos + p.run[0].len - 1, p.run[1].pos,
        p.run[1].pos + p.run[1].len - 1, grid_->cp_rank(),
        2 * grid_->cp_size() - 1 - grid_->cp_rank(), 2 * grid_->cp_size(), shard_.kv_heads,
        shard_.head_size);
  }
  std::printf(
      "data parallel: %d rank(s)%s | %zu bucket(s) of <= %g MB | overlap %s | %s\n",
      grid_->dp_size(), grid_->cp_size() > 1 ? " (gradients summed over DP x CP)" : "",
      dp_grads_->buckets().size(), opts_.dp_bucket_mb, opts_.overlap_grad_reduce ? "on" : "off",
      dp_grads_->zero() ? (grid_->cp_size() > 1 ? "ZeRO-1: optimizer state sharded over DP x CP"
                                                : "ZeRO-1: optimizer state sharded over DP")
      : opts_.zero == 1 ? "ZeRO-1 requested but dp x cp is 1: nothing to shard"
                        : "optimizer state replicated");
  std::printf(
      "optimizer: AdamW lr %.1e betas %g/%g eps %g wd %g (matrices) | clip %g | %s, warmup %d, "
      "final frac %g\n",
      opts_.lr, opts_.beta1, opts_.beta2, opts_.eps, opts_.weight_decay, opts_.grad_clip,
      opts_.lr_schedule.c_str(), opts_.warmup, opts_.final_lr_frac);
  if (resume_) {
    const CheckpointInfo& c = resume_->info;
    const double gb = double(state_files_->model_bytes() + state_files_->optimizer_bytes()) / 1e9;
    auto saved = [&](const char* key) { return setting(c, key).value_or("?"); };
    std::printf(
        "resumed: %s, step %lld of %d, %lld tokens trained on | saved by tp %s x dp %s x pp %s "
        "(%s, V %s, ZeRO %s%s) | read %.2f GB in %.2f s = %.2f GB/s\n",
        newest_checkpoint_.c_str(), static_cast<long long>(c.step), opts_.steps,
        static_cast<long long>(c.tokens_seen), saved("layout.tp").c_str(),
        saved("layout.dp").c_str(), saved("layout.pp").c_str(), saved("layout.schedule").c_str(),
        saved("layout.virtual_stages").c_str(), saved("layout.zero").c_str(),
        saved("layout.sequence_parallel") == "true" ? ", sequence parallel" : "", gb, load_seconds_,
        load_seconds_ > 0 ? gb / load_seconds_ : 0.0);
  }
  if (!opts_.save.empty()) {
    std::string when = "at the end";
    if (opts_.save_every > 0)
      when = "every " + std::to_string(opts_.save_every) + " steps and " + when;
    if (opts_.keep_last > 0) when += ", keeping the newest " + std::to_string(opts_.keep_last);
    std::printf("checkpoints: %s, %s\n", opts_.save.c_str(), when.c_str());
  }
  std::printf(
      "MFU: (6N' + 6LTC, causal attention) x tokens = %.2f GFLOP/step vs peak %.1f GFLOP/s/rank "
      "(%s)\n",
      flops_per_token(cfg_, opts_.seq_len) * opts_.batch * opts_.seq_len / 1e9, peak.gflops,
      opts_.peak_gflops > 0
          ? "--peak-gflops"
          : (std::string(precision_name(opts_.precision)) + " GEMM, measured: the best of " +
             std::to_string(backend::available().size()) + " librar" +
             (backend::available().size() > 1 ? "ies, " : "y, ") + peak.library)
                .c_str());
  std::fflush(stdout);
}

TrainResult TrainingRun::train() {
  TrainResult result;
  if (first_step_ > opts_.steps) {
    if (is_root()) {
      std::printf("resumed at step %d of --steps %d: the run is complete, nothing to train\n",
                  first_step_ - 1, opts_.steps);
    }
    return result;
  }
  const PeakRate& peak = peak_;
  peak_flops_.emplace(peak, opts_.peak_gflops > 0, opts_.precision, grid_->world_comm());
  if (opts_.verbose) print_banner(peak);
  record(MetricsRecord("run")
             .integer("step", first_step_ - 1)
             .text("save", opts_.save.empty() ? "" : resolved_path(opts_.save))
             .text("arch", cfg_.llama() ? "llama" : "gpt2")
             .integer("layers", cfg_.layers)
             .integer("dim", cfg_.channels)
             .integer("heads", cfg_.heads)
             .integer("batch", opts_.batch)
             .integer("seq_len", opts_.seq_len)
             .integer("tp", grid_->tp_size())
             .integer("cp", grid_->cp_size())
             .integer("dp", grid_->dp_size())
             .integer("pp", grid_->pp_size())
             .text("precision", precision_name(opts_.precision))
             .number("peak_gflops", peak_flops_->flops() / 1e9));
  // bf16: the products read weights16_ and round their other inputs (model/layers/matmul.hpp).
  std::optional<Bf16Products> bf16_products;
  if (opts_.precision == Precision::bf16) {
    bf16_products.emplace(params_.slab.data(), weights16_.data(), params_.count, largest_operand());
  }
  int last = first_step_;
  {
    PhaseScope training(phases_, StepPhase::kTraining, first_step_);
    if (opts_.val_every > 0 && first_step_ == 1) report_validation(0);
    for (int n = first_step_; n <= opts_.steps && result.status == kExitDone; ++n) {
      last = n;
      const StepOutcome s = step(n);
      if (!s.suspect.empty()) {
        result.status = report_suspect(s);
        break;
      }
      if (s.rerun) report_rerun(s);
      if (!s.diverged) tally(s, result);
      if (s.skipped) report_skip(s);
      result.status = s.diverged ? report_divergence(s.log) : after_step(s.log);
    }
  }
  report_run(last, result.status);
  profile::set_enabled(false);
  if (result.status != kExitDone) return result;
  report_stages(tally_.ops);
  if (!save_llmc()) result.status = kExitSaveFailed;
  if (!save_hf()) result.status = kExitSaveFailed;
  if (!opts_.trace.empty()) trace_->write(opts_.trace);
  return result;
}

TrainingRun::StepOutcome TrainingRun::step(int step) {
  StepOutcome out = prepare_step(step);
  PhaseScope in_step(phases_, StepPhase::kStep, step);
  Stopwatch clock;
  const DataPosition batch_at = train_data_->position();
  out.log.loss = compute();
  apply_test_fault(test_fault_, step, grid_->world_rank(), grads_.slab.data(), grads_.count);
  // This rank's gradients before any reduction, for a second computation to be held against.
  const uint64_t first = opts_.rerun_suspect ? bits_checksum(grads_.slab.data(), grads_.count) : 0;
  // zb-auto plans from the second step's op times: the first's include the warm-up (first
  // touches of buffers, BLAS start-up) and misstate the stages' ratios.
  if (out.zb_planning) plan_zb_auto(step);
  out.log.norm = sync();
  if (opts_.rerun_suspect && suspect_values(out.log.loss, out.log.norm)) {
    // The same parameters and the same batch again: the same bits, unless hardware erred.
    train_data_->seek(batch_at);
    out.log.loss = compute();
    out.suspect = ranks_whose_bits_changed(grid_->world_comm(), first,
                                           bits_checksum(grads_.slab.data(), grads_.count));
    if (!out.suspect.empty()) return out;
    out.rerun = true;
    out.log.norm = sync();
  }
  // Every rank holds the same loss and norm (all-reduced): they stop together, before an update
  // that would spread the non-finite values into the parameters.
  out.diverged = !std::isfinite(out.log.loss) || !std::isfinite(out.log.norm);
  if (out.diverged) return out;
  out.log.lr = learning_rate(schedule_, step - 1);
  // The same loss and norm on every rank: every rank decides alike.
  out.loss_z = loss_window_.push(out.log.loss);
  out.norm_z = norm_window_.push(out.log.norm);
  const double z = opts_.skip_outliers;
  out.skipped = z > 0 && (out.loss_z > z || out.norm_z > z);
  if (out.skipped) {
    // As llm.c: no update, but AdamW's step count moves on, so that the bias corrections of
    // later steps (and a resumed run's, which takes it from the step) are those of no skip.
    ++skipped_updates_;
    optimizer_->set_steps_taken(optimizer_->steps_taken() + 1);
  } else {
    update(out.log.lr, out.log.norm);
  }
  tokens_seen_ += int64_t(tokens_per_step());
  out.log.ms = clock.seconds() * 1e3;
  return out;
}

TrainingRun::StepOutcome TrainingRun::prepare_step(int step) {
  StepOutcome out;
  out.log.step = step;
  out.log.steps = opts_.steps;
  // A stop signal during this step must see its end within twice the slowest step so far (at
  // least 10 s), or the rank is waiting on one that is gone (stop_signals.hpp).
  set_stop_grace(step > first_step_ ? std::max(10, int(std::ceil(2 * tally_.slowest_ms / 1e3)))
                                    : 0);
  // The first step of a run warms caches and pools: it is not timed.
  out.timed = step > first_step_ || opts_.steps == first_step_;
  out.zb_planning =
      pp_schedule_ == pipeline::Schedule::kZbAuto && !auto_planned_ && step == first_step_ + 1;
  // The ops' own times need a wait at the end of each op. On the host that costs nothing; on a
  // GPU it stalls the stream, so only the steps that use the times pay it: zb-auto's planning
  // step, the traced one and profiled ones.
  out.ops_timed = !kDeviceMemory || opts_.profile || trace_->traces(step) || out.zb_planning;
  stage_->set_op_timing(out.ops_timed);
  profile::set_enabled(opts_.profile && step > first_step_);
  return out;
}

double TrainingRun::compute() {
  PhaseScope in_compute(phases_, StepPhase::kCompute);
  PhaseScope phase(phases_, StepPhase::kData);
  load_batch(*train_data_);
  phase.next(StepPhase::kZeroGrads);
  fill(grads_.slab.data(), grads_.count, 0.0f);
  phase.next(StepPhase::kSchedule);
  PartDone overlap;
  if (opts_.overlap_grad_reduce) overlap = [this](ModelPart part) { dp_grads_->part_done(part); };
  // Each token's loss enters the global mean with weight 1/(B·T); summing the DP ranks' gradients
  // then gives the gradient of the global mean.
  const float dloss = static_cast<float>(1.0 / tokens_per_step());
  stage_->begin_step(&inputs_, &targets_, &params_.t, &grads_.t, dloss, overlap,
                     doc_starts_.empty() ? nullptr : &doc_starts_);
  plan_->run(*stage_, grid_->pp_rank());
  phase.next(StepPhase::kScheduleEnd);
  stage_->end_step();
  phase.next(StepPhase::kLossSum);
  return global_mean_loss(stage_->loss_sum());
}

double TrainingRun::sync() {
  PhaseScope in_sync(phases_, StepPhase::kSync);
  PhaseScope phase(phases_, StepPhase::kTiedSum);
  allreduce_tied_embedding();
  if (opts_.overlap_grad_reduce) dp_grads_->tied_sum_done();  // wte's buckets start now
  phase.next(StepPhase::kDpReduce);
  dp_grads_->finish();
  phase.next(StepPhase::kGradNorm);
  return global_grad_norm();
}

void TrainingRun::update(float lr, double norm) {
  PhaseScope in_update(phases_, StepPhase::kUpdate);
  PhaseScope phase(phases_, StepPhase::kOptimizer);
  const bool zero = dp_grads_->zero(), bf16 = opts_.precision == Precision::bf16;
  const float* grads = zero ? dp_grads_->shard_grads() : grads_.slab.data();
  // bf16: the products' weight copy is written by the update itself, except under ZeRO, where
  // the update covers this rank's shard and the all-gather brings the rest.
  optimizer_->step(params_.slab.data(), grads, lr, clip_scale(norm, opts_.grad_clip),
                   bf16 && !zero ? weights16_.data() : nullptr);
  if (!zero) return;
  phase.next(StepPhase::kZeroGather);
  dp_grads_->allgather_params(params_.slab.data());
  if (bf16) round_to_bf16(weights16_.data(), params_.slab.data(), params_.count);
}

void TrainingRun::tally(const StepOutcome& s, TrainResult& result) {
  result.step_ms.push_back(s.log.ms);
  tally_.slowest_ms = std::max(tally_.slowest_ms, s.log.ms);
  if (s.timed) tally_.timed_ms += s.log.ms;
  tally_.last_loss = s.log.loss;
  if (!s.timed || !s.ops_timed) return;
  const StageTimes& t = stage_->times();
  tally_.ops.forward += t.forward;
  tally_.ops.backward += t.backward;
  tally_.ops.weight += t.weight;
  tally_.ops.forwards += t.forwards;
  tally_.ops.backwards += t.backwards;
  tally_.ops.weights += t.weights;
}

int TrainingRun::after_step(const StepRecord& r) {
  const int step = r.step;
  // A step faster than the peak allows: the peak is measured again, or the line gets a warning.
  const PeakCheck peak = peak_flops_->check(step, flops_per_step(), r.ms / 1e3);
  if (is_root() && opts_.verbose) {
    if (!peak.note.empty()) std::printf("%s\n", peak.note.c_str());
    if (!peak.warning.empty()) std::fprintf(stderr, "warning: %s\n", peak.warning.c_str());
  }
  if (!peak.note.empty()) {
    record(
        MetricsRecord("peak").integer("step", step).number("gflops", peak_flops_->flops() / 1e9));
  }
  const double s = r.ms / 1e3;
  const double tok_s = tokens_per_step() / s,
               mfu = 100.0 * flops_per_step() / s / peak_flops_->flops();
  record(MetricsRecord("step")
             .integer("step", step)
             .number("loss", r.loss)
             .number("lr", r.lr)
             .number("norm", r.norm)
             .number("ms", r.ms)
             .number("tok_s", tok_s)
             .number("mfu", mfu)
             .integer("tokens", tokens_seen_));
  record_scalars(step, {{"train/loss", r.loss},
                        {"train/lr", r.lr},
                        {"train/grad_norm", r.norm},
                        {"train/tok_s", tok_s},
                        {"train/mfu", mfu}});
  log_step(r);
  // The step boundary: the ranks agree whether any of them was asked to stop.
  int signal = 0;
  {
    PhaseScope phase(phases_, StepPhase::kStopAgreement);
    signal = agree_on_stop(grid_->world_comm());
  }
  if (!signal && opts_.val_every > 0 && (step % opts_.val_every == 0 || step == opts_.steps)) {
    report_validation(step);
  }
  if (!signal && sample_ && (step % opts_.sample_every == 0 || step == opts_.steps)) {
    PhaseScope phase(phases_, StepPhase::kSample, step);
    sample_->print(step);
  }
  const bool save_due =
      !opts_.save.empty() &&
      (signal || step == opts_.steps || (opts_.save_every > 0 && step % opts_.save_every == 0));
  if (save_due && !save(step)) return kExitSaveFailed;
  if (!signal) return kExitDone;
  if (is_root()) {
    std::printf(
        "%s received: stopped after step %d; %s; exit status %d\n", signal_name(signal), step,
        opts_.save.empty()
            ? "nothing saved (no --save)"
            : ("saved " + newest_checkpoint_ + ", resume with --load " + opts_.save).c_str(),
        int(kExitSignalled));
    std::fflush(stdout);
  }
  return kExitSignalled;
}

bool TrainingRun::suspect_values(double loss, double norm) const {
  if (!std::isfinite(loss) || !std::isfinite(norm)) return true;
  const double z = opts_.skip_outliers;
  return z > 0 && (loss_window_.z(loss) > z || norm_window_.z(norm) > z);
}

int TrainingRun::report_suspect(const StepOutcome& s) const {
  if (!is_root()) return kExitSuspect;  // the placement table, the log and --metrics are rank 0's
  const std::string line = suspect_line(s.log.step, s.suspect, placement_);
  record(MetricsRecord("suspect").integer("step", s.log.step).text("verdict", line));
  print_error("%s", line.c_str());
  return kExitSuspect;
}

void TrainingRun::report_rerun(const StepOutcome& s) const {
  record(MetricsRecord("rerun").integer("step", s.log.step).number("loss", s.log.loss));
  if (!is_root() || !opts_.verbose) return;
  std::printf(
      "step %d: computed again from the same state: the same bits on every rank, so its "
      "loss %.6f and gradient norm %.6g are the data's\n",
      s.log.step, s.log.loss, s.log.norm);
}

void TrainingRun::report_skip(const StepOutcome& s) const {
  const bool loss = s.loss_z > opts_.skip_outliers;
  record(MetricsRecord("outlier")
             .integer("step", s.log.step)
             .number("loss", s.log.loss)
             .number("norm", s.log.norm)
             .number("loss_z", s.loss_z)
             .number("norm_z", s.norm_z)
             .integer("skipped", skipped_updates_));
  record_scalars(s.log.step, {{"train/skipped_updates", double(skipped_updates_)}});
  if (!is_root() || !opts_.verbose) return;
  std::printf(
      "step %d: update skipped: its %s %.6g is %.1f standard deviations above the last %d steps' "
      "(--skip-outliers %g; %lld skipped so far)\n",
      s.log.step, loss ? "loss" : "gradient norm", loss ? s.log.loss : s.log.norm,
      loss ? s.loss_z : s.norm_z, opts_.outlier_window, opts_.skip_outliers,
      static_cast<long long>(skipped_updates_));
}

int TrainingRun::report_divergence(const StepRecord& r) const {
  record(MetricsRecord("diverged")
             .integer("step", r.step)
             .number("loss", r.loss)
             .number("norm", r.norm));
  if (is_root()) {
    print_error(
        "step %d: loss %g, gradient norm %g: training diverged; the update was "
        "not applied and nothing was saved. %s",
        r.step, r.loss, r.norm,
        newest_checkpoint_.empty() ? "There is no checkpoint of this run (--save DIR keeps them)."
                                   : ("The newest checkpoint is " + newest_checkpoint_ +
                                      ": resume from it (with a lower --lr, say)")
                                         .c_str());
  }
  return kExitDiverged;
}

void TrainingRun::log_step(const StepRecord& r) const {
  if (!is_root() || !opts_.verbose) return;
  if (r.step % opts_.log_every != 0 && r.step != opts_.steps && r.step != first_step_) return;
  std::printf("%s\n",
              format_step(r, tokens_per_step(), flops_per_step(), peak_flops_->flops()).c_str());
  std::fflush(stdout);
}

void TrainingRun::report_validation(int step) {
  if (!val_data_) return;
  PhaseScope phase(phases_, StepPhase::kValidation, step);
  const double loss = validate();
  if (is_root() && opts_.verbose) std::printf("val step %d | loss %.6f\n", step, loss);
  record(MetricsRecord("val").integer("step", step).number("loss", loss));
  record_scalars(step, {{"val/loss", loss}});
}

void TrainingRun::report_run(int last, int status) const {
  const int timed_steps = last - first_step_;
  if (is_root() && opts_.verbose && status != kExitDiverged) {
    const double ms = timed_steps > 0 ? tally_.timed_ms / timed_steps : 0.0;
    std::printf(
        "summary | steps %d | final loss %.6f | %.1f ms/step (steps %d..%d) | %.0f tok/s | "
        "MFU %.1f%% | %s\n",
        last, tally_.last_loss, ms, std::min(first_step_ + 1, last), last,
        ms > 0 ? tokens_per_step() / (ms / 1e3) : 0.0,
        ms > 0 ? 100.0 * flops_per_step() / (ms / 1e3) / peak_flops_->flops() : 0.0,
        peak_flops_->describe().c_str());
    std::printf("%s\n", timers_->summary().c_str());
  }
  if (status != kExitDiverged) {
    const double ms = timed_steps > 0 ? tally_.timed_ms / timed_steps : 0.0;
    record(MetricsRecord("summary")
               .integer("step", last)
               .integer("status", status)
               .number("loss", tally_.last_loss)
               .number("ms_per_step", ms)
               .number("tok_s", ms > 0 ? tokens_per_step() / (ms / 1e3) : 0.0)
               .number("mfu",
                       ms > 0 ? 100.0 * flops_per_step() / (ms / 1e3) / peak_flops_->flops() : 0.0)
               .text("peak", peak_flops_->describe())
               .integer("skipped", skipped_updates_));
  }
  if (is_root() && opts_.verbose && opts_.skip_outliers > 0) {
    std::printf(
        "outliers: %lld update(s) skipped in the run so far (--skip-outliers %g over %d "
        "steps)\n",
        static_cast<long long>(skipped_updates_), opts_.skip_outliers, opts_.outlier_window);
  }
  report_memory(last);
  if (is_root() && opts_.profile && timed_steps > 0) {
    std::printf("%s", profile_table(tally_.timed_ms / timed_steps, timed_steps).c_str());
  }
}

void TrainingRun::report_memory(int last) const {
  // Every rank's peak resident set against its prediction; the line names the rank whose
  // prediction is furthest off. (In a GPU build the model lives in device memory: not shown.)
  if (kDeviceMemory) return;
  const double mine[2] = {double(peak_resident_bytes()), double(memory_.total())};
  std::vector<double> all(is_root() ? 2 * grid_->world_size() : 0);
  MPF_MPI_CHECK(MPI_Gather(mine, 2, MPI_DOUBLE, all.data(), 2, MPI_DOUBLE, 0, grid_->world_comm()));
  if (!is_root() || !opts_.verbose) return;
  int worst = 0;
  for (int r = 0; r < grid_->world_size(); ++r) {
    const double e = std::fabs(all[2 * r + 1] / all[2 * r] - 1.0);
    if (e > std::fabs(all[2 * worst + 1] / all[2 * worst] - 1.0)) worst = r;
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

double TrainingRun::flops_per_step() const {
  return flops_per_token(cfg_, opts_.seq_len) * tokens_per_step();
}

}  // namespace mpf
