// Building a training run: the constructor and its set-up steps, in order (trainer.hpp).
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "backends/gemm.hpp"
#include "checkpoint/checkpoint_dir.hpp"
#include "checkpoint/hf_checkpoint.hpp"
#include "checkpoint/llmc_checkpoint.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/stopwatch.hpp"
#include "layout/layout_memory.hpp"
#include "model/gpt.hpp"
#include "model/layers/matmul.hpp"
#include "model/shard.hpp"
#include "parallel/device_mpi.hpp"
#include "parallel/rank_device.hpp"
#include "pipeline/model_builder.hpp"
#include "pipeline/p2p.hpp"
#include "pipeline/simulator.hpp"
#include "train/trainer.hpp"

namespace mpf {

namespace {
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

TrainingRun::TrainingRun(RunInputs in, MPI_Comm world)
    : opts_(in.opts),
      cfg_(in.cfg),
      model_only_(in.model_only),
      doc_token_(in.doc_token),
      doc_token_after_(in.doc_token_after),
      schedule_(in.schedule),
      train_data_(std::move(in.train_data)),
      val_data_(std::move(in.val_data)),
      val_name_(in.val_name),
      eval_task_(std::move(in.eval_task)),
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
  batch_ = BatchBuffers(local_batch_, opts_.seq_len, stage_->positions(), shape_.microbatches,
                        doc_token_, doc_token_after_);
  observe_phases();
  saver_ = std::make_unique<RunSaver>(
      *this, resume_ ? checkpoint::path(resume_->root, resume_->info.step) : "");
  // Resumed from local shards, the run starts after the step --metrics was planned for.
  if (metrics_start_ && !resumed_from_.empty()) {
    const std::string planned = metrics_start_->note;
    metrics_start_ = plan_metrics(opts_.metrics, first_step_, opts_.save);
    for (std::string& n : notes_) {
      if (!planned.empty() && n == planned) n = metrics_start_->note;
    }
    if (planned.empty() && !metrics_start_->note.empty()) notes_.push_back(metrics_start_->note);
  }
  // Last, after every collective here: an error on rank 0 alone is then agreed on by the caller.
  reporter_ = std::make_unique<RunReporter>(*this);
}

TrainingRun::~TrainingRun() = default;

void TrainingRun::set_up_grid(MPI_Comm world) {
  grid_ = std::make_unique<Grid>(world, opts_.tp, opts_.pp, opts_.dp, opts_.cp, opts_.ep);
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
  if (opts_.zero_group == "node") split_zero_by_node();
}

void TrainingRun::split_zero_by_node() {
  // Every DP x CP group is split alike (each its own nodes); the refusals are agreed over the
  // world, so every rank stops or none does.
  zero_nodes_ = std::make_unique<NodeSplit>(grid_->dp_cp_comm());
  int ok[2] = {zero_nodes_->nodes > 1, zero_nodes_->even};
  MPF_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, ok, 2, MPI_INT, MPI_MIN, grid_->world_comm()));
  const std::string group = std::to_string(grid_->dp_cp_size()) + " DP x CP ranks";
  require(ok[0] == 1, "--zero-group node needs ranks on two or more nodes; the " + group +
                          " of a group are all on one node: use --zero-group all");
  require(ok[1] == 1, "--zero-group node needs each node to hold as many of the " + group +
                          " of a group, and they are spread unevenly over " +
                          std::to_string(zero_nodes_->nodes) +
                          " nodes; place the ranks evenly, or use --zero-group all");
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

LayoutSizes TrainingRun::layout_sizes() const {
  LayoutSizes l;
  l.cfg = cfg_;
  l.tp = grid_->tp_size();
  l.cp = grid_->cp_size();
  l.pp = grid_->pp_size();
  l.ep = grid_->ep_size();
  l.dp_cp = grid_->dp_cp_size();
  l.micro_batch = micro_batch_;
  l.seq_len = opts_.seq_len;
  l.layer_ranges = layer_ranges_;
  l.sequence_parallel = opts_.sequence_parallel;
  l.recompute = opts_.recompute == "full";
  l.selective = opts_.recompute == "selective";
  l.attention = attention_path_named(opts_.attention);
  l.zero = opts_.zero >= 1;
  l.zero_stage = std::max(opts_.zero, 1);
  // --zero-group node: the shards are split over a node's ranks of DP x CP.
  if (zero_nodes_) MPI_Comm_size(zero_nodes_->within, &l.zero_ranks);
  l.bf16 = opts_.precision == Precision::bf16;
  l.staged_mpi = staged();
  l.p2p_bf16 = opts_.p2p_dtype == "bf16";
  l.reduce_bf16 = opts_.grad_reduce_dtype == "bf16";
  l.tp_bf16 = opts_.tp_comm_dtype == "bf16";
  l.muon = opts_.optimizer == "muon" && !model_only_;
  l.threads = host_thread_count();
  l.dp_bucket_bytes = static_cast<int64_t>(opts_.dp_bucket_mb * 1e6);
  return l;
}

MemoryShape TrainingRun::memory_shape() const {
  MemoryShape m = layout_memory_shape(layout_sizes(), *plan_, grid_->tp_rank(), grid_->pp_rank(),
                                      grid_->ep_rank());
  for (const DataLoader* d : {train_data_.get(), val_data_.get()}) {
    if (!d) continue;
    for (const TokenStream& f : d->files()) m.data_bytes += f.size() * f.width();
  }
  // Host memory: on a GPU the plan is of the device's (the staging copy is not in it).
  m.checkpoint_staging = !opts_.save.empty() && opts_.save_async == 1 && !kDeviceMemory;
  if (model_only_) {  // no gradients to sum: no reduction buffers either
    m.model_only = true;
    m.dp_bucket_bytes = 0;
    m.tied_across_stages = false;
  }
  return m;
}

void TrainingRun::plan_memory_use() {
  MemoryShape m = memory_shape();
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
    // The process's baseline or the data may be most of the need: no model flag shrinks those.
    const std::string fix = !big.shrink.empty() ? "shrink it with " + big.shrink
                            : opts_.memory_per_rank > 0
                                ? "no flag shrinks it; raise --memory-per-rank"
                                : "no flag shrinks it; run fewer ranks on the node";
    throw InputError("rank " + std::to_string(grid_->world_rank()) + " needs " + gigabytes(need) +
                     " at its peak, more than the " + gigabytes(may) + " it may use (" + whose +
                     "); the largest term is " + big.name + ", " + gigabytes(big.bytes) + " (" +
                     big.detail + "): " + fix + " (" + memory_.summary() + ")");
  }
}

void TrainingRun::shard_model() {
  const StageOwnership own =
      stage_ownership(layer_ranges_, grid_->pp_rank(), grid_->pp_size(), shape_.placement);
  // Padded to a multiple of the DP x CP size so ZeRO's buckets split evenly.
  // ZeRO-2/3: the slabs' blocks' stretch is this rank's shard alone (optim/sharded_blocks.hpp).
  const int stage = model_only_ || grid_->dp_cp_size() == 1 ? 0 : opts_.zero;
  ModelOnLayout model = build_model(*grid_, cfg_, &own, grid_->dp_cp_size(), !model_only_, stage);
  groups_ = model.groups;
  shard_ = std::move(model.shard);
  if (grid_->ep_size() > 1) {
    require(opts_.moe_a2a_chunks <= shard_.experts,
            "--moe-a2a-chunks " + std::to_string(opts_.moe_a2a_chunks) +
                " is more groups than the " + std::to_string(shard_.experts) +
                " experts each of the --ep " + std::to_string(grid_->ep_size()) +
                " ranks holds; use at most " + std::to_string(shard_.experts));
    shard_.a2a_chunks = opts_.moe_a2a_chunks;
  }
  params_ = std::move(model.params);
  grads_ = std::move(model.grads);
}

void TrainingRun::set_up_optimizer() {
  if (model_only_) {  // the parameters' files alone
    state_files_ = std::make_unique<StateFiles>(*grid_, shard_, params_);
    return;
  }
  const TrainOptions& opts = opts_;
  AdamWConfig adam;
  adam.beta1 = opts.beta1;
  adam.beta2 = opts.beta2;
  adam.eps = opts.eps;
  adam.weight_decay = opts.weight_decay;
  // The ranks holding the same parameters are DP x CP: gradients are summed, and ZeRO shards, over
  // them together.
  const bool zero = opts.zero >= 1 && grid_->dp_cp_size() > 1;
  const int stage = zero ? opts.zero : 0;
  require(stage < 2 || !staged(),
          "--zero " + std::to_string(stage) +
              " needs an MPI that reads device memory (its block buffers are not staged yet); "
              "use --zero 1");
  const int64_t bucket_elems = static_cast<int64_t>(opts.dp_bucket_mb * 1e6 / sizeof(float));
  // Under PP the tied wte is completed over the embedding group after the schedule: its DP
  // buckets wait for that (unless one rank holds both ends, as in a V).
  // Under EP the experts' gradients are summed, and ZeRO shards them, over the ranks holding the
  // same experts.
  const MPI_Comm expert_dp = grid_->ep_size() > 1 ? grid_->expert_dp_cp_comm() : MPI_COMM_NULL;
  // --zero-group node (HSDP): the buckets are reduce-scattered (and gathered) within the node,
  // and the shard then summed over the nodes holding the same one.
  const bool hsdp = zero && zero_nodes_;
  dp_grads_ = std::make_unique<DataParallelGrads>(
      grads_, shard_, hsdp ? zero_nodes_->within : grid_->dp_cp_comm(), bucket_elems, zero,
      /*tied_wte=*/tied_across_stages(), expert_dp, stage);
  if (hsdp) dp_grads_->set_replicas(zero_nodes_->replicas);
  dp_grads_->set_bf16_reduction(opts.grad_reduce_dtype == "bf16");
  if (stage >= 2) sharded_ = std::make_unique<ShardedBlocks>(*dp_grads_, params_, grads_, stage);
  // Under ZeRO-1 AdamW's segments are this rank's shard of the moments, else the slab's pieces.
  std::vector<OptimizerSegment> segments =
      zero ? dp_grads_->zero_segments() : piece_segments(params_);
  const int64_t state = zero ? dp_grads_->shard_size() : params_.count;
  if (opts.optimizer == "muon") {
    // AdamW keeps what Muon does not; the matrices' momentum is AdamW's first moment at their
    // places (optim/muon.hpp), so the moments keep their layout and the checkpoint its format.
    for (OptimizerSegment& s : segments) {
      s.by_muon = muon_tensor(s.tensor) && params_.layout.piece_at(s.param).block >= 0;
    }
    MuonConfig mc;
    mc.momentum = opts.muon_momentum;
    mc.weight_decay = opts.weight_decay;
    mc.ns_bf16 = opts.muon_ns_precision == "bf16";
    // The matrices are dealt out over the ranks holding the same parameters (the experts' over
    // those holding the same experts).
    MuonGroups groups;
    groups.tp = grid_->tp_comm();
    groups.replicas = grid_->dp_cp_comm();
    groups.expert_replicas = expert_dp == MPI_COMM_NULL ? grid_->dp_cp_comm() : expert_dp;
    muon_ = std::make_unique<Muon>(mc, muon_matrices(params_, shard_), groups);
  }
  optimizer_ = std::make_unique<AdamW>(adam, cfg_, std::move(segments), state);
  grad_squares_ = std::make_unique<SumOfSquares>(grid_->ep_size() > 1 ? 2 : 1);
  state_files_ =
      std::make_unique<StateFiles>(*grid_, shard_, params_, *optimizer_, zero, stage == 3);
  if (hsdp) {  // each shard written by its first node's copy
    int replica = 0;
    MPI_Comm_rank(zero_nodes_->replicas, &replica);
    state_files_->set_zero_replica(replica);
  }
}

void TrainingRun::load_state() {
  RunSaver::check_local_dir(*this);  // before anything reads or writes it
  if (resume_) {
    Stopwatch load_clock;
    // --reset-optimizer: the parameters alone; the moments stay zero and the bias corrections
    // start again. The model alone (mpiformer-eval) reads only the parameters too.
    if (opts_.reset_optimizer || model_only_) {
      load_checkpoint_parameters(*state_files_, *resume_);
    } else if (!RunSaver::resume_local(*this)) {
      // The node-local shards when newer and every rank holds them; else the global checkpoint.
      load_checkpoint(*state_files_, *resume_);
    }
    if (resumed_from_.empty()) load_seconds_ = load_clock.seconds();
    const CheckpointInfo& c = resume_->info;
    if (optimizer_) optimizer_->set_steps_taken(opts_.reset_optimizer ? 0 : c.step);
    first_step_ = int(c.step) + 1;
    tokens_seen_ = c.tokens_seen;
    loss_window_.restore(c.loss_window);
    norm_window_.restore(c.norm_window);
    skipped_updates_ = c.skipped_updates;
  } else if (!opts_.init_from.empty() && is_hf_source(opts_.init_from)) {
    load_hf_model(opts_.init_from, cfg_, shard_, params_, grid_->world_comm());
  } else if (!opts_.init_from.empty()) {
    load_model_file(*state_files_, opts_.init_from);
  } else if (zero3()) {
    initialize(params_, shard_, opts_.seed, sharded_->owned_ranges());
  } else {
    initialize(params_, shard_, opts_.seed);
  }
  RunSaver::tidy_local_dir(*this);
  // Under ZeRO-3 no whole copy: the products round each gathered block's weights as they read
  // them (the same bits).
  if (opts_.precision == Precision::bf16 && !zero3()) {
    weights16_ = Bf16Slab("mpf::weights16", params_.count);
    round_to_bf16(weights16_.data(), params_.slab.data(), params_.count);
  }
}

void TrainingRun::set_up_stage() {
  const TrainOptions& opts = opts_;
  const StageOwnership own =
      stage_ownership(layer_ranges_, grid_->pp_rank(), grid_->pp_size(), shape_.placement);
  StageSettings settings;
  settings.micro_batch = micro_batch_;
  settings.seq_len = local_seq_len_;
  settings.sequence_parallel = opts.sequence_parallel;
  settings.recompute = opts.recompute == "full";
  settings.selective = opts.recompute == "selective";
  // bf16 products: the activations only products read are kept in bf16 (model/activations.hpp).
  settings.bf16 = opts.precision == Precision::bf16;
  settings.p2p_bf16 = opts.p2p_dtype == "bf16";
  settings.tp_bf16 = opts.tp_comm_dtype == "bf16";
  settings.placement = shape_.placement;
  settings.attention = attention_path_named(opts.attention);
  settings.forward_only = model_only_;  // scoring runs no backward: no gradient buffers
  stage_ = build_stage(groups_, shard_, own, settings);
  // The classic schedules run each W right after its B: W then goes with B, block by block, and
  // a microbatch keeps two blocks' W inputs instead of its chunk's.
  stage_->set_weight_with_input(!pipeline::is_zero_bubble(pp_schedule_));
  if (opts.qk_clip > 0.0f && !model_only_) stage_->measure_qk_logits();
  if (cfg_.mtp > 0 && !model_only_) stage_->enable_mtp(opts.mtp_weight);
}

void TrainingRun::set_up_sample(std::optional<Tokenizer> tokenizer) {
  if (opts_.sample_every <= 0) return;
  sample_ =
      std::make_unique<TrainingSample>(shard_, params_.t, opts_.sample_tokens, std::move(tokenizer),
                                       groups_.model(), grid_->dp_cp_rank() == 0, is_root());
}

void TrainingRun::observe_phases() {
  // In this order: the trace's barrier starts the traced step before the timers' clocks do, and
  // the timers' fences end a part before the trace reads its clock (step_phases.hpp).
  watchdog_ = std::make_unique<Watchdog>(
      opts_.step_timeout, grid_->world_rank(), grid_->world_size(),
      rank_record_dir(opts_.save, grid_->world_rank(), grid_->world_comm()));
  arm_test_hang_from_environment(grid_->world_rank());
  trace_ = std::make_unique<StepTrace>(*grid_, *stage_, opts_.trace.empty() ? 0 : opts_.steps);
  timers_ = std::make_unique<PhaseTimers>(first_step_ + 1);
  phases_.observe(*watchdog_);
  phases_.observe(*trace_);
  phases_.observe(*timers_);
  stage_->on_op([this](const char* name, int mb, int chunk) { phases_.op(name, mb, chunk); });
}

int TrainingRun::zb_auto_limit() const {
  return opts_.max_in_flight > 0 ? opts_.max_in_flight : grid_->pp_size();
}

bool TrainingRun::tied_across_stages() const {
  return cfg_.wte_with_head() && grid_->pp_size() > 1 &&
         shape_.placement == pipeline::ChunkPlacement::kLooped;
}

int64_t TrainingRun::largest_operand() const {
  return largest_operand(shard_);
}

void TrainingRun::open_bf16_products(std::optional<Bf16Products>& scope) const {
  if (opts_.precision != Precision::bf16) return;
  if (zero3()) {
    scope.emplace(nullptr, nullptr, 0, largest_operand());
    return;
  }
  scope.emplace(params_.slab.data(), weights16_.data(), params_.count, largest_operand());
}

int64_t TrainingRun::largest_operand(const TpShard& shard) const {
  // The fused attention rounds its own tiles.
  return largest_bf16_operand(shard, micro_batch_ * local_seq_len_);
}

void TrainingRun::allreduce_tied_embedding() {
  // The first stage's wte gradient comes from the embedding, the last stage's from the LM head;
  // the serial model's is their sum, and both copies must take the same update. In a V, rank 0
  // holds both and has the sum already.
  if (grid_->embedding_comm() == MPI_COMM_NULL || !tied_across_stages()) return;
  allreduce_sum(grads_.t.wte.data(), int64_t(grads_.t.wte.extent(0)), grid_->embedding_comm());
}

}  // namespace mpf
