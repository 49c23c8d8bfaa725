// The threads a rank chooses: the cores it may use over the ranks on its node, where the node's
// rank count is MPI's (node_placement), never a launcher's variables; --threads, then
// OMP_NUM_THREADS, override it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "parallel/node.hpp"
#include "train/trainer.hpp"

namespace mpf {
namespace {

// Sets (or with nullopt unsets) environment variables for a scope, then puts them back.
class ScopedEnv {
 public:
  void set(const std::string& name, std::optional<std::string> value) {
    if (!saved_.count(name)) {
      const char* old = std::getenv(name.c_str());
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
    }
    if (value) {
      setenv(name.c_str(), value->c_str(), 1);
    } else {
      unsetenv(name.c_str());
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

TEST(Threads, CoresAreSplitOverTheRanksOfTheNode) {
  ScopedEnv env;
  env.set("OMP_NUM_THREADS", std::nullopt);
  env.set("OMP_WAIT_POLICY", "passive");  // no oversubscription warning in the test's log
  // What launchers say about a node's ranks; the choice must not read any of it.
  env.set("SLURM_NTASKS_PER_NODE", "7");
  env.set("OMPI_COMM_WORLD_LOCAL_SIZE", "7");
  env.set("MPI_LOCALNRANKS", "7");
  const int cores = usable_cpus();
  ASSERT_GE(cores, 1);
  for (int local_size : {1, 2, 3, 4, 64}) {
    NodePlacement place;
    place.local_size = local_size;
    EXPECT_EQ(choose_threads(0, place, MPI_COMM_SELF), std::max(1, cores / local_size))
        << local_size << " ranks on the node";
  }
}

TEST(Threads, RequestedThenOmpNumThreadsOverrideTheSplit) {
  ScopedEnv env;
  env.set("OMP_WAIT_POLICY", "passive");
  NodePlacement place;
  place.local_size = 64;
  env.set("OMP_NUM_THREADS", "3");
  EXPECT_EQ(choose_threads(0, place, MPI_COMM_SELF), 3);
  EXPECT_EQ(choose_threads(5, place, MPI_COMM_SELF), 5);
  env.set("OMP_NUM_THREADS", "0");  // not a count: ignored
  EXPECT_EQ(choose_threads(0, place, MPI_COMM_SELF), std::max(1, usable_cpus() / 64));
}

}  // namespace
}  // namespace mpf
