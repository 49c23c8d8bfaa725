#include "layout/settings.hpp"

#include <cstdio>

#include "core/error.hpp"
#include "core/flags.hpp"

namespace mpf {

namespace {

using O = TrainOptions;
constexpr OnResume kKeep = OnResume::keep, kMayChange = OnResume::may_change,
                   kWarns = OnResume::warns, kRecorded = OnResume::recorded;

template <class... F>
struct Overload : F... {
  using F::operator()...;
};
template <class... F>
Overload(F...) -> Overload<F...>;

SettingGroup model_settings() {
  return {
      "model",
      {
          {"--init-from", "FILE|DIR",
           "start from an llm.c checkpoint (fp32, version 3), a Hugging Face model directory "
           "(config.json, model.safetensors or its sharded index) or a .safetensors file "
           "(config.json beside it, or the size flags); the sizes come from it",
           &O::init_from},
          {"--layers", "L", "blocks of a fresh model", &O::layers, kNoMinimum, "model.layers",
           kKeep},
          {"--heads", "H", "attention heads", &O::heads, kNoMinimum, "model.heads", kKeep},
          {"--dim", "C", "channels", &O::dim, kNoMinimum, "model.channels", kKeep},
          {"--vocab", "V", "vocabulary, padded to a multiple of 128 as llm.c does", &O::vocab,
           kNoMinimum, "model.vocab", kKeep},
          {"--max-seq-len", "T", "positions the model embeds", &O::max_seq_len, kNoMinimum,
           "model.max_seq_len", kKeep},
          {"--arch", "A",
           "the model family: gpt2, or Llama blocks (RMSNorm, RoPE, SwiGLU, GQA): llama, qwen2 "
           "(with Q, K, V biases), mistral, phi3, qwen3 (per-head q/k norms), olmo2 (norms after "
           "the sublayers, q/k norms over the whole projection); mixtures of experts: mixtral, "
           "qwen3_moe, olmoe, qwen2_moe (with a shared expert); deepseek_v3 (multi-head latent "
           "attention, from a Hugging Face directory)",
           &O::arch, kNoMinimum, "model.arch", kKeep,
           "gpt2,llama,qwen2,mistral,phi3,qwen3,olmo2,mixtral,qwen3_moe,olmoe,qwen2_moe,"
           "deepseek_v3"},
          {"--kv-heads", "H", "llama: key/value heads, dividing --heads (default, or 0: --heads)",
           &O::kv_heads, 0, "model.kv_heads", kKeep},
          {"--ffn-dim", "F", "llama: the SwiGLU MLP's width (default, or 0: 4C)", &O::ffn_dim, 0,
           "model.ffn_dim", kKeep},
          {"--norm-eps", "X", "llama: RMSNorm's epsilon", &O::norm_eps, kNoMinimum,
           "model.norm_eps", kKeep},
          {"--rope-theta", "X", "llama: the rotary embeddings' base", &O::rope_theta, kNoMinimum,
           "model.rope_theta", kKeep},
          {"--rope-scaling", "S",
           "llama: Llama 3.1's rope_scaling as FACTOR,LOW_FREQ,HIGH_FREQ,ORIGINAL_MAX_POS "
           "(8,1,4,8192), or none",
           &O::rope_scaling, kNoMinimum, "model.rope_scaling", kKeep},
          {"--tie-embeddings", "0|1", "llama: 1: the LM head is the token embedding",
           &O::tie_embeddings, 0, "model.tied", kKeep},
          {"--sliding-window", "N",
           "llama family: a query attends to the last N positions, itself included (Mistral "
           "v0.1's 4096); 0 = all",
           &O::sliding_window, 0, "model.sliding_window", kKeep},
          {"--head-dim", "N",
           "llama family: the head size, when not --dim / --heads (Qwen3's head_dim); 0 = --dim / "
           "--heads",
           &O::head_dim, 0, "model.head_dim", kKeep},
          {"--experts", "E",
           "mixtral, qwen3_moe, olmoe, qwen2_moe: the experts in each block's MLP", &O::experts, 0,
           "model.experts", kKeep},
          {"--experts-per-token", "K", "the experts each token's router chooses (top-k)",
           &O::experts_per_token, 0, "model.experts_per_token", kKeep},
          {"--moe-renormalize", "0|1",
           "1: the chosen experts' gates are renormalised to sum to 1 (Mixtral, Qwen3-MoE's "
           "norm_topk_prob); 0: the router's probabilities (OLMoE); default: the family's",
           &O::moe_renormalize, -1, "model.moe_renormalize", kKeep},
          {"--shared-expert-dim", "N",
           "qwen2_moe: the width of the shared expert every token goes through beside its "
           "routed ones (shared_expert_intermediate_size)",
           &O::shared_expert_dim, 0, "model.shared_ffn", kKeep},
          {"--mtp", "D",
           "deepseek_v3: train D multi-token prediction modules after the blocks (DeepSeek-V3's "
           "MTP, model.layers.{L}.. in its files); default: the file's num_nextn_predict_layers",
           &O::mtp, 0, "model.mtp", kKeep},
      }};
}

SettingGroup data_settings() {
  return {
      "data",
      {
          {"--data", "PATH",
           "llm.c token shard(s) (.bin; a glob or comma list) or a text file (bytes as tokens), "
           "or builtin:train (the default)",
           &O::data, kNoMinimum, "data.train", kMayChange},
          {"--val-data", "PATH",
           "validation data; default builtin:val with builtin data, else none; \"none\": off",
           &O::val_data, kNoMinimum, "data.val", kMayChange},
          {"--batch", "B", "sequences per step, over all ranks", &O::batch, 1, "run.batch", kWarns},
          {"--seq-len", "T", "tokens per sequence", &O::seq_len, 1, "run.seq_len", kWarns},
          {"--doc-mask", "",
           "attend within documents: a document starts at each --doc-token, and a token sees "
           "only its own document's earlier tokens (as Llama 3 was trained)",
           &O::doc_mask, kNoMinimum, "run.doc_mask", kWarns},
          {"--doc-token", "ID",
           "the token that starts a document (default: config.json's bos_token_id, else "
           "<|endoftext|> for GPT-2's vocabulary, <|begin_of_text|> for Llama 3's)",
           &O::doc_token, kNoMinimum, "run.doc_token", kWarns},
          {"--steps", "N", "optimizer steps", &O::steps, 1, "run.steps", kMayChange},
          {"--seed", "S", "initialisation seed", &O::seed, 0, "run.seed", kKeep},
          {"--log-every", "N", "print every Nth step", &O::log_every, 1},
          {"--val-every", "N", "validation every N steps, 0 = never", &O::val_every, 0},
          {"--val-steps", "N", "validation batches", &O::val_steps, 1},
          {"--eval-data", "FILE",
           "a multiple-choice task to score (acc, acc_norm): llm.c's eval file (HellaSwag, MMLU "
           "as its dev/data scripts write them) or JSONL of {\"ctx\", \"endings\", \"label\"} "
           "(encoded with --tokenizer)",
           &O::eval_data},
          {"--eval-every", "N",
           "score --eval-data every N steps and after the last; 0 = after "
           "the last only",
           &O::eval_every, 0},
          {"--eval-examples", "N", "score the first N examples of --eval-data; 0 = all",
           &O::eval_examples, 0},
      }};
}

SettingGroup optimizer_settings() {
  return {
      "optimizer (AdamW; decay on matrices only)",
      {
          {"--lr", "X", "peak learning rate", &O::lr, 0, "optimizer.lr", kWarns},
          {"--lr-schedule", "S", "cosine or constant, after warmup", &O::lr_schedule, kNoMinimum,
           "optimizer.lr_schedule", kWarns},
          {"--lr-decay-steps", "N",
           "the cosine's length in steps (default, or 0: --steps), so a run may stop early "
           "(--steps) and resume on the same schedule",
           &O::lr_decay_steps, 0, "optimizer.lr_decay_steps", kWarns},
          {"--warmup", "N", "linear warmup steps", &O::warmup, 0, "optimizer.warmup", kWarns},
          {"--moe-aux-coef", "X",
           "a mixture of experts' balance loss coefficient (its sequence-wise form: "
           "docs/design.md); default: the model's (config.json's router_aux_loss_coef), or the "
           "family's",
           &O::moe_aux_coef, -1, "optimizer.moe_aux_coef", kWarns},
          {"--final-lr-frac", "X", "the cosine decays to lr*X", &O::final_lr_frac, kNoMinimum,
           "optimizer.final_lr_frac", kWarns},
          {"--optimizer", "S",
           "adamw, or muon: the blocks' weight matrices by Muon (orthogonalised momentum, its "
           "update scaled to AdamW's RMS as Moonlight does), the rest by AdamW, both at --lr",
           &O::optimizer, kNoMinimum, "optimizer.name", kKeep, "adamw,muon"},
          {"--muon-momentum", "X", "Muon's momentum (Nesterov's form), in [0, 1)",
           &O::muon_momentum, 0, "optimizer.muon_momentum", kKeep},
          {"--muon-ns-precision", "P",
           "fp32 or bf16: Muon's Newton-Schulz products (bf16 needs native bf16 products)",
           &O::muon_ns_precision, kNoMinimum, "optimizer.muon_ns_precision", kMayChange,
           "fp32,bf16"},
          {"--qk-clip", "TAU",
           "after each update, scale the query and key projections of any attention head whose "
           "largest logit q.k/sqrt(hs) in the step exceeded TAU down to TAU (Kimi K2's "
           "MuonClip; with any optimizer), above 0; off when left out",
           &O::qk_clip, 0, "optimizer.qk_clip", kWarns},
          {"--moe-bias-update-rate", "X",
           "after each update, move each routed expert's choice bias (deepseek_v3's "
           "e_score_correction_bias) by X toward balance: +X below the mean load of the step "
           "(summed over all ranks), -X above (DeepSeek-V3's aux-loss-free balancing; 0.001 in "
           "its report); 0 = off",
           &O::moe_bias_update_rate, 0, "optimizer.moe_bias_update_rate", kWarns},
          {"--mtp-weight", "X",
           "the multi-token prediction loss's weight λ in the objective: λ times the mean over "
           "the --mtp depths of each depth's cross-entropy (0.3: DeepSeek-V3's for its first 10T "
           "tokens)",
           &O::mtp_weight, 0, "optimizer.mtp_weight", kWarns},
          {"--reset-optimizer", "",
           "on a resume, start the optimizer's state (moments, momentum, step count of the bias "
           "corrections) afresh: the way to resume with another --optimizer",
           &O::reset_optimizer},
          {"--beta1", "X", "AdamW's first-moment decay, in [0, 1)", &O::beta1, kNoMinimum,
           "optimizer.beta1", kKeep},
          {"--beta2", "X", "AdamW's second-moment decay, in [0, 1)", &O::beta2, kNoMinimum,
           "optimizer.beta2", kKeep},
          {"--eps", "X", "AdamW's epsilon, positive", &O::eps, kNoMinimum, "optimizer.eps", kKeep},
          {"--weight-decay", "X", "decoupled weight decay of the matrices", &O::weight_decay, 0,
           "optimizer.weight_decay", kKeep},
          {"--grad-clip", "X", "clip the global gradient norm to X, 0 = off", &O::grad_clip, 0,
           "optimizer.grad_clip", kWarns},
          {"--skip-outliers", "Z",
           "apply no update in a step whose loss or gradient norm is more than Z standard "
           "deviations above the last --outlier-window steps' (llm.c's detector); 0 = off",
           &O::skip_outliers, 0, "optimizer.skip_outliers", kWarns},
          {"--outlier-window", "N", "the steps --skip-outliers compares with (default 128)",
           &O::outlier_window, 2, "optimizer.outlier_window", kWarns},
          {"--rerun-suspect", "",
           "compute a step --skip-outliers flags, or one whose loss or norm is not finite, "
           "again from the same state: if a rank's gradients come out different, stop naming "
           "it and its host (exit 7); if not, the spike is the data's",
           &O::rerun_suspect},
      }};
}

// The pipeline's rows of the layout's group.
std::vector<Setting> pipeline_rows() {
  return {
      {"--microbatches", "M",
       "split each DP rank's rows into M microbatches, accumulating gradients (default 1)",
       &O::microbatches, 1, "layout.microbatches", kRecorded},
      {"--micro-batch-size", "b", "or give the rows per microbatch: M = batch / (dp * b)",
       &O::micro_batch_size, 1},
      {"--schedule", "S",
       "1f1b, afab, interleaved, or a zero-bubble schedule, which computes weight gradients "
       "apart from the backward and moves them into the pipeline's bubbles: zb-h1 (1F1B's "
       "memory), zb-h2 (up to 2P-1 microbatches in flight), zb-v (two chunks per rank in a "
       "V: rank 0 holds embedding and head), zb-auto (searched from the second step's "
       "measured F/B/W times under --max-in-flight)",
       &O::schedule, kNoMinimum, "layout.schedule", kRecorded},
      {"--virtual-stages", "V",
       "model chunks per pipeline rank: interleaved (default 1), zb-v (2), zb-auto (1, or 2 "
       "for a V)",
       &O::virtual_stages, 1, "layout.virtual_stages", kRecorded},
      {"--max-in-flight", "N",
       "the most microbatches' activations a rank may hold: zb-auto's memory limit (default "
       "P, 1F1B's peak); other schedules stop with an error if they would need more",
       &O::max_in_flight, 1},
      {"--p2p-dtype", "D",
       "fp32 (default) or bf16: the pipeline's activations and their gradients sent between "
       "stages rounded to bf16, as Megatron under bf16, half the bytes; results differ from "
       "--pp 1's by that rounding (needs --precision bf16)",
       &O::p2p_dtype, kNoMinimum, nullptr, OnResume::not_saved, "fp32,bf16"},
      {"--pp-layout", "N,N,...",
       "blocks of each of the pp*V chunks, in model order (default: as even as possible, the "
       "first chunks taking one more)",
       &O::pp_layout, kNoMinimum, "layout.pp_layout", kRecorded},
      {"--recompute", "[MODE]",
       "full (the flag alone): keep only each block's output per microbatch and recompute "
       "the block before its backward (Megatron's full recomputation: ~1/3 more compute, a "
       "fraction of the activation memory); selective: keep the block inputs and the "
       "products' outputs and form the norms' and GELU's or SwiGLU's outputs again in the "
       "weight gradients' pass (a few element-wise passes; a GPT-2 block keeps 0.63x the "
       "bytes in fp32, 0.86x in bf16); none (default)",
       &O::recompute, kNoMinimum, nullptr, OnResume::not_saved, "none,full,selective", "full"},
  };
}

SettingGroup layout_settings() {
  SettingGroup layout = {
      "layout (world = tp x cp x dp x pp ranks, tp fastest-varying; any layout resumes any "
      "other's)",
      {
          {"--tp", "N", "tensor-parallel ranks", &O::tp, 1, "layout.tp", kRecorded},
          {"--cp", "N",
           "context-parallel ranks: each sequence split over N ranks (chunks i and 2N-1-i of "
           "2N on rank i), attention as a ring of K/V blocks; --seq-len divisible by 2N",
           &O::cp, 1, "layout.cp", kRecorded},
          {"--pp", "P", "pipeline stages", &O::pp, 1, "layout.pp", kRecorded},
          {"--dp", "D", "data-parallel ranks (default: ranks / (tp * cp * pp))", &O::dp, 0,
           "layout.dp", kRecorded},
          {"--ep", "N",
           "expert-parallel ranks, carved out of DP: a mixture of experts' experts split over N "
           "consecutive DP ranks, which exchange tokens by all-to-all (default 1)",
           &O::ep, 1, "layout.ep", kRecorded},
          {"--moe-a2a-chunks", "N",
           "with --ep: each EP rank's experts in N groups (at most its experts), each group's "
           "all-to-alls nonblocking, so a group's rows travel while another group computes; the "
           "same bits as 1, which blocks on each all-to-all (default 1)",
           &O::moe_a2a_chunks, 1, nullptr, OnResume::not_saved},
          {"--dp-bucket-mb", "X", "gradient bucket size for the data-parallel reduction",
           &O::dp_bucket_mb},
          {"--grad-reduce-dtype", "D",
           "fp32 (default) or bf16: the DP gradient buckets rounded to bf16 and summed in fp32 "
           "as they arrive, half the bytes (needs --precision bf16)",
           &O::grad_reduce_dtype, kNoMinimum, nullptr, OnResume::not_saved, "fp32,bf16"},
          {"--overlap-grad-reduce", "",
           "reduce each bucket as soon as its gradients are final, during the backward",
           &O::overlap_grad_reduce},
          {"--zero", "S",
           "0-3: ZeRO-1 shards the optimizer state over the DP ranks, 2 the blocks' gradients "
           "too, 3 also their parameters (gathered block by block)",
           &O::zero, 0, "layout.zero", kRecorded},
          {"--zero-group", "G",
           "all (default): ZeRO shards over every DP x CP rank; node: over the DP x CP ranks of "
           "each node, replicated across nodes (HSDP: a node's reduce-scatter, then the shard "
           "summed across nodes; --zero 1, 2 or 3; ranks on two or more nodes)",
           &O::zero_group, kNoMinimum, nullptr, OnResume::not_saved, "all,node"},
      }};
  const std::vector<Setting> pipeline = pipeline_rows();
  layout.rows.insert(layout.rows.end(), pipeline.begin(), pipeline.end());
  const std::vector<Setting> tensor_parallel = {
      {"--sequence-parallel", "",
       "shard the LayerNorm/residual regions along the batch rows over the TP ranks "
       "(Megatron's sequence parallelism; B*T per DP rank divisible by tp)",
       &O::sequence_parallel, kNoMinimum, "layout.sequence_parallel", kRecorded},
      {"--tp-comm-dtype", "D",
       "fp32 (default) or bf16: the tensor-parallel collectives (the row-parallel layers' "
       "all-reduce, SP's all-gathers and reduce-scatters, forward and backward) carry their "
       "activations and gradients rounded to bf16, sums added in fp32 as they arrive, as "
       "Megatron under bf16, half the bytes; no effect with --tp 1 (needs --precision bf16)",
       &O::tp_comm_dtype, kNoMinimum, nullptr, OnResume::not_saved, "fp32,bf16"},
  };
  layout.rows.insert(layout.rows.end(), tensor_parallel.begin(), tensor_parallel.end());
  return layout;
}

SettingGroup checkpoint_settings() {
  return {
      "checkpoints (the whole training state; docs/checkpoints.md)",
      {
          {"--save", "DIR",
           "save into DIR/step_NNNNNNNN at the end, on a signal and every --save-every steps; "
           "DIR/latest names the newest complete one",
           &O::save},
          {"--save-every", "N", "also save every N steps (default 0: at the end and on a signal)",
           &O::save_every, 0},
          {"--keep-last", "K", "keep the newest K checkpoints in DIR (default 0: all)",
           &O::keep_last, 0},
          {"--save-async", "0|1",
           "1 (default): copy the state into a host buffer and write it in the background while "
           "training goes on; 0: stop every rank until the save is written",
           &O::save_async, 0},
          {"--save-local", "DIR",
           "also write each rank's own shard of the state into DIR on its node (e.g. /tmp) every "
           "--save-local-every steps; a restart on the same nodes and layout resumes from the "
           "newest complete set when newer than --save's",
           &O::save_local},
          {"--save-local-every", "N", "steps between --save-local shards", &O::save_local_every, 1},
          {"--load", "DIR",
           "resume from DIR/latest; starts a new run (with a note) when DIR holds no checkpoint "
           "yet, so a job script can always pass --save DIR --load DIR",
           &O::load},
          {"--load-step", "N", "resume from DIR/step_N instead of the latest", &O::load_step, 0},
      }};
}

SettingGroup output_settings() {
  return {
      "output",
      {
          {"--save-llmc", "FILE",
           "write the trained model as an llm.c checkpoint (never over "
           "an existing file)",
           &O::save_llmc},
          {"--save-hf", "DIR",
           "write the trained model as a Hugging Face model directory (config.json, "
           "generation_config.json, model.safetensors; never over an existing path)",
           &O::save_hf},
          {"--save-hf-dtype", "T", "f32 or bf16: the dtype of --save-hf's weights",
           &O::save_hf_dtype, kNoMinimum, nullptr, OnResume::not_saved, "f32,bf16"},
          {"--trace", "FILE.json",
           "write every rank's measured timeline of the last step (forward, backward, P2P, DP "
           "sync, optimizer) as a Chrome/Perfetto trace (never over an existing file)",
           &O::trace},
          {"--metrics", "FILE.jsonl",
           "append a JSON object per step (step, loss, lr, norm, ms, tok_s, mfu) and per "
           "validation, peak, memory and summary event; a resumed run continues the file after "
           "its checkpoint's step",
           &O::metrics},
          {"--tensorboard", "DIR",
           "write TensorBoard event files into DIR (a new file per run; a resumed run's steps "
           "replace those a stopped one logged past its checkpoint)",
           &O::tensorboard},
          {"--sample-every", "N",
           "print a greedy sample of the model every N steps and at the end (0: never); not "
           "with --pp",
           &O::sample_every, 0},
          {"--sample-tokens", "K", "tokens per sample", &O::sample_tokens, 1},
          {"--tokenizer", "FILE",
           "decode samples with llm.c's gpt2_tokenizer.bin or a Hugging Face tokenizer.json "
           "(default: bytes); a tokenizer.json also encodes a JSONL --eval-data and is copied into "
           "--save-hf DIR",
           &O::tokenizer},
      }};
}

SettingGroup system_settings() {
  return {"system",
          {
              {"--step-timeout", "SEC",
               "abort the whole job, naming the rank, step and phase, when a step (or a save, or a "
               "validation) runs longer than SEC seconds (default 0: never); rank 0 first prints "
               "where each rank was, its op and MPI call (SIGUSR2 prints that at any time)",
               &O::step_timeout, 0},
              {"--threads", "N",
               "threads per rank (default: OMP_NUM_THREADS, else cores / ranks per node)",
               &O::threads, 1},
              {"--precision", "P",
               "fp32 or bf16: matrix products with bf16 inputs and fp32 accumulation; weights, "
               "gradients, optimizer and checkpoints stay fp32",
               &O::precision},
              {"--gemm", "LIB", "the GEMM library: onednn (the default where built) or openblas",
               &O::gemm},
              {"--attention", "PATH",
               "fused: the FlashAttention-2-style kernel; chunked: 128 queries at a time through "
               "the GEMM library, the same results (docs/performance.md#attention); mma: a CUDA "
               "build's tensor-core forward and backward, bf16 only, not yet checked on a GPU "
               "(docs/gpu.md)",
               &O::attention, kNoMinimum, nullptr, OnResume::not_saved, "fused,chunked,mma"},
              {"--gpu-aware-mpi", "M",
               "auto: in a GPU build, ask the MPI library whether it reads GPU memory "
               "(MPIX_Query_cuda_support) and stage messages through pinned host buffers when it "
               "does not or cannot say; yes: hand MPI GPU memory; no: always stage (in a CPU "
               "build: only to test that path)",
               &O::gpu_aware_mpi, kNoMinimum, nullptr, OnResume::not_saved, "auto,yes,no"},
              {"--peak-gflops", "X",
               "per-rank peak for MFU (default: the best GEMM rate of any library here, in the "
               "run's precision, measured at start-up)",
               &O::peak_gflops, 0},
              {"--profile", "", "print where a step's time goes, kernel by kernel, at the end",
               &O::profile},
              {"--memory-per-rank", "GB",
               "the memory a rank may use (default: the node's MemAvailable over its ranks; set it "
               "for a GPU's memory): a layout predicted to need more is refused at start-up",
               &O::memory_per_rank, 0},
              {"--dry-run", "",
               "check everything a run would start from (flags, the layout against the ranks and "
               "nodes, data files, what --load resumes from), print every rank's placement and a "
               "summary, and exit 0 without loading, initialising or writing anything",
               &O::dry_run},
          }};
}

std::vector<SettingGroup> make_groups() {
  return {model_settings(),      data_settings(),   optimizer_settings(), layout_settings(),
          checkpoint_settings(), output_settings(), system_settings()};
}

bool among(const std::string& value, const std::string& choices) {
  size_t start = 0;
  while (true) {
    const size_t comma = choices.find(',', start);
    if (choices.compare(start, comma - start, value) == 0 &&
        (comma == std::string::npos ? choices.size() - start : comma - start) == value.size())
      return true;
    if (comma == std::string::npos) return false;
    start = comma + 1;
  }
}

std::string spelled(const std::string& choices) {  // "auto,yes,no" -> "auto, yes or no"
  std::string out = choices;
  const size_t last = out.rfind(',');
  if (last != std::string::npos) out.replace(last, 1, " or ");
  for (size_t i = out.find(','); i != std::string::npos; i = out.find(',', i + 2)) {
    out.replace(i, 1, ", ");
  }
  return out;
}

// An integral bound as a person writes it (2147483647, not 2.14748e+09).
std::string bound_text(double v) {
  return v == double(int64_t(v)) ? std::to_string(int64_t(v)) : flags::number(v);
}

void set_flag(const FlagRow& r, const std::string& flag, const std::string& value) {
  auto in_range = [&](double v) {
    require(v >= r.min, flag + " must be >= " + flags::number(r.min) + ", got " + value);
    if (v > r.max) throw InputError(flag + " must be <= " + bound_text(r.max) + ", got " + value);
  };
  std::visit(Overload{
                 [&](int* f) { in_range(*f = flags::to_int32(flag, value)); },
                 [&](int64_t* f) { in_range(double(*f = flags::to_int(flag, value))); },
                 [&](uint64_t* f) {
                   const int64_t v = flags::to_int(flag, value);
                   require(v >= 0, flag + " must be non-negative, got " + value);
                   *f = uint64_t(v);
                 },
                 [&](float* f) { in_range(*f = float(flags::to_double(flag, value))); },
                 [&](double* f) { in_range(*f = flags::to_double(flag, value)); },
                 [&](bool* f) {
                   require(value == "true" || value == "false",
                           flag + " is true or false, got '" + value + "'");
                   *f = value == "true";
                 },
                 [&](std::string* f) {
                   require(!r.choices || among(value, r.choices),
                           flag + " must be " + spelled(r.choices ? r.choices : "") + ", got '" +
                               value + "'");
                   *f = value;
                 },
                 [&](const flags::Setter& set) { set(flag, value); },
             },
             r.field);
}

}  // namespace

const std::vector<SettingGroup>& setting_groups() {
  static const std::vector<SettingGroup> groups = make_groups();
  return groups;
}

void set_setting(TrainOptions& o, const Setting& s, const std::string& flag,
                 const std::string& value) {
  if (const auto* p = std::get_if<Precision O::*>(&s.field)) {
    o.*(*p) = parse_precision(value);
    return;
  }
  // The same checks as another program's rows: a setting is such a row bound to `o`.
  const FlagField field = std::visit(Overload{
                                         [](Precision O::*) { return FlagField(flags::Setter()); },
                                         [&](auto f) { return FlagField(&(o.*f)); },
                                     },
                                     s.field);
  set_flag(FlagRow{s.flag, s.arg, s.help, field, s.min, s.choices}, flag, value);
}

void add_flag_rows(flags::Table& table, const std::vector<FlagGroup>& groups, bool& help) {
  for (const FlagGroup& g : groups) {
    for (const FlagRow& r : g.rows) {
      if (*r.arg == '\0') {
        table.switches[r.flag] = [r] { set_flag(r, r.flag, "true"); };
      } else {
        table.values[r.flag] = [r](const std::string& f, const std::string& v) {
          set_flag(r, f, v);
        };
      }
    }
  }
  table.switches["--help"] = table.switches["-h"] = [&help] { help = true; };
}

std::string flag_rows_help(const std::vector<FlagGroup>& groups) {
  std::string out;
  for (const FlagGroup& g : groups) {
    std::string rows;
    for (const FlagRow& r : g.rows) {
      const std::string shown = std::visit(Overload{
                                               [](int* f) { return std::to_string(*f); },
                                               [](int64_t* f) { return std::to_string(*f); },
                                               [](uint64_t* f) { return std::to_string(*f); },
                                               [](float* f) { return flags::number(*f); },
                                               [](double* f) { return flags::number(*f); },
                                               [](std::string* f) { return *f; },
                                               [](const auto&) { return std::string(); },
                                           },
                                           r.field);
      rows += help_row(r.flag, r.arg, r.help, shown);
    }
    if (!rows.empty()) out += (*g.title ? std::string(g.title) + "\n" : "") + rows;
  }
  return out;
}

std::string setting_text(const TrainOptions& o, const Setting& s) {
  return std::visit(Overload{
                        [&](float O::*f) {
                          char buf[32];
                          std::snprintf(buf, sizeof buf, "%.9g", double(o.*f));
                          return std::string(buf);
                        },
                        [&](auto f) {
                          return setting_shown(o, Setting{"", "", "", f});
                        },
                    },
                    s.field);
}

std::string setting_shown(const TrainOptions& o, const Setting& s) {
  return std::visit(Overload{
                        [&](int O::*f) { return std::to_string(o.*f); },
                        [&](int64_t O::*f) { return std::to_string(o.*f); },
                        [&](uint64_t O::*f) { return std::to_string(o.*f); },
                        [&](float O::*f) { return flags::number(o.*f); },
                        [&](double O::*f) { return flags::number(o.*f); },
                        [&](bool O::*f) { return std::string(o.*f ? "true" : "false"); },
                        [&](std::string O::*f) { return o.*f; },
                        [&](Precision O::*f) { return std::string(precision_name(o.*f)); },
                    },
                    s.field);
}

bool same_setting(const TrainOptions& a, const TrainOptions& b, const Setting& s) {
  return std::visit([&](auto f) { return a.*f == b.*f; }, s.field);
}

std::vector<std::pair<std::string, std::string>> saved_settings(const TrainOptions& resolved) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const SettingGroup& g : setting_groups()) {
    for (const Setting& s : g.rows) {
      if (s.key && std::string(s.key).rfind("model.", 0) != 0) {
        out.emplace_back(s.key, setting_text(resolved, s));
      }
    }
  }
  return out;
}

}  // namespace mpf
