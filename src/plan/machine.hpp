// A machine description for the layout planner: what one device (a CPU core or a GPU) computes,
// how fast its ranks talk within a node and across nodes, and, where measured, what the
// collectives took. `mpiformer-plan --calibrate` writes one from the allocation it runs on; a
// cluster that cannot be measured here is the same file written from its data sheets
// (docs/planning.md gives the schema). Read defensively: a missing key, a negative or zero rate,
// an unknown precision is one InputError naming the file, the key and the fix.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/bf16.hpp"

namespace mpf::plan {

// A product's rate on one device at a size: work in GFLOP (per device), rate in GFLOP/s.
struct RatePoint {
  double gflop = 0, gflops = 0;
};

// The fused attention's rate at a sequence length, forward and backward (the backward's work
// counted as twice the forward's, as MFU counts it).
struct AttentionRate {
  int seq_len = 0;
  double forward_gflops = 0, backward_gflops = 0;
};

struct PrecisionRates {
  double peak_gflops = 0;                // per device: the MFU denominator
  std::vector<RatePoint> gemm;           // GEMM rate by size, ascending; or
  double gemm_efficiency = 0;            // a constant fraction of the peak
  std::vector<AttentionRate> attention;  // by sequence length, ascending; or
  double attention_efficiency = 0;       // a constant fraction of the peak
};

struct Link {
  double bandwidth_gbs = 0;  // GB/s, one direction, per rank pair
  double latency_us = 0;     // one way, a small message
};

// A measured collective: `op` over groups of `ranks` ranks spanning `nodes` nodes (every group of
// the allocation at once), `bytes` per rank (the buffer all-reduced, the output gathered, the
// data each rank sends in an all-to-all), `us` per call.
struct CollectiveTime {
  std::string op;  // "allreduce", "allgather", "alltoall"
  int ranks = 0, nodes = 0;
  double bytes = 0, us = 0;
};

struct Machine {
  std::string name;
  // Where the figures come from: "data sheet" (written by hand from a vendor's figures),
  // "calibrated" (mpiformer-plan --calibrate measured them), or "" where the file does not say;
  // and a free note on them (the file's comment: JSON has none).
  std::string source, note;
  std::string kind = "cpu";         // "cpu": a device is a core, shared by the node's ranks; "gpu"
  int devices_per_node = 1;         // cores or GPUs
  double memory_gb = 0;             // per node (cpu) or per device (gpu)
  double memory_bandwidth_gbs = 0;  // per device, as the element-wise kernels see it
  double kernel_overhead_us = 0;    // per kernel launch (a parallel region, a CUDA launch)
  double process_mb = 0;            // what a rank holds before the model (libraries, MPI)
  std::map<Precision, PrecisionRates> precisions;
  Link intra_node, inter_node;
  // A GPU's road to pinned host memory (PCIe), one direction: the trainer's bf16 sums (the
  // --tp-comm-dtype and --grad-reduce-dtype bf16 all-reduces and reduce-scatters) run their user
  // MPI_Op on host copies, so on a GPU they cross it twice. Bandwidth 0: the file does not say.
  Link host_link;
  // Per call (a message or a collective), beyond the link's latency: the software's overhead and,
  // where a node has more busy ranks than cores, the wait for a partner not running.
  double message_overhead_us = 0;
  std::vector<CollectiveTime> collectives;

  const PrecisionRates& rates(Precision p) const;  // InputError naming the file when absent
  bool gpu() const { return kind == "gpu"; }
};

// Reads and checks a machine file; `origin` names it in messages.
Machine read_machine(const std::string& path);
Machine parse_machine(const std::string& text, const std::string& origin);
// The file's JSON text (what --calibrate writes and read_machine reads back).
std::string machine_json(const Machine& m);

}  // namespace mpf::plan
