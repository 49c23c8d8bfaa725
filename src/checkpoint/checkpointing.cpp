#include "checkpoint/checkpointing.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <climits>
#include <cstdio>
#include <cstring>
#include <functional>

#include "checkpoint/checkpoint_dir.hpp"
#include "checkpoint/llmc_checkpoint.hpp"
#include "core/error.hpp"
#include "core/stopwatch.hpp"
#include "io/output_file.hpp"
#include "parallel/agreement.hpp"
#include "parallel/grid.hpp"

namespace mpf {

namespace {

std::string without_trailing_slash(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

// A message and a sentence after it.
std::string and_then(std::string message, const std::string& hint) {
  if (hint.empty()) return message;
  if (!message.empty() && message.back() != '.') message += ".";
  return message + " " + hint;
}

// Runs check(); an InputError it throws gains the hint of a checkpoint to use instead.
void with_alternative(const std::string& root, int64_t step, const std::function<void()>& check) {
  try {
    check();
  } catch (const InputError& e) {
    throw InputError(and_then(e.what(), intact_alternative(root, step)));
  }
}

// The state file parses and both binary files have the sizes its model needs.
CheckpointInfo read_and_check(const std::string& root, int64_t step) {
  CheckpointInfo info = read_checkpoint_info(checkpoint::state_file(root, step));
  require(info.step == step, "checkpoint " + checkpoint::state_file(root, step) + ": says step " +
                                 std::to_string(info.step) + " in a directory of step " +
                                 std::to_string(step) + "; the checkpoint is corrupt");
  for (const bool optimizer : {false, true}) {
    const std::string file =
        optimizer ? checkpoint::optimizer_file(root, step) : checkpoint::model_file(root, step);
    const GPTConfig cfg = optimizer ? read_optimizer_config(file) : read_checkpoint_config(file);
    require(same_shape(cfg, info.model), "checkpoint " + file + ": holds model " + describe(cfg) +
                                             ", its state file " + describe(info.model) +
                                             "; the checkpoint is corrupt");
  }
  return info;
}

std::string steps_text(const std::vector<int64_t>& steps) {
  std::string s;
  for (size_t i = 0; i < steps.size() && i < 8; ++i)
    s += (i ? ", " : "") + std::to_string(steps[i]);
  if (steps.size() > 8) s += ", ... " + std::to_string(steps.back());
  return s.empty() ? "none" : s;
}

// "", "m of " or "v of ": which part of a file section i of `sections` is.
std::string part(size_t sections, size_t i) {
  if (sections == kNumParameterTensors) return "";
  return i < kNumParameterTensors ? "m of " : "v of ";
}

// An InputError-worthy text if any section holds a non-finite value, else "".
std::string nonfinite(const std::vector<Digest>& digests, const StateFiles& files,
                      const std::string& file) {
  for (size_t i = 0; i < digests.size(); ++i) {
    if (digests[i].nonfinite == 0) continue;
    return file + ": " + part(digests.size(), i) +
           files.describe_position(digests[i].first_nonfinite) + " is not finite (NaN or Inf), " +
           std::to_string(digests[i].nonfinite) + " value(s) of that tensor in all";
  }
  return "";
}

// Checks the digests of a file read against the checksums its state file recorded.
void verify(const std::vector<Digest>& digests, const std::vector<uint64_t>& expected,
            const StateFiles& files, const ResumePoint& r, const std::string& file) {
  const std::string bad = nonfinite(digests, files, file);
  require(bad.empty(), and_then("checkpoint " + bad + "; the checkpoint is corrupt",
                                intact_alternative(r.root, r.info.step)));
  for (size_t i = 0; i < digests.size(); ++i) {
    if (!present(TensorId(int(i % kNumParameterTensors)), r.info.model)) continue;
    if (digests[i].checksum == expected[i]) continue;
    char sums[80];
    std::snprintf(sums, sizeof sums, "0x%016" PRIx64 " where the state file says 0x%016" PRIx64,
                  digests[i].checksum, expected[i]);
    throw InputError(and_then("checkpoint " + file + ": tensor " + part(digests.size(), i) +
                                  kTensors[i % kNumParameterTensors].name +
                                  " fails its checksum (" + sums + "); the file is corrupt",
                              intact_alternative(r.root, r.info.step)));
  }
}

}  // namespace

std::string intact_alternative(const std::string& root, int64_t below) {
  const std::vector<int64_t> steps = checkpoint::list_steps(root);
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (*it >= below) continue;
    try {
      read_and_check(root, *it);
    } catch (const InputError&) {
      continue;
    }
    return "The newest intact checkpoint is " + checkpoint::path(root, *it) +
           ": resume from it with --load " + root + " --load-step " + std::to_string(*it) + ".";
  }
  return "";
}

int64_t choose_checkpoint(const std::string& dir, int64_t load_step,
                          std::vector<std::string>& notes) {
  if (dir.empty()) return -1;
  const std::string root = without_trailing_slash(dir);
  if (!is_directory(root)) {
    require(!path_exists(root),
            "--load " + root + ": not a directory; pass a checkpoint directory");
    notes.push_back("--load " + root +
                    ": no checkpoint yet (the directory does not exist); "
                    "starting a new run");
    return -1;
  }
  const std::vector<int64_t> steps = checkpoint::list_steps(root);
  int64_t step = 0;
  if (load_step > 0) {
    step = load_step;
    require(is_directory(checkpoint::path(root, step)),
            "--load-step " + std::to_string(step) + ": " + checkpoint::path(root, step) +
                " does not exist; " + root + " holds the steps " + steps_text(steps));
  } else {
    with_alternative(root, INT64_MAX, [&] { step = checkpoint::read_latest(root); });
    if (step < 0 && steps.empty()) {
      notes.push_back("--load " + root + ": no checkpoint yet; starting a new run");
      return -1;
    }
    if (step >= 0) {
      with_alternative(root, step, [&] {
        require(is_directory(checkpoint::path(root, step)),
                root + "/latest names " + checkpoint::name(step) + ", which does not exist.");
      });
    }
    // A checkpoint newer than `latest` is complete (it is renamed into place only then): its
    // save was cut off between the rename and `latest`. Resume from it.
    if (!steps.empty() && steps.back() > step) {
      const int64_t newer = steps.back();
      bool intact = true;
      try {
        read_and_check(root, newer);
      } catch (const InputError&) {
        intact = false;
      }
      require(intact || step >= 0,
              and_then(root + " holds checkpoints (steps " + steps_text(steps) +
                           ") but no `latest` file naming the newest complete one; choose one "
                           "with --load-step N",
                       intact_alternative(root, INT64_MAX)));
      if (intact) {
        notes.push_back(checkpoint::path(root, newer) + " is newer than " +
                        (step >= 0 ? "the " + checkpoint::name(step) + " `latest` names"
                                   : std::string("any `latest`")) +
                        " (a save was cut off before updating it): resuming from it");
        step = newer;
      }
    }
  }
  open_checkpoint(root, step);
  return step;
}

void require_checkpoint_found(const std::string& dir, int64_t step) {
  require(step >= 0, "--load " + dir + ": " +
                         (path_exists(dir) ? "holds no checkpoint" : "no such directory") +
                         "; pass the --save directory of a training run, or a model file or "
                         "Hugging Face directory with --init-from");
}

ResumePoint open_checkpoint(const std::string& dir, int64_t step) {
  ResumePoint r{without_trailing_slash(dir), {}};
  with_alternative(r.root, step, [&] { r.info = read_and_check(r.root, step); });
  return r;
}

void check_save_writable(const std::string& save) {
  const std::string root = without_trailing_slash(save);
  require(!path_exists(root) || is_directory(root),
          "--save " + root + ": exists and is not a directory; pass a directory for checkpoints");
  const std::string unwritable = checkpoint::probe_writable(root);
  require(unwritable.empty(),
          "--save " + root + ": " + unwritable + "; pass a --save directory this run can write to");
}

void check_local_writable(const std::string& dir) {
  const std::string root = without_trailing_slash(dir);
  require(!path_exists(root) || is_directory(root),
          "--save-local " + root +
              ": exists and is not a directory; pass a directory for the "
              "local shards");
  const std::string unwritable = checkpoint::probe_writable(root);
  require(unwritable.empty(), "--save-local " + root + ": " + unwritable +
                                  "; pass a --save-local directory this run can write to on "
                                  "every node");
}

void check_save_directory(const std::string& save, const std::string& load, int64_t first_step) {
  if (save.empty()) return;
  const std::string root = without_trailing_slash(save);
  check_save_writable(root);
  const std::vector<int64_t> steps = checkpoint::list_steps(root);
  if (steps.empty()) {
    // This program writes `latest` only after a checkpoint directory is in place, so a `latest`
    // beside none is the user's own file, which the first save would silently replace.
    struct stat st;
    const std::string latest = root + "/latest";
    require(lstat(latest.c_str(), &st) != 0,
            "--save " + root + ": " + latest + " exists but " + root +
                " holds no checkpoint, so this program did not write it and the first save would "
                "replace it; move " +
                latest + " away or pass another --save directory");
    return;
  }
  const bool same = !load.empty() && is_directory(load) && [&] {
    struct stat a, b;
    return stat(root.c_str(), &a) == 0 && stat(load.c_str(), &b) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
  }();
  require(same, "--save " + root + " already holds checkpoints of another run (steps " +
                    steps_text(steps) + "); pass --load " + root +
                    " to continue that run, or save into an empty directory");
  // Resuming into the same directory: nothing there may be newer than the resumed step, or this
  // run's saves would collide with (and --keep-last remove) checkpoints of another history.
  require(steps.back() < first_step,
          root + " holds " + checkpoint::name(steps.back()) +
              ", newer than the checkpoint this run resumes from (step " +
              std::to_string(first_step - 1) +
              "): it was saved by a run that was cut off before updating `latest`, or "
              "--load-step chose an older one. Resume from it with --load-step " +
              std::to_string(steps.back()) + ", or move it out of " + root);
}

SaveReport save_checkpoint(const StateFiles& files, MPI_Comm world, const std::string& root_in,
                           CheckpointInfo info, int keep_last,
                           const std::function<void()>& between_files) {
  const std::string root = without_trailing_slash(root_in);
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  Stopwatch clock;
  SaveReport report;
  report.path = checkpoint::path(root, info.step);
  std::string error, partial;
  // A rank's own work between the collectives may throw (on a background writer thread an
  // escaped exception would end the process): it becomes this rank's error, the rank goes on
  // through the same collectives, and the ranks agree on it before anything is published.
  auto guarded = [&error](const auto& work) {
    try {
      work();
    } catch (const std::exception& e) {
      if (error.empty()) error = std::string("the save failed: ") + e.what();
    } catch (...) {
      if (error.empty()) error = "the save failed (an unknown exception)";
    }
  };
  if (rank == 0) {
    guarded([&] {
      // This run saves one at a time: a partial of its own is a save of it that was cut off.
      // The others' were looked at when the lock was taken (checkpoint/save_lock.hpp).
      report.notes = checkpoint::remove_dead_partials(root, nullptr, /*own_only=*/true);
      error = checkpoint::create_partial(root, info.step, partial);
    });
  }
  error = broadcast(error, 0, world);
  partial = broadcast(partial, 0, world);
  std::vector<Digest> model, moments;
  if (error.empty())
    error = files.write_model(checkpoint::model_file_in(partial, info.step), model);
  if (between_files) guarded(between_files);
  // Agreed before the next collective: a rank whose own work failed still makes it with the
  // others (write_model's error is agreed already).
  error = first_error(world, error);
  if (error.empty()) {
    error = files.write_optimizer(checkpoint::optimizer_file_in(partial, info.step), moments);
  }
  if (error.empty()) {
    const std::string bad = nonfinite(model, files, "the parameters");
    const std::string bad_m = nonfinite(moments, files, "the optimizer state");
    if (!bad.empty() || !bad_m.empty()) error = (bad.empty() ? bad_m : bad) + ": not saved";
  }
  if (rank == 0) {
    guarded([&] {
      if (!error.empty()) return;
      for (int i = 0; i < kNumParameterTensors; ++i) {
        info.params_checksum[i] = model[i].checksum;
        info.m_checksum[i] = moments[i].checksum;
        info.v_checksum[i] = moments[kNumParameterTensors + i].checksum;
      }
      error = checkpoint::write_text(checkpoint::state_file_in(partial, info.step), to_text(info));
      if (error.empty()) error = checkpoint::commit(root, info.step, partial);
    });
    if (!error.empty() && !partial.empty())
      guarded([&] { checkpoint::remove(partial, info.step); });
    // Published: a failure of --keep-last's removals is a note, not the save's error.
    if (error.empty() && keep_last > 0) {
      try {
        const std::vector<int64_t> steps = checkpoint::list_steps(root);
        for (size_t i = 0; i + size_t(keep_last) < steps.size(); ++i) {
          if (steps[i] == info.step) continue;
          const std::string dir = checkpoint::path(root, steps[i]);
          const std::string kept = checkpoint::remove(dir, steps[i]);
          report.notes.push_back(kept.empty() ? "removed " + dir + " (--keep-last " +
                                                    std::to_string(keep_last) + ")"
                                              : kept);
        }
      } catch (const std::exception& e) {
        report.notes.push_back(std::string("--keep-last stopped: ") + e.what());
      }
    }
  }
  report.error = broadcast(error, 0, world);
  report.bytes = files.model_bytes() + files.optimizer_bytes();
  report.seconds = clock.seconds();
  return report;
}

void load_checkpoint_parameters(const StateFiles& files, const ResumePoint& r) {
  const int64_t step = r.info.step;
  std::vector<Digest> digests;
  const std::string model = checkpoint::model_file(r.root, step);
  const std::string error = files.read_model(model, digests);
  require(error.empty(), and_then("checkpoint " + error, intact_alternative(r.root, step)));
  verify(digests, {r.info.params_checksum.begin(), r.info.params_checksum.end()}, files, r, model);
}

void load_checkpoint(const StateFiles& files, const ResumePoint& r) {
  const int64_t step = r.info.step;
  load_checkpoint_parameters(files, r);
  std::vector<Digest> digests;
  const std::string optimizer = checkpoint::optimizer_file(r.root, step);
  const std::string error = files.read_optimizer(optimizer, digests);
  require(error.empty(), and_then("checkpoint " + error, intact_alternative(r.root, step)));
  std::vector<uint64_t> expected(r.info.m_checksum.begin(), r.info.m_checksum.end());
  expected.insert(expected.end(), r.info.v_checksum.begin(), r.info.v_checksum.end());
  verify(digests, expected, files, r, optimizer);
}

void load_model_file(const StateFiles& files, const std::string& path) {
  std::vector<Digest> digests;
  const std::string error = files.read_model(path, digests);
  require(error.empty(), "checkpoint " + error);
  const std::string bad = nonfinite(digests, files, path);
  require(bad.empty(), "checkpoint " + bad + "; a model cannot train from it: pass a finite one");
}

std::string save_model_file(const StateFiles& files, MPI_Comm world, const std::string& path) {
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  // The temporary is named by rank 0's pid, beside the target (same file system: the rename is
  // atomic).
  const std::string tmp = broadcast(path + ".partial-" + std::to_string(getpid()), 0, world);
  std::vector<Digest> digests;
  std::string error = files.write_model(tmp, digests);
  if (error.empty()) {
    const std::string bad = nonfinite(digests, files, "the parameters");
    if (!bad.empty()) error = bad + ": " + path + " not written";
  }
  if (rank == 0) {
    if (error.empty() && rename_no_replace(tmp, path) != 0) {
      error = path + ": cannot rename " + tmp + " into place (" + std::strerror(errno) + ")";
    }
    if (!error.empty()) std::remove(tmp.c_str());
  }
  return broadcast(error, 0, world);
}

}  // namespace mpf
