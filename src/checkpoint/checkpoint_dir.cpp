#include "checkpoint/checkpoint_dir.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.hpp"
#include "io/input_file.hpp"
#include "io/output_file.hpp"

namespace mpf::checkpoint {

namespace {

constexpr const char* kPrefix = "step_";
constexpr int kDigits = 8;
constexpr const char* kPartial = ".partial-";
constexpr const char* kLock = "mpiformer.lock";

// "step_00001000" -> 1000; -1 for anything else (a partial directory, a user's file).
int64_t parse_name(const std::string& s) {
  const size_t p = std::strlen(kPrefix);
  if (s.size() < p + kDigits || s.compare(0, p, kPrefix) != 0) return -1;
  int64_t step = 0;
  for (size_t i = p; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9' || step > (INT64_MAX - 9) / 10) return -1;
    step = step * 10 + (s[i] - '0');
  }
  return step;
}

std::string sync_directory(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return "cannot open " + dir + " (" + errno_text() + ")";
  const bool ok = fsync(fd) == 0;
  const std::string why = ok ? "" : "cannot sync " + dir + " (" + errno_text() + ")";
  close(fd);
  return why;
}

std::string host_name() {
  char host[256] = "host";
  gethostname(host, sizeof host - 1);
  return host;
}

// This process's writer_tag: looked up each time (a few small reads per save), so that a forked
// process never names its files after its parent.
std::string my_tag() {
  return writer_tag(this_process());
}

}  // namespace

std::vector<std::string> directory_entries(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (const dirent* e = readdir(d)) out.emplace_back(e->d_name);
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::string make_directories(const std::string& dir) {
  if (dir.empty() || is_directory(dir)) return "";
  const size_t slash = dir.find_last_of('/', dir.size() - 2);
  if (slash != std::string::npos && slash > 0) {
    if (std::string e = make_directories(dir.substr(0, slash)); !e.empty()) return e;
  }
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return "cannot create directory " + dir + " (" + errno_text() + ")";
  }
  return "";
}

std::string lock_file(const std::string& root) {
  return root + "/" + kLock;
}

std::string lock_partial(const std::string& root) {
  return lock_file(root) + kPartial + my_tag();
}

std::string name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%s%0*lld", kPrefix, kDigits, static_cast<long long>(step));
  return buf;
}

std::string path(const std::string& root, int64_t step) {
  return root + "/" + name(step);
}

namespace {
std::string file_in(const std::string& dir, const char* kind, int64_t step, const char* ext) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%s_%0*lld.%s", kind, kDigits, static_cast<long long>(step), ext);
  return dir + "/" + buf;
}
}  // namespace

std::string model_file_in(const std::string& dir, int64_t step) {
  return file_in(dir, "model", step, "bin");
}
std::string optimizer_file_in(const std::string& dir, int64_t step) {
  return file_in(dir, "optimizer", step, "bin");
}
std::string state_file_in(const std::string& dir, int64_t step) {
  return file_in(dir, "state", step, "txt");
}
std::string model_file(const std::string& root, int64_t step) {
  return model_file_in(path(root, step), step);
}
std::string optimizer_file(const std::string& root, int64_t step) {
  return optimizer_file_in(path(root, step), step);
}
std::string state_file(const std::string& root, int64_t step) {
  return state_file_in(path(root, step), step);
}

std::vector<int64_t> list_steps(const std::string& root) {
  std::vector<int64_t> steps;
  for (const std::string& e : directory_entries(root)) {
    const int64_t step = parse_name(e);
    if (step >= 0 && is_directory(root + "/" + e)) steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::vector<std::string> list_partial(const std::string& root) {
  std::vector<std::string> out;
  for (const std::string& e : directory_entries(root)) {
    const size_t at = e.find(kPartial);
    if (at == std::string::npos) continue;
    const std::string base = e.substr(0, at);
    if ((parse_name(base) >= 0 && is_directory(root + "/" + e)) ||
        ((base == "latest" || base == kLock) && !is_directory(root + "/" + e))) {
      out.push_back(root + "/" + e);
    }
  }
  return out;
}

int64_t read_latest(const std::string& root) {
  const std::string file = root + "/latest";
  struct stat st;
  if (lstat(file.c_str(), &st) != 0) return -1;
  std::string s = read_input_text(file, file, "a file naming the newest checkpoint", 4096);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  const int64_t step = parse_name(s);
  require(step >= 0, file + ": does not name a checkpoint (expected one line like " + name(1000) +
                         ", found '" + s.substr(0, 40) +
                         "'); the file is corrupt: remove it and pass --load-step N");
  return step;
}

std::string latest_partial(const std::string& root) {
  return root + "/latest" + kPartial + my_tag();
}

std::string probe_writable(const std::string& root) {
  std::string dir = root;
  while (!path_exists(dir)) {
    const size_t slash = dir.find_last_of('/');
    if (slash == std::string::npos) {
      dir = ".";
      break;
    }
    dir = slash == 0 ? "/" : dir.substr(0, slash);
  }
  if (!is_directory(dir)) return dir + " is not a directory";
  // Unique per process, so ranks probing one directory at once do not collide.
  const std::string probe =
      dir + "/.mpiformer-probe-" + host_name() + "-" + std::to_string(getpid());
  const int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return "cannot create a file in " + dir + " (" + errno_text() + ")";
  close(fd);
  if (unlink(probe.c_str()) != 0) return "cannot remove " + probe + " (" + errno_text() + ")";
  return "";
}

std::string create_partial(const std::string& root, int64_t step, std::string& partial) {
  if (std::string e = make_directories(root); !e.empty()) return e;
  partial = path(root, step) + kPartial + my_tag();
  if (mkdir(partial.c_str(), 0755) != 0) {
    return "cannot create " + partial + " (" + errno_text() + ")";
  }
  return "";
}

std::string write_text(const std::string& file, const std::string& text) {
  const int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0) return "cannot create " + file + " (" + errno_text() + ")";
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += size_t(n);
  }
  bool ok = done == text.size() && fsync(fd) == 0;
  std::string why = ok ? "" : "cannot write " + file + " (" + errno_text() + ")";
  if (close(fd) != 0 && ok) why = "cannot write " + file + " (" + errno_text() + ")";
  return why;
}

namespace {
// Points root/latest at `step`. `latest` is the one file this program replaces: through a synced
// temporary and a rename, so a reader sees the old name or the new one, never a torn line.
std::string point_latest(const std::string& root, int64_t step) {
  const std::string tmp = latest_partial(root);
  if (std::string e = write_text(tmp, name(step) + "\n"); !e.empty()) {
    std::remove(tmp.c_str());
    return e;
  }
  if (std::rename(tmp.c_str(), (root + "/latest").c_str()) != 0) {
    const std::string why = "cannot replace " + root + "/latest (" + errno_text() + ")";
    std::remove(tmp.c_str());
    return why;
  }
  return sync_directory(root);
}
}  // namespace

std::string commit(const std::string& root, int64_t step, const std::string& partial) {
  if (std::string e = sync_directory(partial); !e.empty()) return e;
  const std::string final_path = path(root, step);
  if (rename_no_replace(partial, final_path) != 0) {
    return "cannot rename " + partial + " to " + final_path + " (" + errno_text() + ")";
  }
  std::string e = sync_directory(root);
  if (e.empty()) e = point_latest(root, step);
  // A checkpoint `latest` does not name goes back to its partial name: a failed save leaves
  // nothing new in sight.
  if (!e.empty() && std::rename(final_path.c_str(), partial.c_str()) != 0) {
    e += "; " + final_path + " stays: it is complete, but `latest` does not name it";
  }
  return e;
}

int64_t partial_step(const std::string& dir) {
  const std::string base = dir.substr(dir.find_last_of('/') + 1);
  const size_t at = base.find(kPartial);
  return at == std::string::npos ? -1 : parse_name(base.substr(0, at));
}

std::string remove_partial(const std::string& partial) {
  const int64_t step = partial_step(partial);
  if (step < 0) {  // a `latest` temporary
    return std::remove(partial.c_str()) == 0
               ? ""
               : "cannot remove " + partial + " (" + errno_text() + ")";
  }
  return remove(partial, step);
}

std::optional<PartialWriter> partial_writer(const std::string& partial) {
  const std::string base = partial.substr(partial.find_last_of('/') + 1);
  const size_t at = base.find(kPartial);
  if (at == std::string::npos) return std::nullopt;
  const std::string tag = base.substr(at + std::strlen(kPartial));
  const size_t last = tag.find_last_of('-');
  if (last == std::string::npos || last + 1 == tag.size()) return std::nullopt;
  PartialWriter w;
  for (size_t i = last + 1; i < tag.size(); ++i) {
    if (tag[i] < '0' || tag[i] > '9' || w.pid > 100000000) return std::nullopt;
    w.pid = w.pid * 10 + (tag[i] - '0');
  }
  w.host = tag.substr(0, last);
  // "<job>-<host>": a job tag has no '-' and reads "nojob" or "job...".
  const size_t first = w.host.find('-');
  const std::string job = w.host.substr(0, first);
  if (first != std::string::npos && (job == "nojob" || job.compare(0, 3, "job") == 0)) {
    w.job = job;
    w.host = w.host.substr(first + 1);
  }
  return w;
}

std::vector<std::string> remove_dead_partials(const std::string& root, const Writer* dead,
                                              bool own_only) {
  const Writer me = this_process();
  const std::string my_host = safe_name(me.host);
  std::vector<std::string> notes;
  for (const std::string& p : list_partial(root)) {
    const std::optional<PartialWriter> w = partial_writer(p);
    const bool here = w && w->host == my_host;
    std::string why;
    if (here && w->pid == me.pid && (w->job.empty() || w->job == job_tag(me.slurm_job))) {
      why = "a save of this run that was cut off";
    } else if (own_only) {
      continue;
    } else if (dead && w && w->host == safe_name(dead->host) && w->pid == dead->pid &&
               (w->job.empty() || w->job == job_tag(dead->slurm_job))) {
      why = "a save of the gone run on " + describe(*dead);
    } else if (here && !process_running(w->pid, 0)) {
      why = "a cut-off save: pid " + std::to_string(w->pid) + " no longer runs on " + me.host;
    } else {
      notes.push_back("kept " + p + ": its writer" +
                      (w ? " (pid " + std::to_string(w->pid) + " on " + w->host + ")" : "") +
                      " may still be saving; remove it once that run is over");
      continue;
    }
    const std::string kept = remove_partial(p);
    notes.push_back(kept.empty() ? "removed " + p + ", " + why : kept);
  }
  return notes;
}

std::string remove(const std::string& dir, int64_t step) {
  for (const std::string& f :
       {model_file_in(dir, step), optimizer_file_in(dir, step), state_file_in(dir, step)}) {
    std::remove(f.c_str());
  }
  if (rmdir(dir.c_str()) != 0) {
    return dir + " was kept: it holds files this program did not write (" + errno_text() + ")";
  }
  return "";
}

}  // namespace mpf::checkpoint
