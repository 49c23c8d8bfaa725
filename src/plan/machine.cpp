#include "plan/machine.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <set>
#include <vector>

#include "core/error.hpp"
#include "io/input_file.hpp"
#include "io/json.hpp"

namespace mpf::plan {

namespace {

using json::Value;

// The ceilings of a machine file's figures: each far past any machine's (an H100's bf16 peak is
// ~1e6 GFLOP/s, its memory 80 GB), low enough that bytes and products stay in range.
constexpr int kMaxDevicesPerNode = 1024;
constexpr int kMaxGroupRanks = 1 << 20;
constexpr int kMaxSeqLen = 1 << 24;
constexpr double kMaxMemoryGb = 1e5;      // per node or device
constexpr double kMaxProcessMb = 1e6;     // a rank's memory before the model
constexpr double kMaxGflops = 1e8;        // a device's rate
constexpr double kMaxGflop = 1e9;         // one product's work per device
constexpr double kMaxBandwidthGbs = 1e6;  // a device's memory or a link
constexpr double kMaxMicroseconds = 1e6;  // a latency or overhead
constexpr double kMaxBytes = 1e12;        // a measured collective's buffer
constexpr double kMaxCallUs = 1e9;        // a measured collective's time

// Reads one object's keys, each error naming the file and the key's path.
struct Reader {
  const std::string& origin;
  std::string where;  // "device.fp32"

  std::string key(const std::string& k) const {
    return where.empty() || k.empty() ? where + k : where + "." + k;
  }
  [[noreturn]] void fail(const std::string& k, const std::string& what) const {
    throw InputError("machine file " + origin + ": " + key(k) + " " + what +
                     "; see docs/planning.md for the schema, or write one with mpiformer-plan "
                     "--calibrate");
  }
  const Value& need(const Value& obj, const std::string& k, Value::Kind kind) const {
    const Value* v = obj.find(k);
    if (!v) fail(k, "is missing");
    if (v->kind() != kind) {
      fail(k,
           std::string("must be ") + json::kind_name(kind) + ", not " + json::kind_name(v->kind()));
    }
    return *v;
  }
  // Each figure has a ceiling well past any machine's: beyond it a typo (or 1e300) would
  // overflow the byte counts and rank products the plan computes into nonsense.
  double positive(const Value& obj, const std::string& k, double most) const {
    const double x = need(obj, k, Value::Kind::kNumber).number();
    if (!(x > 0 && x <= most)) {
      fail(k, "must be positive and at most " + flag_number(most) + ", got " + flag_number(x));
    }
    return x;
  }
  double non_negative(const Value& obj, const std::string& k, double fallback, double most) const {
    if (!obj.find(k)) return fallback;
    const double x = need(obj, k, Value::Kind::kNumber).number();
    if (!(x >= 0 && x <= most)) {
      fail(k,
           "must not be negative, nor more than " + flag_number(most) + ", got " + flag_number(x));
    }
    return x;
  }
  // A count: a fraction is refused, not truncated (2.5 devices is a typo, not 2).
  int integer(const Value& obj, const std::string& k, int least, int most) const {
    const double x = need(obj, k, Value::Kind::kNumber).number();
    if (!(x >= least && x <= most) || x != std::floor(x)) {
      fail(k, "must be an integer in " + std::to_string(least) + ".." + std::to_string(most) +
                  ", got " + flag_number(x));
    }
    return int(x);
  }
  // A misspelt optional key would be ignored and its default used without a word; a repeated
  // one would let the last silently win. Called after an object's keys are read, so that a
  // misspelt required key is reported as missing.
  void only(const Value& obj, std::initializer_list<const char*> known) const {
    std::set<std::string> seen;
    for (const auto& member : obj.object()) {
      const std::string& k = member.first;
      if (std::find_if(known.begin(), known.end(), [&](const char* n) { return k == n; }) ==
          known.end()) {
        std::string list;
        for (const char* n : known) list += std::string(list.empty() ? "" : ", ") + n;
        fail(k, "is not a key of " + (where.empty() ? std::string("the file") : where) +
                    " (misspelt?); its keys are " + list);
      }
      if (!seen.insert(k).second) fail(k, "is given twice; give it once");
    }
  }
  static std::string flag_number(double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", x);
    return buf;
  }
  Reader in(const std::string& k) const { return {origin, key(k)}; }
};

Link read_link(const Reader& r, const Value& obj, const std::string& k) {
  const Value& v = r.need(obj, k, Value::Kind::kObject);
  const Reader in = r.in(k);
  in.need(v, "latency_us", Value::Kind::kNumber);
  const Link link{in.positive(v, "bandwidth_gbs", kMaxBandwidthGbs),
                  in.non_negative(v, "latency_us", 0, kMaxMicroseconds)};
  in.only(v, {"bandwidth_gbs", "latency_us"});
  return link;
}

// The points of the curve under `key` (none when absent), each read by `point`, ascending in `x`.
template <class P, class Read, class X>
std::vector<P> read_curve(const Reader& r, const Value& v, const std::string& key, Read point, X x,
                          const char* x_key) {
  std::vector<P> out;
  const Value* c = v.find(key);
  if (!c) return out;
  if (!c->is_array() || c->array().empty()) r.fail(key, "must be a non-empty array");
  for (size_t i = 0; i < c->array().size(); ++i) {
    const Reader e = r.in(key + "[" + std::to_string(i) + "]");
    const Value& pt = c->array()[i];
    if (!pt.is_object()) e.fail("", "must be an object");
    out.push_back(point(e, pt));
    if (i > 0 && x(out[i]) <= x(out[i - 1])) e.fail(x_key, "must ascend");
  }
  return out;
}

PrecisionRates read_rates(const Reader& r, const Value& v) {
  PrecisionRates p;
  p.peak_gflops = r.positive(v, "peak_gflops", kMaxGflops);
  p.gemm = read_curve<RatePoint>(
      r, v, "gemm",
      [](const Reader& e, const Value& pt) {
        const RatePoint q{e.positive(pt, "gflop", kMaxGflop), e.positive(pt, "gflops", kMaxGflops)};
        e.only(pt, {"gflop", "gflops"});
        return q;
      },
      [](const RatePoint& q) { return q.gflop; }, "gflop");
  if (p.gemm.empty()) p.gemm_efficiency = r.positive(v, "gemm_efficiency", 1);
  p.attention = read_curve<AttentionRate>(
      r, v, "attention",
      [](const Reader& e, const Value& pt) {
        const AttentionRate a{e.integer(pt, "seq_len", 1, kMaxSeqLen),
                              e.positive(pt, "forward_gflops", kMaxGflops),
                              e.positive(pt, "backward_gflops", kMaxGflops)};
        e.only(pt, {"seq_len", "forward_gflops", "backward_gflops"});
        return a;
      },
      [](const AttentionRate& a) { return a.seq_len; }, "seq_len");
  if (p.attention.empty()) p.attention_efficiency = r.positive(v, "attention_efficiency", 1);
  r.only(v, {"peak_gflops", "gemm", "gemm_efficiency", "attention", "attention_efficiency"});
  return p;
}

}  // namespace

const PrecisionRates& Machine::rates(Precision p) const {
  const auto it = precisions.find(p);
  require(it != precisions.end(), "machine " + name + " gives no rates for " + precision_name(p) +
                                      "; add device." + precision_name(p) +
                                      " to its file, or plan another --precision");
  return it->second;
}

Machine parse_machine(const std::string& text, const std::string& origin) {
  const Value doc = json::parse(text, "machine file " + origin);
  const Reader r{origin, ""};
  if (!doc.is_object()) r.fail("the document", "must be a JSON object");
  Machine m;
  m.name = r.need(doc, "name", Value::Kind::kString).string();
  m.kind = r.need(doc, "kind", Value::Kind::kString).string();
  if (m.kind != "cpu" && m.kind != "gpu")
    r.fail("kind", "must be \"cpu\" or \"gpu\", got \"" + m.kind + "\"");
  if (doc.find("source")) {
    m.source = r.need(doc, "source", Value::Kind::kString).string();
    if (m.source != "data sheet" && m.source != "calibrated")
      r.fail("source", "must be \"data sheet\" or \"calibrated\", got \"" + m.source + "\"");
  }
  if (doc.find("note")) m.note = r.need(doc, "note", Value::Kind::kString).string();
  m.devices_per_node = r.integer(doc, "devices_per_node", 1, kMaxDevicesPerNode);
  const Value& dev = r.need(doc, "device", Value::Kind::kObject);
  const Reader d = r.in("device");
  m.memory_gb = d.positive(dev, "memory_gb", kMaxMemoryGb);
  m.memory_bandwidth_gbs = d.positive(dev, "memory_bandwidth_gbs", kMaxBandwidthGbs);
  m.kernel_overhead_us = d.non_negative(dev, "kernel_overhead_us", 0, kMaxMicroseconds);
  m.process_mb = d.non_negative(dev, "process_mb", 0, kMaxProcessMb);
  const Value& precisions = d.need(dev, "precisions", Value::Kind::kObject);
  if (precisions.object().empty()) d.fail("precisions", "must name fp32 or bf16");
  for (const auto& [name, rates] : precisions.object()) {
    const Reader p = d.in("precisions." + name);
    if (name != "fp32" && name != "bf16") {
      d.fail("precisions." + name, "is not a precision the trainer runs; use fp32 or bf16");
    }
    if (!rates.is_object()) p.fail("", "must be an object");
    if (m.precisions.count(parse_precision(name))) p.fail("", "is given twice; give it once");
    m.precisions[parse_precision(name)] = read_rates(p, rates);
  }
  d.only(dev,
         {"memory_gb", "memory_bandwidth_gbs", "kernel_overhead_us", "process_mb", "precisions"});
  m.intra_node = read_link(r, doc, "intra_node");
  m.inter_node = read_link(r, doc, "inter_node");
  if (doc.find("host_link")) m.host_link = read_link(r, doc, "host_link");
  m.message_overhead_us = r.non_negative(doc, "message_overhead_us", 0, kMaxMicroseconds);
  if (const Value* c = doc.find("collectives")) {
    if (!c->is_array()) r.fail("collectives", "must be an array");
    for (size_t i = 0; i < c->array().size(); ++i) {
      const Reader e = r.in("collectives[" + std::to_string(i) + "]");
      const Value& row = c->array()[i];
      if (!row.is_object()) e.fail("", "must be an object");
      CollectiveTime t;
      t.op = e.need(row, "op", Value::Kind::kString).string();
      if (t.op != "allreduce" && t.op != "allgather" && t.op != "alltoall") {
        e.fail("op", "must be allreduce, allgather or alltoall, got \"" + t.op + "\"");
      }
      t.ranks = e.integer(row, "ranks", 1, kMaxGroupRanks);
      t.nodes = e.integer(row, "nodes", 1, t.ranks);  // a group spans at most one node a rank
      t.bytes = e.positive(row, "bytes", kMaxBytes);
      t.us = e.positive(row, "us", kMaxCallUs);
      e.only(row, {"op", "ranks", "nodes", "bytes", "us"});
      m.collectives.push_back(t);
    }
  }
  r.only(doc, {"name", "source", "note", "kind", "devices_per_node", "device", "intra_node",
               "inter_node", "host_link", "message_overhead_us", "collectives"});
  return m;
}

Machine read_machine(const std::string& path) {
  const std::string text = read_input_text(
      path, "machine file " + path, "a machine file (--calibrate writes one; docs/planning.md)",
      int64_t(1) << 24);
  return parse_machine(text, path);
}

namespace {
std::string num(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}
std::string link_json(const Link& l) {
  return "{\"bandwidth_gbs\": " + num(l.bandwidth_gbs) + ", \"latency_us\": " + num(l.latency_us) +
         "}";
}
}  // namespace

std::string machine_json(const Machine& m) {
  std::string s = "{\n  \"name\": " + json::quote(m.name) +
                  (m.source.empty() ? "" : ",\n  \"source\": " + json::quote(m.source)) +
                  (m.note.empty() ? "" : ",\n  \"note\": " + json::quote(m.note)) +
                  ",\n  \"kind\": " + json::quote(m.kind) +
                  ",\n  \"devices_per_node\": " + std::to_string(m.devices_per_node) +
                  ",\n  \"device\": {\n    \"memory_gb\": " + num(m.memory_gb) +
                  ",\n    \"memory_bandwidth_gbs\": " + num(m.memory_bandwidth_gbs) +
                  ",\n    \"kernel_overhead_us\": " + num(m.kernel_overhead_us) +
                  ",\n    \"process_mb\": " + num(m.process_mb) + ",\n    \"precisions\": {";
  bool first = true;
  for (const auto& [p, r] : m.precisions) {
    s += std::string(first ? "" : ",") + "\n      " + json::quote(precision_name(p)) +
         ": {\n        \"peak_gflops\": " + num(r.peak_gflops) + ",\n        ";
    first = false;
    if (r.gemm.empty()) {
      s += "\"gemm_efficiency\": " + num(r.gemm_efficiency);
    } else {
      s += "\"gemm\": [";
      for (size_t i = 0; i < r.gemm.size(); ++i) {
        s += std::string(i ? ", " : "") + "{\"gflop\": " + num(r.gemm[i].gflop) +
             ", \"gflops\": " + num(r.gemm[i].gflops) + "}";
      }
      s += "]";
    }
    s += ",\n        ";
    if (r.attention.empty()) {
      s += "\"attention_efficiency\": " + num(r.attention_efficiency);
    } else {
      s += "\"attention\": [";
      for (size_t i = 0; i < r.attention.size(); ++i) {
        const AttentionRate& a = r.attention[i];
        s += std::string(i ? ", " : "") + "{\"seq_len\": " + std::to_string(a.seq_len) +
             ", \"forward_gflops\": " + num(a.forward_gflops) +
             ", \"backward_gflops\": " + num(a.backward_gflops) + "}";
      }
      s += "]";
    }
    s += "\n      }";
  }
  s += "\n    }\n  },\n  \"intra_node\": " + link_json(m.intra_node) +
       ",\n  \"inter_node\": " + link_json(m.inter_node) +
       (m.host_link.bandwidth_gbs > 0 ? ",\n  \"host_link\": " + link_json(m.host_link) : "") +
       ",\n  \"message_overhead_us\": " + num(m.message_overhead_us) + ",\n  \"collectives\": [";
  for (size_t i = 0; i < m.collectives.size(); ++i) {
    const CollectiveTime& c = m.collectives[i];
    s += std::string(i ? "," : "") + "\n    {\"op\": " + json::quote(c.op) +
         ", \"ranks\": " + std::to_string(c.ranks) + ", \"nodes\": " + std::to_string(c.nodes) +
         ", \"bytes\": " + num(c.bytes) + ", \"us\": " + num(c.us) + "}";
  }
  s += std::string(m.collectives.empty() ? "" : "\n  ") + "]\n}\n";
  return s;
}

}  // namespace mpf::plan
