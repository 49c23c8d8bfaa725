#include "checkpoint/writer.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace mpf::checkpoint {

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// Field 22 of /proc/<pid>/stat, 0 if it cannot be read. The command name (field 2) is in
// parentheses and may hold spaces and parentheses itself: count from the last ')'.
unsigned long long start_time_of(const std::string& pid) {
  std::ifstream in("/proc/" + pid + "/stat");
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  const size_t close = s.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(s.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i == 22) return std::strtoull(field.c_str(), nullptr, 10);
  }
  return 0;
}

std::string now_utc() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Slurm's job states in which none of the job's processes runs: finished, or waiting to run
// (a requeued job waits only after its processes have ended). COMPLETING is not one: its
// processes are still being ended.
bool state_without_processes(const std::string& state) {
  for (const char* s : {"PENDING", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL",
                        "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY"}) {
    if (state == s) return true;
  }
  return false;
}

}  // namespace

Writer this_process() {
  Writer w;
  char host[256] = "host";
  gethostname(host, sizeof host - 1);
  w.host = host;
  w.pid = long(getpid());
  w.start_time = start_time_of("self");
  w.boot_id = first_line("/proc/sys/kernel/random/boot_id");
  char ns[128];
  const ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
  w.pid_namespace = n > 0 ? std::string(ns, size_t(n)) : "";
  w.slurm_job = env("SLURM_JOB_ID");
  const std::string array = env("SLURM_ARRAY_JOB_ID"), task = env("SLURM_ARRAY_TASK_ID");
  if (!array.empty()) w.slurm_array = array + "_" + task;
  w.taken = now_utc();
  return w;
}

std::string describe(const Writer& w) {
  std::string s = "host " + w.host + " (pid " + std::to_string(w.pid);
  if (!w.slurm_job.empty()) s += ", Slurm job " + w.slurm_job;
  if (!w.slurm_array.empty()) s += ", array task " + w.slurm_array;
  return s + ")";
}

std::string safe_name(const std::string& text) {
  std::string s = text.empty() ? "_" : text;
  for (char& c : s) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '.' || c == '_' || c == '-';
    if (!plain) c = '_';
  }
  return s;
}

std::string job_tag(const std::string& slurm_job) {
  // No '-' in it: the host, which may hold one, is what lies between the first and the last.
  std::string job = slurm_job.empty() ? "nojob" : "job" + safe_name(slurm_job);
  for (char& c : job) {
    if (c == '-') c = '_';
  }
  return job;
}

std::string writer_tag(const Writer& w) {
  return job_tag(w.slurm_job) + "-" + safe_name(w.host) + "-" + std::to_string(w.pid);
}

bool process_running(long pid, unsigned long long start_time) {
  // Only a real pid: kill() of 0 or of a negative one signals whole process groups, and always
  // "finds" them.
  if (pid <= 0 || pid > INT_MAX) return false;
  if (kill(pid_t(pid), 0) != 0 && errno == ESRCH) return false;
  if (start_time == 0) return true;
  const unsigned long long now = start_time_of(std::to_string(pid));
  return now == 0 || now == start_time;  // unreadable: it may be the same process
}

std::optional<std::string> slurm_job_state(const std::string& job, double timeout_s) {
  int out[2];
  if (pipe(out) != 0) return std::nullopt;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, out[1], 2);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  posix_spawn_file_actions_addclose(&actions, out[1]);
  // This process blocks the stop signals in every thread (train/stop_signals.hpp) and a blocked
  // mask survives exec: squeue gets the default mask and dispositions.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (const int s : {SIGPIPE, SIGTERM, SIGINT, SIGUSR1, SIGALRM}) sigaddset(&defaults, s);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::string j = job;
  char* argv[] = {const_cast<char*>("squeue"),
                  const_cast<char*>("-h"),
                  const_cast<char*>("-j"),
                  j.data(),
                  const_cast<char*>("-o"),
                  const_cast<char*>("%T"),
                  nullptr};
  pid_t child = 0;
  const int spawned = posix_spawnp(&child, "squeue", &actions, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(out[1]);
  if (spawned != 0) {
    close(out[0]);
    return std::nullopt;
  }
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline =
      Clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));
  auto left_ms = [&] {
    return int(std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count()));
  };
  std::string text;
  bool timed_out = false;
  for (;;) {
    pollfd p{out[0], POLLIN, 0};
    const int ready = poll(&p, 1, left_ms());
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      timed_out = true;
      break;
    }
    char buf[512];
    const ssize_t n = read(out[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (text.size() < 4096) text.append(buf, size_t(n));
  }
  close(out[0]);
  int status = 0;
  for (;;) {
    const pid_t done = waitpid(child, &status, timed_out ? 0 : WNOHANG);
    if (done == child) break;
    if (done < 0 && errno != EINTR) return std::nullopt;
    if (done == 0 && left_ms() == 0) timed_out = true;
    if (timed_out) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!WIFEXITED(status)) return std::nullopt;
  if (WEXITSTATUS(status) != 0) {
    // Once Slurm has forgotten a finished job, squeue fails naming it invalid.
    if (text.find("Invalid job id") != std::string::npos) return std::string();
    return std::nullopt;
  }
  std::istringstream lines(text);
  std::string state;
  lines >> state;
  return state;
}

Verdict writer_gone(const Writer& w, const Writer& me) {
  Verdict v;
  const std::string pid = "pid " + std::to_string(w.pid);
  const bool same_namespace =
      w.pid_namespace.empty() || me.pid_namespace.empty() || w.pid_namespace == me.pid_namespace;
  if (w.host == me.host && same_namespace) {
    if (!w.boot_id.empty() && !me.boot_id.empty() && w.boot_id != me.boot_id) {
      v.gone = true;
      v.why = w.host + " has rebooted since";
    } else if (w.pid == me.pid && w.start_time == me.start_time) {
      v.why = "it is this process";
    } else if (!process_running(w.pid, 0)) {
      v.gone = true;
      v.why = pid + " no longer runs on " + w.host;
    } else if (!process_running(w.pid, w.start_time)) {
      v.gone = true;
      v.why = pid + " on " + w.host + " is now another process (it started later)";
    } else {
      v.why = pid + " is running on " + w.host;
    }
    return v;
  }
  if (!w.slurm_job.empty() && w.slurm_job == me.slurm_job) {
    v.gone = true;
    v.why =
        "it is this Slurm job's earlier run (requeued: Slurm starts the new run only after the "
        "old one has ended)";
    return v;
  }
  if (!w.slurm_job.empty()) {
    const std::optional<std::string> state = slurm_job_state(w.slurm_job, 10.0);
    if (state && (state->empty() || state_without_processes(*state))) {
      v.gone = true;
      v.why = "squeue reports Slurm job " + w.slurm_job + " " +
              (state->empty() ? std::string("gone") : "as " + *state);
    } else if (state) {
      v.why = "squeue reports Slurm job " + w.slurm_job + " as " + *state;
    } else {
      v.provable = false;
      v.why = "it ran on another host, and squeue could not say whether Slurm job " + w.slurm_job +
              " has ended";
    }
    return v;
  }
  v.provable = false;
  v.why = w.host == me.host ? "its pids are not this process's to check (another pid namespace)"
                            : "it ran on another host, outside Slurm";
  return v;
}

}  // namespace mpf::checkpoint
