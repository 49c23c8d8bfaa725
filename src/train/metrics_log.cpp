#include "train/metrics_log.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>

#include "core/error.hpp"
#include "io/input_file.hpp"
#include "io/json.hpp"
#include "io/output_file.hpp"

namespace mpf {

MetricsRecord::MetricsRecord(const char* kind) {
  text("kind", kind);
}

MetricsRecord& MetricsRecord::number(const char* key, double value) {
  char buf[32] = "null";
  if (std::isfinite(value)) std::snprintf(buf, sizeof buf, "%.9g", value);
  body_ += (body_.empty() ? "" : ",") + json::quote(key) + ":" + buf;
  return *this;
}

MetricsRecord& MetricsRecord::integer(const char* key, long long value) {
  body_ += (body_.empty() ? "" : ",") + json::quote(key) + ":" + std::to_string(value);
  return *this;
}

MetricsRecord& MetricsRecord::text(const char* key, const std::string& value) {
  body_ += (body_.empty() ? "" : ",") + json::quote(key) + ":" + json::quote(value);
  return *this;
}

std::string MetricsRecord::line() const {
  return "{" + body_ + "}\n";
}

namespace {
// The line as a record of this program's (a JSON object with a string "kind" and an integer
// "step"), or nullopt.
std::optional<json::Value> parse_record(const std::string& line, const std::string& origin) {
  try {
    json::Value v = json::parse(line, origin);
    const json::Value* kind = v.find("kind");
    const json::Value* step = v.find("step");
    if (!kind || !kind->is_string() || !step || !step->is_number()) return std::nullopt;
    step->integer();  // integral, or TypeError
    return v;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// The file's lines, without their newlines (a last line without one included).
std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  for (size_t at = 0; at < text.size();) {
    const size_t end = std::min(text.find('\n', at), text.size());
    lines.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return lines;
}

// What the start says of the records it drops ("" when none).
std::string dropped_note(const std::string& path, const std::string& save_dir, int first_step,
                         int64_t dropped) {
  if (dropped == 0) return "";
  if (first_step == 1) {
    return "--metrics " + path + ": an earlier attempt of this job (--save " + save_dir +
           ") saved no checkpoint; its " + std::to_string(dropped) +
           " records are replaced by this run's";
  }
  return "--metrics " + path + ": continues after step " + std::to_string(first_step - 1) +
         ", dropping " + std::to_string(dropped) +
         " records of steps the checkpoint does not hold (this run does them again)";
}
}  // namespace

MetricsStart plan_metrics(const std::string& path, int first_step, const std::string& save_dir) {
  MetricsStart start;
  if (!path_exists(path)) return start;
  start.exists = true;
  // A week at a step a second is ~600,000 lines of ~200 bytes.
  const std::string text = read_input_text(path, "--metrics " + path,
                                           "a .jsonl file this program wrote", int64_t(1) << 32);
  const std::string save = save_dir.empty() ? "" : resolved_path(save_dir);
  const std::vector<std::string> lines = split_lines(text);
  // Whole lines end with a newline; one a crash cut short does not.
  const bool torn_end = !text.empty() && text.back() != '\n';
  // Every record this program writes starts so; a line cut short starts as much of it as it holds.
  const std::string head = "{\"kind\":\"";
  bool other_run = false;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string origin = "--metrics " + path + " line " + std::to_string(i + 1);
    const std::optional<json::Value> record = parse_record(lines[i], origin);
    const std::string not_ours =
        " a --metrics file of this program, so it is left as it is; choose another file";
    if (!record) {
      // Only a last line cut short after whole records of this program's is dropped: anything
      // else may be the user's, and nothing the user wrote is rewritten.
      const size_t n = std::min(lines[i].size(), head.size());
      require(i > 0 && i + 1 == lines.size() && torn_end && lines[i].compare(0, n, head, 0, n) == 0,
              origin + " is not a metrics record (a JSON object with a kind and a step): not" +
                  not_ours);
      start.note = "--metrics " + path +
                   ": its last line was cut short (a run stopped while "
                   "writing it): dropped";
      break;
    }
    // Each start writes a run record first, so this program's files begin with one.
    require(i > 0 || record->find("kind")->string() == "run",
            origin + " is not a run record, as the first line of every --metrics file is: not" +
                not_ours);
    const json::Value* run_save = record->find("save");
    const bool is_run = record->find("kind")->string() == "run";
    const bool names_save = run_save && run_save->is_string() && run_save->string() == save;
    if (first_step == 1) {
      // A new run: only an earlier attempt of this job (same --save, no checkpoint) may be
      // started over.
      if (is_run && (save.empty() || !names_save)) other_run = true;
      ++start.dropped;
      continue;
    }
    // A resumed run drops the records of the steps it does again: only its own run's.
    const auto named = [](const std::string& dir) {
      return dir.empty() ? std::string("no --save") : "--save " + dir;
    };
    require(!is_run || names_save,
            "--metrics " + path + " holds the records of another run (" +
                named(run_save && run_save->is_string() ? run_save->string() : "") +
                "), not this one's (" + named(save) +
                "), and resuming would drop that run's later records; choose another file");
    if (record->find("step")->integer() < first_step) {
      start.kept.push_back(lines[i] + "\n");
    } else {
      ++start.dropped;
    }
  }
  require(!other_run,
          "--metrics " + path +
              " holds another run's records, and a new run never appends to another run's file; "
              "choose another file, or resume that run with --load");
  start.keep_through = first_step - 1;
  const std::string dropped = dropped_note(path, save_dir, first_step, start.dropped);
  if (!dropped.empty()) start.note += (start.note.empty() ? "" : "; ") + dropped;
  start.rewrite = start.dropped > 0 || torn_end;
  return start;
}

MetricsLog::MetricsLog(std::string path, const MetricsStart& start) : path_(std::move(path)) {
  if (start.exists && start.rewrite) {
    // The kept records under a temporary name, renamed over the file: a crash leaves the old
    // file or the new one, never a mix. A symbolic link's target is rewritten, not the link.
    const std::string target = resolved_path(path_);
    const std::string tmp = target + ".partial-" + std::to_string(::getpid());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    require(fd >= 0, "--metrics " + path_ + ": cannot write " + tmp + " (" + std::strerror(errno) +
                         "); check the directory's permissions");
    std::string text;
    for (const std::string& line : start.kept) text += line;
    const bool written =
        ::write(fd, text.data(), text.size()) == ssize_t(text.size()) && ::fsync(fd) == 0;
    const int error = errno;
    ::close(fd);
    if (!written || std::rename(tmp.c_str(), target.c_str()) != 0) {
      const int e = written ? errno : error;
      ::unlink(tmp.c_str());
      throw InputError("--metrics " + path_ + ": cannot rewrite it (" + std::strerror(e) +
                       "); free space or choose another file");
    }
  }
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  require(fd_ >= 0, "--metrics " + path_ + ": cannot open it to append (" + std::strerror(errno) +
                        "); check the path and its permissions");
}

MetricsLog::~MetricsLog() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsLog::write(const MetricsRecord& record) {
  if (failed_) return;
  const std::string line = record.line();
  struct stat before {};
  const bool sized = ::fstat(fd_, &before) == 0;
  size_t done = 0;
  ssize_t n = 0;
  while (done < line.size() && (n = ::write(fd_, line.data() + done, line.size() - done)) > 0) {
    done += size_t(n);
  }
  if (done == line.size()) return;
  const std::string why = n < 0 ? std::strerror(errno) : "nothing written";
  failed_ = true;
  // Part of a record (a full disk, a file size limit) is cut off again: the file ends with a
  // whole line, as a reader expects.
  const bool whole = done == 0 || (sized && ::ftruncate(fd_, before.st_size) == 0);
  std::fprintf(stderr,
               "warning: --metrics %s: a record could not be written (%s)%s; the file stops here, "
               "the run goes on\n",
               path_.c_str(), why.c_str(),
               whole ? "" : " and its part written could not be removed");
}

}  // namespace mpf
