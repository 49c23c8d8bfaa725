// Multiple-choice tasks as a language model is scored on them (HellaSwag, MMLU): a context, its
// endings and the right one. Two files hold them:
// - llm.c's eval file (dev/data/hellaswag.py and mmlu.py write it): 256 int32s of header (magic
//   20240522, version 1, the number of examples, the longest example's bytes), then per example
//   uint16s: 65535, its bytes, its index, its label, its number of endings, the context's length
//   and tokens, then each ending's length and tokens (docs/file-formats.md);
// - JSONL, one {"ctx": text, "endings": [text, ...], "label": i} per line, encoded with a
//   tokenizer.json as llm.c's hellaswag.py encodes: the context as it is, each ending as
//   " " + ending, no begin-of-text token.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mpf {

struct TaskExample {
  int index = 0;  // in the file
  int label = 0;  // the right ending
  std::vector<int32_t> context;
  std::vector<std::vector<int32_t>> endings;
  // The positions its longest row takes: the context and an ending, whose last token is only a
  // target (a row of T positions predicts T tokens).
  int row_length() const;
};

struct EvalTask {
  std::string name;  // the file's base name, for the log
  std::vector<TaskExample> examples;
  int longest_row() const;
  int most_endings() const;
  int32_t largest_token() const;
};

// Reads `path`, llm.c's eval file (recognised by its magic) or JSONL (which needs `tokenizer`, a
// tokenizer.json). `limit` > 0 keeps the first `limit` examples. Throws InputError naming the file
// and the example for a bad header, a wrong delimiter or index, a label outside the endings, an
// empty context or ending, a truncated or overlong file, or a JSONL line that is not such an
// object.
EvalTask read_eval_task(const std::string& path, const std::string& tokenizer, int limit);

}  // namespace mpf
