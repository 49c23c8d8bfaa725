// Files the program writes for the user (checkpoints, traces): never over something that exists,
// and found unwritable at start-up rather than at the end of a run.
#pragma once

#include <string>

namespace mpf {

bool path_exists(const std::string& path);
bool is_directory(const std::string& path);

// rename(2) that never replaces an existing `to` (RENAME_NOREPLACE, or a check where the file
// system lacks it). Returns 0, or -1 with errno set (EEXIST if `to` exists).
int rename_no_replace(const std::string& from, const std::string& to);

// Throws InputError, naming `label` (e.g. "checkpoint out.bin", "--trace t.json"), if `path`
// exists or its directory is missing or not writable.
void check_new_output(const std::string& path, const std::string& label);

}  // namespace mpf
