// Saving and resuming a training run (--save DIR, --load DIR; checkpoint_dir.hpp has the
// files): which checkpoint a run resumes from and what it must agree with, and the collective
// save and load of the whole state through StateFiles.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_info.hpp"
#include "checkpoint/state_files.hpp"

namespace mpf {

struct ResumePoint {
  std::string root;
  CheckpointInfo info;
};

// Which checkpoint --load DIR (and --load-step N) names: its step, or -1 when DIR holds none yet
// (a job script may always pass --load), with a note saying so. Without --load-step: the one
// `latest` names, or a complete one newer than that (its save was cut off before `latest` was
// updated), with a note. The choice's state file is read and its binary files' headers and sizes
// checked. Throws InputError naming the file, and the newest intact checkpoint to use instead.
// `dir` and `load_step` are --load's and --load-step's (0: none); "" finds nothing.
//
// World rank 0 alone chooses and broadcasts the step, then every rank opens it: on a parallel
// file system another node's view of the directory may lag behind, and ranks that chose alone
// could choose differently and then read different checkpoints as one.
int64_t choose_checkpoint(const std::string& dir, int64_t load_step,
                          std::vector<std::string>& notes);

// For a program that reads a trained model (mpiformer-generate, mpiformer-eval), where a run's
// "no checkpoint yet, start anew" would be a random model: refuses (InputError) a --load `dir` in
// which choose_checkpoint found none (`step` -1), saying whether `dir` is missing or empty.
void require_checkpoint_found(const std::string& dir, int64_t step);

// The checkpoint `step` of --load `dir`, as choose_checkpoint chose it: its state file read and
// its two binary files' headers and sizes checked. No MPI. Throws InputError as
// choose_checkpoint does. Its model file (checkpoint::model_file) is an llm.c file any reader of
// weights can use.
ResumePoint open_checkpoint(const std::string& dir, int64_t step);

// "The newest intact checkpoint older than step `below` is DIR/step_N: resume from it with
// --load DIR --load-step N." or "" if there is none. Intact: complete, its state file readable
// and its binary files of the right sizes (their checksums are verified when it loads).
std::string intact_alternative(const std::string& root, int64_t below);

// Refuses (InputError) a --save directory that is not one, or that this process cannot write in
// (or, where it does not exist yet, in the nearest directory above it, where saving makes it):
// found at start-up, not at the first save after hours of training.
void check_save_writable(const std::string& save);
// The same for --save-local `dir`, on the node of the rank that calls it.
void check_local_writable(const std::string& dir);

// Refuses (InputError) a --save directory (`save`; `load`: --load's) this run would write over:
// checkpoints of another run when not resuming from it, the checkpoint steps this run is about
// to save, or a `latest` it did not write (one beside no checkpoint); and what
// check_save_writable refuses. World rank 0 checks, holding the directory's lock.
void check_save_directory(const std::string& save, const std::string& load, int64_t first_step);

struct SaveReport {
  std::string error;  // "" on success
  std::string path;   // the checkpoint directory
  int64_t bytes = 0;
  double seconds = 0;
  std::vector<std::string> notes;  // --keep-last removals
};

// Collective over world: writes the state after info.step into root (atomically: a partial
// directory renamed into place, then `latest`), then keeps only the newest keep_last (0: all).
// A failed save removes its partial directory and leaves the previous checkpoint and `latest`
// untouched; the error is the same on every rank. Rank 0 alone changes the directory's entries,
// and returns only after a broadcast: no rank reads them before they are there.
// `between_files` (tests only) runs on every rank after the model file, before the optimizer's:
// a save made slow on purpose, to be cut off mid-write.
SaveReport save_checkpoint(const StateFiles& files, MPI_Comm world, const std::string& root,
                           CheckpointInfo info, int keep_last,
                           const std::function<void()>& between_files = {});

// Collective: reads the parameters and moments of `resume` into the rank's shards, verifying
// every tensor's checksum and that every value is finite. Throws InputError on every rank.
void load_checkpoint(const StateFiles& files, const ResumePoint& resume);
// The parameters only (the model file), verified the same way: for programs that run the model.
void load_checkpoint_parameters(const StateFiles& files, const ResumePoint& resume);

// --init-from: the parameters of an llm.c model file, cut to this rank's shard. Throws
// InputError on every rank if the file cannot be read or holds a non-finite value.
void load_model_file(const StateFiles& files, const std::string& path);

// --save-llmc: an llm.c model file at `path`, written under a temporary name and renamed into
// place (never over an existing file). Returns the error, the same on every rank.
std::string save_model_file(const StateFiles& files, MPI_Comm world, const std::string& path);

}  // namespace mpf
