// One verdict on every rank for a step that may fail on some of them: the lowest failing rank's
// error, thrown everywhere (no rank printing; the app's all_ranks_succeed prints it once). For
// library code that must keep every rank in step between collectives.
#pragma once

#include <mpi.h>

#include <string>

#include "core/error.hpp"

namespace mpf {

// Collective: "" if `mine` is empty on every rank, else the lowest failing rank's `mine`.
std::string first_error(MPI_Comm comm, const std::string& mine);

// Collective: runs step() here, then throws InputError(first_error) on every rank if it threw
// an InputError on any.
template <class Step>
void on_every_rank(MPI_Comm comm, Step&& step) {
  std::string mine;
  try {
    step();
  } catch (const InputError& e) {
    mine = e.what();
  }
  const std::string error = first_error(comm, mine);
  if (!error.empty()) throw InputError(error);
}

}  // namespace mpf
