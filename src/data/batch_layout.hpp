// A rank's share of a batch's rows beyond the data-parallel split: the positions a
// context-parallel rank holds of each sequence (model/positions.hpp), and where each position's
// document starts under --doc-mask. Pure functions on host token arrays, unit-tested.
#pragma once

#include <cstdint>

#include "model/positions.hpp"

namespace mpf {

// out (rows, mine.rows) = the columns mine.position(t) of full (rows, T).
void take_positions(const int32_t* full, int rows, int T, const PositionRuns& mine, int32_t* out);

// starts (rows, T): for each position t of each row of tokens (rows, T), the last position p <= t
// holding `doc_token` (a document starts at each occurrence of it), or 0 when none does: the
// first document of a row began before the row.
// With `after`, doc_token ends a document instead (an end-of-sequence token, as Llama 2's and
// Mistral's files mark documents): a document starts right after each occurrence.
void document_starts(const int32_t* tokens, int rows, int T, int32_t doc_token, int32_t* starts,
                     bool after = false);

}  // namespace mpf
