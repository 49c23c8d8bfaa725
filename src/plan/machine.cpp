#include "plan/machine.hpp"

#include <cmath>
#include <cstdio>
#include <vector>

#include "core/error.hpp"
#include "io/input_file.hpp"
#include "io/json.hpp"

namespace mpf::plan {

namespace {

using json::Value;

// Reads one object's keys, each error naming the file and the key's path.
struct Reader {
  const std::string& origin;
  std::string where;  // "device.fp32"

  std::string key(const std::string& k) const { return where.empty() ? k : where + "." + k; }
  [[noreturn]] void fail(const std::string& k, const std::string& what) const {
    throw InputError("machine file " + origin + ": " + key(k) + " " + what +
                     "; see docs/planning.md for the schema, or write one with mpiformer-plan "
                     "--calibrate");
  }
  const Value& need(const Value& obj, const std::string& k, Value::Kind kind) const {
    const Value* v = obj.find(k);
    if (!v) fail(k, "is missing");
    if (v->kind() != kind) {
      fail(k, std::string("must be a ") + json::kind_name(kind) + ", not a " +
                  json::kind_name(v->kind()));
    }
    return *v;
  }
  double positive(const Value& obj, const std::string& k) const {
    const double x = need(obj, k, Value::Kind::kNumber).number();
    if (!(x > 0) || !std::isfinite(x)) fail(k, "must be positive, got " + flag_number(x));
    return x;
  }
  double non_negative(const Value& obj, const std::string& k, double fallback) const {
    if (!obj.find(k)) return fallback;
    const double x = need(obj, k, Value::Kind::kNumber).number();
    if (!(x >= 0) || !std::isfinite(x)) fail(k, "must not be negative, got " + flag_number(x));
    return x;
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
  return {in.positive(v, "bandwidth_gbs"), in.non_negative(v, "latency_us", 0)};
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
  p.peak_gflops = r.positive(v, "peak_gflops");
  p.gemm = read_curve<RatePoint>(
      r, v, "gemm",
      [](const Reader& e, const Value& pt) {
        return RatePoint{e.positive(pt, "gflop"), e.positive(pt, "gflops")};
      },
      [](const RatePoint& q) { return q.gflop; }, "gflop");
  if (p.gemm.empty()) p.gemm_efficiency = r.positive(v, "gemm_efficiency");
  p.attention = read_curve<AttentionRate>(
      r, v, "attention",
      [](const Reader& e, const Value& pt) {
        return AttentionRate{int(e.positive(pt, "seq_len")), e.positive(pt, "forward_gflops"),
                             e.positive(pt, "backward_gflops")};
      },
      [](const AttentionRate& a) { return a.seq_len; }, "seq_len");
  if (p.attention.empty()) p.attention_efficiency = r.positive(v, "attention_efficiency");
  if (p.gemm_efficiency > 1) r.fail("gemm_efficiency", "is a fraction of the peak, at most 1");
  if (p.attention_efficiency > 1) {
    r.fail("attention_efficiency", "is a fraction of the peak, at most 1");
  }
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
  const double devices = r.positive(doc, "devices_per_node");
  if (devices != std::floor(devices)) r.fail("devices_per_node", "must be a whole number");
  m.devices_per_node = int(devices);
  const Value& dev = r.need(doc, "device", Value::Kind::kObject);
  const Reader d = r.in("device");
  m.memory_gb = d.positive(dev, "memory_gb");
  m.memory_bandwidth_gbs = d.positive(dev, "memory_bandwidth_gbs");
  m.kernel_overhead_us = d.non_negative(dev, "kernel_overhead_us", 0);
  m.process_mb = d.non_negative(dev, "process_mb", 0);
  const Value& precisions = d.need(dev, "precisions", Value::Kind::kObject);
  if (precisions.object().empty()) d.fail("precisions", "must name fp32 or bf16");
  for (const auto& [name, rates] : precisions.object()) {
    const Reader p = d.in("precisions." + name);
    if (name != "fp32" && name != "bf16") {
      d.fail("precisions." + name, "is not a precision the trainer runs; use fp32 or bf16");
    }
    if (!rates.is_object()) p.fail("", "must be an object");
    m.precisions[parse_precision(name)] = read_rates(p, rates);
  }
  m.intra_node = read_link(r, doc, "intra_node");
  m.inter_node = read_link(r, doc, "inter_node");
  m.message_overhead_us = r.non_negative(doc, "message_overhead_us", 0);
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
      t.ranks = int(e.positive(row, "ranks"));
      t.nodes = int(e.positive(row, "nodes"));
      t.bytes = e.positive(row, "bytes");
      t.us = e.positive(row, "us");
      m.collectives.push_back(t);
    }
  }
  return m;
}

Machine read_machine(const std::string& path) {
  const std::string text = read_input_text(
      path, "machine file " + path,
      "pass a machine file (--calibrate writes one; docs/planning.md)", int64_t(1) << 24);
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
