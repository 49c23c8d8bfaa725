// Two kinds of failure (LAMMPS' Error::all / Error::one):
// - InputError: the user's input is wrong (flags, data files, checkpoints, layouts). Every rank
//   reaches the same verdict, so it is thrown, caught in the app, agreed on with one collective,
//   printed once and every rank exits nonzero.
// - fatal(): an internal fault on one rank (an MPI call failing). Prints with its host and pid,
// calls
//   MPI_Abort, since the other ranks may be blocked in a collective.
#pragma once

#include <mpi.h>

#include <stdexcept>
#include <string>

namespace mpf {

class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws InputError(message) unless ok. The message names the problem and the fix.
inline void require(bool ok, const std::string& message) {
  if (!ok) throw InputError(message);
}

// Called by every rank of comm after a phase that may have failed on some of them: local_error is
// empty where it succeeded. Returns true if any rank failed; the lowest failing rank has printed
// "error: <its message>" to stderr.
bool any_rank_failed(MPI_Comm comm, const std::string& local_error);

// Runs step() on every rank of comm, then agrees on the InputError it may have thrown: true if it
// succeeded on every rank; else false on every rank, the lowest failing one having printed its
// message (any_rank_failed). The apps' phases that read user input go through it.
template <class Step>
bool all_ranks_succeed(MPI_Comm comm, Step&& step) {
  std::string error;
  try {
    step();
  } catch (const InputError& e) {
    error = e.what();
  }
  return !any_rank_failed(comm, error);
}

// "error: <message>\n" with the message's control characters escaped (a newline as \n, others as
// \xNN): a message may quote a user's file (a `latest` of two lines), and a log reader or a job
// script's grep must see exactly one line per error.
std::string error_line(const std::string& message);

// Prints error_line(the printf-formatted message) to stderr and flushes it. Every "error:" the
// apps print goes through it.
void print_error(const char* format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

[[noreturn]] void fatal(const char* file, int line, const std::string& message);

}  // namespace mpf

#define MPF_FATAL(msg) ::mpf::fatal(__FILE__, __LINE__, (msg))
#define MPF_MPI_CHECK(call)                                                          \
  do {                                                                               \
    const int mpf_rc_ = (call);                                                      \
    if (mpf_rc_ != MPI_SUCCESS) MPF_FATAL(std::string("MPI call failed: ") + #call); \
  } while (0)
