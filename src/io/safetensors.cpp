#include "io/safetensors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>

#include "core/bf16.hpp"
#include "core/error.hpp"
#include "io/input_file.hpp"
#include "io/json.hpp"
#include "io/output_file.hpp"

// The format is little-endian; this program reads and writes it with plain memcpy.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors files are little-endian");

namespace mpf::safetensors {

namespace {

// The safetensors library refuses headers above 100 MB; so does this reader, before allocating.
constexpr int64_t kMaxHeaderBytes = 100'000'000;

// Every dtype the format defines (its Rust crate's Dtype), with its size in bytes.
const std::map<std::string, int, std::less<>>& known_dtypes() {
  static const std::map<std::string, int, std::less<>> dtypes{
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  return dtypes;
}

std::string st_file_name(const std::string& path) {
  return "safetensors file " + path;
}

std::string st_tensor_name(const std::string& path, const std::string& tensor) {
  return st_file_name(path) + ": tensor " + tensor;
}

// pread until done; false on an error or the end of the file.
bool st_read_at(int fd, void* dst, int64_t bytes, int64_t offset) {
  char* p = static_cast<char*>(dst);
  while (bytes > 0) {
    const ssize_t n = pread(fd, p, size_t(std::min<int64_t>(bytes, 1 << 30)), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) errno = 0;  // the end of the file
    if (n <= 0) return false;
    p += n;
    bytes -= n;
    offset += n;
  }
  return true;
}

// The entry's fields, each checked; `data_bytes`: the size of the data after the header.
TensorEntry parse_entry(const std::string& path, const std::string& name, const json::Value& v,
                        int64_t data_start, int64_t data_bytes) {
  const std::string where = st_tensor_name(path, name);
  require(v.is_object(), where + ": its header entry is not a JSON object; the file is corrupt");
  TensorEntry t;
  t.name = name;
  const json::Value* dtype = v.find("dtype");
  const json::Value* shape = v.find("shape");
  const json::Value* offsets = v.find("data_offsets");
  require(dtype && dtype->is_string(), where + ": no \"dtype\" string; the file is corrupt");
  t.dtype = dtype->string();
  const auto known = known_dtypes().find(t.dtype);
  require(known != known_dtypes().end(),
          where + ": unknown dtype \"" + t.dtype +
              "\"; a safetensors dtype is one of F32, BF16, F16, ... (the file is corrupt or of "
              "a newer format)");
  t.element_bytes = known->second;
  require(shape && shape->is_array(), where + ": no \"shape\" array; the file is corrupt");
  int64_t elements = 1;
  for (const json::Value& d : shape->array()) {
    int64_t n = -1;
    try {
      n = d.integer();
    } catch (const json::TypeError&) {
    }
    require(n >= 0, where +
                        ": its shape holds a dimension that is not a non-negative integer; "
                        "the file is corrupt");
    t.shape.push_back(n);
    require(
        n == 0 || elements <= (int64_t(1) << 50) / n,
        where + ": shape " + shape_text(t.shape) + " is implausibly large; the file is corrupt");
    elements *= n;
  }
  require(offsets && offsets->is_array() && offsets->array().size() == 2,
          where + ": no \"data_offsets\" [begin, end]; the file is corrupt");
  int64_t b = -1, e = -1;
  try {
    b = offsets->array()[0].integer();
    e = offsets->array()[1].integer();
  } catch (const json::TypeError&) {
  }
  // The offsets as the header writes them (1e+30, not the -1 a failed conversion leaves).
  auto as_written = [](const json::Value& x) {
    if (!x.is_number()) return std::string(json::kind_name(x.kind()));
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", x.number());
    return std::string(buf);
  };
  require(b >= 0 && e >= b, where + ": data_offsets [" + as_written(offsets->array()[0]) + ", " +
                                as_written(offsets->array()[1]) +
                                "] are not a range of byte offsets; the file is corrupt");
  require(e <= data_bytes, where + ": data_offsets [" + std::to_string(b) + ", " +
                               std::to_string(e) + "] run past the " + std::to_string(data_bytes) +
                               " bytes of data after the header; the file is truncated or corrupt");
  require(e - b == elements * t.element_bytes,
          where + ": data_offsets [" + std::to_string(b) + ", " + std::to_string(e) + "] hold " +
              std::to_string(e - b) + " bytes but shape " + shape_text(t.shape) + " of " + t.dtype +
              " needs " + std::to_string(elements * t.element_bytes) + "; the file is corrupt");
  t.begin = data_start + b;
  t.end = data_start + e;
  return t;
}

void st_convert(const std::string& dtype, const unsigned char* src, int64_t n, float* out) {
  if (dtype == "F32") {
    std::memcpy(out, src, size_t(n) * sizeof(float));
  } else if (dtype == "BF16") {
    for (int64_t i = 0; i < n; ++i) {
      bf16 h;
      std::memcpy(&h, src + 2 * i, 2);
      out[i] = from_bf16(h);
    }
  } else {  // F16
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      out[i] = from_f16(h);
    }
  }
}

}  // namespace

const char* dtype_name(Dtype d) {
  return d == Dtype::kF32 ? "F32" : "BF16";
}

int dtype_bytes(Dtype d) {
  return d == Dtype::kF32 ? 4 : 2;
}

int64_t TensorEntry::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

float from_f16(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in a float
    const float x = std::ldexp(float(mantissa), -24);
    std::memcpy(&bits, &x, sizeof bits);
    bits |= sign;
  } else if (exponent == 31) {  // Inf or NaN
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  }
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

Reader::Reader(const std::string& path) : path_(path) {
  const std::string what = st_file_name(path);
  int64_t size = 0;
  fd_ = open_input(path, what, "a .safetensors file or a model directory", size);
  require(size >= 8, what + ": " + std::to_string(size) +
                         " bytes is too short for the 8-byte header length; the file is "
                         "truncated or not a safetensors file");
  uint64_t n = 0;
  require(st_read_at(fd_, &n, 8, 0), what + ": cannot read the header length");
  require(n <= uint64_t(size - 8), what + ": the header length " + std::to_string(n) +
                                       " runs past the end of the file (" + std::to_string(size) +
                                       " bytes); the file is truncated or not a safetensors file");
  require(int64_t(n) <= kMaxHeaderBytes,
          what + ": the header length " + std::to_string(n) +
              " is above the format's 100 MB limit; the file is corrupt");
  std::string text(size_t(n), '\0');
  require(st_read_at(fd_, text.data(), int64_t(n), 8), what + ": cannot read the header");
  require(!text.empty() && text[0] == '{',
          what + ": the header does not start with '{'; not a safetensors file");
  const json::Value header = json::parse(text, what + " header");
  require(header.is_object(), what + ": the header is not a JSON object; the file is corrupt");
  const int64_t data_start = 8 + int64_t(n), data_bytes = size - data_start;
  std::map<std::string, size_t, std::less<>> seen;
  for (const auto& [name, value] : header.object()) {
    require(seen.emplace(name, tensors_.size()).second,
            st_tensor_name(path, name) + ": listed twice in the header; the file is corrupt");
    if (name == "__metadata__") {
      require(value.is_object(),
              what + ": __metadata__ is not a JSON object of strings; the file is corrupt");
      for (const auto& [key, v] : value.object()) {
        require(v.is_string(),
                what + ": __metadata__ key \"" + key + "\" is not a string; the file is corrupt");
        metadata_.emplace_back(key, v.string());
      }
      continue;
    }
    tensors_.push_back(parse_entry(path, name, value, data_start, data_bytes));
  }
  // No two tensors may share a byte (the format's rule; a writer that did would alias them).
  std::vector<const TensorEntry*> by_offset;
  for (const TensorEntry& t : tensors_) {
    if (t.end > t.begin) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorEntry* a, const TensorEntry* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorEntry &a = *by_offset[i - 1], &b = *by_offset[i];
    require(b.begin >= a.end, st_tensor_name(path, b.name) +
                                  ": its data_offsets overlap those of " + a.name +
                                  "; the file is corrupt");
  }
}

Reader::~Reader() {
  if (fd_ >= 0) close(fd_);
}

Reader::Reader(Reader&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(other.fd_),
      tensors_(std::move(other.tensors_)),
      metadata_(std::move(other.metadata_)) {
  other.fd_ = -1;
}

const TensorEntry* Reader::find(std::string_view name) const {
  for (const TensorEntry& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

void Reader::read(const TensorEntry& t, int64_t first, int64_t count, float* out) const {
  // Called per row segment of a shard: messages are built only on failure.
  if (t.dtype != "F32" && t.dtype != "BF16" && t.dtype != "F16") {
    throw InputError(st_tensor_name(path_, t.name) + ": dtype " + t.dtype +
                     " is not a floating-point type this program reads (F32, BF16, F16)");
  }
  if (first < 0 || count < 0 || first + count > t.elements()) {
    MPF_FATAL("safetensors read of elements [" + std::to_string(first) + ", " +
              std::to_string(first + count) + ") of " + t.name + ", which has " +
              std::to_string(t.elements()));
  }
  auto failed = [&] {
    return InputError(st_tensor_name(path_, t.name) + ": read failed (" +
                      (errno ? std::strerror(errno) : "end of file") +
                      "); the file changed while being read or is unreadable");
  };
  if (t.element_bytes == 4) {
    if (!st_read_at(fd_, out, count * 4, t.begin + first * 4)) throw failed();
    return;
  }
  std::vector<unsigned char> raw(size_t(std::min<int64_t>(count, 1 << 22)) * 2);
  for (int64_t done = 0; done < count;) {
    const int64_t n = std::min<int64_t>(count - done, int64_t(raw.size() / 2));
    if (!st_read_at(fd_, raw.data(), n * 2, t.begin + (first + done) * 2)) throw failed();
    st_convert(t.dtype, raw.data(), n, out + done);
    done += n;
  }
}

Layout::Layout(std::vector<TensorLayout> tensors,
               const std::vector<std::pair<std::string, std::string>>& metadata)
    : tensors_(std::move(tensors)) {
  std::string text = "{";
  if (!metadata.empty()) {
    text += "\"__metadata__\":{";
    for (size_t i = 0; i < metadata.size(); ++i) {
      text +=
          (i ? "," : "") + json::quote(metadata[i].first) + ":" + json::quote(metadata[i].second);
    }
    text += "}";
  }
  int64_t at = 0;
  for (const TensorLayout& t : tensors_) {
    int64_t n = dtype_bytes(t.dtype);
    std::string dims;
    for (size_t i = 0; i < t.shape.size(); ++i) {
      n *= t.shape[i];
      dims += (i ? "," : "") + std::to_string(t.shape[i]);
    }
    text += std::string(text.size() > 1 ? "," : "") + json::quote(t.name) + ":{\"dtype\":\"" +
            dtype_name(t.dtype) + "\",\"shape\":[" + dims + "],\"data_offsets\":[" +
            std::to_string(at) + "," + std::to_string(at + n) + "]}";
    offsets_.push_back(at);
    at += n;
  }
  text += "}";
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  const uint64_t n = text.size();
  header_.assign(reinterpret_cast<const char*>(&n), 8);
  header_ += text;
  for (int64_t& o : offsets_) o += int64_t(header_.size());
  file_bytes_ = int64_t(header_.size()) + at;
}

void encode(Dtype dtype, const float* src, int64_t n, void* dst) {
  if (dtype == Dtype::kF32) {
    std::memcpy(dst, src, size_t(n) * sizeof(float));
    return;
  }
  auto* out = static_cast<unsigned char*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const bf16 h = to_bf16(src[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
}

void write_file(const std::string& path, const Layout& layout,
                const std::vector<const float*>& data) {
  if (data.size() != layout.tensors().size()) MPF_FATAL("safetensors::write_file: data per tensor");
  check_new_output(path, st_file_name(path));
  PendingFile file(path);
  file.write(layout.header().data(), layout.header().size());
  std::vector<unsigned char> bytes;
  for (size_t i = 0; i < data.size(); ++i) {
    const TensorLayout& t = layout.tensors()[i];
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    bytes.resize(size_t(n) * size_t(dtype_bytes(t.dtype)));
    encode(t.dtype, data[i], n, bytes.data());
    file.write(bytes.data(), bytes.size());
  }
  const std::string error = file.commit();
  require(error.empty(), st_file_name(path) + ": " + error +
                             "; check free space and permissions, or choose another path");
}

std::vector<std::pair<std::string, std::string>> read_index(const std::string& path) {
  const std::string what = "safetensors index " + path;
  int64_t size = 0;
  const int fd = open_input(path, what, "a model.safetensors.index.json", size);
  if (size > kMaxHeaderBytes) close(fd);
  require(size <= kMaxHeaderBytes, what + ": " + std::to_string(size) +
                                       " bytes is implausibly large for an index; the file is "
                                       "corrupt");
  std::string text(size_t(size), '\0');
  const bool ok = st_read_at(fd, text.data(), size, 0);
  close(fd);
  require(ok, what + ": read failed; the file changed while being read or is unreadable");
  const json::Value index = json::parse(text, what);
  const json::Value* map = index.find("weight_map");
  require(map && map->is_object(), what + ": no \"weight_map\" object; not a safetensors index");
  std::vector<std::pair<std::string, std::string>> out;
  std::map<std::string, int, std::less<>> seen;
  for (const auto& [name, file] : map->object()) {
    require(file.is_string(),
            what + ": weight_map entry " + name + " is not a file name; the index is corrupt");
    const std::string& f = file.string();
    require(!f.empty() && f.find('/') == std::string::npos && f != "." && f != "..",
            what + ": weight_map entry " + name + " names \"" + f +
                "\", not a file beside the index; the index is corrupt");
    require(seen.emplace(name, 0).second,
            what + ": tensor " + name + " is listed twice in weight_map; the index is corrupt");
    out.emplace_back(name, f);
  }
  return out;
}

}  // namespace mpf::safetensors
