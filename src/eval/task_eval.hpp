// Scoring a multiple-choice task as llm.c does (dev/data/hellaswag.py): each ending follows the
// context in a row of its own, and the model's per-token losses of the ending's tokens (the last
// context token predicts the first) are summed. acc counts the examples whose right ending has
// the lowest sum, acc_norm those whose right ending has the lowest mean (the sum over the ending's
// tokens); a tie goes to the lower index. Nothing here runs the model or MPI: the caller's
// RowLosses does, so every layout scores through the same code.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "eval/task_file.hpp"

namespace mpf {

struct ExampleScore {
  int index = 0, label = 0, pred = 0, pred_norm = 0;
  std::vector<double> sum, mean;  // per ending
  std::vector<int> tokens;        // per ending
};

struct TaskResult {
  std::string name;
  int examples = 0, correct = 0, correct_norm = 0;
  int total = 0;  // the task's examples: more than `examples` when cut short
  double seconds = 0.0;
  std::vector<ExampleScore> details;  // per example, when asked for
  // Ended early by the caller's StopCheck: the counts are of the examples scored before it, and
  // no score of the task.
  bool cut_short = false;
  double acc() const { return examples ? double(correct) / examples : 0.0; }
  double acc_norm() const { return examples ? double(correct_norm) / examples : 0.0; }
  // "eval | NAME | N examples | acc 0.2500 (3/12) | acc_norm ... | 1.2 s"
  std::string line(int step) const;
};

// The model on B rows of T positions: losses[r·T + t] is the loss of predicting targets[r·T + t]
// from inputs[r·T .. r·T + t]. Collective: every rank passes the same rows and gets the same
// losses.
using RowLosses = std::function<void(const int32_t* inputs, const int32_t* targets, float* losses)>;

// InputError unless every example fits a batch of `batch` rows of `seq_len` positions and its
// tokens the vocabulary; `batch_flag`, `seq_flag`: the flags that set them, for the fix.
void check_task_fits(const EvalTask& task, int batch, int seq_len, int vocab,
                     const std::string& batch_flag, const std::string& seq_flag);

// Asked before each batch, collectively as RowLosses is: true ends the scoring there.
using StopCheck = std::function<bool()>;

// Scores every example: they are packed into batches of `batch` rows, an example's endings in
// consecutive rows of one batch, the unused rows and positions zero (and not scored). A `stop`
// that says true ends it early, with the result cut_short.
TaskResult evaluate_task(const EvalTask& task, int batch, int seq_len, const RowLosses& losses,
                         bool details, const StopCheck& stop = {});

// One example's score line of --eval-details: a JSON object.
std::string details_json(const ExampleScore& s);

}  // namespace mpf
