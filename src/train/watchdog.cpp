#include "train/watchdog.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "train/exit_status.hpp"

namespace mpf {

namespace {
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The pipeline ops' short names, as a person reads them.
const char* spelled_out(const char* phase) {
  if (std::strcmp(phase, "F") == 0) return "forward";
  if (std::strcmp(phase, "B") == 0) return "backward";
  if (std::strcmp(phase, "W") == 0) return "weight gradients";
  return phase;
}
}  // namespace

Watchdog::Watchdog(double timeout_seconds, int world_rank)
    : timeout_(timeout_seconds), rank_(world_rank) {
  if (timeout_ > 0) thread_ = std::thread([this] { watch(); });
}

Watchdog::~Watchdog() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    quit_ = true;
  }
  wake_.notify_all();
  thread_.join();
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
      this->phase(phase_name(phase));
  }
}

void Watchdog::left(StepPhase phase) {
  // The other phases' ends are the next one's start: a rank that waits between them waits in
  // the phase it left.
  if (phase == StepPhase::kTraining) stop();
}

void Watchdog::begin(const char* what, int step, double limit) {
  if (timeout_ <= 0) return;
  limit_ = limit > timeout_ ? limit : timeout_;
  what_ = what;
  step_ = step;
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

void Watchdog::watch() {
  // Looks often enough to fire within a few percent of the limit, at most once a second.
  const auto every = std::chrono::duration<double>(timeout_ / 20 < 1.0 ? timeout_ / 20 : 1.0);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, every, [this] { return quit_; })) {
    if (!armed_) continue;
    const double elapsed = double(now_ns() - started_ns_) * 1e-9;
    if (elapsed <= limit_) continue;
    char where[96] = "";
    if (mb_ >= 0)
      std::snprintf(where, sizeof where, " (microbatch %d, chunk %d)", int(mb_), int(chunk_));
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
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
                 rank_, host, int(getpid()), what_.load(), int(step_), elapsed, limit,
                 spelled_out(phase_), where, int(kExitWatchdog));
    std::fflush(stderr);
    // No MPI call from this thread (MPI is initialised funneled: the main thread only). Ending
    // the process is what makes the launcher end the job.
    _exit(kExitWatchdog);
  }
}

}  // namespace mpf
