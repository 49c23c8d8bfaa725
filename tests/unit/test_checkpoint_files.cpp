// The checkpoint directory's files on one rank: names, `latest`, the atomic commit that never
// replaces a checkpoint, removal that never takes a user's file, and the state file's round trip
// and refusals.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "checkpoint/checkpoint_dir.hpp"
#include "checkpoint/checkpoint_info.hpp"
#include "model/tensors.hpp"
#include "test_helpers.hpp"

namespace mpf {
namespace {

using test::input_error;
using ::testing::HasSubstr;
namespace ckpt = checkpoint;

using test::read_file;
using test::write_file;

class CheckpointDirTest : public test::ScratchDirTest {
 protected:
  // A committed checkpoint of `step` whose files hold `tag`.
  void save(int64_t step, const std::string& tag) {
    std::string partial;
    ASSERT_EQ(ckpt::create_partial(dir_, step, partial), "");
    ASSERT_EQ(ckpt::write_text(ckpt::model_file_in(partial, step), tag), "");
    ASSERT_EQ(ckpt::write_text(ckpt::state_file_in(partial, step), tag), "");
    ASSERT_EQ(ckpt::commit(dir_, step, partial), "");
  }
};

TEST_F(CheckpointDirTest, Names) {
  EXPECT_EQ(ckpt::name(1000), "step_00001000");
  EXPECT_EQ(ckpt::model_file("d", 12), "d/step_00000012/model_00000012.bin");
  EXPECT_EQ(ckpt::optimizer_file("d", 12), "d/step_00000012/optimizer_00000012.bin");
  EXPECT_EQ(ckpt::state_file("d", 12), "d/step_00000012/state_00000012.txt");
}

TEST_F(CheckpointDirTest, CommitMakesItVisibleThenLatest) {
  EXPECT_TRUE(ckpt::list_steps(dir_).empty());
  EXPECT_EQ(ckpt::read_latest(dir_), -1);
  save(4, "four");
  save(12, "twelve");
  EXPECT_EQ(ckpt::list_steps(dir_), (std::vector<int64_t>{4, 12}));
  EXPECT_EQ(ckpt::read_latest(dir_), 12);
  EXPECT_EQ(read_file(dir_ + "/latest"), "step_00000012\n");
  EXPECT_EQ(read_file(ckpt::model_file(dir_, 4)), "four");
  EXPECT_TRUE(ckpt::list_partial(dir_).empty());
}

TEST_F(CheckpointDirTest, CommitNeverReplacesACheckpoint) {
  save(4, "first");
  std::string partial;
  ASSERT_EQ(ckpt::create_partial(dir_, 4, partial), "");
  ASSERT_EQ(ckpt::write_text(ckpt::model_file_in(partial, 4), "second"), "");
  EXPECT_THAT(ckpt::commit(dir_, 4, partial), HasSubstr("cannot rename"));
  EXPECT_EQ(read_file(ckpt::model_file(dir_, 4)), "first");
  // The partial directory is left for the caller to remove, and is listed as such.
  ASSERT_EQ(ckpt::list_partial(dir_).size(), 1u);
  EXPECT_EQ(ckpt::partial_step(ckpt::list_partial(dir_)[0]), 4);
  EXPECT_EQ(ckpt::remove(partial, 4), "");
  EXPECT_TRUE(ckpt::list_partial(dir_).empty());
}

TEST_F(CheckpointDirTest, CreatesTheRootAndItsParents) {
  const std::string root = dir_ + "/a/b/ckpt";
  std::string partial;
  ASSERT_EQ(ckpt::create_partial(root, 1, partial), "");
  EXPECT_TRUE(std::filesystem::is_directory(partial));
}

TEST_F(CheckpointDirTest, WriteTextNeverOverwrites) {
  write_file(path("mine.txt"), "user data");
  EXPECT_THAT(ckpt::write_text(path("mine.txt"), "ours"), HasSubstr("cannot create"));
  EXPECT_EQ(read_file(path("mine.txt")), "user data");
}

TEST_F(CheckpointDirTest, RemoveKeepsAUsersFile) {
  save(4, "four");
  save(8, "eight");
  write_file(ckpt::path(dir_, 4) + "/notes.txt", "keep me");
  EXPECT_THAT(ckpt::remove(ckpt::path(dir_, 4), 4), HasSubstr("was kept"));
  EXPECT_EQ(read_file(ckpt::path(dir_, 4) + "/notes.txt"), "keep me");
  EXPECT_FALSE(std::filesystem::exists(ckpt::model_file(dir_, 4)));
  EXPECT_EQ(ckpt::remove(ckpt::path(dir_, 8), 8), "");
  EXPECT_FALSE(std::filesystem::exists(ckpt::path(dir_, 8)));
}

TEST_F(CheckpointDirTest, ListsOnlyCheckpointDirectories) {
  save(3, "three");
  std::filesystem::create_directory(path("step_12"));        // too few digits
  std::filesystem::create_directory(path("step_0000001x"));  // not a number
  write_file(path("step_00000007"), "a file, not a directory");
  std::filesystem::create_directory(path("step_00000009.partial-host-1"));
  EXPECT_EQ(ckpt::list_steps(dir_), (std::vector<int64_t>{3}));
  EXPECT_EQ(ckpt::list_partial(dir_).size(), 1u);
}

TEST_F(CheckpointDirTest, MalformedLatest) {
  write_file(path("latest"), "garbage\n");
  EXPECT_THAT(
      input_error([&] { ckpt::read_latest(dir_); }),
      ::testing::AllOf(HasSubstr("latest"), HasSubstr("garbage"), HasSubstr("--load-step")));
  write_file(path("latest"), "");
  EXPECT_THAT(input_error([&] { ckpt::read_latest(dir_); }), HasSubstr("does not name"));
}

CheckpointInfo filled() {
  CheckpointInfo c;
  c.step = 1234;
  c.model = {64, 300, 384, 3, 4, 16};
  c.settings = {{"run.seed", "987654321012345"},
                {"run.batch", "12"},
                {"optimizer.lr", "0.000600000028"},
                {"data.train", "data/x_*.bin,more data/y.bin"},
                {"data.val", ""},
                {"layout.sequence_parallel", "true"}};
  c.train_data_tokens = 1LL << 40;
  c.train_file = 3;
  c.train_position = 123456789;
  c.tokens_seen = 987654321;
  c.val_file = 0;
  c.val_position = 4096;
  for (int i = 0; i < kNumParameterTensors; ++i) {
    if (!present(TensorId(i), c.model)) continue;  // no checksum for a tensor GPT-2 lacks
    c.params_checksum[i] = 0x9e3779b97f4a7c15ULL * (i + 1);
    c.m_checksum[i] = ~c.params_checksum[i];
    c.v_checksum[i] = c.params_checksum[i] ^ 0xffffULL;
  }
  return c;
}

TEST_F(CheckpointDirTest, StateFileRoundTrip) {
  const CheckpointInfo c = filled();
  write_file(path("state.txt"), to_text(c));
  const CheckpointInfo r = read_checkpoint_info(path("state.txt"));
  // Field by field through the text form: the same text means every field came back.
  EXPECT_EQ(to_text(r), to_text(c));
  EXPECT_EQ(r.settings, c.settings);  // in order, an empty value kept
  EXPECT_EQ(setting(r, "data.train"), "data/x_*.bin,more data/y.bin");
  EXPECT_EQ(setting(r, "data.val"), "");
  EXPECT_EQ(setting(r, "run.steps"), std::nullopt);
  EXPECT_EQ(r.train_position, c.train_position);
  EXPECT_EQ(r.m_checksum, c.m_checksum);
}

// A Llama's state file adds its architecture and fields, and checksums only the tensors it has.
TEST_F(CheckpointDirTest, LlamaStateFileRoundTrip) {
  CheckpointInfo c = filled();
  c.model.arch = Arch::kLlama;
  c.model.kv_heads = 2;
  c.model.ffn_dim = 40;
  c.model.norm_eps = 1e-6f;
  c.model.rope_theta = 500000.0f;
  c.model.rope_factor = 8.0f;
  c.model.rope_original_max_pos = 8192;
  c.model.tied = false;
  for (int i = 0; i < kNumParameterTensors; ++i) {
    const bool has = present(TensorId(i), c.model);
    c.params_checksum[i] = has ? 0x9e3779b97f4a7c15ULL * (i + 1) : 0;
    c.m_checksum[i] = has ? ~c.params_checksum[i] : 0;
    c.v_checksum[i] = has ? c.params_checksum[i] ^ 0xffffULL : 0;
  }
  const std::string text = to_text(c);
  EXPECT_NE(text.find("model.arch = llama\n"), std::string::npos);
  EXPECT_NE(text.find("checksum.model.lmhead"), std::string::npos);
  EXPECT_EQ(text.find("checksum.model.wpe"), std::string::npos);
  write_file(path("state.txt"), text);
  const CheckpointInfo r = read_checkpoint_info(path("state.txt"));
  EXPECT_EQ(to_text(r), text);
  EXPECT_TRUE(same_shape(r.model, c.model));
  EXPECT_FALSE(r.model.tied);
  EXPECT_EQ(r.model.rope_theta, 500000.0f);
}

// A Qwen2-MoE without its Q, K, V biases (config.json's qkv_bias false) says so, has no qkvb
// checksums, and reads back as that model (not as the family's, which has them).
TEST_F(CheckpointDirTest, StateFileWithoutQkvBiases) {
  CheckpointInfo c = filled();
  c.model.arch = Arch::kQwen2Moe;
  c.model.kv_heads = 2;
  c.model.ffn_dim = 40;
  c.model.experts = 4;
  c.model.experts_per_token = 2;
  c.model.shared_ffn = 24;
  c.model.no_qkv_bias = true;
  EXPECT_FALSE(present(TensorId::qkvb, c.model));
  c.params_checksum = c.m_checksum = c.v_checksum = {};
  for (int i = 0; i < kNumParameterTensors; ++i) {
    if (present(TensorId(i), c.model)) c.params_checksum[i] = 0x9e3779b97f4a7c15ULL * (i + 1);
  }
  const std::string text = to_text(c);
  EXPECT_NE(text.find("model.no_qkv_bias = 1\n"), std::string::npos);
  EXPECT_EQ(text.find("checksum.model.qkvb"), std::string::npos);
  write_file(path("state.txt"), text);
  const CheckpointInfo r = read_checkpoint_info(path("state.txt"));
  EXPECT_EQ(to_text(r), text);
  EXPECT_TRUE(r.model.no_qkv_bias);
  EXPECT_TRUE(same_shape(r.model, c.model));
  GPTConfig with_biases = c.model;
  with_biases.no_qkv_bias = false;
  EXPECT_FALSE(same_shape(with_biases, c.model));
}

TEST_F(CheckpointDirTest, StateFileRefusals) {
  const std::string good = to_text(filled());
  auto with = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    t.replace(t.find(from), from.size(), to);
    write_file(path("state.txt"), t);
    return input_error([&] { read_checkpoint_info(path("state.txt")); });
  };
  EXPECT_THAT(with("format = 1", "format = 2"),
              ::testing::AllOf(HasSubstr("format version 2"), HasSubstr("reads version 1")));
  EXPECT_THAT(
      with("data.train_position = 123456789\n", ""),
      ::testing::AllOf(HasSubstr("'data.train_position' is missing"), HasSubstr("state.txt")));
  EXPECT_THAT(with("model.layers = 3", "model.layers = three"),
              HasSubstr("'model.layers' = 'three' is malformed"));
  EXPECT_THAT(with("data.val_file = 0", "data.val_file = first"), HasSubstr("malformed"));
  EXPECT_THAT(with("step = 1234", "step = 0"), HasSubstr("out of range"));
  EXPECT_THAT(input_error([&] { read_checkpoint_info(path("none.txt")); }),
              HasSubstr("cannot open"));
}

}  // namespace
}  // namespace mpf
