// The node-local tier (--save-local DIR --save-local-every N; docs/checkpoints.md): each rank
// writes its own part of the training state, as it holds it, into one file on storage of its
// node, often; the global checkpoint (--save) is written less often. A restart on the same nodes
// with the same layout resumes from the newest set every rank holds complete, when it is newer
// than the global checkpoint; anything else (a rank's shard missing or damaged, another layout)
// reads the global one. A shard is this rank's memory, not the serial tensors: it is never
// used to reshard.
//
// A shard is DIR/shard-<save>-<layout>-step_NNNNNNNN-rank_RRRRR: <save> a hash of the --save
// directory's resolved path (the run it belongs to: two runs may share a node's /tmp), <layout>
// a hash of the layout key below. Its bytes: the magic "MPFSHRD1"; six uint64 (the key's length,
// the state text's, the slab's floats, m's floats, the step, the rank); the key; the
// state text (a state file's, checkpoint_info.hpp); the slab, m and v as floats; a uint64
// checksum of everything before it. It is written under a temporary name, synced and renamed
// into place; a reader checks the size, the header, the key and the checksum before trusting a
// byte of it.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_info.hpp"

namespace mpf::local_tier {

// What a shard belongs to: the run, the exact layout, the rank.
struct ShardKey {
  std::string save;     // --save, resolved
  std::string layout;   // the world size, the layout's settings, the model's shape: all ranks'
  int rank = 0;         // world rank
  int64_t slab = 0;     // floats of this rank's parameters
  int64_t moments = 0;  // floats of m
  int64_t second_moments = 0;  // floats of v (fewer than m's under Muon: optim/adamw.hpp)

  std::string save_tag() const;    // 8 hex digits
  std::string layout_tag() const;  // 16 hex digits
};

// DIR/shard-<save>-<layout>-step_NNNNNNNN-rank_RRRRR.
std::string shard_path(const std::string& dir, const ShardKey& key, int64_t step);

// Writes this rank's shard of `info.step` atomically (a temporary beside it, synced, renamed,
// the directory synced; a failure removes the temporary). slab, m and v are in the kernels'
// memory (copied through a bounded host buffer). Returns "" or what went wrong.
std::string write_shard(const std::string& dir, const ShardKey& key, const CheckpointInfo& info,
                        const float* slab, const float* m, const float* v);

// "" if the shard of `step` is complete and intact for `key` (its size, header, key, checksum,
// and state text of that step), filling `info`; else why not ("missing", "truncated: ...",
// "fails its checksum", ...). Reads the whole file.
std::string check_shard(const std::string& dir, const ShardKey& key, int64_t step,
                        CheckpointInfo& info);

// Reads a shard check_shard passed into the kernels' memory, checking its checksum again.
// Returns "" or what went wrong (then the state is partly overwritten: load another).
std::string read_shard(const std::string& dir, const ShardKey& key, int64_t step, float* slab,
                       float* m, float* v);

// The steps of this rank's shards of `key` in dir, ascending (by name: they may be damaged).
std::vector<int64_t> list_steps(const std::string& dir, const ShardKey& key);
// Whether dir holds shards of the same run of another layout.
bool other_layouts(const std::string& dir, const ShardKey& key);
// Removes this rank's shards of `key` but the one of step `keep`, its temporaries, and the
// run's shards of other layouts (of any rank: no rank of this layout reads them). Other runs'
// files and anything not named as a shard are left.
void remove_stale(const std::string& dir, const ShardKey& key, int64_t keep);

// Collective over `world`: "" if no two hosts see `dir` as one directory, else (the same on every
// rank) why it is not node-local storage. Each rank leaves a marker file naming itself in dir;
// after a barrier each looks for the marker of one rank on another host (the next such rank after
// it), which only a directory shared by those hosts holds (a file system every node mounts is
// found; one that only some pairs of nodes share may not be); the markers are then removed. `host`:
// this rank's host name (MPIFORMER_TEST_HOST replaces it, for the tests: one machine posing as
// two).
std::string check_node_local(MPI_Comm world, const std::string& dir, const ShardKey& key,
                             std::string host);

// Collective over `world`, at a restart whose global checkpoint is of step `global_step`
// (`global` its path): the step of the newest set every rank holds complete and intact, when it
// is newer than the global one (each rank's newest, agreed by an MPI_MIN all-reduce, then held by
// every rank), filling `info` with this rank's state text; -1 otherwise. `line` gets, on rank 0,
// the one line that says why the local tier is not used when it had something newer (naming the
// first rank lacking it and why), or that it holds another layout's shards; else "".
int64_t choose_local_set(MPI_Comm world, const std::string& dir, const ShardKey& key,
                         int64_t global_step, const std::string& global, CheckpointInfo& info,
                         std::string& line);

}  // namespace mpf::local_tier
