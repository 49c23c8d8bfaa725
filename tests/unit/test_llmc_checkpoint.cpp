// llm.c checkpoints: fp32 round trip through write/read, the exact llm.c header layout, refusal
// to overwrite, and an InputError with the key facts for every malformed file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint/llmc_checkpoint.hpp"
#include "core/error.hpp"
#include "test_helpers.hpp"

namespace mpf {
namespace {

using test::input_error;
using ::testing::AllOf;
using ::testing::HasSubstr;

GPTConfig tiny() {
  GPTConfig cfg;
  cfg.max_seq_len = 4;
  cfg.vocab = 10;
  cfg.padded_vocab = 16;
  cfg.layers = 2;
  cfg.heads = 2;
  cfg.channels = 8;
  return cfg;
}

std::vector<float> ramp(int64_t n) {
  std::vector<float> p(n);
  for (int64_t i = 0; i < n; ++i) p[i] = 0.001f * float(i) - 0.5f;
  return p;
}

class CheckpointTest : public test::ScratchDirTest {
 protected:
  // A checkpoint with an arbitrary header (slots as given) and `floats` parameters.
  std::string write_raw(const std::string& name, std::vector<int32_t> slots, int64_t floats) const {
    std::vector<int32_t> header(256, 0);
    std::copy(slots.begin(), slots.end(), header.begin());
    std::ofstream out(path(name), std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), 1024);
    const std::vector<float> params(floats, 0.25f);
    out.write(reinterpret_cast<const char*>(params.data()), 4 * floats);
    return path(name);
  }
  std::vector<int32_t> tiny_header(int32_t magic = 20240326, int32_t version = 3) const {
    const GPTConfig c = tiny();
    return {magic, version, c.max_seq_len, c.vocab, c.layers, c.heads, c.channels, c.padded_vocab};
  }
};

TEST_F(CheckpointTest, RoundTrip) {
  const GPTConfig cfg = tiny();
  const std::vector<float> params = ramp(parameter_count(cfg));
  write_checkpoint(path("m.bin"), cfg, params);
  EXPECT_EQ(std::filesystem::file_size(path("m.bin")), 1024u + 4u * params.size());

  const GPTConfig back = read_checkpoint_config(path("m.bin"));
  EXPECT_EQ(back.max_seq_len, 4);
  EXPECT_EQ(back.vocab, 10);
  EXPECT_EQ(back.padded_vocab, 16);
  EXPECT_EQ(back.layers, 2);
  EXPECT_EQ(back.heads, 2);
  EXPECT_EQ(back.channels, 8);

  std::vector<float> read;
  read_checkpoint_params(path("m.bin"), back, read);
  ASSERT_EQ(read.size(), params.size());
  EXPECT_EQ(std::memcmp(read.data(), params.data(), 4 * params.size()), 0);

  // No temporary is left beside it.
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir_)) entries += e.exists();
  EXPECT_EQ(entries, 1);
}

TEST_F(CheckpointTest, HeaderIsLlmcLayout) {
  const GPTConfig cfg = tiny();
  write_checkpoint(path("m.bin"), cfg, ramp(parameter_count(cfg)));
  std::ifstream in(path("m.bin"), std::ios::binary);
  std::vector<int32_t> h(256);
  in.read(reinterpret_cast<char*>(h.data()), 1024);
  EXPECT_EQ(std::vector<int32_t>(h.begin(), h.begin() + 8), tiny_header());
  for (int i = 8; i < 256; ++i) EXPECT_EQ(h[i], 0) << "slot " << i;
  float first = 0;
  in.read(reinterpret_cast<char*>(&first), 4);
  EXPECT_EQ(first, -0.5f);
}

TEST_F(CheckpointTest, ReadsAHandWrittenFile) {
  // An independently written file (as llm.c's exporter would) reads back with its values.
  const int64_t n = parameter_count(tiny());
  write_raw("hand.bin", tiny_header(), n);
  std::vector<float> params;
  read_checkpoint_params(path("hand.bin"), read_checkpoint_config(path("hand.bin")), params);
  ASSERT_EQ(static_cast<int64_t>(params.size()), n);
  for (float p : params) ASSERT_EQ(p, 0.25f);
}

TEST_F(CheckpointTest, RefusesToOverwrite) {
  const GPTConfig cfg = tiny();
  write_checkpoint(path("m.bin"), cfg, ramp(parameter_count(cfg)));
  const std::vector<float> other(parameter_count(cfg), 7.0f);
  EXPECT_THAT(input_error([&] { write_checkpoint(path("m.bin"), cfg, other); }),
              AllOf(HasSubstr(path("m.bin")), HasSubstr("already exists")));
  std::vector<float> read;
  read_checkpoint_params(path("m.bin"), cfg, read);
  EXPECT_EQ(read, ramp(parameter_count(cfg)));  // the original is untouched
}

TEST_F(CheckpointTest, WriteIntoMissingDirectory) {
  const GPTConfig cfg = tiny();
  EXPECT_THAT(
      input_error([&] { write_checkpoint(path("no/m.bin"), cfg, ramp(parameter_count(cfg))); }),
      AllOf(HasSubstr(path("no/m.bin")), HasSubstr("cannot create")));
}

TEST_F(CheckpointTest, CheckWritable) {
  EXPECT_NO_THROW(check_checkpoint_writable(path("new.bin")));
  write_raw("old.bin", tiny_header(), parameter_count(tiny()));
  EXPECT_THAT(input_error([&] { check_checkpoint_writable(path("old.bin")); }),
              AllOf(HasSubstr(path("old.bin")), HasSubstr("already exists")));
  EXPECT_THAT(input_error([&] { check_checkpoint_writable(path("sub/m.bin")); }),
              AllOf(HasSubstr(path("sub")), HasSubstr("does not exist")));
  EXPECT_THAT(input_error([] { check_checkpoint_writable(""); }), HasSubstr("empty"));
}

TEST_F(CheckpointTest, CheckWritableReadOnlyDirectory) {
  if (geteuid() == 0) GTEST_SKIP() << "root writes to read-only directories";
  ASSERT_EQ(mkdir(path("ro").c_str(), 0555), 0);
  EXPECT_THAT(input_error([&] { check_checkpoint_writable(path("ro/m.bin")); }),
              AllOf(HasSubstr(path("ro")), HasSubstr("not writable")));
}

TEST_F(CheckpointTest, MissingFile) {
  EXPECT_THAT(
      input_error([&] { read_checkpoint_config(path("gone.bin")); }),
      AllOf(HasSubstr(path("gone.bin")), HasSubstr("cannot open"), HasSubstr("No such file")));
}

TEST_F(CheckpointTest, ShortFile) {
  std::ofstream(path("short.bin")) << "not a model";
  EXPECT_THAT(input_error([&] { read_checkpoint_config(path("short.bin")); }),
              AllOf(HasSubstr(path("short.bin")), HasSubstr("11 bytes"), HasSubstr("too short"),
                    HasSubstr("1024")));
}

TEST_F(CheckpointTest, WrongMagic) {
  write_raw("bad.bin", tiny_header(12345), parameter_count(tiny()));
  EXPECT_THAT(
      input_error([&] { read_checkpoint_config(path("bad.bin")); }),
      AllOf(HasSubstr(path("bad.bin")), HasSubstr("bad magic 12345"), HasSubstr("20240326")));
}

TEST_F(CheckpointTest, TokenShardIsNotAModel) {
  write_raw("shard.bin", {20240520, 1, 4}, 2);
  EXPECT_THAT(input_error([&] { read_checkpoint_config(path("shard.bin")); }),
              AllOf(HasSubstr(path("shard.bin")), HasSubstr("token shard")));
}

TEST_F(CheckpointTest, Bf16VersionSaysExportFp32) {
  write_raw("bf16.bin", tiny_header(20240326, 5), parameter_count(tiny()) / 2);
  EXPECT_THAT(input_error([&] { read_checkpoint_config(path("bf16.bin")); }),
              AllOf(HasSubstr(path("bf16.bin")), HasSubstr("bf16"),
                    HasSubstr("only fp32 (version 3)"), HasSubstr("export fp32")));
}

TEST_F(CheckpointTest, OtherVersion) {
  write_raw("v1.bin", tiny_header(20240326, 1), parameter_count(tiny()));
  EXPECT_THAT(
      input_error([&] { read_checkpoint_config(path("v1.bin")); }),
      AllOf(HasSubstr(path("v1.bin")), HasSubstr("version 1"), HasSubstr("only fp32 (version 3)")));
}

TEST_F(CheckpointTest, BadSizesInHeader) {
  std::vector<int32_t> h = tiny_header();
  h[5] = 3;  // 8 channels do not split into 3 heads
  write_raw("heads.bin", h, parameter_count(tiny()));
  EXPECT_THAT(input_error([&] { read_checkpoint_config(path("heads.bin")); }),
              AllOf(HasSubstr(path("heads.bin")), HasSubstr("3 heads")));
  h = tiny_header();
  h[7] = 0;  // padded vocab missing
  write_raw("vp.bin", h, parameter_count(tiny()));
  EXPECT_THAT(input_error([&] { read_checkpoint_config(path("vp.bin")); }),
              HasSubstr(path("vp.bin")));
}

TEST_F(CheckpointTest, ImplausibleSizesDoNotOverflow) {
  write_raw("huge.bin", {20240326, 3, 1 << 30, 1 << 30, 1 << 30, 1, 1 << 30, 1 << 30}, 4);
  EXPECT_THAT(input_error([&] { read_checkpoint_config(path("huge.bin")); }),
              AllOf(HasSubstr(path("huge.bin")), HasSubstr("implausible")));
}

TEST_F(CheckpointTest, SizeMismatch) {
  const int64_t n = parameter_count(tiny());
  const std::string expected = std::to_string(1024 + 4 * n);
  write_raw("short.bin", tiny_header(), n - 1);
  EXPECT_THAT(input_error([&] { read_checkpoint_config(path("short.bin")); }),
              AllOf(HasSubstr(path("short.bin")), HasSubstr("expected " + expected + " bytes"),
                    HasSubstr("has " + std::to_string(1024 + 4 * (n - 1)))));
  write_raw("long.bin", tiny_header(), n + 1);
  EXPECT_THAT(input_error([&] { read_checkpoint_config(path("long.bin")); }),
              AllOf(HasSubstr("expected " + expected + " bytes"),
                    HasSubstr("has " + std::to_string(1024 + 4 * (n + 1)))));
  std::vector<float> params;
  EXPECT_THAT(input_error([&] { read_checkpoint_params(path("short.bin"), tiny(), params); }),
              HasSubstr("size mismatch"));
}

TEST_F(CheckpointTest, ParamsFromADifferentModel) {
  const GPTConfig cfg = tiny();
  write_checkpoint(path("m.bin"), cfg, ramp(parameter_count(cfg)));
  GPTConfig other = cfg;
  other.layers = 3;
  std::vector<float> params;
  EXPECT_THAT(
      input_error([&] { read_checkpoint_params(path("m.bin"), other, params); }),
      AllOf(HasSubstr(path("m.bin")), HasSubstr("L2"), HasSubstr("L3"), HasSubstr("was expected")));
}

}  // namespace
}  // namespace mpf
