// The checkpoint directory of a training run (--save DIR, --load DIR):
//
//   DIR/step_00001000/model_00001000.bin      parameters: an llm.c model file (--init-from reads
//                                             it)
//   DIR/step_00001000/optimizer_00001000.bin  AdamW's m and v, whole tensors in the same order
//   DIR/step_00001000/state_00001000.txt      the rest of the state (checkpoint_info.hpp)
//   DIR/latest                                one line naming the newest complete checkpoint
//   DIR/mpiformer.lock                        the run writing here, while it runs (save_lock.hpp)
//
// A checkpoint becomes visible only when complete: it is written into
// DIR/step_00001000.partial-<job>-<host>-<pid> (writer_tag: named by its writer, so that a save
// never mistakes another run's save in progress for its own leftover), its files synced, and the
// directory renamed into place (never over an existing one); `latest` is then replaced through a
// synced temporary and a rename. A crash at any point leaves the previous checkpoint and `latest`
// as they were.
//
// Everything here is POSIX on one rank (world rank 0 saves the directory entries and reads the
// listing; the others read only the files of a checkpoint rank 0 chose): the tensors themselves
// are written collectively by checkpointing.hpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/writer.hpp"

namespace mpf::checkpoint {

std::string name(int64_t step);  // "step_00001000"
std::string path(const std::string& root, int64_t step);
std::string model_file(const std::string& root, int64_t step);
std::string optimizer_file(const std::string& root, int64_t step);
std::string state_file(const std::string& root, int64_t step);
// The same files inside a directory that is not (yet) at its final name.
std::string model_file_in(const std::string& dir, int64_t step);
std::string optimizer_file_in(const std::string& dir, int64_t step);
std::string state_file_in(const std::string& dir, int64_t step);

// The names in dir ("." and ".." among them), sorted; none if it cannot be read.
std::vector<std::string> directory_entries(const std::string& dir);
// Steps of the checkpoint directories in root (named step_NNNNNNNN), ascending; none if root does
// not exist.
std::vector<int64_t> list_steps(const std::string& root);
// What interrupted saves left in root: directories step_NNNNNNNN.partial-* and temporaries
// latest.partial-* and mpiformer.lock.partial-*.
std::vector<std::string> list_partial(const std::string& root);
// Removes one of them (remove() for a directory).
std::string remove_partial(const std::string& partial);
// Who wrote a partial, as its name says: "<job>-<host>-<pid>" (writer_tag), or "<host>-<pid>"
// as earlier versions named them (job ""); nullopt if the name holds no pid.
struct PartialWriter {
  std::string job, host;  // job_tag() and safe_name() forms
  long pid = 0;
};
std::optional<PartialWriter> partial_writer(const std::string& partial);
// Removes the partials in root (list_partial) whose writer is provably gone: this process (an
// earlier save of it, cut off), `dead` (a lock holder this run found gone and took over from), or
// a pid on this host that no longer runs. Another run's may be a save in progress: each is kept,
// with a note. Returns the notes. With `own_only`, only this process's are looked at.
std::vector<std::string> remove_dead_partials(const std::string& root, const Writer* dead,
                                              bool own_only);
// The step root/latest names, or -1 if root has no `latest`. Throws InputError if it is not one
// line naming a checkpoint.
int64_t read_latest(const std::string& root);

// root/mpiformer.lock (save_lock.hpp), and the temporary this process writes it through.
std::string lock_file(const std::string& root);
std::string lock_partial(const std::string& root);
// mkdir -p: "" or what stopped it.
std::string make_directories(const std::string& dir);

// "" if this process can create and remove a file in root or, where root does not exist yet, in
// the nearest existing directory above it (where create_partial would make it); else what stops
// it. A uniquely named probe file is created and removed.
std::string probe_writable(const std::string& root);

// Rank 0's side of a save. Each returns "" on success, else what went wrong.
// Creates root (and its parents) if missing, then the partial directory for `step`, whose path
// goes to `partial`.
std::string create_partial(const std::string& root, int64_t step, std::string& partial);
// Writes a small text file durably (exclusive create, fsync); the directory entry is synced with
// the directory.
std::string write_text(const std::string& path, const std::string& text);
// Syncs the partial directory, renames it to root/step_NNNNNNNN (failing if that exists), syncs
// root, then points `latest` at it. If that last part fails, the directory goes back to its
// partial name, so a failed commit leaves nothing new in sight.
std::string commit(const std::string& root, int64_t step, const std::string& partial);
// Removes a checkpoint or partial directory of `step`: the three files this program writes
// there, then the directory. Anything else in it (a user's file) is left, and so is the
// directory: the returned text says so.
std::string remove(const std::string& dir, int64_t step);
// The step of a partial directory's path (list_partial), -1 if it is not one.
int64_t partial_step(const std::string& dir);
// The temporary `latest` is written to before its rename: root/latest.partial-<writer_tag>.
std::string latest_partial(const std::string& root);

}  // namespace mpf::checkpoint
