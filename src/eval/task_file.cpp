#include "eval/task_file.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "core/error.hpp"
#include "generate/tokenizer_file.hpp"
#include "io/input_file.hpp"
#include "io/json.hpp"
#include "io/llmc_format.hpp"

namespace mpf {

namespace {

constexpr int32_t kEvalMagic = 20240522;
constexpr uint16_t kStartExample = 65535;
// An eval file past this is not one (HellaSwag's validation set is 3.6 MB).
constexpr int64_t kMaxFileBytes = int64_t(1) << 31;

std::string example_name(const std::string& path, int64_t i) {
  return "eval file " + path + ": example " + std::to_string(i);
}

// llm.c's binary eval file, checked field by field (its reader only asserts).
EvalTask read_llmc_eval(const std::string& path, const std::string& text, int limit) {
  const std::string what = "eval file " + path;
  require(text.size() >= size_t(llmc::kHeaderBytes),
          what + " is shorter than llm.c's 1024-byte header; regenerate it");
  int32_t header[llmc::kHeaderInts];
  std::memcpy(header, text.data(), llmc::kHeaderBytes);
  require(header[1] == 1, what + " has version " + std::to_string(header[1]) +
                              "; this reader knows version 1 (llm.c's data_common.py)");
  require(header[2] > 0, what + " holds " + std::to_string(header[2]) + " examples");
  const size_t count = size_t(header[2]);
  const size_t words = (text.size() - llmc::kHeaderBytes) / 2;
  require((text.size() - llmc::kHeaderBytes) % 2 == 0, what + " has an odd number of bytes");
  auto word = [&](size_t i) {
    uint16_t w;
    std::memcpy(&w, text.data() + llmc::kHeaderBytes + 2 * i, 2);
    return w;
  };
  EvalTask task;
  size_t at = 0;
  for (size_t i = 0; i < count; ++i) {
    const std::string name = example_name(path, int64_t(i));
    require(at + 6 <= words, name + " is cut short: the file is truncated");
    require(word(at) == kStartExample, name + " does not start with 65535: the file is corrupt");
    const size_t length = word(at + 1) / 2, end = at + length;
    require(word(at + 1) % 2 == 0 && length >= 6 && end <= words,
            name + " claims " + std::to_string(word(at + 1)) + " bytes, past the file's end");
    require(word(at + 2) == i % 65536, name + " is numbered " + std::to_string(word(at + 2)));
    TaskExample e;
    e.index = int(i);
    e.label = word(at + 3);
    const int endings = word(at + 4);
    size_t p = at + 5;
    auto tokens = [&](const char* part) {
      require(p < end, name + "'s " + part + " runs past the example's bytes");
      const size_t n = word(p++);
      require(n > 0, name + " has an empty " + part);
      require(p + n <= end, name + "'s " + part + " runs past the example's bytes");
      std::vector<int32_t> t(n);
      for (size_t k = 0; k < n; ++k) t[k] = word(p + k);
      p += n;
      return t;
    };
    e.context = tokens("context");
    for (int j = 0; j < endings; ++j) e.endings.push_back(tokens("ending"));
    require(p == end, name + " has " + std::to_string(end - p) + " bytes after its last ending");
    require(endings > 0 && e.label < endings, name + " has label " + std::to_string(e.label) +
                                                  " of " + std::to_string(endings) + " endings");
    at = end;
    if (limit <= 0 || int(task.examples.size()) < limit) task.examples.push_back(std::move(e));
  }
  require(at == words, what + " has " + std::to_string(2 * (words - at)) + " bytes after its " +
                           std::to_string(count) + " examples: the header's count is wrong");
  return task;
}

int jsonl_label(const json::Value& v, const std::string& where, size_t endings) {
  const json::Value* label = v.find("label");
  require(label && label->is_number(), where + " has no integer \"label\"");
  int64_t l = -1;
  try {
    l = label->integer();
  } catch (const json::TypeError&) {
  }
  require(l >= 0 && size_t(l) < endings, where + ": \"label\" is not the index of one of its " +
                                             std::to_string(endings) + " endings");
  return int(l);
}

EvalTask read_jsonl_eval(const std::string& path, const std::string& text,
                         const std::string& tokenizer, int limit) {
  require(!tokenizer.empty(),
          "--eval-data " + path + " is JSONL text: pass --tokenizer tokenizer.json to encode it");
  const TokenizerFile file = read_tokenizer_file(tokenizer);
  require(file.encoder.has_value(), "--tokenizer " + tokenizer +
                                        " decodes only (llm.c's .bin): JSONL needs a "
                                        "tokenizer.json");
  const BpeTokenizer& bpe = *file.encoder;
  EvalTask task;
  std::istringstream lines(text);
  std::string line;
  for (int n = 1; std::getline(lines, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (limit > 0 && int(task.examples.size()) >= limit) break;
    const std::string where = "eval file " + path + " line " + std::to_string(n);
    const json::Value v = json::parse(line, where);
    require(v.is_object(), where + " is not a JSON object");
    const json::Value* ctx = v.find("ctx");
    const json::Value* endings = v.find("endings");
    require(ctx && ctx->is_string(), where + " has no string \"ctx\"");
    require(endings && endings->is_array() && !endings->array().empty(),
            where + " has no non-empty array \"endings\"");
    TaskExample e;
    e.index = int(task.examples.size());
    e.context = bpe.encode(ctx->string());
    require(!e.context.empty(), where +
                                    ": \"ctx\" is empty: nothing predicts the first ending "
                                    "token");
    for (const json::Value& end : endings->array()) {
      require(end.is_string(), where + ": an ending is not a string");
      e.endings.push_back(bpe.encode(" " + end.string()));
    }
    e.label = jsonl_label(v, where, e.endings.size());
    task.examples.push_back(std::move(e));
  }
  require(!task.examples.empty(), "eval file " + path + " holds no examples");
  return task;
}

}  // namespace

int TaskExample::row_length() const {
  size_t longest = 0;
  for (const auto& e : endings) longest = std::max(longest, e.size());
  return int(context.size() + longest) - 1;
}

int EvalTask::longest_row() const {
  int n = 0;
  for (const TaskExample& e : examples) n = std::max(n, e.row_length());
  return n;
}

int EvalTask::most_endings() const {
  size_t n = 0;
  for (const TaskExample& e : examples) n = std::max(n, e.endings.size());
  return int(n);
}

int32_t EvalTask::largest_token() const {
  int32_t m = 0;
  for (const TaskExample& e : examples) {
    for (int32_t t : e.context) m = std::max(m, t);
    for (const auto& end : e.endings) {
      for (int32_t t : end) m = std::max(m, t);
    }
  }
  return m;
}

EvalTask read_eval_task(const std::string& path, const std::string& tokenizer, int limit) {
  std::string text = read_input_text(path, "--eval-data " + path,
                                     "an eval file (llm.c's .bin or JSONL)", kMaxFileBytes);
  // A UTF-8 byte order mark, as some editors write one before JSONL, is no part of the text.
  if (text.compare(0, 3, "\xEF\xBB\xBF") == 0) text.erase(0, 3);
  int32_t magic = 0;
  if (text.size() >= 4) std::memcpy(&magic, text.data(), 4);
  const size_t first = text.find_first_not_of(" \t\r\n");
  require(magic == kEvalMagic || (first != std::string::npos && text[first] == '{'),
          "--eval-data " + path +
              " is neither llm.c's eval file (magic 20240522) nor JSONL of {\"ctx\", "
              "\"endings\", \"label\"}; write it with llm.c's dev/data/hellaswag.py or as JSONL");
  EvalTask task = magic == kEvalMagic ? read_llmc_eval(path, text, limit)
                                      : read_jsonl_eval(path, text, tokenizer, limit);
  const size_t slash = path.find_last_of('/');
  task.name = slash == std::string::npos ? path : path.substr(slash + 1);
  return task;
}

}  // namespace mpf
