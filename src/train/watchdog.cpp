#include "train/watchdog.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "parallel/grid.hpp"
#include "parallel/rank_activity.hpp"
#include "train/exit_status.hpp"

namespace mpf {

namespace {
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Wall-clock seconds: a record's age is read on another node (its clock kept by NTP).
double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The pipeline ops' short names, as a person reads them.
const char* spelled_out(const char* phase) {
  if (std::strcmp(phase, "F") == 0) return "forward";
  if (std::strcmp(phase, "B") == 0) return "backward";
  if (std::strcmp(phase, "W") == 0) return "weight gradients";
  return phase;
}

std::atomic<bool> table_asked{false};

// A record file holds one line, padded to this size so a rewrite covers the one before.
constexpr size_t kRecordBytes = 512;
// A rank other than 0 whose watchdog fired waits this long before it exits, so that rank 0's
// (firing at about the same moment) prints the table before the launcher ends the job.
constexpr unsigned kOthersWaitSeconds = 5;

// Every record file starts with this, and only a file named rank_NNNNN that does is removed or
// rewritten: the directory may hold a file of the user's (or another program's) of that name.
constexpr char kRecordMarker[] = "mpiformer-rank-record ";

std::string record_file(const std::string& dir, int rank) {
  char name[32];
  std::snprintf(name, sizeof name, "/rank_%05d", rank);
  return dir + name;
}

// "rank 3 (host n2): step 4, stage 1, microbatch 5, B; MPI_Irecv from rank 1 tag 1005 on pp",
// without its time.
std::string describe(const ActivitySnapshot& a, int rank, const char* host) {
  char where[160];
  if (a.op) {
    std::snprintf(where, sizeof where, "step %d, stage %d, microbatch %d, %s", a.step, a.stage,
                  a.mb, a.op);
  } else {
    std::snprintf(where, sizeof where, "step %d, %s", a.step, a.phase ? a.phase : "starting");
  }
  char call[160] = "outside MPI";
  if (a.call) {
    int n = std::snprintf(call, sizeof call, "%s", a.call);
    if (a.peer >= 0 && n < int(sizeof call)) {
      n += std::snprintf(call + n, sizeof call - size_t(n), " %s rank %d",
                         std::strstr(a.call, "recv") ? "from" : "to", a.peer);
    }
    if (a.tag >= 0 && n < int(sizeof call)) {
      n += std::snprintf(call + n, sizeof call - size_t(n), " tag %d", a.tag);
    }
    if (n < int(sizeof call)) {
      n += std::snprintf(call + n, sizeof call - size_t(n), " on %s", a.comm ? a.comm : "?");
    }
  }
  return "rank " + std::to_string(rank) + " (host " + host + "): " + where + "; " + call +
         (a.stalled ? " (stopped there by MPIFORMER_TEST_HANG)" : "");
}

// The line with its time: "...; waiting 300 s" in an MPI call, "...; for 2 s" outside.
std::string with_time(const std::string& line, bool in_mpi, double seconds) {
  char tail[48];
  std::snprintf(tail, sizeof tail, "; %s %.0f s", in_mpi ? "waiting" : "for", seconds);
  return line + tail;
}
}  // namespace

void ask_for_rank_table() {
  table_asked = true;
}

namespace {
// Whether `path` is a record file this program wrote: a regular file of a record's size that
// starts with the marker.
bool own_record(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || size_t(st.st_size) != kRecordBytes)
    return false;
  char head[sizeof kRecordMarker] = "";
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  const ssize_t got = pread(fd, head, sizeof kRecordMarker - 1, 0);
  close(fd);
  return got == ssize_t(sizeof kRecordMarker - 1) &&
         std::memcmp(head, kRecordMarker, sizeof kRecordMarker - 1) == 0;
}

// Removes a record directory: the record files in it (named rank_NNNNN and holding a record;
// nothing else), then itself if nothing else is in it.
void remove_records(const std::string& dir) {
  if (DIR* d = opendir(dir.c_str())) {
    while (const dirent* e = readdir(d)) {
      int rank = -1, used = 0;
      const bool named = std::sscanf(e->d_name, "rank_%d%n", &rank, &used) == 1 && rank >= 0 &&
                         e->d_name[used] == '\0' && used >= 10;
      const std::string path = dir + "/" + e->d_name;
      if (named && own_record(path)) unlink(path.c_str());
    }
    closedir(d);
  }
  rmdir(dir.c_str());
}

// Without --save: $TMPDIR/mpiformer-ranks-<host>-<rank 0's pid>. What runs ended by their
// watchdog (or a fault) left there is removed once their rank 0, on this host, is gone, so such
// directories do not pile up.
std::string temporary_record_dir(const std::string& host) {
  const char* tmp = std::getenv("TMPDIR");
  const std::string parent = tmp && *tmp ? tmp : "/tmp";
  const std::string prefix = "mpiformer-ranks-" + host + "-";
  if (DIR* d = opendir(parent.c_str())) {
    while (const dirent* e = readdir(d)) {
      long pid = 0;
      char tail = 0;
      if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) != 0 ||
          std::sscanf(e->d_name + prefix.size(), "%ld%c", &pid, &tail) != 1) {
        continue;
      }
      if (pid == long(getpid()) || (kill(pid_t(pid), 0) != 0 && errno == ESRCH)) {
        remove_records(parent + "/" + e->d_name);
      }
    }
    closedir(d);
  }
  const std::string dir = parent + "/" + prefix + std::to_string(getpid());
  return mkdir(dir.c_str(), 0700) == 0 ? dir : "";
}
}  // namespace

std::string rank_record_dir(const std::string& save_dir, int world_rank, MPI_Comm world) {
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  std::string dir;
  if (world_rank == 0) {
    if (!save_dir.empty()) {
      // An earlier run's records (one the watchdog ended, maybe on more ranks) go first: the
      // others open theirs only after the broadcast below.
      dir = save_dir + "/ranks";
      remove_records(dir);
      mkdir(dir.c_str(), 0755);
    } else {
      dir = temporary_record_dir(host);
    }
  }
  // Rank 0's host, then the directory.
  const std::string where = broadcast(std::string(host) + '\n' + dir, 0, world);
  const size_t cut = where.find('\n');
  dir = where.substr(cut + 1);
  if (world_rank == 0 || dir.empty()) return dir;
  if (save_dir.empty()) {
    // A directory in /tmp is rank 0's node's: ranks elsewhere keep no record file.
    return where.substr(0, cut) == host ? dir : "";
  }
  mkdir(dir.c_str(), 0755);  // another node's view of the save directory may lag rank 0's
  return dir;
}

Watchdog::Watchdog(double timeout_seconds, int world_rank, int world_size, std::string record_dir)
    : timeout_(timeout_seconds),
      rank_(world_rank),
      ranks_(world_size),
      record_dir_(std::move(record_dir)),
      period_(timeout_ > 0 && timeout_ / 20 < 1.0 ? timeout_ / 20 : 1.0) {
  gethostname(host_, sizeof host_ - 1);
  rank_activity().claim_writer();  // the main thread's, which runs the steps
  if (!record_dir_.empty()) {
    // A new file, or one of this program's records: never a file someone else put there.
    const std::string path = record_file(record_dir_, rank_);
    record_fd_ = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (record_fd_ < 0 && errno == EEXIST && own_record(path)) {
      record_fd_ = open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
    }
    if (record_fd_ < 0) {
      std::fprintf(stderr,
                   "warning: rank %d keeps no watchdog record: %s exists and is no record this "
                   "program wrote (left as it is)\n",
                   rank_, path.c_str());
    }
    // Written at once: a record file is never seen without its marker.
    Seen start;
    start.line = "rank " + std::to_string(rank_) + " (host " + host_ + "): starting";
    start.since = wall_seconds();
    write_record(start, start.since);
  }
  thread_ = std::thread([this] { watch(); });
}

Watchdog::~Watchdog() {
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      quit_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  // A run that ends (not one the watchdog ended) leaves no records; the last rank out removes
  // the directory, unless it holds something else.
  if (record_fd_ >= 0) {
    close(record_fd_);
    unlink(record_file(record_dir_, rank_).c_str());
    rmdir(record_dir_.c_str());
  }
}

void Watchdog::entered(StepPhase phase, int step, double min_seconds) {
  switch (phase) {
    case StepPhase::kTraining:
      return;  // its steps start the clock
    case StepPhase::kStep:
    case StepPhase::kValidation:
    case StepPhase::kSample:
    case StepPhase::kSave:
      begin(phase_name(phase), step, min_seconds);
      return;
    default:
      rank_activity().phase(step_, phase_name(phase));
      this->phase(phase_name(phase));
  }
}

void Watchdog::left(StepPhase phase) {
  // The other phases' ends are the next one's start: a rank that waits between them waits in
  // the phase it left.
  if (phase == StepPhase::kTraining) stop();
}

void Watchdog::begin(const char* what, int step, double limit) {
  rank_activity().phase(step, what);
  step_ = step;
  if (timeout_ <= 0) return;
  limit_ = limit > timeout_ ? limit : timeout_;
  what_ = what;
  phase_ = "start";
  mb_ = chunk_ = -1;
  started_ns_ = now_ns();
  armed_ = true;
}

void Watchdog::phase(const char* name, int mb, int chunk) {
  if (timeout_ <= 0) return;
  phase_ = name;
  mb_ = mb;
  chunk_ = chunk;
}

void Watchdog::stop() {
  armed_ = false;
}

void Watchdog::write_record(const Seen& own, double checked) {
  if (record_fd_ < 0) return;
  char text[kRecordBytes];
  std::memset(text, ' ', sizeof text);
  const int n = std::snprintf(text, sizeof text, "%s%.3f %.3f %d %s", kRecordMarker, own.since,
                              checked, own.in_mpi ? 1 : 0, own.line.c_str());
  if (n >= 0 && size_t(n) < sizeof text) text[n] = ' ';
  text[sizeof text - 1] = '\n';
  const ssize_t ignored = pwrite(record_fd_, text, sizeof text, 0);
  (void)ignored;
}

std::string Watchdog::read_record(int rank, double now) const {
  char text[kRecordBytes + 1] = "";
  ssize_t got = -1;
  if (!record_dir_.empty()) {
    const int fd = open(record_file(record_dir_, rank).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      got = pread(fd, text, kRecordBytes, 0);
      close(fd);
    }
  }
  double since = 0, checked = 0;
  int in_mpi = 0, used = 0;
  if (got > 0) {
    text[got] = '\0';
    const size_t mark = sizeof kRecordMarker - 1;
    if (std::strncmp(text, kRecordMarker, mark) != 0 ||
        std::sscanf(text + mark, "%lf %lf %d %n", &since, &checked, &in_mpi, &used) < 3 ||
        used == 0) {
      got = 0;
    }
    used += int(mark);
  }
  if (got <= 0) {
    return "rank " + std::to_string(rank) +
           ": no record (none written yet, or not on a file system rank 0 reads: give --save on "
           "a shared one)";
  }
  std::string line(text + used);
  line.erase(line.find_last_not_of(" \n") + 1);
  // How long the record had stood when its rank last looked; a rank that stopped looking (its
  // process stopped, or gone) says so.
  line = with_time(line, in_mpi != 0, checked - since);
  if (now - checked > 3 * period_ + 1.0) {
    char stale[96];
    std::snprintf(stale, sizeof stale, "; not refreshed for %.0f s (its process stopped or gone?)",
                  now - checked);
    line += stale;
  }
  return line;
}

void Watchdog::print_table(const char* why, const Seen& own) const {
  const double now = wall_seconds();
  std::string table = std::string(why) + ": where each rank is (their records in " +
                      (record_dir_.empty() ? std::string("no directory") : record_dir_) + "):\n";
  for (int r = 0; r < ranks_; ++r) {
    table += (r == rank_ ? with_time(own.line, own.in_mpi, now - own.since) : read_record(r, now));
    table += '\n';
  }
  std::fwrite(table.data(), 1, table.size(), stderr);
  std::fflush(stderr);
}

void Watchdog::fire_if_over(const Seen& own) const {
  if (!armed_) return;
  const double elapsed = double(now_ns() - started_ns_) * 1e-9;
  if (elapsed <= limit_) return;
  char where[96] = "";
  if (mb_ >= 0)
    std::snprintf(where, sizeof where, " (microbatch %d, chunk %d)", int(mb_), int(chunk_));
  char limit[96];
  if (limit_ > timeout_) {
    std::snprintf(limit, sizeof limit, "%g s (a save's limit: its size at 20 MB/s)",
                  double(limit_));
  } else {
    std::snprintf(limit, sizeof limit, "--step-timeout %g", timeout_);
  }
  std::fprintf(stderr,
               "fatal: [rank %d, %s pid %d] %s %d has run %.1f s, over %s, in phase '%s'%s: "
               "aborting the job (exit status %d)\n",
               rank_, host_, int(getpid()), what_.load(), int(step_), elapsed, limit,
               spelled_out(phase_), where, int(kExitWatchdog));
  std::fflush(stderr);
  if (rank_ == 0) {
    print_table("watchdog", own);
  } else {
    sleep(kOthersWaitSeconds);
  }
  // No MPI call from this thread (MPI is initialised funneled: the main thread only). Ending
  // the process is what makes the launcher end the job.
  _exit(kExitWatchdog);
}

void Watchdog::watch() {
  // Fires within a few percent of the limit; sees a SIGUSR2 request within a tenth of a second;
  // rewrites the record file once a period (at most a second), changed or not: the time it was
  // last written tells rank 0 this process still runs.
  const auto tick = std::chrono::duration<double>(period_ < 0.1 ? period_ : 0.1);
  uint64_t seen = ~uint64_t(0);
  Seen own;
  own.since = wall_seconds();
  double written = 0, table_due = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, tick, [this] { return quit_; })) {
    // The record's age is measured here, to the tick: its writer reads no clock.
    const double now = wall_seconds();
    const ActivitySnapshot a = rank_activity().read();
    if (a.seq != seen) {
      seen = a.seq;
      own = Seen{describe(a, rank_, host_), a.call != nullptr, now};
    }
    if (now - written >= period_) {
      write_record(own, now);
      written = now;
    }
    // SIGUSR2: printed a period later, when every running rank has rewritten its record since.
    if (table_asked.exchange(false) && rank_ == 0 && table_due == 0) table_due = now + period_;
    if (table_due > 0 && now >= table_due) {
      print_table("SIGUSR2", own);
      table_due = 0;
    }
    fire_if_over(own);
  }
}

}  // namespace mpf
