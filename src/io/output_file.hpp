// Files the program writes for the user (checkpoints, traces): never over something that exists,
// and found unwritable at start-up rather than at the end of a run.
#pragma once

#include <string>

namespace mpf {

bool path_exists(const std::string& path);

// Throws InputError, naming `label` (e.g. "checkpoint out.bin", "--trace t.json"), if `path`
// exists or its directory is missing or not writable.
void check_new_output(const std::string& path, const std::string& label);

}  // namespace mpf
