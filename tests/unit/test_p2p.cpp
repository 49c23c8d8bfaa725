// The pipeline verbs along every rank, with 1 and 2 chunks per rank: a value travels forward
// through every virtual stage, each adding its stage number, and a gradient travels back. On one
// rank a single chunk is both ends of the pipeline, where every verb is a no-op, and two chunks
// exchange through the rank itself.
#include <gtest/gtest.h>
#include <mpi.h>

#include <vector>

#include "pipeline/p2p.hpp"

namespace mpf {

namespace {
void forward_and_back(int chunks) {
  int rank = 0, P = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  const int n = 3, microbatches = 2, S = P * chunks;
  PipelineP2P p2p(MPI_COMM_WORLD, chunks, n);
  // Sent buffers stay untouched until wait_for_sends(): one per message.
  std::vector<std::vector<float>> sent;
  sent.reserve(2 * microbatches * chunks);
  // Forward: virtual stage s receives Σ_{t<s} t (+ mb), adds s, sends on; the last checks.
  for (int mb = 0; mb < microbatches; ++mb) {
    for (int c = 0; c < chunks; ++c) {
      const int s = c * P + rank;
      std::vector<float>& x = sent.emplace_back(n, float(mb));
      p2p.recv_forward(x.data(), mb, c);
      for (float v : x) ASSERT_EQ(v, float(mb + s * (s - 1) / 2)) << "stage " << s;
      for (float& v : x) v += float(s);
      p2p.send_forward(x.data(), mb, c);
    }
  }
  // Backward, last chunk first: the gradient counts the stages it passed.
  for (int mb = 0; mb < microbatches; ++mb) {
    for (int c = chunks - 1; c >= 0; --c) {
      const int s = c * P + rank;
      std::vector<float>& g = sent.emplace_back(n, 0.0f);
      p2p.recv_backward(g.data(), mb, c);
      for (float v : g) ASSERT_EQ(v, float(S - 1 - s)) << "stage " << s;
      for (float& v : g) v += 1.0f;
      p2p.send_backward(g.data(), mb, c);
    }
  }
  p2p.wait_for_sends();
}
}  // namespace

TEST(PipelineP2P, ForwardAndBackOneChunk) {
  forward_and_back(1);
}
TEST(PipelineP2P, ForwardAndBackTwoChunksRing) {
  forward_and_back(2);
}

// --p2p-dtype bf16: every message arrives rounded to bf16, to nearest with ties to even (1 + 2^-8
// is a tie that goes down to 1, 1 + 3·2^-8 one that goes up to 1 + 2^-6, 1 + 2^-8 + 2^-20 is past
// the tie and goes up), and a value already bf16 arrives as it was; a sent buffer may be
// overwritten as soon as the verb returns (the wire buffer holds the message).
TEST(PipelineP2P, Bf16MessagesArriveRounded) {
  int rank = 0, P = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  const int chunks = 2;
  const std::vector<float> x = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-20f,
                                -2.5f, 3.0e-3f};
  const std::vector<float> rounded = {1.0f, 1.0f + 0x1p-6f, 1.0f + 0x1p-7f, -2.5f,
                                      from_bf16(to_bf16(3.0e-3f))};
  PipelineP2P p2p(MPI_COMM_WORLD, chunks, int64_t(x.size()));
  p2p.set_bf16(true);
  for (int c = 0; c < chunks; ++c) {
    std::vector<float> v = x;
    p2p.recv_forward(v.data(), 0, c);
    if (!p2p.is_first(c)) {
      EXPECT_EQ(v, rounded) << "forward, chunk " << c;
    }
    p2p.send_forward(v.data(), 0, c);
    std::fill(v.begin(), v.end(), -1.0f);
  }
  for (int c = chunks - 1; c >= 0; --c) {
    std::vector<float> g = x;
    p2p.recv_backward(g.data(), 0, c);
    if (!p2p.is_last(c)) {
      EXPECT_EQ(g, rounded) << "backward, chunk " << c;
    }
    p2p.send_backward(g.data(), 0, c);
    std::fill(g.begin(), g.end(), -1.0f);
  }
  p2p.wait_for_sends();
}

// The paired verbs in the steady state of 1F1B on two neighbouring stages: stage 0 sends
// microbatch 1's output while receiving microbatch 0's gradient; stage 1 sends microbatch 0's
// input gradient while receiving microbatch 1's input. Both post before waiting: no deadlock. The
// stages are ranks 0 and 1 (the others take no part), or on one rank its two chunks.
TEST(PipelineP2P, PairedVerbsDoNotDeadlock) {
  int rank = 0, P = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  const int n = 1 << 16;  // large enough for MPI's rendezvous protocol
  PipelineP2P p2p(MPI_COMM_WORLD, P == 1 ? 2 : 1, n);
  std::vector<float> output(n, 1.0f), input(n, 0.0f), input_grad(n, 2.0f), output_grad(n, 0.0f);
  if (rank > 1) return;  // stages 0 and 1 only
  if (P == 1) {
    // One thread plays both stages and cannot wait in two verbs at once: stage 1's gradient
    // leaves first, alone (a send never waits for its receiver), stage 0's pair completes on it,
    // then stage 1 takes its input.
    p2p.send_backward(input_grad.data(), 0, 1);
    p2p.send_forward_recv_backward(output.data(), 1, 0, output_grad.data(), 0, 0);
    p2p.recv_forward(input.data(), 1, 1);
  } else if (rank == 0) {
    p2p.send_forward_recv_backward(output.data(), 1, 0, output_grad.data(), 0, 0);
  } else {
    p2p.send_backward_recv_forward(input_grad.data(), 0, 0, input.data(), 1, 0);
  }
  p2p.wait_for_sends();
  if (rank == 0) {
    for (float v : output_grad) ASSERT_EQ(v, 2.0f);  // stage 0 received stage 1's gradient
  }
  if (rank == 1 || P == 1) {
    for (float v : input) ASSERT_EQ(v, 1.0f);  // stage 1 received stage 0's output
  }
}

}  // namespace mpf
