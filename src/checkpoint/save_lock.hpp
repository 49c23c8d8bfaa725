// The lock on an output directory: DIR/mpiformer.lock names the run that writes there (writer.hpp:
// host, pid and its start time, Slurm job, when), so that a second run on the same directory is
// refused instead of interleaving its files with the first's: a --save directory's saves, `latest`
// and --keep-last removals, or mpiformer-tokenize's shards and manifest. World rank 0 takes it at
// start-up and holds it for the whole run.
//
// Taking it is atomic, also on NFS: the holder's identity is written to a uniquely named
// temporary, synced, and link()ed to the lock's name, which fails with EEXIST if the name exists.
// A lock whose holder is provably gone (writer_gone) is taken over; anything else is refused.
// Released (removed, only while it still holds this process's identity) when the SaveLock is
// destroyed: every way out of the run that returns. A run that ends at once (_exit, MPI_Abort)
// leaves it, and the next run finds its holder gone.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "checkpoint/writer.hpp"

namespace mpf::checkpoint {

// The lock's text: a first line saying what it is, then `key = value` lines of the holder.
std::string lock_text(const Writer& w);
// The holder a lock's text names; nullopt if it is not a lock this program wrote.
std::optional<Writer> parse_lock(const std::string& text);

// What a run started now would find in root's lock, taking nothing (--dry-run): "" if there is no
// lock, else a sentence naming its holder and whether a run would be refused or take it over.
std::string inspect_lock(const std::string& root);

class SaveLock {
 public:
  // Takes the lock of `root` (the directory `flag` names, created with its parents if missing;
  // messages name it as "<flag> <root>"). A lock
  // whose holder is provably gone is taken over, with a note naming it in `notes`. Throws
  // InputError naming the holder and what to do if a live run holds it, or one that cannot be
  // proven gone, or if root/mpiformer.lock is not a lock this program wrote.
  SaveLock(const std::string& root, std::vector<std::string>& notes, std::string flag = "--save");
  ~SaveLock();
  SaveLock(const SaveLock&) = delete;
  SaveLock& operator=(const SaveLock&) = delete;

  const std::string& root() const { return root_; }  // without a trailing '/'
  const Writer& holder() const { return me_; }
  // The gone run whose lock this one took over: what its cut-off saves left may be removed.
  const std::optional<Writer>& taken_over() const { return taken_over_; }

 private:
  // One attempt to take over the lock that reads `theirs` (its holder, gone): true if this
  // process now holds it; false to look at the lock again.
  bool take_over(const std::string& tmp, const std::string& theirs);

  std::string flag_, root_, file_;
  Writer me_;
  std::string text_;  // what this process wrote into the lock
  bool held_ = false;
  std::optional<Writer> taken_over_;
};

}  // namespace mpf::checkpoint
