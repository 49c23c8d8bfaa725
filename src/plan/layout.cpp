#include "plan/layout.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "core/error.hpp"
#include "core/flags.hpp"
#include "model/shard.hpp"
#include "optim/muon.hpp"
#include "pipeline/layer_ownership.hpp"

namespace mpf::plan {

namespace {

bool flag_value(const std::string& key, const std::string& v) {
  require(v == "0" || v == "1" || v == "true" || v == "false",
          "--evaluate: " + key + " is 0 or 1, got '" + v + "'");
  return v == "1" || v == "true";
}

}  // namespace

Layout parse_layout(const std::string& text, const Job& job) {
  Layout l;
  bool dp_given = false, m_given = false;
  int mbs = 0;
  // An empty layout (or ",,,") would evaluate the default one, not what was meant.
  require(!text.empty(),
          "--evaluate is given an empty layout; give key=value pairs, e.g. "
          "tp=2,pp=2,microbatches=4");
  std::set<std::string> seen;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    at = comma + 1;
    require(!item.empty(), "--evaluate " + text +
                               ": an empty item; separate key=value pairs by single commas, "
                               "e.g. tp=2,pp=2,microbatches=4");
    const size_t eq = item.find('=');
    require(eq != std::string::npos,
            "--evaluate: '" + item + "' is not key=value (e.g. tp=2,pp=2,microbatches=4)");
    const std::string key = item.substr(0, eq), v = item.substr(eq + 1);
    const std::string flag = "--evaluate " + key;
    // One name for each setting, so that vp=2,virtual_stages=4 is a repeat too.
    const std::string name = key == "virtual_stages"      ? "vp"
                             : key == "sequence_parallel" ? "sp"
                                                          : key;
    require(seen.insert(name).second,
            flag + " is given twice (the last would silently win); give each key once");
    auto positive = [&](int most = kMaxRanks) {
      const int n = flags::to_int32(flag, v);
      require(n >= 1 && n <= most,
              flag + " must be an integer in 1.." + std::to_string(most) + ", got " + v);
      return n;
    };
    if (key == "tp")
      l.tp = positive();
    else if (key == "cp")
      l.cp = positive();
    else if (key == "ep")
      l.ep = positive();
    else if (key == "pp")
      l.pp = positive();
    else if (key == "dp")
      l.dp = positive(), dp_given = true;
    else if (key == "vp" || key == "virtual_stages")
      l.virtual_stages = positive();
    else if (key == "microbatches")
      l.microbatches = positive(kMaxMicrobatches), m_given = true;
    else if (key == "micro_batch_size")
      mbs = positive();
    else if (key == "schedule")
      l.schedule = pipeline::parse_schedule(v);
    else if (key == "recompute") {
      require(v == "none" || v == "full" || v == "selective" || v == "0" || v == "1" ||
                  v == "true" || v == "false",
              "--evaluate: recompute is 0, 1, none, full or selective, got '" + v + "'");
      l.recompute = v == "full" || v == "1" || v == "true";
      l.selective = v == "selective";
    } else if (key == "sp" || key == "sequence_parallel")
      l.sequence_parallel = flag_value(key, v);
    else if (key == "zero") {
      const int stage = flags::to_int32(flag, v);
      require(stage >= 0 && stage <= 3, flag + " is a ZeRO stage, 0 to 3, got " + v);
      l.zero = stage;
    } else if (key == "zero_group") {
      require(v == "all" || v == "node", flag + " is all or node, got '" + v + "'");
      l.zero_node = v == "node";
    } else {
      throw InputError("--evaluate: unknown key '" + key +
                       "'; use tp, cp, ep, pp, dp, vp, schedule, microbatches, micro_batch_size, "
                       "recompute, sp, zero, zero_group");
    }
  }
  // The ranks the sizes given make, in 64 bits and checked as it grows: past kMaxRanks it is no
  // job's, and an int product would wrap (to 0 for 65536 x 65536, then a division by it).
  int64_t ranks = 1;
  std::string product;
  for (const auto& [key, size] : {std::pair<const char*, int>{"tp", l.tp},
                                  {"cp", l.cp},
                                  {"pp", l.pp},
                                  {"dp", dp_given ? l.dp : 1}}) {
    if (!seen.count(key)) continue;
    ranks *= size;
    product += std::string(product.empty() ? "" : " x ") + key;
    require(ranks <= kMaxRanks, "--evaluate: " + product + " = " + std::to_string(ranks) +
                                    " ranks, more than the " + std::to_string(kMaxRanks) +
                                    " a plan may have; give sizes whose product is the job's " +
                                    std::to_string(job.world()) + " ranks");
  }
  if (!dp_given) l.dp = int(std::max<int64_t>(1, job.world() / (int64_t(l.tp) * l.cp * l.pp)));
  if (!seen.count("vp")) l.virtual_stages = pipeline::default_virtual_stages(l.schedule);
  if (mbs > 0) {
    require(!m_given, "--evaluate: give microbatches or micro_batch_size, not both");
    l.microbatches = int(std::max<int64_t>(1, job.batch / (int64_t(l.dp) * mbs)));
    require(job.batch == int64_t(l.dp) * mbs * l.microbatches,
            "--evaluate: micro_batch_size=" + std::to_string(mbs) + " does not divide the " +
                std::to_string(job.batch / l.dp) + " rows of a DP rank's batch");
    require(l.microbatches <= kMaxMicrobatches,
            "--evaluate: micro_batch_size=" + std::to_string(mbs) + " makes " +
                std::to_string(l.microbatches) + " microbatches, more than " +
                std::to_string(kMaxMicrobatches) + "; give a larger one");
  }
  return l;
}

std::string layout_problem(const Job& job, const Layout& l) {
  const GPTConfig& cfg = job.cfg;
  auto str = [](int64_t n) { return std::to_string(n); };
  if (int64_t(l.tp) * l.cp * l.dp * l.pp != job.world()) {
    return "tp x cp x dp x pp = " + str(int64_t(l.tp) * l.cp * l.dp * l.pp) + " is not the " +
           str(job.world()) + " ranks";
  }
  if (job.ranks_per_node % l.tp != 0) {
    return "TP across nodes: tp " + str(l.tp) + " does not divide the " + str(job.ranks_per_node) +
           " ranks per node, so a TP group would span nodes";
  }
  try {
    const TpShard shard = make_tp_shard(cfg, 0, l.tp);
    if (job.muon) {
      try {
        check_muon_split(cfg, shard);
      } catch (const InputError& e) {
        return e.what();
      }
    }
  } catch (const InputError& e) {
    return std::string("does not divide: ") + e.what();
  }
  if (l.ep > 1) {
    if (!cfg.moe()) return "ep " + str(l.ep) + " on a model without experts";
    if (cfg.experts % l.ep != 0)
      return "does not divide: " + str(cfg.experts) + " experts over ep " + str(l.ep);
    if (l.dp % l.ep != 0) return "does not divide: ep " + str(l.ep) + " over dp " + str(l.dp);
  }
  if (job.batch % l.dp != 0)
    return "does not divide: batch " + str(job.batch) + " over dp " + str(l.dp);
  const int local = job.batch / l.dp;
  if (local % l.microbatches != 0) {
    return "does not divide: " + str(local) + " rows per DP rank into " + str(l.microbatches) +
           " microbatches";
  }
  if (l.cp > 1 && job.seq_len % (2 * l.cp) != 0) {
    return "does not divide: seq_len " + str(job.seq_len) + " into 2 x cp = " + str(2 * l.cp) +
           " chunks";
  }
  if (job.seq_len > cfg.max_seq_len) {
    return "seq_len " + str(job.seq_len) + " exceeds the model's " + str(cfg.max_seq_len) +
           " positions";
  }
  const int64_t rows = int64_t(l.micro_batch_size(job)) * (job.seq_len / l.cp);
  if (l.sequence_parallel && (l.tp == 1 || rows % l.tp != 0)) {
    return l.tp == 1
               ? "sequence parallelism without TP"
               : "does not divide: a microbatch's " + str(rows) + " rows over tp " + str(l.tp);
  }
  if (l.zero && l.dp * l.cp == 1) return "ZeRO with one data-parallel rank";
  if (l.zero >= 2 && job.muon) return "Muon under ZeRO-2/3, which the trainer refuses";
  if (l.zero_node) {
    if (!l.zero) return "HSDP (zero_group=node) without ZeRO";
    if (l.ep > 1) return "HSDP with EP, which the trainer refuses";
    if (job.muon) return "HSDP under Muon, which the trainer refuses";
    if (zero_node_ranks(job, l) == 0) {
      return "HSDP with each DP x CP group on one node, or spread unevenly over its nodes";
    }
  }
  if (int64_t(l.pp) * l.virtual_stages > cfg.layers) {
    return "does not divide: " + str(cfg.layers) + " blocks over " +
           str(int64_t(l.pp) * l.virtual_stages) + " pipeline chunks";
  }
  if (l.pp == 1 && (l.schedule != pipeline::Schedule::kOneFOneB || l.virtual_stages != 1)) {
    return "a pipeline schedule without pipeline stages";
  }
  try {
    const pipeline::PipelineShape shape{l.pp, 0, l.virtual_stages, l.microbatches,
                                        pipeline::placement_of(l.schedule, l.virtual_stages)};
    pipeline::validate(shape, l.schedule);
  } catch (const InputError& e) {
    return std::string("the schedule cannot run it: ") + e.what();
  }
  return "";
}

int group_nodes(const Job& job, const Layout& l, const std::string& dim) {
  // Strides of each coordinate in the world rank, TP fastest.
  const int s_tp = 1, s_cp = l.tp, s_dp = l.tp * l.cp, s_pp = l.tp * l.cp * l.dp;
  std::vector<int> members{0};
  auto extend = [&](int count, int stride) {
    std::vector<int> out;
    for (int m : members) {
      for (int i = 0; i < count; ++i) out.push_back(m + i * stride);
    }
    members = out;
  };
  if (dim == "tp")
    extend(l.tp, s_tp);
  else if (dim == "cp")
    extend(l.cp, s_cp);
  else if (dim == "ep")
    extend(l.ep, s_dp);  // consecutive DP ranks
  else if (dim == "dp")
    extend(l.dp, s_dp);
  else if (dim == "dp_cp")
    extend(l.cp, s_cp), extend(l.dp, s_dp);
  else if (dim == "expert_dp_cp")
    extend(l.cp, s_cp), extend(l.dp / l.ep, s_dp * l.ep);
  else if (dim == "pp")
    extend(l.pp, s_pp);
  // Counted with a flag per node, not a set: the search asks this of millions of layouts.
  const int last = members.empty() ? 0 : *std::max_element(members.begin(), members.end());
  std::vector<char> seen(size_t(last / job.ranks_per_node + 1), 0);
  int nodes = 0;
  for (int m : members) {
    char& s = seen[size_t(m / job.ranks_per_node)];
    nodes += !s;
    s = 1;
  }
  return nodes;
}

int zero_node_ranks(const Job& job, const Layout& l) {
  const int ranks = l.dp * l.cp;
  if (job.ranks_per_node % l.tp == 0) {
    // A DP x CP group's ranks are tp·k for k < dp·cp (Megatron's order), so a node holds
    // ranks_per_node / tp consecutive ones: the search asks this of every ZeRO layout it bounds.
    const int per_node = job.ranks_per_node / l.tp;
    return ranks > per_node && ranks % per_node == 0 ? per_node : 0;
  }
  const int nodes = group_nodes(job, l, "dp_cp");
  if (nodes < 2 || ranks % nodes != 0) return 0;
  // Megatron's order puts a group's ranks at regular strides, so a node holds ranks / nodes of
  // them exactly when no node boundary falls inside the stride pattern unevenly: count them.
  const int s_cp = l.tp, s_dp = l.tp * l.cp;
  std::map<int, int> per_node;
  for (int d = 0; d < l.dp; ++d) {
    for (int c = 0; c < l.cp; ++c) ++per_node[(d * s_dp + c * s_cp) / job.ranks_per_node];
  }
  for (const auto& [node, count] : per_node) {
    if (count != ranks / nodes) return 0;
  }
  return ranks / nodes;
}

std::string layout_flags(const Layout& l) {
  return "--tp " + std::to_string(l.tp) + " --pp " + std::to_string(l.pp) + " --dp " +
         std::to_string(l.dp) + layout_extra_flags(l);
}

std::string layout_extra_flags(const Layout& l) {
  std::string s;
  if (l.cp > 1) s += " --cp " + std::to_string(l.cp);
  if (l.ep > 1) s += " --ep " + std::to_string(l.ep);
  if (l.pp > 1) {
    s += " --schedule " + std::string(pipeline::schedule_name(l.schedule));
    if (l.virtual_stages != pipeline::default_virtual_stages(l.schedule)) {
      s += " --virtual-stages " + std::to_string(l.virtual_stages);
    }
  }
  s += " --microbatches " + std::to_string(l.microbatches);
  if (l.recompute) s += " --recompute";
  if (l.selective) s += " --recompute selective";
  if (l.sequence_parallel) s += " --sequence-parallel";
  if (l.zero) s += " --zero " + std::to_string(l.zero);
  if (l.zero_node) s += " --zero-group node";
  return s;
}

std::string layout_text(const Layout& l) {
  return "tp=" + std::to_string(l.tp) + ",cp=" + std::to_string(l.cp) +
         ",ep=" + std::to_string(l.ep) + ",pp=" + std::to_string(l.pp) +
         ",dp=" + std::to_string(l.dp) + ",vp=" + std::to_string(l.virtual_stages) +
         ",schedule=" + pipeline::schedule_name(l.schedule) +
         ",microbatches=" + std::to_string(l.microbatches) + ",recompute=" +
         (l.selective ? std::string("selective") : std::to_string(int(l.recompute))) +
         ",sp=" + std::to_string(int(l.sequence_parallel)) + ",zero=" + std::to_string(l.zero) +
         (l.zero_node ? ",zero_group=node" : "");
}

}  // namespace mpf::plan
