#include <gtest/gtest.h>

#include <string>

#include "core/error.hpp"

namespace mpf {

// Every error is one line, whatever the message quotes (a user's file of two lines, a tab, a
// NUL byte), so a job script's grep '^error:' sees all of it.
TEST(ErrorLine, EscapesControlCharacters) {
  EXPECT_EQ(error_line("plain"), "error: plain\n");
  EXPECT_EQ(error_line("a\nb"), "error: a\\nb\n");
  EXPECT_EQ(error_line("a\r\tb"), "error: a\\r\\tb\n");
  EXPECT_EQ(error_line(std::string("a\0b\x1b\x7f", 5)), "error: a\\x00b\\x1b\\x7f\n");
  EXPECT_EQ(error_line("caf\xc3\xa9"), "error: caf\xc3\xa9\n");  // UTF-8 passes
}

}  // namespace mpf
