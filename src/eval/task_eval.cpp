#include "eval/task_eval.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/error.hpp"

namespace mpf {

namespace {

// Example e's rows from row `first`: ending j in row first + j, the context then the ending, the
// targets shifted by one.
void fill_rows(const TaskExample& e, int first, int T, int32_t* inputs, int32_t* targets) {
  for (size_t j = 0; j < e.endings.size(); ++j) {
    int32_t* in = inputs + int64_t(first + j) * T;
    int32_t* tg = targets + int64_t(first + j) * T;
    std::vector<int32_t> row = e.context;
    row.insert(row.end(), e.endings[j].begin(), e.endings[j].end());
    for (size_t t = 0; t + 1 < row.size(); ++t) {
      in[t] = row[t];
      tg[t] = row[t + 1];
    }
  }
}

// The first index of the least value.
int first_min(const std::vector<double>& v) {
  int best = 0;
  for (size_t i = 1; i < v.size(); ++i) {
    if (v[i] < v[size_t(best)]) best = int(i);
  }
  return best;
}

ExampleScore score(const TaskExample& e, int first, int T, const float* losses) {
  ExampleScore s;
  s.index = e.index;
  s.label = e.label;
  const int context = int(e.context.size());
  for (size_t j = 0; j < e.endings.size(); ++j) {
    const float* row = losses + int64_t(first + j) * T;
    const int n = int(e.endings[j].size());
    double sum = 0.0;
    for (int t = context - 1; t < context - 1 + n; ++t) sum += row[t];
    s.sum.push_back(sum);
    s.mean.push_back(sum / n);
    s.tokens.push_back(n);
  }
  s.pred = first_min(s.sum);
  s.pred_norm = first_min(s.mean);
  return s;
}

}  // namespace

void check_task_fits(const EvalTask& task, int batch, int seq_len, int vocab,
                     const std::string& batch_flag, const std::string& seq_flag) {
  const std::string what = "eval file " + task.name;
  require(task.most_endings() <= batch,
          what + " has an example with " + std::to_string(task.most_endings()) +
              " endings, more than the " + std::to_string(batch) + " rows of a batch: use " +
              batch_flag + " " + std::to_string(task.most_endings()) + " or more");
  require(task.longest_row() <= seq_len, what + " has an example whose context and ending take " +
                                             std::to_string(task.longest_row()) +
                                             " positions, more than " + seq_flag + " " +
                                             std::to_string(seq_len) + ": use " + seq_flag + " " +
                                             std::to_string(task.longest_row()) + " or more");
  require(task.largest_token() < vocab,
          what + " holds token " + std::to_string(task.largest_token()) +
              ", outside the model's vocabulary of " + std::to_string(vocab) +
              ": it was encoded for another model; encode the task with this model's tokenizer");
}

TaskResult evaluate_task(const EvalTask& task, int batch, int seq_len, const RowLosses& losses,
                         bool details, const StopCheck& stop) {
  const auto start = std::chrono::steady_clock::now();
  TaskResult r;
  r.name = task.name;
  r.total = int(task.examples.size());
  const size_t cells = size_t(batch) * size_t(seq_len);
  std::vector<int32_t> inputs(cells), targets(cells);
  std::vector<float> out(cells);
  size_t next = 0;
  while (next < task.examples.size()) {
    if (stop && stop()) {
      r.cut_short = true;
      break;
    }
    // The examples whose endings fit this batch's rows, in file order.
    size_t end = next;
    int rows = 0;
    std::fill(inputs.begin(), inputs.end(), 0);
    std::fill(targets.begin(), targets.end(), 0);
    while (end < task.examples.size() && rows + int(task.examples[end].endings.size()) <= batch) {
      fill_rows(task.examples[end], rows, seq_len, inputs.data(), targets.data());
      rows += int(task.examples[end].endings.size());
      ++end;
    }
    losses(inputs.data(), targets.data(), out.data());
    rows = 0;
    for (size_t i = next; i < end; ++i) {
      const TaskExample& e = task.examples[i];
      ExampleScore s = score(e, rows, seq_len, out.data());
      rows += int(e.endings.size());
      ++r.examples;
      r.correct += s.pred == e.label;
      r.correct_norm += s.pred_norm == e.label;
      if (details) r.details.push_back(std::move(s));
    }
    next = end;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

std::string TaskResult::line(int step) const {
  // The name outside the fixed buffer: a long file name is never cut.
  char figures[160];
  std::snprintf(figures, sizeof figures,
                " | %d examples | acc %.4f (%d/%d) | acc_norm %.4f (%d/%d) | %.1f s", examples,
                acc(), correct, examples, acc_norm(), correct_norm, examples, seconds);
  return "eval step " + std::to_string(step) + " | " + name + figures;
}

std::string details_json(const ExampleScore& s) {
  auto list = [](const auto& v) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.9g", double(v[i]));
      out += (i ? ", " : "") + std::string(buf);
    }
    return out + "]";
  };
  return "{\"index\": " + std::to_string(s.index) + ", \"label\": " + std::to_string(s.label) +
         ", \"pred\": " + std::to_string(s.pred) +
         ", \"pred_norm\": " + std::to_string(s.pred_norm) + ", \"sum\": " + list(s.sum) +
         ", \"mean\": " + list(s.mean) + ", \"tokens\": " + list(s.tokens) + "}";
}

}  // namespace mpf
