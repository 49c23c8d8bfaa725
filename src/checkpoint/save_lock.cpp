#include "checkpoint/save_lock.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "checkpoint/checkpoint_dir.hpp"
#include "core/error.hpp"
#include "io/input_file.hpp"

namespace mpf::checkpoint {

namespace {

constexpr const char* kHeader = "mpiformer save lock: a run writes checkpoints into this directory";
// Looks at the lock at most this often before giving up (each look sees it taken, released or
// taken over by another run at that very moment).
constexpr int kAttempts = 50;

// The whole file; false if it cannot be read (gone: released since).
bool read_text(const std::string& path, std::string& text) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return false;
  // Anything but a small regular file (a FIFO would block the open) is refused, naming it.
  text = read_input_text(path, "the lock " + path,
                         "nothing there: remove it (it is not a lock this program wrote)", 1 << 20);
  return true;
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat x, y;
  return stat(a.c_str(), &x) == 0 && stat(b.c_str(), &y) == 0 && x.st_dev == y.st_dev &&
         x.st_ino == y.st_ino;
}

// link(from, to), true if `to` is now `from`. Over NFS a link whose reply was lost is sent again
// and fails with EEXIST although it was made, so a failure is checked by what `to` now is.
bool link_to(const std::string& from, const std::string& to) {
  if (link(from.c_str(), to.c_str()) == 0) return true;
  const int err = errno;
  if (same_file(from, to)) return true;
  errno = err;
  return false;
}

std::string hex_hash(const std::string& text) {
  uint64_t h = 14695981039346656037ULL;  // FNV-1a
  for (const unsigned char c : text) h = (h ^ c) * 1099511628211ULL;
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, h);
  return buf;
}

std::string without_trailing_slash(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

std::string quoted(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
    text.pop_back();
  }
  return "'" + text.substr(0, 60) + (text.size() > 60 ? "...'" : "'");
}

}  // namespace

std::string lock_text(const Writer& w) {
  std::string s = std::string(kHeader) + "\n";
  s += "host = " + w.host + "\n";
  s += "pid = " + std::to_string(w.pid) + "\n";
  s += "start_time = " + std::to_string(w.start_time) + "\n";
  s += "boot_id = " + w.boot_id + "\n";
  s += "pid_namespace = " + w.pid_namespace + "\n";
  s += "slurm_job = " + w.slurm_job + "\n";
  s += "slurm_array = " + w.slurm_array + "\n";
  s += "taken = " + w.taken + "\n";
  return s;
}

std::optional<Writer> parse_lock(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line) || line != kHeader) return std::nullopt;
  Writer w;
  bool host = false, pid = false, start = false, taken = false;
  while (std::getline(in, line)) {
    const size_t eq = line.find(" = ");
    if (eq == std::string::npos) return std::nullopt;
    const std::string key = line.substr(0, eq), value = line.substr(eq + 3);
    char* end = nullptr;
    if (key == "host") {
      w.host = value;
      host = !value.empty();
    } else if (key == "pid") {
      errno = 0;
      w.pid = std::strtol(value.c_str(), &end, 10);
      // A pid past pid_t (or past strtol's range) would become -1 or wrap: not a lock's pid.
      pid = !value.empty() && *end == '\0' && errno != ERANGE && w.pid > 0 && w.pid <= INT_MAX;
    } else if (key == "start_time") {
      w.start_time = std::strtoull(value.c_str(), &end, 10);
      start = !value.empty() && *end == '\0';
    } else if (key == "boot_id") {
      w.boot_id = value;
    } else if (key == "pid_namespace") {
      w.pid_namespace = value;
    } else if (key == "slurm_job") {
      w.slurm_job = value;
    } else if (key == "slurm_array") {
      w.slurm_array = value;
    } else if (key == "taken") {
      w.taken = value;
      taken = !value.empty();
    }
  }
  if (!host || !pid || !start || !taken) return std::nullopt;
  return w;
}

std::string inspect_lock(const std::string& root) {
  const std::string file = lock_file(without_trailing_slash(root));
  std::string text;
  if (!read_text(file, text)) return "";
  const std::optional<Writer> holder = parse_lock(text);
  if (!holder) return file + " is not a lock this program wrote: a run would be refused";
  const Verdict v = writer_gone(*holder, this_process());
  const std::string who = "the run on " + describe(*holder) + " since " + holder->taken;
  if (v.gone)
    return file + " names " + who + ", which is gone (" + v.why + "): a run would take it over";
  return file + " names " + who + " (" + v.why + "): a run would be refused";
}

SaveLock::SaveLock(const std::string& root, std::vector<std::string>& notes, std::string flag)
    : flag_(std::move(flag)),
      root_(without_trailing_slash(root)),
      file_(lock_file(root_)),
      me_(this_process()),
      text_(lock_text(me_)) {
  const std::string fix = "; pass a " + flag_ + " directory this run can write to";
  if (std::string e = make_directories(root_); !e.empty()) {
    throw InputError(flag_ + " " + root_ + ": " + e + fix);
  }
  // Named after this process: a file of that name can only be a dead process's (of the same
  // pid, before), never a live one's.
  const std::string tmp = lock_partial(root_);
  std::remove(tmp.c_str());
  if (std::string e = write_text(tmp, text_); !e.empty()) {
    std::remove(tmp.c_str());
    throw InputError(flag_ + " " + root_ + ": " + e + fix);
  }
  struct RemoveTmp {
    const std::string& path;
    ~RemoveTmp() { std::remove(path.c_str()); }
  } remove_tmp{tmp};
  for (int attempt = 0; attempt < kAttempts && !held_; ++attempt) {
    if (link_to(tmp, file_)) {
      held_ = true;
      break;
    }
    require(errno == EEXIST,
            flag_ + " " + root_ + ": cannot create " + file_ + " (" + errno_text() + ")" + fix);
    std::string theirs;
    if (!read_text(file_, theirs)) continue;  // released since: try again
    const std::optional<Writer> holder = parse_lock(theirs);
    require(holder.has_value(),
            flag_ + " " + root_ + ": " + file_ + " is not a lock this program wrote (it reads " +
                quoted(theirs) + "): if no run writes into " + root_ + ", remove " + file_ +
                "; else pass another " + flag_ + " directory");
    const Verdict v = writer_gone(*holder, me_);
    const std::string who = "the run on " + describe(*holder) + " since " + holder->taken;
    require(v.gone || !v.provable, flag_ + " " + root_ + " is in use by " + who + " (" + v.why +
                                       "); wait for it to end or pass another " + flag_ +
                                       " directory");
    require(v.gone, flag_ + " " + root_ + " is locked by " + who +
                        ", which this run cannot prove has ended (" + v.why +
                        "): if that run is over, remove " + file_ +
                        "; else wait for it to end or pass another " + flag_ + " directory");
    if (take_over(tmp, theirs)) {
      held_ = true;
      taken_over_ = holder;
      notes.push_back(flag_ + " " + root_ + ": took over the lock of " + who + ", which is gone (" +
                      v.why + ")");
    }
  }
  require(held_, flag_ + " " + root_ + ": could not take " + file_ +
                     ": other runs kept taking it at the same moment; try again");
}

// Two new runs may find the same dead holder at once. If each removed the lock by its name and
// linked its own, the second could remove the first's fresh lock, and both would hold it. So
// only a run that has first created the marker named after the dead lock's contents
// (mpiformer.lock.takeover-<hash>, by link(), which one run alone wins) removes that lock, and
// only while the lock still reads those contents. Nothing else removes a lock of a gone holder,
// and no lock is made while one exists, so the lock it removes is the dead one. The winner then
// links its own in (a fresh run may take the freed name first: then the next look judges that
// one) and removes the marker; a run that lost the marker looks again and finds the new lock.
bool SaveLock::take_over(const std::string& tmp, const std::string& theirs) {
  const std::string marker = file_ + ".takeover-" + hex_hash(theirs);
  if (!link_to(tmp, marker)) {
    require(errno == EEXIST, flag_ + " " + root_ + ": cannot create " + marker + " (" +
                                 errno_text() + "); pass a " + flag_ +
                                 " directory this run can write to");
    std::string text;
    if (!read_text(marker, text)) return false;  // done since: look again
    const std::optional<Writer> taker = parse_lock(text);
    // A run that died while taking over leaves its marker; removing that would bring back the
    // race the marker prevents, so the user does, once no run uses the directory.
    require(taker && !writer_gone(*taker, me_).gone,
            flag_ + " " + root_ + ": " + marker +
                " is stale (left by a run that died taking over " + file_ +
                "): if no run writes into " + root_ + ", remove both files");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return false;  // another run is taking it over: look again
  }
  std::string now;
  if (read_text(file_, now) && now == theirs) std::remove(file_.c_str());
  const bool took = link_to(tmp, file_);
  std::remove(marker.c_str());
  return took;
}

SaveLock::~SaveLock() {
  std::string now;
  if (held_ && read_text(file_, now) && now == text_) std::remove(file_.c_str());
}

}  // namespace mpf::checkpoint
