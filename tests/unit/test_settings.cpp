// The table of run settings: parsing, --help, what a checkpoint saves and what a resumed run
// takes from it all follow its rows.
#include <sys/stat.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <vector>

#include "checkpoint/checkpoint_info.hpp"
#include "layout/model_options.hpp"
#include "layout/options.hpp"
#include "layout/settings.hpp"
#include "test_helpers.hpp"
#include "train/resume.hpp"

namespace mpf {
namespace {

using test::input_error;
using ::testing::AllOf;
using ::testing::HasSubstr;

TrainOptions parse(std::vector<const char*> flags) {
  flags.insert(flags.begin(), "mpiformer-train");
  return parse_options(int(flags.size()), flags.data());
}

std::vector<const Setting*> rows() {
  std::vector<const Setting*> out;
  for (const SettingGroup& g : setting_groups()) {
    for (const Setting& s : g.rows) out.push_back(&s);
  }
  return out;
}

TEST(Settings, FlagsAndKeysAreUniqueAndHelpListsEveryFlag) {
  std::set<std::string> flags, keys;
  const std::string help = usage();
  for (const Setting* s : rows()) {
    EXPECT_TRUE(flags.insert(s->flag).second) << s->flag;
    if (s->key) {
      EXPECT_TRUE(keys.insert(s->key).second) << s->key;
    }
    EXPECT_NE(help.find(std::string("  ") + s->flag + " "), std::string::npos) << s->flag;
    // A setting saved in a checkpoint has a policy for the resumed run, and only then.
    EXPECT_EQ(s->key != nullptr, s->on_resume != OnResume::not_saved) << s->flag;
  }
  EXPECT_GE(rows().size(), 50u);
}

TEST(Settings, EveryFlagParsesIntoItsField) {
  // Flags that need another to mean something.
  const std::map<std::string, std::vector<const char*>> needs = {
      {"--tokenizer", {"--sample-every", "1"}},
      {"--save-every", {"--save", "dir"}},
      {"--keep-last", {"--save", "dir"}},
      {"--save-async", {"--save", "dir"}},
      {"--save-local", {"--save", "dir", "--save-local-every", "1"}},
      {"--save-local-every", {"--save", "dir", "--save-local", "local"}},
      {"--load-step", {"--load", "dir"}},
      {"--save-hf-dtype", {"--save-hf", "dir"}},
      {"--doc-token", {"--doc-mask"}},
      {"--eval-every", {"--eval-data", "tasks.bin"}},
      {"--eval-examples", {"--eval-data", "tasks.bin"}},
      {"--outlier-window", {"--skip-outliers", "2"}},
      {"--muon-momentum", {"--optimizer", "muon"}},
      {"--muon-ns-precision", {"--optimizer", "muon"}},
      {"--grad-reduce-dtype", {"--precision", "bf16"}},
      {"--p2p-dtype", {"--precision", "bf16"}},
      {"--tp-comm-dtype", {"--precision", "bf16"}},
      {"--zero-group", {"--zero", "1"}},
      {"--cp", {"--seq-len", "96"}}};  // 2 x 3 chunks
  for (const Setting* s : rows()) {
    const std::string flag = s->flag;
    if (flag == "--gemm" || flag == "--init-from") continue;  // checked against this build / files
    const bool is_switch = std::holds_alternative<bool TrainOptions::*>(s->field);
    // A value other than the default that the row accepts.
    std::string value = std::holds_alternative<float TrainOptions::*>(s->field) ? "0.5" : "3";
    if (s->choices) value = std::string(s->choices).substr(std::string(s->choices).rfind(',') + 1);
    if (std::holds_alternative<Precision TrainOptions::*>(s->field)) value = "bf16";
    if (flag == "--zero") value = "1";
    if (flag == "--save-async") value = "0";       // 1 is the default, and 0 or 1 the values
    if (flag == "--attention") value = "chunked";  // mma needs a CUDA build
    if (flag == "--rope-scaling") value = "8,1,4,8192";
    std::vector<const char*> args = {s->flag};
    if (!is_switch) args.push_back(value.c_str());
    if (needs.count(flag)) args.insert(args.end(), needs.at(flag).begin(), needs.at(flag).end());
    const TrainOptions o = parse(args);
    EXPECT_TRUE(o.given.count(flag)) << flag;
    EXPECT_EQ(setting_shown(o, *s), is_switch ? "true" : value) << flag;
  }
}

TEST(Settings, SaveAsyncIsZeroOrOneAndNeedsSave) {
  EXPECT_EQ(parse({"--save", "dir"}).save_async, 1);  // the default with --save
  EXPECT_THAT(input_error([] {
                parse({"--save", "dir", "--save-async", "2"});
              }),
              HasSubstr("--save-async takes 0 or 1, got 2"));
  EXPECT_THAT(input_error([] {
                parse({"--save-async", "0"});
              }),
              HasSubstr("--save-async 0 needs --save DIR"));
}

// --recompute takes none, full or selective, and alone (the switch it was) means full.
TEST(Settings, RecomputeAloneIsFull) {
  EXPECT_EQ(parse({}).recompute, "none");
  EXPECT_EQ(parse({"--recompute"}).recompute, "full");
  const TrainOptions o = parse({"--recompute", "--steps", "2"});
  EXPECT_EQ(o.recompute, "full");
  EXPECT_EQ(o.steps, 2);
  EXPECT_EQ(parse({"--recompute", "selective"}).recompute, "selective");
  EXPECT_EQ(parse({"--recompute=none"}).recompute, "none");
  EXPECT_THAT(input_error([] {
                parse({"--recompute", "partial"});
              }),
              HasSubstr("--recompute must be none, full or selective, got 'partial'"));
}

TEST(Settings, MinimumsAndChoicesAreEnforcedWithTheFlagsName) {
  EXPECT_THAT(input_error([] {
                parse({"--batch", "0"});
              }),
              HasSubstr("--batch must be >= 1, got 0"));
  EXPECT_THAT(input_error([] {
                parse({"--virtual-stages", "0"});
              }),
              HasSubstr("--virtual-stages must be >= 1"));
  EXPECT_THAT(input_error([] {
                parse({"--gpu-aware-mpi", "maybe"});
              }),
              HasSubstr("--gpu-aware-mpi must be auto, yes or no, got 'maybe'"));
  EXPECT_THAT(input_error([] { parse({"--seed", "-1"}); }), HasSubstr("non-negative"));
}

// Options as a run resolves them before saving: the layout and the schedule's length known.
TrainOptions resolved(TrainOptions o) {
  o.dp = o.virtual_stages = o.microbatches = 1;
  if (o.lr_decay_steps == 0) o.lr_decay_steps = o.steps;
  return o;
}

// A checkpoint's settings as a run with options `o` saves them.
CheckpointInfo saved_by(const TrainOptions& given) {
  const TrainOptions o = resolved(given);
  CheckpointInfo c;
  c.step = 10;
  c.model = {o.max_seq_len, o.vocab, 256, o.layers, o.heads, o.dim};
  c.settings = saved_settings(o);
  return c;
}

TEST(Settings, SavedTextReadsBackToTheSameValue) {
  const TrainOptions o =
      resolved(parse({"--lr", "0.0003", "--beta2", "0.95", "--seed", "12345678901",
                      "--sequence-parallel", "--schedule", "zb-v"}));
  for (const auto& [key, text] : saved_settings(o)) {
    for (const Setting* s : rows()) {
      if (!s->key || key != s->key) continue;
      TrainOptions back;
      set_setting(back, *s, key, text);
      EXPECT_TRUE(same_setting(back, o, *s)) << key << " = " << text;
    }
  }
}

TEST(Settings, ResumeKeepsTakesAndWarnsByPolicy) {
  const CheckpointInfo c = saved_by(parse({"--lr", "0.002", "--batch", "8", "--steps", "50"}));
  std::vector<std::string> warnings;
  // keep: a different value given is refused, naming the saved one.
  TrainOptions o = parse({"--seed", "7"});
  EXPECT_THAT(input_error([&] { adopt_checkpoint_options(o, c, "state.txt", warnings); }),
              AllOf(HasSubstr("--seed 7 differs from the checkpoint's 1337"),
                    HasSubstr("pass --seed 1337")));
  o = parse({"--layers", "3"});
  EXPECT_THAT(input_error([&] { adopt_checkpoint_options(o, c, "state.txt", warnings); }),
              HasSubstr("--layers 3 differs from the checkpoint's"));
  // Not given: taken from the checkpoint, whatever the policy.
  o = parse({});
  adopt_checkpoint_options(o, c, "state.txt", warnings);
  EXPECT_EQ(o.lr, 0.002f);
  EXPECT_EQ(o.batch, 8);
  EXPECT_EQ(o.steps, 50);
  EXPECT_TRUE(warnings.empty());
  // warns: a new batch is taken, with a warning.
  o = parse({"--batch", "4"});
  warnings.clear();
  adopt_checkpoint_options(o, c, "state.txt", warnings);
  EXPECT_EQ(o.batch, 4);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("differ from the checkpoint's 8 x 64"));
  // warns: the learning-rate schedule and the clipping may change (a diverged run resumes with
  // a lower --lr), each with a warning naming the old and the new value.
  o = parse({"--lr", "0.001", "--warmup", "5", "--lr-schedule", "constant", "--grad-clip", "0.5",
             "--final-lr-frac", "0.25"});
  warnings.clear();
  adopt_checkpoint_options(o, c, "state.txt", warnings);
  EXPECT_EQ(o.lr, 0.001f);
  EXPECT_EQ(o.warmup, 5);
  EXPECT_EQ(o.lr_schedule, "constant");
  EXPECT_EQ(o.grad_clip, 0.5f);
  EXPECT_EQ(o.final_lr_frac, 0.25f);
  ASSERT_EQ(warnings.size(), 5u);
  EXPECT_THAT(warnings[0], AllOf(HasSubstr("--lr 0.001 differs from the checkpoint's 0.002"),
                                 HasSubstr("pass --lr 0.002")));
  for (const char* flag :
       {"--warmup 5", "--lr-schedule constant", "--grad-clip 0.5", "--final-lr-frac 0.25"}) {
    bool named = false;
    for (const std::string& w : warnings) named |= w.rfind(flag, 0) == 0;
    EXPECT_TRUE(named) << flag;
  }
  // recorded: the layout is the new run's own.
  o = parse({"--tp", "2"});
  adopt_checkpoint_options(o, c, "state.txt", warnings);
  EXPECT_EQ(o.tp, 2);
}

// The model the flags describe: a Llama's fields, the Llama flags refused for GPT-2, a malformed
// --rope-scaling named; resuming a Llama keeps its architecture.
TEST(Settings, LlamaFlagsMakeTheModel) {
  const GPTConfig cfg = model_config(parse(
      {"--arch", "llama", "--heads", "4", "--kv-heads", "2", "--dim", "64", "--ffn-dim", "160",
       "--rope-scaling", "8,1,4,8192", "--tie-embeddings", "0", "--rope-theta", "500000"}));
  EXPECT_TRUE(cfg.llama());
  EXPECT_EQ(cfg.kv_head_count(), 2);
  EXPECT_EQ(cfg.ffn_width(), 160);
  EXPECT_EQ(cfg.rope_factor, 8.0f);
  EXPECT_EQ(cfg.rope_original_max_pos, 8192);
  EXPECT_FALSE(cfg.tied);
  EXPECT_EQ(rope_scaling_text(cfg), "8,1,4,8192");
  EXPECT_EQ(parse({"--rope-scaling", "8.0,1.00,4,8192"}).rope_scaling, "8,1,4,8192");
  EXPECT_THAT(input_error([&] {
                model_config(parse({"--kv-heads", "2"}));
              }),
              HasSubstr("--kv-heads is a Llama-family setting; pass --arch llama"));
  EXPECT_THAT(input_error([&] {
                model_config(parse({"--arch", "llama", "--rope-scaling", "8"}));
              }),
              HasSubstr("--rope-scaling '8' is not FACTOR,LOW_FREQ_FACTOR"));
  EXPECT_THAT(input_error([&] {
                model_config(parse({"--arch", "llama", "--kv-heads", "3"}));
              }),
              HasSubstr("choose --kv-heads dividing --heads"));
  EXPECT_THAT(input_error([&] { parse({"--arch", "bert"}); }), HasSubstr("--arch"));
  // An infinite value and sizes past any model's stop in validate(), before any allocation.
  EXPECT_THAT(input_error([&] {
                model_config(parse({"--arch", "llama", "--rope-scaling", "inf,1,4,8192"}));
              }),
              HasSubstr("--rope-scaling expects a number, got 'inf'"));
  EXPECT_THAT(input_error([&] {
                model_config(parse({"--arch", "llama", "--rope-scaling", "8,1,4,4294967297"}));
              }),
              HasSubstr("--rope-scaling value 4294967297 is out of range"));
  EXPECT_THAT(input_error([&] {
                model_config(parse({"--arch", "llama", "--ffn-dim", "2000000000"}));
              }),
              HasSubstr("the MLP width 2000000000 is implausibly large"));
  EXPECT_THAT(input_error([&] {
                model_config(parse({"--vocab", "2147483647"}));
              }),
              HasSubstr("the vocabulary size 2147483647 is implausibly large"));
  // An llm.c checkpoint holds the whole model: the model flags given are named.
  EXPECT_THAT(input_error([&] {
                model_config(parse({"--arch", "llama", "--kv-heads", "2", "--init-from", "m.bin"}));
              }),
              HasSubstr("drop --arch, --kv-heads, or drop --init-from"));

  CheckpointInfo c = saved_by(parse({}));
  c.model.arch = Arch::kLlama;
  c.model.kv_heads = 2;
  std::vector<std::string> warnings;
  TrainOptions o = parse({});
  adopt_checkpoint_options(o, c, "state.txt", warnings);
  EXPECT_EQ(o.arch, "llama");
  EXPECT_EQ(o.kv_heads, 2);
  o = parse({"--arch", "gpt2"});
  EXPECT_THAT(input_error([&] { adopt_checkpoint_options(o, c, "state.txt", warnings); }),
              HasSubstr("--arch gpt2 differs from the checkpoint's llama"));
  // A GPT-2 checkpoint's Llama settings are defaults, not values to pass back.
  o = parse({"--kv-heads", "1"});
  EXPECT_THAT(
      input_error([&] { adopt_checkpoint_options(o, saved_by(parse({})), "state.txt", warnings); }),
      HasSubstr("--kv-heads is a Llama setting and checkpoint state.txt holds a GPT-2"));
}

using DataVocab = test::ScratchDirTest;

// The manifest.json beside --data's shards gives a fresh model's vocabulary; --vocab may raise it,
// never lower it; no manifest (or data that is not .bin shards) leaves the flags as they are.
TEST_F(DataVocab, TheManifestBesideTheShardsGivesTheVocabulary) {
  test::write_file(path("manifest.json"), R"({"tokenizer": {"vocab_size": 300}})");
  const std::string shards = path("data_train_*.bin");
  TrainOptions o = parse({"--data", shards.c_str()});
  EXPECT_THAT(adopt_data_vocab(o),
              HasSubstr(path("manifest.json") + "'s tokenizer.vocab_size 300"));
  EXPECT_EQ(o.vocab, 300);
  EXPECT_EQ(model_config(o).vocab, 300);

  o = parse({"--data", shards.c_str(), "--vocab", "512"});
  EXPECT_EQ(adopt_data_vocab(o), "");
  EXPECT_EQ(o.vocab, 512);
  o = parse({"--data", shards.c_str(), "--vocab", "299"});
  EXPECT_THAT(input_error([&] { adopt_data_vocab(o); }),
              AllOf(HasSubstr("--vocab 299 is smaller than " + path("manifest.json")),
                    HasSubstr("--vocab >= 300")));

  // A comma list: the largest of the manifests beside its entries.
  ASSERT_EQ(mkdir(path("big").c_str(), 0755), 0);
  test::write_file(path("big/manifest.json"), R"({"tokenizer": {"vocab_size": 400}})");
  const std::string both = shards + "," + path("big/x.bin");
  o = parse({"--data", both.c_str()});
  EXPECT_THAT(adopt_data_vocab(o), HasSubstr("big/manifest.json"));
  EXPECT_EQ(o.vocab, 400);

  for (const std::string& data :
       {std::string("builtin:train"), path("corpus.txt"), path("none/data.bin")}) {
    o = parse({"--data", data.c_str()});
    EXPECT_EQ(adopt_data_vocab(o), "") << data;
    EXPECT_EQ(o.vocab, TrainOptions().vocab) << data;
  }

  test::write_file(path("manifest.json"), R"({"tokenizer": {"vocab_size": 2.5}})");
  o = parse({"--data", shards.c_str()});
  EXPECT_THAT(input_error([&] { adopt_data_vocab(o); }),
              HasSubstr("manifest " + path("manifest.json") + ": tokenizer.vocab_size"));
}

TEST(Settings, ResumeRefusesAMissingOrMalformedSavedSetting) {
  CheckpointInfo c = saved_by(parse({}));
  std::vector<std::string> warnings;
  for (auto& kv : c.settings) {
    if (kv.first == "run.batch") kv.second = "twelve";
  }
  TrainOptions o = parse({});
  EXPECT_THAT(input_error([&] { adopt_checkpoint_options(o, c, "state.txt", warnings); }),
              AllOf(HasSubstr("state.txt"), HasSubstr("'run.batch' = 'twelve' is malformed")));
  c.settings.erase(c.settings.begin());
  o = parse({});
  EXPECT_THAT(input_error([&] { adopt_checkpoint_options(o, c, "state.txt", warnings); }),
              HasSubstr("is missing; the file is truncated or corrupt"));
}

}  // namespace
}  // namespace mpf
