// The run's settings, one row each: the flag, its --help text, the least value it takes, where a
// checkpoint's state file keeps it and what a resumed run does with it. Parsing (options.cpp),
// --help, the settings a checkpoint saves and the resume policy (resume.cpp) all read this table,
// so a new setting is a field in TrainOptions and one row here.
#pragma once

#include <limits>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/flags.hpp"
#include "layout/options.hpp"

namespace mpf {

// What a resumed run does with a setting its checkpoint saved.
enum class OnResume {
  not_saved,   // this process's business: paths, output, threads, logging
  keep,        // defines the run (the model, the seed, the optimizer): taken from the checkpoint;
               // given on the command line with another value, an error
  may_change,  // taken from the checkpoint unless given
  warns,       // may change, with a warning saying what the change does to the run
  recorded,    // written for the record (the layout that saved it): any layout may resume
};

// The TrainOptions field a setting parses into; a bool field is a switch (a flag without value).
using SettingField =
    std::variant<int TrainOptions::*, int64_t TrainOptions::*, uint64_t TrainOptions::*,
                 float TrainOptions::*, double TrainOptions::*, bool TrainOptions::*,
                 std::string TrainOptions::*, Precision TrainOptions::*>;

inline constexpr double kNoMinimum = -std::numeric_limits<double>::infinity();

struct Setting {
  const char* flag;  // "--lr"
  const char* arg;   // the value's name in --help ("X"); "" for a switch
  const char* help;  // --help's text; " (default V)" is added from TrainOptions{} unless it
                     // says "default" itself
  SettingField field;
  double min = kNoMinimum;    // the least value a given number may take
  const char* key = nullptr;  // in the state file ("optimizer.lr"); nullptr: not saved
  OnResume on_resume = OnResume::not_saved;
  const char* choices = nullptr;  // "auto,yes,no": the only values a text setting takes
  const char* alone = nullptr;    // the value the flag means given without one (flags::Table)
};

struct SettingGroup {
  const char* title;  // --help's heading
  std::vector<Setting> rows;
};

// Every setting of mpiformer-train, grouped as --help shows them.
const std::vector<SettingGroup>& setting_groups();

// Another program's own flag (mpiformer-generate's, mpiformer-tokenize's): a row of this table
// bound to a field of that program's options, parsed with a setting's checks (the number, its
// least and most value, its choices; a bool field is a switch) and shown in --help as a setting
// is. A field of a kind the table has no type for (a list) is a setter of its own; a row whose
// value has no name (arg "") is a switch, which sets "true".
using FlagField =
    std::variant<int*, int64_t*, uint64_t*, float*, double*, bool*, std::string*, flags::Setter>;

inline constexpr double kNoMaximum = std::numeric_limits<double>::infinity();

struct FlagRow {
  const char* flag;
  const char* arg;   // "" for a switch
  const char* help;  // " (default V)" is added from the field as a setting's is
  FlagField field;
  double min = kNoMinimum;
  const char* choices = nullptr;
  double max = kNoMaximum;
};

struct FlagGroup {
  const char* title;  // --help's heading
  std::vector<FlagRow> rows;
};

// The rows into `table` (flags::parse's), with --help and -h setting `help`.
void add_flag_rows(flags::Table& table, const std::vector<FlagGroup>& groups, bool& help);

// --help's lines of the rows under their groups' titles, the defaults shown from the fields
// (bind the rows to a default options).
std::string flag_rows_help(const std::vector<FlagGroup>& groups);

// Parses `value` into the row's field of `o`; InputError naming `flag` for a malformed value, one
// below the row's minimum or not among its choices. A switch takes value "true".
void set_setting(TrainOptions& o, const Setting& s, const std::string& flag,
                 const std::string& value);

// The field's value as the state file writes it (floats with 9 digits: the same float back).
std::string setting_text(const TrainOptions& o, const Setting& s);

// The field's value as a person writes it (1e-08, 0.9): for --help and messages.
std::string setting_shown(const TrainOptions& o, const Setting& s);

bool same_setting(const TrainOptions& a, const TrainOptions& b, const Setting& s);

// The saved settings of a run whose options are `resolved` (the layout, the data and the
// schedule's length as the run resolved them), in table order; the model's sizes are left to
// the checkpoint's own model section.
std::vector<std::pair<std::string, std::string>> saved_settings(const TrainOptions& resolved);

}  // namespace mpf
