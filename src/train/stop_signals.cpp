#include "train/stop_signals.hpp"

#include <unistd.h>

#include <csignal>
#include <cstring>

#include "core/error.hpp"

namespace mpf {

namespace {

volatile sig_atomic_t received = 0;

void on_signal(int sig) {
  if (received != 0) {
    // Only async-signal-safe calls here.
    static const char text[] = "mpiformer: second stop signal: exiting now, without saving\n";
    const ssize_t ignored = write(STDERR_FILENO, text, sizeof text - 1);
    (void)ignored;
    _exit(128 + sig);
  }
  received = sig;
}

}  // namespace

void install_stop_signals() {
  struct sigaction action;
  std::memset(&action, 0, sizeof action);
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // system calls in progress (MPI's, file I/O) go on
  for (const int sig : {SIGUSR1, SIGTERM, SIGINT}) sigaction(sig, &action, nullptr);
}

int agree_on_stop(MPI_Comm comm) {
  int sig = received;
  MPF_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &sig, 1, MPI_INT, MPI_MAX, comm));
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
      return "a signal";
  }
}

}  // namespace mpf
