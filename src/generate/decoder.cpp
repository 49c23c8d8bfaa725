#include "generate/decoder.hpp"

#include "core/transfer.hpp"

#include "core/error.hpp"
#include "model/gpt.hpp"
#include "model/layers/encoder.hpp"
#include "model/layers/linear.hpp"
#include "model/mla_block.hpp"
#include "parallel/tp_regions.hpp"

namespace mpf {

namespace {
Tensor first(const Tensor& t, int64_t n) {
  return Tensor(t.data(), n);
}

// The first n rows of one block's activations.
LayerActivations first_rows(const LayerActivations& a, const TpShard& s, int64_t n) {
  const int64_t C = s.cfg.channels;
  LayerActivations x = a;
  x.ln1 = first(a.ln1, n * C);
  const int64_t mean = s.cfg.rms_norm() ? 0 : n;  // RMSNorm keeps no mean
  x.ln1_mean = first(a.ln1_mean, mean);
  x.ln1_rstd = first(a.ln1_rstd, n);
  x.qkv = first(a.qkv, n * s.qkv);
  x.qk_raw = first(a.qk_raw, n * s.qk_norm_width());
  x.qk_rstd = first(a.qk_rstd, n * s.qk_norm_stats());
  x.atty = first(a.atty, n * s.attn);
  const int64_t post = s.cfg.post_norm() ? n * C : 0;
  x.attn_out = first(a.attn_out, post);
  x.residual2 = first(a.residual2, n * C);
  x.ln2 = first(a.ln2, n * C);
  x.ln2_mean = first(a.ln2_mean, mean);
  x.ln2_rstd = first(a.ln2_rstd, n);
  // A mixture of experts' slots are k rows a token, its experts' rows k from each EP rank.
  const int64_t k = s.cfg.moe() ? s.cfg.experts_per_token : 1, E = s.cfg.experts;
  const int64_t ep = s.cfg.moe() ? s.ep_size : 1, moe = s.cfg.moe() ? 1 : 0;
  x.fch = first(a.fch, n * k * ep * s.mlp_in);
  x.fch_gelu = first(a.fch_gelu, n * k * ep * s.fc);
  x.router_probs = first(a.router_probs, n * E);
  x.gates = first(a.gates, moe * n * k);
  x.moe_in = first(a.moe_in, moe * n * k * ep * C);
  x.moe_out = first(a.moe_out, moe * n * k * C);
  x.mlp_out = first(a.mlp_out, post);
  x.residual3 = first(a.residual3, n * C);
  return x;
}
}  // namespace

Decoder::Decoder(const TpShard& shard, const ParameterTensors& params, int capacity,
                 const ModelGroups& groups, bool kv_cache)
    : shard_(shard),
      params_(params),
      groups_(groups),
      tp_(groups.tp),
      kv_cache_(kv_cache),
      capacity_(capacity) {
  if (capacity < 1 || capacity > shard.cfg.max_seq_len || !shard.has_embedding || !shard.has_head ||
      shard.local_layers() != shard.cfg.blocks()) {  // the MTP modules' too, which it ignores
    MPF_FATAL("Decoder: needs the whole model's shard and 1 <= capacity <= max_seq_len");
  }
  if (kv_cache_) {
    cache_ = KVCache::allocate(shard, capacity);
    work_ = Activations::allocate(shard, ChunkPieces{0, 1, false, false}, 1, capacity);
    work_.groups = groups;
    if (cache_.latent) {
      latent_scratch_ =
          Slab("mpf::decoder_latent", mla_cached_attention_scratch_floats(shard, capacity));
    }
  }
  head_slab_ = Slab("mpf::decoder_head", shard.cfg.channels + 2 + shard.vocab_shard);
  tokens_ = Tokens("mpf::decoder_tokens", capacity);
  host_tokens_ = HostTokens("mpf::decoder_host_tokens", capacity);
}

Tensor Decoder::append(const std::vector<int32_t>& tokens) {
  const int n = int(tokens.size()), pos = length_, C = shard_.cfg.channels;
  if (n < 1 || pos + n > capacity_) MPF_FATAL("Decoder::append: past the decoder's capacity");
  for (int i = 0; i < n; ++i) host_tokens_(pos + i) = tokens[i];
  copy_from_host(tokens_.data() + pos, host_tokens_.data() + pos, size_t(n) * sizeof(int32_t),
                 "h2d generated tokens");
  length_ += n;
  if (!kv_cache_) return recompute();
  // The vocab-parallel embedding of the new positions (wpe from row pos on), summed over TP (g).
  const Tensor x = first(work_.input, int64_t(n) * C);
  const Tokens ids = Kokkos::subview(tokens_, std::make_pair(pos, pos + n));
  const bool positions = !shard_.cfg.rope();  // rotary models rotate Q and K in the blocks
  const Tensor wpe =
      positions ? Tensor(params_.wpe.data() + int64_t(pos) * C, int64_t(capacity_ - pos) * C)
                : Tensor();
  encoder_forward(x, ids, params_.wte, wpe, 1, n, C, shard_.vocab_begin, shard_.vocab_shard,
                  /*add_positions=*/positions && shard_.rank == 0);
  tp::reduce_from_region_forward(x.data(), int64_t(n) * C, tp_);
  const Tensor out = cached_blocks(x, n);
  return head(Tensor(out.data() + int64_t(n - 1) * C, C));
}

Tensor Decoder::cached_blocks(Tensor x, int n) {
  const int pos = length_ - n;
  tp::SequenceSplit rows;  // no sequence parallelism: every rank holds all n rows
  rows.rows = rows.local_rows = n;
  const LayerActivations a = first_rows(work_.layer(0), shard_, n);
  // The residual stream ping-pongs between the workspace's input and output rows.
  Tensor in = x, out = a.residual3;
  const RopePositions rope{work_.rope_cos, work_.rope_sin, n, pos};  // row i at pos + i
  for (int l = 0; l < shard_.cfg.layers; ++l) {
    // A mixed model's dense block has its own shard, and its MLP its own rows (block_shard).
    const TpShard block = shard_.block_shard(l);
    LayerActivations al = shard_.cfg.mixed() ? first_rows(work_.layer(0), block, n) : a;
    al.residual3 = out;
    block_forward(al, in, Tensor(), params_.blocks[size_t(l)], block, rows, tp_, rope,
                  [&](Tensor atty, Tensor qkv) {
                    if (cache_.latent) {  // MLA: the latent and the rotary key, absorbed
                      mla_cache_store(cache_, l, mla_latent(al, block, n), qkv, n, pos, block);
                      mla_cached_attention_forward(
                          atty, a.lse, Tensor(latent_scratch_.data(), latent_scratch_.extent(0)),
                          qkv, params_.blocks[size_t(l)].kvbw, cache_, l, n, pos, block);
                      return;
                    }
                    kv_cache_store(cache_, l, qkv, n, pos);
                    cached_attention_forward(atty, a.lse, qkv, cache_, l, n, pos, shard_.heads,
                                             shard_.cfg.sliding_window);
                  });
    std::swap(in, out);
  }
  return in;
}

Tensor Decoder::recompute() {
  const ChunkPieces blocks{0, shard_.cfg.layers, /*embedding=*/true, /*head=*/false};
  Activations acts = Activations::allocate(shard_, blocks, 1, length_);
  acts.groups = groups_;
  const Tokens ids = Kokkos::subview(tokens_, std::make_pair(0, length_));
  embedding_forward(acts, params_, ids, tp_);
  for (int l = 0; l < shard_.cfg.layers; ++l) block_forward(acts, params_, l, tp_);
  const int C = shard_.cfg.channels;
  return head(Tensor(acts.output().data() + int64_t(length_ - 1) * C, C));
}

Tensor Decoder::head(Tensor row) {
  const int C = shard_.cfg.channels;
  const Tensor lnf(head_slab_.data(), C), mean(head_slab_.data() + C, 1),
      rstd(head_slab_.data() + C + 1, 1), logits(head_slab_.data() + C + 2, shard_.vocab_shard);
  const Tensor none;
  const GPTConfig& cfg = shard_.cfg;
  model_norm_forward(lnf, mean, rstd, row, params_.lnfw, params_.lnfb, 1, cfg);
  // The head: this rank's rows of wte (tied) or lmhead give its vocabulary shard's logits.
  linear_forward(logits, none, lnf, head_weight(params_, cfg), none, 1, C, shard_.vocab_shard);
  Kokkos::fence();
  return logits;
}

}  // namespace mpf
