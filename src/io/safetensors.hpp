// Hugging Face's safetensors format (github.com/huggingface/safetensors, its README's "Format"):
//   8 bytes   N, the header's length, unsigned little-endian
//   N bytes   a JSON object: for every tensor "name": {"dtype": "F32", "shape": [rows, cols],
//             "data_offsets": [begin, end]}, and optionally "__metadata__": {string: string};
//             padded with spaces (writers pad it to a multiple of 8, so the data is aligned)
//   the data  each tensor's bytes, row-major, little-endian, at [begin, end) counted from the
//             byte after the header
// The reader validates the whole header against the file before any tensor is read, and reads
// element ranges of a tensor (F32, BF16 and F16, converted to float exactly), so a rank reads only
// the bytes of its shard. The writer's header depends on the tensors' names, dtypes and shapes
// alone: every rank of a collective save computes it and writes its own byte ranges.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mpf::safetensors {

// The dtypes this program writes; the reader knows every dtype of the format and converts
// F32, BF16 and F16.
enum class Dtype { kF32, kBF16 };
const char* dtype_name(Dtype d);  // "F32", "BF16"
int dtype_bytes(Dtype d);

struct TensorEntry {
  std::string name;
  std::string dtype;  // as the header spells it
  int element_bytes = 0;
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;  // byte offsets in the file (the header's, plus the data's start)
  int64_t elements() const;
};

// "(768, 2304)": a shape for messages.
std::string shape_text(const std::vector<int64_t>& shape);

// An open safetensors file with its header checked: a length inside the file, JSON of the form
// above, known dtypes, shapes whose byte count matches data_offsets, offsets inside the data and
// no two tensors overlapping. Every failure is an InputError naming the file and the tensor.
class Reader {
 public:
  explicit Reader(const std::string& path);
  ~Reader();
  Reader(Reader&& other) noexcept;
  Reader& operator=(Reader&&) = delete;
  Reader(const Reader&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<TensorEntry>& tensors() const { return tensors_; }  // in header order
  const std::vector<std::pair<std::string, std::string>>& metadata() const { return metadata_; }
  const TensorEntry* find(std::string_view name) const;

  // Elements [first, first + count) of the flattened tensor, as floats (exact for F32, BF16 and
  // F16). InputError for another dtype or a failed read.
  void read(const TensorEntry& t, int64_t first, int64_t count, float* out) const;

 private:
  std::string path_;
  int fd_ = -1;
  std::vector<TensorEntry> tensors_;
  std::vector<std::pair<std::string, std::string>> metadata_;
};

// A file's layout as the writer makes it: the tensors in the given order, packed, after a header
// padded with spaces to a multiple of 8 bytes.
struct TensorLayout {
  std::string name;
  Dtype dtype = Dtype::kF32;
  std::vector<int64_t> shape;
};

class Layout {
 public:
  Layout(std::vector<TensorLayout> tensors,
         const std::vector<std::pair<std::string, std::string>>& metadata);
  // The file's first bytes: the 8-byte length and the padded JSON.
  const std::string& header() const { return header_; }
  const std::vector<TensorLayout>& tensors() const { return tensors_; }
  int64_t offset(size_t i) const { return offsets_[i]; }  // tensor i's first byte in the file
  int64_t file_bytes() const { return file_bytes_; }

 private:
  std::vector<TensorLayout> tensors_;
  std::vector<int64_t> offsets_;
  std::string header_;
  int64_t file_bytes_ = 0;
};

// n floats as the dtype's little-endian bytes (BF16: rounded to nearest, ties to even).
void encode(Dtype dtype, const float* src, int64_t n, void* dst);
// Exact conversions of the 16-bit formats to float.
float from_f16(uint16_t h);

// Writes a whole file from host floats (data[i]: tensor i's elements) under a temporary name,
// renamed into place without replacing anything. Throws InputError naming the file.
void write_file(const std::string& path, const Layout& layout,
                const std::vector<const float*>& data);

// A sharded checkpoint's model.safetensors.index.json: its weight_map, tensor name -> file name
// (relative to the index's directory), in document order. InputError naming the index and the
// entry for anything else (a file name with a directory in it, a tensor listed twice).
std::vector<std::pair<std::string, std::string>> read_index(const std::string& path);

}  // namespace mpf::safetensors
