// A training run's evaluations, outside its steps: the validation loss, and the scores of a
// multiple-choice task (--eval-data) through the same forward passes (trainer.hpp).
#include <algorithm>

#include "core/error.hpp"
#include "core/transfer.hpp"
#include "parallel/device_mpi.hpp"
#include "train/stop_signals.hpp"
#include "train/trainer.hpp"

namespace mpf {

bool TrainingRun::stop_requested() {
  // An evaluation may take longer than Slurm's KillWait: a stop signal must not wait for its end.
  if (stop_signal_ == 0) stop_signal_ = agree_on_stop(grid_->world_comm());
  return stop_signal_ != 0;
}

std::optional<double> TrainingRun::validate(int& batches) {
  val_data_->reset();
  double total = 0.0;
  for (batches = 0; batches < opts_.val_steps; ++batches) {
    if (stop_requested()) return std::nullopt;
    batch_.load(*val_data_, grid_->dp_rank() * local_batch_);
    total += global_mean_loss(
        stage_->evaluate(params_.t, batch_.inputs(), batch_.targets(), batch_.doc_starts()));
  }
  return total / opts_.val_steps;
}

void TrainingRun::validate_at(int step) {
  if (!val_data_ || stop_signal_) return;
  PhaseScope phase(phases_, StepPhase::kValidation, step);
  int batches = 0;
  if (const std::optional<double> loss = validate(batches)) {
    reporter_->validation(step, *loss);
  } else {
    reporter_->cut_short("validation", step, batches, opts_.val_steps, "batches");
  }
}

void TrainingRun::score_task_at(int step) {
  if (!eval_task_ || stop_signal_) return;
  PhaseScope phase(phases_, StepPhase::kValidation, step);
  const TaskResult r = score_task(false);
  if (r.cut_short) {
    reporter_->cut_short("eval of " + r.name, step, r.examples, r.total, "examples");
  } else {
    reporter_->task(step, r);
  }
}

TaskResult TrainingRun::evaluate(bool details) {
  // As train() runs its steps: with --precision bf16 the products read the weights' bf16 copy.
  std::optional<Bf16Products> bf16_products;
  open_bf16_products(bf16_products);
  return score_task(details);
}

TaskResult TrainingRun::score_task(bool details) {
  return evaluate_task(
      *eval_task_, opts_.batch, opts_.seq_len,
      [this](const int32_t* in, const int32_t* tg, float* out) { row_losses(in, tg, out); },
      details, [this] { return stop_requested(); });
}

void TrainingRun::row_losses(const int32_t* inputs, const int32_t* targets, float* losses) {
  // This DP rank's rows go through the pipeline; the last stage's TP rank 0 writes the losses of
  // the positions its CP rank holds into the whole (B, T), zero elsewhere. Each element then has
  // one writer, so the sum over all ranks is exact: every rank gets the same bits.
  const int T = opts_.seq_len, B = opts_.batch;
  const int64_t first = int64_t(grid_->dp_rank()) * local_batch_;
  batch_.place(inputs + first * T, targets + first * T);
  std::vector<float> mine(size_t(B) * T, 0.0f), piece(size_t(micro_batch_) * local_seq_len_);
  const PositionRuns& pos = stage_->positions();
  const bool writer = grid_->tp_rank() == 0;
  stage_->evaluate(
      params_.t, batch_.inputs(), batch_.targets(), batch_.doc_starts(),
      [&](int mb, const Tensor& l) {
        if (!writer) return;
        // An internal fault if not (one rank alone would leave the others in the all-reduce).
        if (l.extent(0) != piece.size())
          MPF_FATAL("eval: the head's losses are not a microbatch's");
        copy_to_host(piece.data(), l.data(), piece.size() * sizeof(float), "d2h eval losses");
        for (int r = 0; r < micro_batch_; ++r) {
          const int64_t row = first + int64_t(mb) * micro_batch_ + r;
          for (int t = 0; t < local_seq_len_; ++t) {
            mine[size_t(row * T + pos.position(t))] = piece[size_t(r) * local_seq_len_ + t];
          }
        }
      });
  MPF_MPI_CHECK(MPI_Allreduce(mine.data(), losses, B * T, MPI_FLOAT, MPI_SUM, grid_->world_comm()));
}

}  // namespace mpf
