// Who writes into a checkpoint directory, and whether a writer other than this process is
// provably gone. The save lock (save_lock.hpp) records a writer in full; the names of partial
// saves (checkpoint_dir.hpp) carry its job, host and pid. Something left behind by a writer is
// taken over or removed only when that writer is provably gone: a live run's lock or save in
// progress is never touched.
#pragma once

#include <optional>
#include <string>

namespace mpf::checkpoint {

// A process, as a lock records it.
struct Writer {
  std::string host;  // gethostname()
  long pid = 0;
  // Clock ticks after boot when it started (/proc/<pid>/stat, field 22): with the pid it names
  // one process, where a pid alone may since have been given to another.
  unsigned long long start_time = 0;
  std::string boot_id;        // /proc/sys/kernel/random/boot_id: another after a reboot
  std::string pid_namespace;  // /proc/self/ns/pid: pids compare only within one
  std::string slurm_job;      // SLURM_JOB_ID, "" outside Slurm
  std::string slurm_array;    // SLURM_ARRAY_JOB_ID_SLURM_ARRAY_TASK_ID, "" if not an array task
  std::string taken;          // when it took the lock, UTC (ISO 8601)
};

// This process, taken now.
Writer this_process();

// "host H (pid P, Slurm job J)": how messages name a writer.
std::string describe(const Writer& w);

// The tag partial saves are named with: "<job>-<host>-<pid>", job "job<SLURM_JOB_ID>" or
// "nojob", every character outside [A-Za-z0-9._-] as '_' (a file name's, on any file system).
std::string writer_tag(const Writer& w);
// The part of writer_tag() for a job or a host.
std::string job_tag(const std::string& slurm_job);
std::string safe_name(const std::string& text);

// Whether pid runs on this host (and, if start_time is not 0, is the process that started
// then). True where that cannot be told (a /proc that hides other users' processes).
bool process_running(long pid, unsigned long long start_time);

struct Verdict {
  bool gone = false;
  bool provable = true;  // false: neither gone nor running could be shown
  std::string why;       // how it was shown, or why it could not be
};

// Whether writer `w` is provably gone, as seen by `me`:
// - on this host (same host name and pid namespace): its pid no longer runs, or runs a process
//   that started at another time, or the host has rebooted since (another boot id);
// - elsewhere, of a Slurm job: the job is ours (a requeued job keeps its ID, and Slurm starts
//   the new incarnation only after the old one has ended), or squeue (asked with a short
//   timeout) knows no such job or reports it finished;
// - anything else (another host outside Slurm, or no squeue to ask) cannot be proven gone.
Verdict writer_gone(const Writer& w, const Writer& me);

// What `squeue -h -j job -o %T` says: the job's state, "" if Slurm knows no such job (any more);
// nullopt if squeue is missing, fails or does not answer within `timeout_s`.
std::optional<std::string> slurm_job_state(const std::string& job, double timeout_s);

}  // namespace mpf::checkpoint
