#include "train/options.hpp"

#include <algorithm>
#include <functional>
#include <vector>

#include "backends/gemm.hpp"
#include "core/error.hpp"
#include "core/flags.hpp"

namespace mpf {

namespace {

using flags::number;
using flags::to_double;
using flags::to_int;
using flags::to_int32;

void at_least(const std::string& flag, double value, double low) {
  require(value >= low, flag + " must be >= " + number(low) + ", got " + number(value));
}

}  // namespace

TrainOptions parse_options(int argc, const char* const* argv) {
  TrainOptions o;
  using Setter = flags::Setter;
  auto model = [&](int& field) {
    return Setter([&field, &o](const std::string& f, const std::string& v) {
      field = to_int32(f, v);
      o.model_sizes_given = true;
    });
  };
  auto integer = [](int& field) {
    return Setter([&field](const std::string& f, const std::string& v) { field = to_int32(f, v); });
  };
  auto real = [](float& field) {
    return Setter([&field](const std::string& f, const std::string& v) {
      field = static_cast<float>(to_double(f, v));
    });
  };
  auto text = [](std::string& field) {
    return Setter([&field](const std::string&, const std::string& v) { field = v; });
  };
  flags::Table table;
  table.values = {
      {"--init-from", text(o.init_from)},
      {"--layers", model(o.layers)},
      {"--heads", model(o.heads)},
      {"--dim", model(o.dim)},
      {"--vocab", model(o.vocab)},
      {"--max-seq-len", model(o.max_seq_len)},
      {"--data", text(o.data)},
      {"--val-data", text(o.val_data)},
      {"--batch", integer(o.batch)},
      {"--seq-len", integer(o.seq_len)},
      {"--steps", integer(o.steps)},
      {"--seed",
       [&](const std::string& f, const std::string& v) {
         const int64_t s = to_int(f, v);
         require(s >= 0, "--seed must be non-negative, got " + v);
         o.seed = static_cast<uint64_t>(s);
       }},
      {"--log-every", integer(o.log_every)},
      {"--val-every", integer(o.val_every)},
      {"--val-steps", integer(o.val_steps)},
      {"--lr", real(o.lr)},
      {"--beta1", real(o.beta1)},
      {"--beta2", real(o.beta2)},
      {"--eps", real(o.eps)},
      {"--weight-decay", real(o.weight_decay)},
      {"--grad-clip", real(o.grad_clip)},
      {"--warmup", integer(o.warmup)},
      {"--lr-schedule", text(o.lr_schedule)},
      {"--final-lr-frac", real(o.final_lr_frac)},
      {"--lr-decay-steps", integer(o.lr_decay_steps)},
      {"--tp", integer(o.tp)},
      {"--pp", integer(o.pp)},
      {"--dp", integer(o.dp)},
      {"--dp-bucket-mb",
       [&](const std::string& f, const std::string& v) { o.dp_bucket_mb = to_double(f, v); }},
      {"--zero", integer(o.zero)},
      {"--microbatches", integer(o.microbatches)},
      {"--micro-batch-size", integer(o.micro_batch_size)},
      {"--schedule", text(o.schedule)},
      {"--virtual-stages",
       [&](const std::string& f, const std::string& v) {
         o.virtual_stages = to_int32(f, v);
         at_least(f, o.virtual_stages, 1);
       }},
      {"--max-in-flight",
       [&](const std::string& f, const std::string& v) {
         o.max_in_flight = to_int32(f, v);
         at_least(f, o.max_in_flight, 1);
       }},
      {"--pp-layout", text(o.pp_layout)},
      {"--save", text(o.save)},
      {"--save-every", integer(o.save_every)},
      {"--keep-last", integer(o.keep_last)},
      {"--load", text(o.load)},
      {"--load-step",
       [&](const std::string& f, const std::string& v) { o.load_step = to_int(f, v); }},
      {"--step-timeout",
       [&](const std::string& f, const std::string& v) { o.step_timeout = to_double(f, v); }},
      {"--save-llmc", text(o.save_llmc)},
      {"--trace", text(o.trace)},
      {"--sample-every", integer(o.sample_every)},
      {"--sample-tokens", integer(o.sample_tokens)},
      {"--tokenizer", text(o.tokenizer)},
      {"--threads", integer(o.threads)},
      {"--peak-gflops",
       [&](const std::string& f, const std::string& v) { o.peak_gflops = to_double(f, v); }},
      {"--precision",
       [&](const std::string&, const std::string& v) { o.precision = parse_precision(v); }},
      {"--gpu-aware-mpi",
       [&](const std::string& f, const std::string& v) {
         require(v == "auto" || v == "yes" || v == "no",
                 f + " must be auto, yes or no, got '" + v + "'");
         o.gpu_aware_mpi = v;
       }},
      {"--gemm",
       [&](const std::string&, const std::string& v) {
         const std::vector<std::string> libraries = backend::available();
         std::string names;
         for (const std::string& l : libraries) names += (names.empty() ? "" : ", ") + l;
         require(std::find(libraries.begin(), libraries.end(), v) != libraries.end(),
                 "--gemm " + v + " is not a GEMM library of this build; it has " + names);
         o.gemm = v;
       }},
  };

  table.switches = {
      {"--help", [&] { o.help = true; }},
      {"-h", [&] { o.help = true; }},
      {"--overlap-grad-reduce", [&] { o.overlap_grad_reduce = true; }},
      {"--sequence-parallel", [&] { o.sequence_parallel = true; }},
      {"--recompute", [&] { o.recompute = true; }},
      {"--profile", [&] { o.profile = true; }},
  };
  // Kokkos consumes its own --kokkos-* flags in Kokkos::initialize.
  o.given = flags::parse(argc, argv, table, "mpiformer-train", "--kokkos-");

  require(o.init_from.empty() || !o.model_sizes_given,
          "--init-from takes the model's sizes from the checkpoint; drop --layers/--heads/--dim/"
          "--vocab/--max-seq-len, or drop --init-from to train a fresh model");
  at_least("--batch", o.batch, 1);
  at_least("--seq-len", o.seq_len, 1);
  at_least("--steps", o.steps, 1);
  at_least("--log-every", o.log_every, 1);
  at_least("--val-every", o.val_every, 0);
  at_least("--val-steps", o.val_steps, 1);
  at_least("--lr", o.lr, 0);
  require(o.beta1 >= 0 && o.beta1 < 1, "--beta1 must be in [0, 1), got " + number(o.beta1));
  require(o.beta2 >= 0 && o.beta2 < 1, "--beta2 must be in [0, 1), got " + number(o.beta2));
  require(o.eps > 0, "--eps must be positive, got " + number(o.eps));
  at_least("--weight-decay", o.weight_decay, 0);
  at_least("--grad-clip", o.grad_clip, 0);
  at_least("--warmup", o.warmup, 0);
  require(o.final_lr_frac >= 0 && o.final_lr_frac <= 1,
          "--final-lr-frac must be in [0, 1], got " + number(o.final_lr_frac));
  at_least("--microbatches", o.microbatches, 0);
  at_least("--micro-batch-size", o.micro_batch_size, 0);
  require(o.microbatches == 0 || o.micro_batch_size == 0,
          "--microbatches and --micro-batch-size both set the microbatch count; give one");
  at_least("--tp", o.tp, 1);
  at_least("--pp", o.pp, 1);
  at_least("--dp", o.dp, 0);
  require(o.dp_bucket_mb > 0, "--dp-bucket-mb must be positive, got " + number(o.dp_bucket_mb));
  require(o.zero == 0 || o.zero == 1,
          "--zero " + std::to_string(o.zero) + " is not a ZeRO stage this trainer has; use 0 or 1");
  at_least("--lr-decay-steps", o.lr_decay_steps, 0);
  at_least("--save-every", o.save_every, 0);
  at_least("--keep-last", o.keep_last, 0);
  at_least("--load-step", double(o.load_step), 0);
  at_least("--step-timeout", o.step_timeout, 0);
  require(o.given.count("--save") == 0 || !o.save.empty(),
          "--save needs a directory; pass --save DIR");
  require(o.given.count("--load") == 0 || !o.load.empty(),
          "--load needs a directory; pass --load DIR");
  require(o.save_every == 0 || !o.save.empty(),
          "--save-every " + std::to_string(o.save_every) + " needs --save DIR to save into");
  require(o.keep_last == 0 || !o.save.empty(),
          "--keep-last " + std::to_string(o.keep_last) + " needs --save DIR");
  require(o.load_step == 0 || !o.load.empty(),
          "--load-step " + std::to_string(o.load_step) + " needs --load DIR to load from");
  at_least("--sample-every", o.sample_every, 0);
  at_least("--sample-tokens", o.sample_tokens, 1);
  require(o.tokenizer.empty() || o.sample_every > 0,
          "--tokenizer decodes the samples of --sample-every N; pass that too, or drop it");
  at_least("--threads", o.threads, 0);
  at_least("--peak-gflops", o.peak_gflops, 0);
  return o;
}

std::string usage() {
  return R"(usage: mpiexec -n N mpiformer-train [flags]

Trains GPT-2 (llm.c's model) on N ranks = tp x dp x pp (tensor, data and pipeline parallel). Flags take a value as `--flag V` or
`--flag=V`. Defaults train a small byte-level model on the built-in corpus.

model
  --init-from FILE      start from an llm.c checkpoint (fp32, version 3); sizes come from it
  --layers L --heads H --dim C --vocab V --max-seq-len T
                        sizes of a fresh model (default 4, 4, 128, 256, 256); the vocabulary is
                        padded to a multiple of 128 as llm.c does
data
  --data PATH           llm.c token shard(s) (.bin; a glob or comma list) or a text file (bytes
                        as tokens), or builtin:train (default)
  --val-data PATH       validation data; default builtin:val with builtin data, else none; "none"
  --batch B             sequences per step, over all ranks (default 16)
  --seq-len T           tokens per sequence (default 64)
  --steps N             optimizer steps (default 200)
  --seed S              initialisation seed (default 1337)
  --log-every N         print every Nth step (default 1)
  --val-every N         validation every N steps, 0 = never (default 50)
  --val-steps N         validation batches (default 10)
optimizer (AdamW; decay on matrices only)
  --lr X (1e-3) --beta1 X (0.9) --beta2 X (0.999) --eps X (1e-8) --weight-decay X (0.1)
  --grad-clip X         clip the global gradient norm to X, 0 = off (default 1.0)
  --warmup N            linear warmup steps (default 0)
  --lr-schedule S       cosine (default) or constant, after warmup
  --final-lr-frac X     cosine decays to lr*X (default 0)
  --lr-decay-steps N    the cosine's length in steps (default: --steps), so a run may stop early
                        (--steps) and resume on the same schedule
layout (world = tp x dp x pp ranks, tp fastest-varying)
  --tp T                tensor-parallel ranks (default 1)
  --pp P                pipeline stages (default 1)
  --dp D                data-parallel ranks (default: ranks / (tp * pp))
  --dp-bucket-mb X      gradient bucket size for the data-parallel reduction (default 25)
  --overlap-grad-reduce reduce each bucket as soon as its gradients are final, during backward
  --zero S              0 (default) or 1: ZeRO-1 shards the optimizer state over the DP ranks
  --microbatches M      split each DP rank's rows into M microbatches, accumulating gradients
                        (default 1)
  --micro-batch-size b  or give the rows per microbatch: M = batch / (dp * b)
  --schedule S          1f1b (default), afab, interleaved, or a zero-bubble schedule, which
                        computes weight gradients apart from the backward and moves them into
                        the pipeline's bubbles: zb-h1 (1F1B's memory), zb-h2 (up to 2P-1
                        microbatches in flight), zb-v (two chunks per rank in a V: rank 0 holds
                        embedding and head), zb-auto (searched from the second step's measured
                        F/B/W times under --max-in-flight)
  --virtual-stages V    model chunks per pipeline rank: interleaved (default 1), zb-v (2),
                        zb-auto (1, or 2 for a V)
  --max-in-flight N     the most microbatches' activations a rank may hold: zb-auto's memory
                        limit (default P, 1F1B's peak); other schedules stop with an error if
                        they would need more
  --pp-layout N,N,...   blocks of each of the pp*V chunks, in model order (default: as even as
                        possible, the first chunks taking one more)
  --recompute           keep only each block's output per microbatch and recompute the block
                        before its backward (Megatron's full recomputation: ~1/3 more compute,
                        a fraction of the activation memory)
  --sequence-parallel   shard the LayerNorm/residual regions along the batch rows over the TP
                        ranks (Megatron's sequence parallelism; B*T per DP rank divisible by tp)
checkpoints (the whole training state; any layout resumes from any other's)
  --save DIR            save into DIR/step_NNNNNNNN at the end, on a signal and every --save-every
                        steps; DIR/latest names the newest complete one
  --save-every N        also save every N steps (default 0: at the end and on a signal only)
  --keep-last K         keep the newest K checkpoints in DIR, removing older ones (default 0: all)
  --load DIR            resume from DIR/latest; starts a new run (with a note) when DIR holds no
                        checkpoint yet, so a job script can always pass --save DIR --load DIR
  --load-step N         resume from DIR/step_N instead of the latest
  SIGUSR1, SIGTERM or SIGINT (to any rank) finish the current step, save (with --save) and exit
  with status 3; a second signal exits at once. Exit status: 0 done, 1 internal fault, 2 bad
  input or checkpoint, 3 stopped by a signal, 4 diverged (non-finite loss or gradient norm: the
  update is not applied), 5 watchdog (--step-timeout), 6 a save failed (the previous checkpoint
  stays intact)
output
  --save-llmc FILE      write the trained model as an llm.c checkpoint (never overwrites)
  --trace FILE.json     write every rank's measured timeline of the last step (forward,
                        backward, P2P, DP sync, optimizer) as a Chrome/Perfetto trace (never
                        overwrites)
  --sample-every N      print a greedy sample of the model every N steps and at the end (default
                        0: never); not with --pp
  --sample-tokens K     tokens per sample (default 64)
  --tokenizer FILE      decode samples with llm.c's gpt2_tokenizer.bin (default: bytes)
system
  --step-timeout SEC    abort the whole job, naming the rank, step and phase, when a step (or a
                        save, or a validation) runs longer than SEC seconds (default 0: never)
  --threads N           threads per rank (default: OMP_NUM_THREADS, else cores / ranks per node)
  --precision P         fp32 (default) or bf16: matrix products with bf16 inputs and fp32
                        accumulation; weights, gradients, optimizer and checkpoints stay fp32
  --gemm LIB            the GEMM library: onednn (the default where built) or openblas
  --gpu-aware-mpi M     auto (default): in a GPU build, ask the MPI library whether it reads GPU
                        memory (MPIX_Query_cuda_support) and stage messages through pinned host
                        buffers when it does not or cannot say; yes: hand MPI GPU memory; no:
                        always stage (in a CPU build: only to test that path)
  --peak-gflops X       per-rank peak for MFU (default: the best GEMM rate of any library here,
                        in the run's precision, measured at start-up)
  --profile             print where a step's time goes, kernel by kernel, at the end
  --help
)";
}

}  // namespace mpf
