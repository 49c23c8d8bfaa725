#include "train/stop_signals.hpp"

#include <unistd.h>

#include <csignal>
#include <cstring>

#include "core/error.hpp"

namespace mpf {

namespace {

volatile sig_atomic_t received = 0;
volatile sig_atomic_t grace = 0;

// Only async-signal-safe calls in the handlers.
void say(const char* text, size_t n) {
  const ssize_t ignored = write(STDERR_FILENO, text, n);
  (void)ignored;
}

void on_signal(int sig) {
  if (received != 0) {
    static const char text[] = "mpiformer: second stop signal: exiting now, without saving\n";
    say(text, sizeof text - 1);
    _exit(128 + sig);
  }
  received = sig;
  if (grace > 0) alarm(unsigned(grace));
}

void on_alarm(int) {
  static const char text[] =
      "mpiformer: stop signal: this step did not end within its grace period (a rank is gone, "
      "or the job is being torn down): exiting without saving\n";
  say(text, sizeof text - 1);
  _exit(128 + received);
}

}  // namespace

void install_stop_signals() {
  struct sigaction action;
  std::memset(&action, 0, sizeof action);
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // system calls in progress (MPI's, file I/O) go on
  for (const int sig : {SIGUSR1, SIGTERM, SIGINT}) sigaction(sig, &action, nullptr);
  action.sa_handler = on_alarm;
  sigaction(SIGALRM, &action, nullptr);
}

void set_stop_grace(int seconds) {
  grace = seconds;
  // A signal that came outside a step (its agreement already past) is still to be honoured at
  // this step's end: it gets the same grace.
  if (received != 0 && seconds > 0) alarm(unsigned(seconds));
}

int agree_on_stop(MPI_Comm comm) {
  int sig = received;
  // The alarm stays set through the all-reduce: a rank whose peer is gone waits here.
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
