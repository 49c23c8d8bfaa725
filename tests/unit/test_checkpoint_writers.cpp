// The writers of a checkpoint directory, on one rank: the lock on a --save directory (its text
// read back defensively, a live holder refused, a gone one taken over, by exactly one of several
// runs at once, the lock released only while it is ours); partial names that say who wrote them,
// whether a writer is provably gone, and cleanup that removes only what a gone writer left.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "checkpoint/checkpoint_dir.hpp"
#include "checkpoint/save_lock.hpp"
#include "checkpoint/writer.hpp"
#include "test_helpers.hpp"

namespace mpf {
namespace {

using test::input_error;
using ::testing::AllOf;
using ::testing::HasSubstr;
namespace ckpt = checkpoint;

using test::read_file;
using test::write_file;

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// This process as another pid would be: same host, boot and pid namespace.
ckpt::Writer as_pid(long pid, unsigned long long start_time) {
  ckpt::Writer w = ckpt::this_process();
  w.pid = pid;
  w.start_time = start_time;
  w.taken = "2025-01-02T03:04:05Z";
  return w;
}

// A pid that ran (a child of this process) and is gone.
long gone_pid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  return long(child);
}

unsigned long long start_time_of(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream fields(s.substr(s.rfind(')') + 1));
  std::string f;
  for (int i = 3; i <= 22; ++i) fields >> f;
  return std::stoull(f);
}

class SaveLockTest : public test::ScratchDirTest {};
class WriterTest : public test::ScratchDirTest {};

TEST_F(SaveLockTest, LockTextRoundTrip) {
  ckpt::Writer w = ckpt::this_process();
  w.slurm_job = "4242";
  w.slurm_array = "4240_2";
  const std::optional<ckpt::Writer> r = ckpt::parse_lock(ckpt::lock_text(w));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(ckpt::lock_text(*r), ckpt::lock_text(w));  // every field, through the text
  EXPECT_EQ(r->pid, long(getpid()));
  EXPECT_GT(r->start_time, 0u);
  EXPECT_EQ(r->slurm_job, "4242");
  EXPECT_EQ(ckpt::describe(*r), "host " + w.host + " (pid " + std::to_string(getpid()) +
                                    ", Slurm job 4242, array task 4240_2)");
}

TEST_F(SaveLockTest, GarbageIsNotALock) {
  const std::string good = ckpt::lock_text(ckpt::this_process());
  EXPECT_FALSE(ckpt::parse_lock(""));
  EXPECT_FALSE(ckpt::parse_lock("hello\n"));
  EXPECT_FALSE(ckpt::parse_lock(good.substr(0, good.find("pid ="))));  // truncated
  std::string bad_pid = good;
  bad_pid.replace(bad_pid.find("pid = ") + 6, 1, "x");
  EXPECT_FALSE(ckpt::parse_lock(bad_pid));
  EXPECT_FALSE(ckpt::parse_lock(good + "a line that is no field\n"));
}

TEST_F(SaveLockTest, TakesAndReleases) {
  const std::string root = path("a/b");  // made with its parents
  {
    std::vector<std::string> notes;
    ckpt::SaveLock lock(root, notes);
    EXPECT_TRUE(notes.empty());
    EXPECT_FALSE(lock.taken_over());
    const std::optional<ckpt::Writer> holder = ckpt::parse_lock(read_file(ckpt::lock_file(root)));
    ASSERT_TRUE(holder.has_value());
    EXPECT_EQ(holder->pid, long(getpid()));
    EXPECT_EQ(names_in(root), std::vector<std::string>{"mpiformer.lock"});  // no temporary left
  }
  EXPECT_TRUE(names_in(root).empty());
}

TEST_F(SaveLockTest, RefusesALiveHolder) {
  const long parent = long(getppid());
  const std::string text = ckpt::lock_text(as_pid(parent, start_time_of(parent)));
  write_file(ckpt::lock_file(dir_), text);
  std::vector<std::string> notes;
  EXPECT_THAT(
      input_error([&] { ckpt::SaveLock lock(dir_, notes); }),
      AllOf(HasSubstr("--save " + dir_ + " is in use by the run on host"),
            HasSubstr("(pid " + std::to_string(parent) + ")"),
            HasSubstr("since 2025-01-02T03:04:05Z"), HasSubstr("pass another --save directory")));
  EXPECT_EQ(read_file(ckpt::lock_file(dir_)), text);
  EXPECT_EQ(names_in(dir_), std::vector<std::string>{"mpiformer.lock"});
}

TEST_F(SaveLockTest, TakesOverAGoneHolder) {
  const long gone = gone_pid();
  write_file(ckpt::lock_file(dir_), ckpt::lock_text(as_pid(gone, 12345)));
  std::vector<std::string> notes;
  {
    ckpt::SaveLock lock(dir_, notes);
    ASSERT_TRUE(lock.taken_over());
    EXPECT_EQ(lock.taken_over()->pid, gone);
    EXPECT_EQ(ckpt::parse_lock(read_file(ckpt::lock_file(dir_)))->pid, long(getpid()));
    EXPECT_EQ(names_in(dir_), std::vector<std::string>{"mpiformer.lock"});  // no marker left
  }
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_THAT(notes[0], AllOf(HasSubstr("took over the lock of the run on host"),
                              HasSubstr("pid " + std::to_string(gone) + " no longer runs")));
}

TEST_F(SaveLockTest, ReleasesOnlyItsOwnLock) {
  std::vector<std::string> notes;
  const std::string other = ckpt::lock_text(as_pid(long(getppid()), 1));
  {
    ckpt::SaveLock lock(dir_, notes);
    // Another run has since taken it over (as one that found this run gone would).
    write_file(path("other"), other);
    std::filesystem::rename(path("other"), ckpt::lock_file(dir_));
  }
  EXPECT_EQ(read_file(ckpt::lock_file(dir_)), other);
}

// Several new runs find the same gone holder at the same moment: exactly one takes the lock over,
// the others are refused (it is in use by the one that did), and nothing is left behind.
TEST_F(SaveLockTest, OneOfManyTakesOverAtOnce) {
  write_file(ckpt::lock_file(dir_), ckpt::lock_text(as_pid(gone_pid(), 12345)));
  constexpr int kRuns = 6;
  int go[2], results[2], release[2];
  ASSERT_EQ(pipe(go), 0);
  ASSERT_EQ(pipe(results), 0);
  ASSERT_EQ(pipe(release), 0);
  std::vector<pid_t> runs;
  for (int i = 0; i < kRuns; ++i) {
    const pid_t child = fork();
    if (child == 0) {
      close(go[1]);
      close(release[1]);
      char c;
      (void)!::read(go[0], &c, 1);  // all start together, when the parent closes `go`
      char took = 'N';
      {
        std::vector<std::string> notes;
        try {
          ckpt::SaveLock lock(dir_, notes);
          took = 'Y';
          (void)!::write(results[1], &took, 1);
          (void)!::read(release[0], &c, 1);  // held until every run has tried
        } catch (const InputError&) {
          (void)!::write(results[1], &took, 1);
        }
      }
      _exit(0);
    }
    runs.push_back(child);
  }
  close(go[0]);
  close(release[0]);
  close(go[1]);
  int taken = 0;
  for (int i = 0; i < kRuns; ++i) {
    char c = 0;
    ASSERT_EQ(::read(results[0], &c, 1), 1);
    taken += c == 'Y';
  }
  EXPECT_EQ(taken, 1);
  const std::optional<ckpt::Writer> holder = ckpt::parse_lock(read_file(ckpt::lock_file(dir_)));
  ASSERT_TRUE(holder.has_value());
  EXPECT_NE(std::find(runs.begin(), runs.end(), pid_t(holder->pid)), runs.end());
  close(release[1]);
  for (const pid_t r : runs) waitpid(r, nullptr, 0);
  EXPECT_TRUE(names_in(dir_).empty());  // released; no marker or temporary left
}

TEST_F(WriterTest, WhoIsProvablyGone) {
  const ckpt::Writer me = ckpt::this_process();
  const long parent = long(getppid());
  EXPECT_FALSE(ckpt::writer_gone(as_pid(parent, start_time_of(parent)), me).gone);
  const ckpt::Verdict reused = ckpt::writer_gone(as_pid(parent, start_time_of(parent) + 1), me);
  EXPECT_TRUE(reused.gone) << reused.why;
  EXPECT_TRUE(ckpt::writer_gone(as_pid(gone_pid(), 1), me).gone);
  ckpt::Writer rebooted = as_pid(parent, start_time_of(parent));
  rebooted.boot_id = "another boot";
  EXPECT_TRUE(ckpt::writer_gone(rebooted, me).gone);
  ckpt::Writer elsewhere = as_pid(1, 1);
  elsewhere.host = "othernode";
  const ckpt::Verdict unknown = ckpt::writer_gone(elsewhere, me);
  EXPECT_FALSE(unknown.gone);
  EXPECT_FALSE(unknown.provable);
  // Of this Slurm job but on another host: its earlier run, requeued.
  ckpt::Writer requeued = elsewhere, us = me;
  requeued.slurm_job = us.slurm_job = "4242";
  EXPECT_TRUE(ckpt::writer_gone(requeued, us).gone);
  // On this host the pid decides, Slurm job or not: a live one is not gone.
  ckpt::Writer same_job_here = as_pid(parent, start_time_of(parent));
  same_job_here.slurm_job = "4242";
  EXPECT_FALSE(ckpt::writer_gone(same_job_here, us).gone);
}

TEST_F(WriterTest, PartialNamesSayWhoWroteThem) {
  ckpt::Writer w = ckpt::this_process();
  w.host = "node 7/a-b";
  w.pid = 77;
  w.slurm_job = "12-x";
  EXPECT_EQ(ckpt::writer_tag(w), "job12_x-node_7_a-b-77");
  w.slurm_job.clear();
  EXPECT_EQ(ckpt::writer_tag(w), "nojob-node_7_a-b-77");
  const auto parsed = ckpt::partial_writer("d/step_00000005.partial-job12_x-node_7_a-b-77");
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->job, "job12_x");
  EXPECT_EQ(parsed->host, "node_7_a-b");
  EXPECT_EQ(parsed->pid, 77);
  const auto old = ckpt::partial_writer("d/step_00000005.partial-my-host-9");  // earlier versions
  ASSERT_TRUE(old.has_value());
  EXPECT_EQ(old->job, "");
  EXPECT_EQ(old->host, "my-host");
  EXPECT_EQ(old->pid, 9);
  EXPECT_EQ(ckpt::partial_writer("d/latest.partial-nojob-h-1")->host, "h");
  EXPECT_FALSE(ckpt::partial_writer("d/step_00000005.partial-host"));
  EXPECT_FALSE(ckpt::partial_writer("d/step_00000005"));
  std::string partial;
  ASSERT_EQ(ckpt::create_partial(dir_, 3, partial), "");
  EXPECT_EQ(partial, ckpt::path(dir_, 3) + ".partial-" + ckpt::writer_tag(ckpt::this_process()));
}

TEST_F(WriterTest, CleanupRemovesOnlyAGoneWritersPartials) {
  const ckpt::Writer me = ckpt::this_process();
  const std::string here = ckpt::safe_name(me.host), gone = std::to_string(gone_pid());
  const std::string live = std::to_string(getppid());
  std::string own;
  ASSERT_EQ(ckpt::create_partial(dir_, 1, own), "");
  for (const std::string& d : std::vector<std::string>{
           "step_00000002.partial-nojob-" + here + "-" + gone,
           "step_00000003.partial-nojob-" + here + "-" + live,
           "step_00000004.partial-nojob-other-" + gone, "step_00000005.partial-job9-other-5",
           "step_00000006.partial-job8-other-5"}) {
    std::filesystem::create_directory(path(d));
  }
  write_file(path("latest.partial-nojob-" + here + "-" + gone), "step_00000002\n");
  write_file(path("mpiformer.lock.partial-nojob-" + here + "-" + gone), "a lock never linked");
  // A save looks at its own alone.
  std::vector<std::string> notes = ckpt::remove_dead_partials(dir_, nullptr, true);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_THAT(notes[0], HasSubstr("removed " + own + ", a save of this run that was cut off"));
  EXPECT_EQ(ckpt::list_partial(dir_).size(), 7u);
  // At start-up: a gone pid here, and the gone lock holder's (job 9 on `other`, pid 5).
  ckpt::Writer holder = me;
  holder.host = "other";
  holder.pid = 5;
  holder.slurm_job = "9";
  notes = ckpt::remove_dead_partials(dir_, &holder, false);
  EXPECT_EQ(notes.size(), 7u);
  EXPECT_EQ(names_in(dir_),
            (std::vector<std::string>{"step_00000003.partial-nojob-" + here + "-" + live,
                                      "step_00000004.partial-nojob-other-" + gone,
                                      "step_00000006.partial-job8-other-5"}));
  EXPECT_THAT(notes, ::testing::Contains(HasSubstr("step_00000004.partial-nojob-other-" + gone +
                                                   ": its writer (pid " + gone +
                                                   " on other) may still be saving")));
  EXPECT_THAT(notes, ::testing::Contains(HasSubstr("step_00000005.partial-job9-other-5, a save "
                                                   "of the gone run on host other")));
}

}  // namespace
}  // namespace mpf
