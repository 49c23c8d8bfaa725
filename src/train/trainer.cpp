// The training run's step loop (the run's parts: trainer.hpp).
#include "train/trainer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/profile.hpp"
#include "core/stopwatch.hpp"
#include "core/transfer.hpp"
#include "model/layers/matmul.hpp"
#include "optim/grad_norm.hpp"
#include "optim/qk_clip.hpp"
#include "parallel/device_mpi.hpp"
#include "pipeline/stage_costs.hpp"
#include "train/exit_status.hpp"
#include "train/stop_signals.hpp"

namespace mpf {

TrainResult TrainingRun::train() {
  TrainResult result;
  if (first_step_ > opts_.steps) {
    if (is_root()) {
      std::printf("resumed at step %d of --steps %d: the run is complete, nothing to train\n",
                  first_step_ - 1, opts_.steps);
    }
    return result;
  }
  peak_flops_.emplace(peak_, opts_.peak_gflops > 0, opts_.precision, grid_->world_comm());
  reporter_->start();
  // bf16: the products read weights16_ and round their other inputs (model/layers/matmul.hpp).
  std::optional<Bf16Products> bf16_products;
  open_bf16_products(bf16_products);
  int last = first_step_;
  {
    PhaseScope training(phases_, StepPhase::kTraining, first_step_);
    if (first_step_ == 1) {
      if (opts_.val_every > 0) validate_at(0);
      if (opts_.eval_every > 0) score_task_at(0);
    }
    for (int n = first_step_; n <= opts_.steps && result.status == kExitDone; ++n) {
      last = n;
      const StepOutcome s = step(n);
      if (!s.suspect.empty()) {
        result.status = reporter_->suspect(s);
        break;
      }
      if (s.rerun) reporter_->rerun(s);
      if (!s.diverged) tally(s, result);
      if (s.skipped) reporter_->skip(s);
      result.status = s.diverged ? reporter_->divergence(s.log, saver_->newest_after_write())
                                 : after_step(s.log);
    }
  }
  // The process never exits with a background save in flight (a divergence or a failed save
  // ends the loop without the final save).
  if (!saver_->finish_background() && result.status == kExitDone) {
    result.status = kExitSaveFailed;
  }
  reporter_->summary(last, result.status);
  profile::set_enabled(false);
  // A stop during the last step's evaluations leaves the training complete: its model files are
  // still written (a complete run resumed writes nothing).
  const bool complete = last == opts_.steps && result.status == kExitSignalled;
  if (result.status != kExitDone && !complete) return result;
  reporter_->stages(tally_.ops);
  if (!saver_->save_llmc()) result.status = kExitSaveFailed;
  if (!saver_->save_hf()) result.status = kExitSaveFailed;
  if (!opts_.trace.empty()) trace_->write(opts_.trace);
  return result;
}

StepOutcome TrainingRun::step(int step) {
  StepOutcome out = prepare_step(step);
  PhaseScope in_step(phases_, StepPhase::kStep, step);
  Stopwatch clock;
  const DataPosition batch_at = train_data_->position();
  out.log.loss = compute();
  if (cfg_.moe()) out.log.aux = global_aux_loss();
  if (cfg_.mtp > 0) out.log.mtp = global_mean_loss(stage_->mtp_sum());
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
  judge_outlier(out);
  if (out.skipped) {
    // As llm.c: no update, but AdamW's step count moves on, so that the bias corrections of
    // later steps (and a resumed run's, which takes it from the step) are those of no skip.
    ++skipped_updates_;
    optimizer_->set_steps_taken(optimizer_->steps_taken() + 1);
  } else {
    update(out.log.lr, out.log.norm);
    if (opts_.qk_clip > 0.0f) clip_qk(out.log);
    if (opts_.moe_bias_update_rate > 0.0f) update_moe_bias();
  }
  tokens_seen_ += int64_t(tokens_per_step());
  out.log.ms = clock.seconds() * 1e3;
  return out;
}

void TrainingRun::judge_outlier(StepOutcome& out) {
  // The same loss and norm on every rank: every rank decides alike.
  out.loss_z = loss_window_.push(out.log.loss);
  out.norm_z = norm_window_.push(out.log.norm);
  const double z = opts_.skip_outliers;
  out.skipped = z > 0 && (out.loss_z > z || out.norm_z > z);
}

StepOutcome TrainingRun::prepare_step(int step) {
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
  batch_.load(*train_data_, grid_->dp_rank() * local_batch_);
  phase.next(StepPhase::kZeroGrads);
  if (sharded_) {
    sharded_->begin_step();  // the blocks' gradients are zeroed in their pool, block by block
  } else {
    fill(grads_.slab.data(), grads_.count, 0.0f);
  }
  phase.next(StepPhase::kSchedule);
  PartDone overlap;
  if (opts_.overlap_grad_reduce) overlap = [this](ModelPart part) { dp_grads_->part_done(part); };
  // Each token's loss enters the global mean with weight 1/(B·T); summing the DP ranks' gradients
  // then gives the gradient of the global mean.
  const float dloss = static_cast<float>(1.0 / tokens_per_step());
  stage_->begin_step(&batch_.inputs(), &batch_.targets(), &params_.t, &grads_.t, dloss, overlap,
                     batch_.doc_starts());
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
  if (sharded_) sharded_->finish();
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
  const float scale = clip_scale(norm, opts_.grad_clip);
  optimizer_->step(params_.slab.data(), grads, lr, scale,
                   bf16 && !zero ? weights16_.data() : nullptr);
  if (muon_ && zero) {
    // The gradient slab is free once its sum was scattered: it gathers the matrices' U.
    muon_->step_sharded(
        params_.slab.data(), grads, optimizer_->first_moment().data(), optimizer_->segments(),
        grads_.slab.data(), [this](float* x) { dp_grads_->allgather_params(x); }, lr, scale);
  } else if (muon_) {
    muon_->step(params_.slab.data(), grads, optimizer_->first_moment().data(), lr, scale,
                bf16 ? weights16_.data() : nullptr);
  }
  if (!zero) return;
  phase.next(StepPhase::kZeroGather);
  dp_grads_->allgather_params(params_.slab.data());
  if (bf16 && !zero3()) round_to_bf16(weights16_.data(), params_.slab.data(), params_.count);
}

void TrainingRun::update_moe_bias() {
  // DeepSeek-V3's aux-loss-free balancing (arXiv 2412.19437, 2.1.2): b_e += γ · sign(mean − c_e),
  // c_e the step's choices of expert e over every rank that routes. Every rank gets the same
  // loads (summed in doubles from integers) and adds the same floats, so the replicated bias
  // stays one value; under ZeRO the slab is each shard's master copy, so all of it moves alike.
  const int E = cfg_.experts;
  const std::vector<double> load = global_expert_load();
  const float rate = opts_.moe_bias_update_rate;
  std::vector<float> bias(size_t(E), 0.0f);
  for (int i = 0; i < shard_.local_layers(); ++i) {
    const double* c = load.data() + size_t(shard_.layers[size_t(i)]) * E;
    double mean = 0.0;
    for (int e = 0; e < E; ++e) mean += c[e];
    mean /= E;
    const Tensor b = params_.t.blocks[size_t(i)].moebias;
    if (b.extent(0) == 0) continue;  // a dense block (first_k_dense_replace)
    copy_to_host(bias.data(), b.data(), bias.size() * sizeof(float), "d2h routing bias");
    for (int e = 0; e < E; ++e) bias[size_t(e)] += c[e] < mean ? rate : c[e] > mean ? -rate : 0.0f;
    copy_from_host(b.data(), bias.data(), bias.size() * sizeof(float), "h2d routing bias");
  }
}

void TrainingRun::clip_qk(StepRecord& log) {
  std::vector<float> head_max = stage_->qk_logit_max();
  MPF_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, head_max.data(), int(head_max.size()), MPI_FLOAT,
                              MPI_MAX, groups_.dp_cp));
  const bool bf16 = opts_.precision == Precision::bf16;
  const QkClipReport r =
      qk_clip(params_, shard_, head_max, opts_.qk_clip, bf16 ? weights16_.data() : nullptr);
  // The line reports the whole model: the largest logit and the heads clipped over the stages
  // and TP ranks (each holds other heads).
  double largest = r.largest, heads = r.heads;
  MPF_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &largest, 1, MPI_DOUBLE, MPI_MAX, grid_->world_comm()));
  heads = allreduce_sum(allreduce_sum(heads, grid_->tp_comm()), grid_->pp_comm());
  log.qk_logit = largest;
  log.qk_clipped = int(heads);
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
  reporter_->step(r, peak_flops_->check(step, flops_per_step(), r.ms / 1e3));
  if (cfg_.moe() && reporter_->logs_step(step)) reporter_->expert_load(step, global_expert_load());
  saver_->poll();  // reports a background save that has ended
  // The step boundary: the ranks agree whether any of them was asked to stop.
  {
    PhaseScope phase(phases_, StepPhase::kStopAgreement);
    stop_signal_ = agree_on_stop(grid_->world_comm());
  }
  auto due = [&](int every) { return every > 0 && step % every == 0; };
  const bool last = step == opts_.steps;
  // The checkpoint before the evaluations: a stop signal during one, then SIGKILL after Slurm's
  // KillWait, must not lose the steps since the last save. The evaluations (which skip themselves
  // once a stop is agreed on) leave the training state as it is.
  // The node-local tier between the global saves; a stop and the last step save globally.
  if (!opts_.save_local.empty() && due(opts_.save_local_every) && !stop_signal_ && !last) {
    saver_->save_local(step);
  }
  const bool save_due = !opts_.save.empty() && (stop_signal_ || last || due(opts_.save_every));
  // A stop and the last step save synchronously (after a background write in flight).
  if (save_due && !saver_->save(step, stop_signal_ || last)) return kExitSaveFailed;
  if (opts_.val_every > 0 && (due(opts_.val_every) || last)) validate_at(step);
  if (due(opts_.eval_every) || last) score_task_at(step);
  if (!stop_signal_ && sample_ && (due(opts_.sample_every) || last)) {
    PhaseScope phase(phases_, StepPhase::kSample, step);
    sample_->print(step);
  }
  // A stop asked for during the evaluations: this step's checkpoint, unless saved above.
  if (stop_signal_ && !save_due && !opts_.save.empty() && !saver_->save(step, true)) {
    return kExitSaveFailed;
  }
  return stop_signal_ ? stop_after(stop_signal_, step) : kExitDone;
}

int TrainingRun::stop_after(int signal, int step) const {
  if (is_root()) {
    std::printf("%s received: stopped after step %d; %s; exit status %d\n", signal_name(signal),
                step,
                opts_.save.empty()
                    ? "nothing saved (no --save)"
                    : ("saved " + saver_->newest() + ", resume with --load " + opts_.save).c_str(),
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

double TrainingRun::global_mean_loss(double local_sum) const {
  // Only the last pipeline stage computes losses (the others contribute 0); each DP x CP rank
  // holds its rows' tokens.
  return sum_over_data_and_stages(local_sum) / (double(opts_.batch) * opts_.seq_len);
}

double TrainingRun::global_aux_loss() const {
  // The balance losses of every block (pipeline stages hold distinct ones) and every sequence
  // row (DP), each row's counted once over its TP and CP ranks: their mean over the batch's rows.
  return sum_over_data_and_stages(stage_->aux_sum()) / double(opts_.batch);
}

double TrainingRun::sum_over_data_and_stages(double local) const {
  return allreduce_sum(allreduce_sum(local, grid_->dp_cp_comm()), grid_->pp_comm());
}

std::vector<double> TrainingRun::global_expert_load() const {
  // Each stage's blocks into their places among all L, summed over the DP and CP ranks (each
  // row's choices counted on one of its CP ranks) and the stages.
  const int E = cfg_.experts;
  std::vector<double> all(size_t(cfg_.blocks()) * E, 0.0);  // the MTP modules' blocks too
  const std::vector<float> mine = stage_->expert_load();
  for (int i = 0; i < shard_.local_layers(); ++i) {
    for (int e = 0; e < E; ++e) {
      all[size_t(shard_.layers[size_t(i)]) * E + e] = mine[size_t(i) * E + e];
    }
  }
  // TP rank 0 alone counts them (the others add zeros), so every rank ends with the whole.
  for (MPI_Comm c : {grid_->dp_cp_comm(), grid_->pp_comm(), grid_->tp_comm()}) {
    MPF_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, all.data(), int(all.size()), MPI_DOUBLE, MPI_SUM, c));
  }
  return all;
}

double TrainingRun::global_grad_norm() const {
  // Every element counted once: a tensor split over TP on each TP rank, a replicated one on TP
  // rank 0; under ZeRO each DP rank holds a distinct part of the summed gradient, without ZeRO
  // every DP rank holds all of it. Pipeline stages hold distinct blocks, except the tied wte,
  // counted on the first stage only.
  // Under EP the EP ranks hold different experts: their sums (kept apart) are added over the EP
  // group too, unless ZeRO already made every element distinct over DP x CP.
  const float* grads = dp_grads_->zero() ? dp_grads_->shard_grads() : grads_.slab.data();
  SumOfSquares& squares = *grad_squares_;
  squares.reset();
  const bool ep = grid_->ep_size() > 1;
  for (const OptimizerSegment& s : optimizer_->segments()) {
    if (shard_.is_tied_copy(s.tensor)) continue;
    if (!shard_.is_split(s.tensor) && grid_->tp_rank() != 0) continue;
    if (!shard_.kv_owner() && tensor_spec(s.tensor).blocks == RowBlocks::kQkv) {
      add_unreplicated(squares, grads, s);
      continue;
    }
    squares.add(grads + s.grad, s.length, ep && shard_.is_expert(s.tensor) ? 1 : 0);
  }
  const std::vector<double> sums = squares.read_all();
  double local = sums[0];
  if (ep) local += dp_grads_->zero() ? sums[1] : allreduce_sum(sums[1], grid_->ep_comm());
  // (Under --zero-group node each node holds every element once: summed over its ranks.)
  if (dp_grads_->zero()) local = allreduce_sum(local, dp_grads_->group());
  local = allreduce_sum(local, grid_->tp_comm());
  return std::sqrt(allreduce_sum(local, grid_->pp_comm()));
}

void TrainingRun::add_unreplicated(SumOfSquares& squares, const float* grads,
                                   const OptimizerSegment& s) const {
  // A segment of qkvw (or qkvb) lies within one block's [Q | K | V] rows; a replicated kv head's
  // K and V rows are counted by their owner only, so this rank adds the parts outside them.
  const SlabPiece& piece = params_.layout.piece_at(s.param);
  const int64_t width = dim_size(tensor_spec(s.tensor).cols, cfg_);  // C, or 1 for the bias
  const int64_t begin = s.param - piece.offset, end = begin + s.length;
  const int64_t kv_begin = int64_t(shard_.attn) * width, kv_end = int64_t(shard_.qkv) * width;
  if (begin < kv_begin) squares.add(grads + s.grad, std::min(end, kv_begin) - begin);
  if (end > kv_end) {
    const int64_t from = std::max(begin, kv_end);
    squares.add(grads + s.grad + (from - begin), end - from);
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
  reporter_->zb_plan(step, costs, limit);
}

double TrainingRun::flops_per_step() const {
  return flops_per_token(cfg_, opts_.seq_len) * tokens_per_step();
}

}  // namespace mpf
