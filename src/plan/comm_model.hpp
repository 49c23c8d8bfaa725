// What a message or a collective costs on a machine: the calibrated time of the same collective
// over groups of the same size and node span where the machine file has one (interpolated in
// log-log between its sizes), else the ring algorithms' alpha-beta formulas (Thakur et al. 2005)
// over the slower link the group uses; each call adds the machine's per-message overhead once.
#pragma once

#include "plan/machine.hpp"

namespace mpf::plan {

struct Group {
  int ranks = 1, nodes = 1;
};

// All in milliseconds; bytes per rank as CollectiveTime counts them.
double p2p_ms(const Machine& m, double bytes, bool across_nodes);
double allreduce_ms(const Machine& m, double bytes, Group g);
double allgather_ms(const Machine& m, double bytes, Group g);       // bytes: the gathered output
double reduce_scatter_ms(const Machine& m, double bytes, Group g);  // bytes: the input
double alltoall_ms(const Machine& m, double bytes, Group g);        // bytes: what each rank sends
// From one rank to the others, as MPI's long-message broadcast: a scatter, then an all-gather of
// the pieces (van de Geijn's; Thakur et al. 2005), twice an all-gather's traffic.
double broadcast_ms(const Machine& m, double bytes, Group g);
// A sum the trainer runs on host copies (a bf16 sum on a GPU: its user MPI_Op reads host memory,
// parallel/device_mpi.cpp): the payload copied out over the machine's host link, the ring among
// the host buffers (within a node through shared memory, timed at the host link; across nodes
// over the inter-node link), and the result copied back. The machine must give its host link.
double host_allreduce_ms(const Machine& m, double bytes, Group g);
double host_reduce_scatter_ms(const Machine& m, double bytes, Group g);  // bytes: the input

}  // namespace mpf::plan
