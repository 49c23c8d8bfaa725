// What mpiformer-plan prints: the ranked table, why the first layout wins, why others are
// excluded, the commands that run it; or the same as one JSON object.
#pragma once

#include <string>
#include <vector>

#include "plan/search.hpp"

namespace mpf::plan {

struct ReportInput {
  const Job* job = nullptr;
  const Machine* machine = nullptr;
  std::string machine_path;
  std::string model_flags;     // the trainer's flags for the model: "--init-from DIR" or the sizes
  std::string model_note;      // a line on how the commands take the model, or ""
  int top = 10;                // rows shown
  bool include_unfit = false;  // JSON: list a layout that does not fit too (--evaluate)
};

// The launch commands of a layout: mpiexec, and srun with the job script's variables.
std::string mpiexec_command(const ReportInput& in, const Layout& l);
std::string srun_command(const ReportInput& in, const Layout& l);
// The same through the job script ci/slurm/cpu.sbatch: its variables, then sbatch.
std::string job_script_command(const ReportInput& in, const Layout& l);

std::string text_report(const ReportInput& in, const std::vector<Candidate>& ranked);
std::string json_report(const ReportInput& in, const std::vector<Candidate>& ranked);
// One layout (--evaluate): its terms, memory and commands.
std::string text_evaluation(const ReportInput& in, const Candidate& c);

}  // namespace mpf::plan
