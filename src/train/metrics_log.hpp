// --metrics FILE.jsonl: the run's record for curves and dashboards, one JSON object a line, each
// with a "kind":
//   run      each start: the step it starts after ("step", 0 for a new run), layout and model;
//   step     every step, the step line's fields under their plain names: step, loss, lr, norm,
//            ms, tok_s, mfu, and tokens (seen so far);
//   val      a validation: step, loss;
//   peak     MFU's peak measured again (peak_tracker.hpp): step, gflops (all ranks);
//   outlier  an update --skip-outliers skipped: step, loss, norm, their z-scores, skipped so far;
//   rerun    --rerun-suspect computed a step again to the same bits: step, loss;
//   suspect  ... to other bits on some rank: step, verdict (the ranks and hosts);
//   diverged the step that stopped the run: step, loss, norm (null where not finite);
//   memory   the end: the measured peak resident set and the prediction, GB, of the rank whose
//            prediction was furthest off;
//   summary  the end: step, status, loss, ms_per_step, tok_s, mfu, peak, skipped.
// Each line is one write(2) on a descriptor opened with O_APPEND, cut off again if the file system
// takes only part of it (a full disk): a reader (a plot, tail -f) never sees half a line, and a
// crash loses at most the line being written. A resumed run keeps the records up to its
// checkpoint's step and drops the later ones (steps it does again), so a Slurm chain requeued any
// number of times leaves one file holding each step once. Rank 0 writes.
#pragma once

#include <string>
#include <vector>

namespace mpf {

// One object, its members in the order added.
class MetricsRecord {
 public:
  explicit MetricsRecord(const char* kind);
  MetricsRecord& number(const char* key, double value);  // null when not finite
  MetricsRecord& integer(const char* key, long long value);
  MetricsRecord& text(const char* key, const std::string& value);
  std::string line() const;  // the object and "\n"

 private:
  std::string body_;
};

// What opening the file will do, decided at start-up by reading it only (a dry run writes
// nothing): keep the records of steps up to `keep_through`, or start the file over.
struct MetricsStart {
  bool exists = false;
  int keep_through = 0;           // records of later steps are dropped (0: none kept)
  std::vector<std::string> kept;  // the lines kept, each with its "\n"
  int dropped = 0;
  // The file is written anew (atomically) before appending: records dropped, or a last line
  // that lacks its newline (a crash between a record's last byte and its newline, or a full disk).
  bool rewrite = false;
  std::string note;  // for rank 0 to print, or ""
};

// For a run whose first step is `first_step` (> 1: resumed from a checkpoint of first_step - 1).
// A new run never appends to another run's file: InputError, unless every run record in it names
// `save_dir` (an earlier attempt of the same job that saved no checkpoint, whose steps this run
// does again), or the file is empty. A resumed run's file must name `save_dir` in every run record
// too (else InputError naming both). Only this program's records are dropped: a file that does not
// start with a run record, or holds a line that is no record, is InputError, but for a last line
// without its newline after whole records that starts as a record does (one a crash cut short),
// dropped with a note.
MetricsStart plan_metrics(const std::string& path, int first_step, const std::string& save_dir);

class MetricsLog {
 public:
  // Applies `start`: when it drops records, the kept lines are written to a temporary beside the
  // file and renamed over it (atomic); then opens the file to append. Throws InputError.
  MetricsLog(std::string path, const MetricsStart& start);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // One line, all or nothing: a failed write is truncated back to the file's length before it,
  // reported once on stderr and ends the file's records; the run goes on (its checkpoints are what
  // it cannot lose).
  void write(const MetricsRecord& record);

 private:
  std::string path_;
  int fd_ = -1;
  bool failed_ = false;
};

}  // namespace mpf
