// The writers of a checkpoint directory, on one rank: partial names that say who wrote them,
// whether a writer is provably gone, and cleanup that removes only what a gone writer left.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "checkpoint/checkpoint_dir.hpp"
#include "checkpoint/writer.hpp"
#include "test_helpers.hpp"

namespace mpf {
namespace {

using test::input_error;
using ::testing::AllOf;
using ::testing::HasSubstr;
namespace ckpt = checkpoint;

void write(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

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

class WriterTest : public test::ScratchDirTest {};

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
  write(path("latest.partial-nojob-" + here + "-" + gone), "step_00000002\n");
  // A save looks at its own alone.
  std::vector<std::string> notes = ckpt::remove_dead_partials(dir_, nullptr, true);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_THAT(notes[0], HasSubstr("removed " + own + ", a save of this run that was cut off"));
  EXPECT_EQ(ckpt::list_partial(dir_).size(), 6u);
  // At start-up: a gone pid here, and a writer known to be gone (job 9 on `other`, pid 5).
  ckpt::Writer holder = me;
  holder.host = "other";
  holder.pid = 5;
  holder.slurm_job = "9";
  notes = ckpt::remove_dead_partials(dir_, &holder, false);
  EXPECT_EQ(notes.size(), 6u);
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
