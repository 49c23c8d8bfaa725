// Command-line options of mpiformer-train. Parsing checks syntax and ranges; checks that need the
// model or the data (seq-len against max_seq_len, token ids against the vocabulary) happen where
// those are known. Every problem is an InputError naming the flag and the fix.
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include "core/bf16.hpp"
#include "core/flags.hpp"

namespace mpf {

struct TrainOptions {
  // Model: a checkpoint, or the sizes of a fresh one.
  std::string init_from;
  int layers = 4, heads = 4, dim = 128, vocab = 256, max_seq_len = 256;
  // The family (model/config.hpp: gpt2, llama, ..., olmoe) and what the families
  // of Llama blocks add; GPT-2 takes none of them.
  std::string arch = "gpt2";
  int kv_heads = 0, ffn_dim = 0;  // 0: the heads, 4C
  float norm_eps = 1e-5f, rope_theta = 10000.0f;
  std::string rope_scaling = "none";  // "none" or FACTOR,LOW,HIGH,ORIGINAL_MAX_POS (llama3)
  int tie_embeddings = 1;
  int sliding_window = 0;  // a query sees the last N positions; 0: all (Mistral v0.1, Phi-3)
  int head_dim = 0;        // the head size when not --dim / --heads (Qwen3); 0: --dim / --heads
  // A mixture of experts (the MoE families): E experts, k per token, the gates renormalised over
  // the k (-1: the family's way) and the balance loss's coefficient (-1: the model's, or 0.01).
  int experts = 0, experts_per_token = 0, moe_renormalize = -1;
  int shared_expert_dim = 0;  // Qwen2-MoE's shared expert width
  float moe_aux_coef = -1.0f;
  // DeepSeek-V3's multi-token prediction modules trained after the blocks (model/mtp.hpp); -1:
  // the Hugging Face file's num_nextn_predict_layers (0 for any other model).
  int mtp = -1;
  std::string model_flags_given;  // the model flags above on the command line ("--arch, --dim")
  // Data.
  std::string data = "builtin:train";
  std::string val_data;  // "" = builtin:val when training on builtin data, else none; "none" = off
  int batch = 16, seq_len = 64, steps = 200;
  // Document masking: a query attends within its own document, which starts at each occurrence of
  // doc_token (-1: the model's begin-of-document token, found from its vocabulary or config.json).
  bool doc_mask = false;
  int doc_token = -1;
  uint64_t seed = 1337;
  int log_every = 1, val_every = 50, val_steps = 10;
  // A multiple-choice task scored every eval_every steps and after the last (eval/task_eval.hpp).
  std::string eval_data;
  int eval_every = 0, eval_examples = 0;
  // Optimizer and schedule.
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.1f,
        grad_clip = 1.0f;
  // The blocks' matrices' optimizer (optim/muon.hpp): "adamw", or "muon" (AdamW keeps the rest),
  // Muon's momentum and the precision of its Newton-Schulz products; --reset-optimizer starts
  // the optimizer's state afresh on a resume (the only way to switch optimizers).
  std::string optimizer = "adamw";
  float muon_momentum = 0.95f;
  std::string muon_ns_precision = "fp32";
  bool reset_optimizer = false;
  // --qk-clip τ: after each update, a head whose largest attention logit in the step exceeded τ
  // has its query and key projections scaled down to τ (optim/qk_clip.hpp); 0: off.
  float qk_clip = 0.0f;
  // --moe-bias-update-rate γ: DeepSeek-V3's aux-loss-free balancing, after each update every
  // routing bias moved by γ · sign(mean load − the expert's load); 0: off.
  float moe_bias_update_rate = 0.0f;
  // --mtp-weight λ: the multi-token prediction loss's weight in the objective (DeepSeek-V3's 0.3
  // for its first 10T tokens).
  float mtp_weight = 0.3f;
  int warmup = 0;
  // --skip-outliers Z: no update for a step whose loss or gradient norm is more than Z standard
  // deviations above the last outlier_window steps' (0: off).
  double skip_outliers = 0.0;
  int outlier_window = 128;
  bool rerun_suspect = false;  // compute such a step (or a non-finite one) again and compare
  std::string lr_schedule = "cosine";
  float final_lr_frac = 0.0f;
  int lr_decay_steps = 0;  // the schedule's length (Megatron's --lr-decay-iters); 0: --steps
  // Layout: world = tp x cp x dp x pp (tp fastest); dp = 0 means world / (tp * cp * pp).
  int tp = 1, pp = 1, dp = 0, cp = 1;
  int ep = 1;  // expert-parallel ranks, a divisor of dp
  // Groups of each EP rank's experts whose all-to-alls overlap their products (1: blocking).
  int moe_a2a_chunks = 1;
  // Microbatches per step (each DP rank's rows split evenly; or rows per microbatch) and the
  // schedule that runs them.
  int microbatches = 0, micro_batch_size = 0;  // 0: not given (one microbatch)
  std::string schedule = "1f1b";
  // Pipeline: model chunks per rank (interleaved, zb-v, zb-auto; 0: the schedule's default, 2 for
  // zb-v, else 1), blocks per chunk ("" = as even as possible, the first chunks taking the
  // remainder), and the most microbatches' activations a rank may hold (0: unlimited, and P for
  // zb-auto's search).
  int virtual_stages = 0;
  std::string pp_layout;
  int max_in_flight = 0;
  // Data parallel: gradient buckets, overlap of their reduction with the backward, ZeRO stage.
  double dp_bucket_mb = 25.0;
  // The bytes of the DP reduction, of the pipeline's messages and of the TP collectives: fp32, or
  // bf16 (--precision bf16 only).
  std::string grad_reduce_dtype = "fp32", p2p_dtype = "fp32", tp_comm_dtype = "fp32";
  bool overlap_grad_reduce = false;
  bool sequence_parallel = false;  // Megatron's sequence parallelism in the TP group
  // Recomputation: none, full (only each block's output kept) or selective (the norms' and the
  // activation functions' outputs formed again in W); a bare --recompute is full.
  std::string recompute = "none";
  int zero = 0;
  // --zero-group: "all" shards ZeRO's state over all DP x CP ranks; "node" over those of a node,
  // replicated across the nodes (HSDP).
  std::string zero_group = "all";
  // Checkpoints: the whole training state (checkpoint/checkpointing.hpp).
  std::string save;       // --save DIR
  int save_every = 0;     // steps between saves; 0: at the end (and on a signal) only
  int keep_last = 0;      // checkpoints kept in DIR; 0: all
  int save_async = 1;     // 1: stage a copy and write it in the background (train/run_saver.hpp)
  std::string load;       // --load DIR: resume from DIR/latest, or start fresh if none yet
  int64_t load_step = 0;  // --load-step N instead of latest
  // The node-local tier: each rank's own shard, often (checkpoint/local_shards.hpp).
  std::string save_local;  // --save-local DIR
  int save_local_every = 0;
  // Faults: abort the job when a step (or a save, or a validation) runs longer than this.
  double step_timeout = 0.0;  // seconds; 0: no watchdog
  // Output.
  std::string save_llmc;
  std::string save_hf;                // a Hugging Face model directory
  std::string save_hf_dtype = "f32";  // f32 or bf16
  std::string trace;                  // Chrome trace of the measured per-rank timeline
  std::string metrics;                // --metrics FILE.jsonl: a JSON object per step and event
  std::string tensorboard;            // --tensorboard DIR: TensorBoard event files
  // A greedy sample every N steps (0: never), of K tokens, decoded with a tokenizer file or as
  // bytes (generate/training_sample.hpp).
  int sample_every = 0, sample_tokens = 64;
  std::string tokenizer;
  // System.
  int threads = 0;  // 0: OMP_NUM_THREADS, else the cores this rank may use / ranks per node
  double peak_gflops = 0.0;      // per rank, for MFU; 0: measure the best GEMM at start-up
  double memory_per_rank = 0.0;  // GB a rank may use; 0: MemAvailable over the node's ranks
  // Speed: the precision of the matrix products, and the GEMM library ("": the build's default).
  Precision precision = Precision::fp32;
  std::string gemm;
  // The attention's path (model/layers/attention_path.hpp): fused, chunked or mma.
  std::string attention = "fused";
  // Whether MPI reads GPU memory: auto (ask the library), yes, no (stage through host buffers).
  std::string gpu_aware_mpi = "auto";
  bool profile = false;  // print a per-kernel time breakdown at the end
  // Check the flags, the layout against the ranks, the data and what --load resumes from; print
  // the placement and a summary; exit without loading, allocating or writing.
  bool dry_run = false;
  bool help = false;
  std::set<std::string> given;  // the flags on the command line (a resume keeps the others)
  bool verbose = true;          // banner and step lines (benchmarks turn them off); not a flag
};

// Throws InputError for an unknown flag, a missing or malformed value, or a value out of range.
TrainOptions parse_options(int argc, const char* const* argv);

// The settings' flags (settings.hpp), all or those in `only`, parsing into `o`; with --help.
flags::Table settings_table(TrainOptions& o, const std::set<std::string>* only);
// The checks of flags against each other, after parsing (InputError).
void check_options(TrainOptions& o);
// --help's lines of the settings, all or those in `only`, under their groups' titles.
std::string settings_help(const std::set<std::string>* only);
// "  --flag ARG   text", wrapped at 100 columns.
std::string help_entry(const std::string& left, const std::string& text);
// A row of --help: "  --flag ARG   text (default V)", the default added unless the text speaks
// of it, the flag is a switch (arg "") or the default is empty.
std::string help_row(const std::string& flag, const std::string& arg, std::string text,
                     const std::string& shown);

std::string usage();

// "992 or 1000": the multiples of m on either side of n (only the one above when none is below),
// for the errors that ask for a divisible size.
std::string nearest_multiples(int n, int m);

}  // namespace mpf
