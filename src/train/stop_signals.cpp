#include "train/stop_signals.hpp"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "core/error.hpp"
#include "parallel/rank_activity.hpp"
#include "train/exit_status.hpp"
#include "train/watchdog.hpp"

namespace mpf {

namespace {

std::atomic<int> received{0};
std::atomic<int> grace{0};
// Stop signals this close together are one request: scancel sends TERM and the job script, seeing
// it, sends USR1 within a moment (ci/slurm), and neither means "exit without saving". Only a
// signal this long after the first is a second request, which exits at once. Set at
// install_stop_signals (MPIFORMER_STOP_SAME_REQUEST_S overrides it, for tests); read by the
// signal thread alone, like first_at.
double same_request_seconds = 5;
double first_at = 0;

double now_seconds() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// write(2), not stdio: the exits below must not wait on a stream lock another thread holds.
void say(const char* text) {
  const ssize_t ignored = write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

// The stop signals, the grace alarm and SIGUSR2 (the table of where each rank is, which stops
// nothing): blocked in every thread, taken only by sigwait below.
sigset_t stop_set() {
  sigset_t set;
  sigemptyset(&set);
  for (const int sig : {SIGUSR1, SIGTERM, SIGINT, SIGALRM, SIGUSR2}) sigaddset(&set, sig);
  return set;
}

// The one place these signals arrive. A plain thread, so it may print and use atomics.
void* wait_for_signals(void*) {
  const sigset_t set = stop_set();
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    if (sig == SIGUSR2) {
      ask_for_rank_table();  // the watchdog's thread prints it (train/watchdog.hpp)
      continue;
    }
    if (sig == SIGALRM) {
      say("mpiformer: stop signal: this step did not end within its grace period (a rank is gone, "
          "or the job is being torn down): exiting without saving\n");
      _exit(exit_status_killed_by(received.load()));
    }
    if (received.load() != 0) {
      if (now_seconds() - first_at < same_request_seconds) {
        say("mpiformer: another stop signal soon after the first: the same request to stop\n");
        continue;
      }
      say("mpiformer: second stop signal: exiting now, without saving\n");
      _exit(exit_status_killed_by(sig));
    }
    first_at = now_seconds();
    received = sig;
    if (grace.load() > 0) alarm(unsigned(grace.load()));
  }
  return nullptr;
}

}  // namespace

void install_stop_signals() {
  // Why no handler: a handler runs on whichever thread the kernel picks, with its frame pushed
  // below that thread's stack pointer. oneDNN's JIT sgemm kernels (2.6 to 3.11 at least; fixed
  // upstream by oneDNN PR #4855 for issue #4845) point the stack pointer into a heap buffer while
  // they run, so a handler there writes ~3 KB of signal frame over the heap: glibc aborts
  // ("corrupted size vs. prev_size") or a oneDNN object is damaged ("could not execute a
  // primitive"). Blocked in every thread, the signals interrupt no code; one thread takes them
  // with sigwait. Threads inherit the mask, so this must come before any thread exists (MPI's,
  // OpenMP's, the watchdog's).
  if (const char* env = std::getenv("MPIFORMER_STOP_SAME_REQUEST_S")) {
    same_request_seconds = std::atof(env);
  }
  const sigset_t set = stop_set();
  pthread_t thread;
  if (pthread_sigmask(SIG_BLOCK, &set, nullptr) != 0 ||
      pthread_create(&thread, nullptr, wait_for_signals, nullptr) != 0) {
    MPF_FATAL("cannot block the stop signals and start the thread that waits for them");
  }
  pthread_detach(thread);
}

void set_stop_grace(int seconds) {
  grace = seconds;
  // A signal that came outside a step (its agreement already past) is still to be honoured at
  // this step's end: it gets the same grace.
  if (received.load() != 0 && seconds > 0) alarm(unsigned(seconds));
}

int agree_on_stop(MPI_Comm comm) {
  int sig = received.load();
  // The alarm stays set through the all-reduce: a rank whose peer is gone waits here.
  MpiCallScope in_mpi("MPI_Allreduce", comm);
  MPF_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &sig, 1, MPI_INT, MPI_MAX, comm));
  // The step's end is reached; what follows (validation, a save) has no grace limit.
  grace = 0;
  alarm(0);
  return sig;
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGUSR1:
      return "SIGUSR1";
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    default:
      return "a stop signal";
  }
}

}  // namespace mpf
