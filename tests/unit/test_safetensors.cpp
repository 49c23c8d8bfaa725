// The safetensors reader and writer (io/safetensors.hpp): a written file reads back bit for bit
// (F32) or as the rounded values (BF16), F16 converts exactly, and every defect of a header is
// refused with a message naming the file and the tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "core/bf16.hpp"
#include "io/safetensors.hpp"
#include "unit/test_helpers.hpp"

namespace mpf {
namespace {

using safetensors::Dtype;
using safetensors::Layout;
using safetensors::Reader;

class SafetensorsTest : public test::ScratchDirTest {
 protected:
  // A file of an 8-byte length, `header` as given and `data`.
  std::string raw_file(const std::string& name, const std::string& header, const std::string& data,
                       int64_t length = -1) {
    const std::string p = path(name);
    std::ofstream out(p, std::ios::binary);
    const uint64_t n = length < 0 ? header.size() : uint64_t(length);
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << header << data;
    return p;
  }
  // The error a Reader of `p` throws; it must name the file and `tensor`.
  void expect_refused(const std::string& p, const std::string& tensor, const std::string& what) {
    const std::string e = test::input_error([&] { Reader r(p); });
    EXPECT_NE(e.find(p), std::string::npos) << e;
    EXPECT_NE(e.find(tensor), std::string::npos) << e;
    EXPECT_NE(e.find(what), std::string::npos) << e;
  }
};

std::vector<float> values(int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = scale * std::sin(0.37f * float(i) + 0.1f);
  return v;
}

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

TEST_F(SafetensorsTest, RoundTripKeepsEveryBit) {
  std::vector<float> a = values(15, 3.0f), b = values(7, 1e-3f), c = values(24, 100.0f);
  // Values whose bits a careless conversion would lose: -0, a subnormal, the largest float.
  a[0] = -0.0f;
  a[1] = std::numeric_limits<float>::denorm_min();
  a[2] = std::numeric_limits<float>::max();
  const Layout layout(
      {{"a", Dtype::kF32, {3, 5}}, {"b.bias", Dtype::kF32, {7}}, {"c", Dtype::kF32, {2, 3, 4}}},
      {{"format", "pt"}});
  EXPECT_EQ(layout.header().size() % 8, 0u);  // the data starts 8-byte aligned
  const std::string p = path("m.safetensors");
  safetensors::write_file(p, layout, {a.data(), b.data(), c.data()});

  const Reader r(p);
  ASSERT_EQ(r.tensors().size(), 3u);
  ASSERT_EQ(r.metadata().size(), 1u);
  EXPECT_EQ(r.metadata()[0].second, "pt");
  const std::vector<std::vector<float>*> want{&a, &b, &c};
  const std::vector<std::vector<int64_t>> shapes{{3, 5}, {7}, {2, 3, 4}};
  for (size_t i = 0; i < 3; ++i) {
    const safetensors::TensorEntry& t = r.tensors()[i];
    EXPECT_EQ(t.shape, shapes[i]);
    EXPECT_EQ(t.begin, layout.offset(i));
    std::vector<float> got(static_cast<size_t>(t.elements()));
    r.read(t, 0, t.elements(), got.data());
    for (size_t k = 0; k < got.size(); ++k) EXPECT_EQ(bits(got[k]), bits((*want[i])[k])) << t.name;
  }
  // A range inside a tensor: what a rank reads of its shard.
  float mid[4];
  r.read(*r.find("c"), 9, 4, mid);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(bits(mid[k]), bits(c[size_t(9 + k)]));
  // Never over an existing file.
  const std::string e = test::input_error([&] {
    safetensors::write_file(p, layout, {a.data(), b.data(), c.data()});
  });
  EXPECT_NE(e.find("already exists"), std::string::npos) << e;
}

TEST_F(SafetensorsTest, Bf16IsRoundedToNearestEven) {
  std::vector<float> a = values(33, 7.0f);
  a[0] = 1.0f + 1.0f / 256;  // a tie: rounds to even, 1.0
  const std::string p = path("bf16.safetensors");
  safetensors::write_file(p, Layout({{"w", Dtype::kBF16, {3, 11}}}, {}), {a.data()});
  const Reader r(p);
  EXPECT_EQ(r.tensors()[0].dtype, "BF16");
  EXPECT_EQ(r.tensors()[0].end - r.tensors()[0].begin, 66);
  std::vector<float> got(33);
  r.read(r.tensors()[0], 0, 33, got.data());
  EXPECT_EQ(got[0], 1.0f);
  for (size_t k = 0; k < 33; ++k) EXPECT_EQ(bits(got[k]), bits(from_bf16(to_bf16(a[k]))));
}

TEST_F(SafetensorsTest, F16ConvertsExactly) {
  // 1, -2, the smallest subnormal 2^-24, the largest half 65504, infinity, 1/3 rounded.
  const uint16_t h[6] = {0x3c00, 0xc000, 0x0001, 0x7bff, 0x7c00, 0x3555};
  const std::string data(reinterpret_cast<const char*>(h), sizeof h);
  const std::string p = raw_file(
      "f16.safetensors", R"({"x":{"dtype":"F16","shape":[2,3],"data_offsets":[0,12]}})", data);
  const Reader r(p);
  float got[6];
  r.read(r.tensors()[0], 0, 6, got);
  EXPECT_EQ(got[0], 1.0f);
  EXPECT_EQ(got[1], -2.0f);
  EXPECT_EQ(got[2], std::ldexp(1.0f, -24));
  EXPECT_EQ(got[3], 65504.0f);
  EXPECT_TRUE(std::isinf(got[4]));
  EXPECT_EQ(got[5], 0.333251953125f);  // 0x3555 = 1365/4096
}

TEST_F(SafetensorsTest, RefusesEveryBadHeader) {
  const std::string two = std::string(8, '\0');  // 8 bytes of data: two floats
  const std::string ok = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  {
    const std::string p = raw_file("length.safetensors", ok, two, 1000);
    const std::string e = test::input_error([&] { Reader r(p); });
    EXPECT_NE(e.find(p), std::string::npos) << e;
    EXPECT_NE(e.find("runs past the end of the file"), std::string::npos) << e;
  }
  expect_refused(raw_file("overlap.safetensors",
                          R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                          two),
                 "tensor b", "overlap those of a");
  expect_refused(raw_file("range.safetensors",
                          R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", two),
                 "tensor w", "run past the 8 bytes of data");
  expect_refused(raw_file("dtype.safetensors",
                          R"({"w":{"dtype":"F17","shape":[2],"data_offsets":[0,8]}})", two),
                 "tensor w", "unknown dtype \"F17\"");
  expect_refused(raw_file("bytes.safetensors",
                          R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", two),
                 "tensor w", "shape (3,) of F32 needs 12");
  expect_refused(raw_file("order.safetensors",
                          R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", two),
                 "tensor w", "not a range");
  expect_refused(raw_file("twice.safetensors",
                          R"({"w":{"dtype":"F32","shape":[1],)"
                          R"("data_offsets":[0,4]},"w":{"dtype":"F32",)"
                          R"("shape":[1],"data_offsets":[4,8]}})",
                          two),
                 "tensor w", "listed twice");
  expect_refused(raw_file("meta.safetensors", R"({"__metadata__":{"format":1}})", ""),
                 "__metadata__", "not a string");
  {
    const std::string p = raw_file("json.safetensors", R"({"w":{"dtype":)", two);
    const std::string e = test::input_error([&] { Reader r(p); });
    EXPECT_NE(e.find(p), std::string::npos) << e;
    EXPECT_NE(e.find("invalid JSON"), std::string::npos) << e;
  }
  {
    const std::string p = path("short.safetensors");
    test::write_file(p, "abc");
    const std::string e = test::input_error([&] { Reader r(p); });
    EXPECT_NE(e.find("too short"), std::string::npos) << e;
  }
  // A dtype the format has but weights are not: refused when read.
  const std::string p =
      raw_file("int.safetensors", R"({"n":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", two);
  const Reader r(p);
  float x;
  const std::string e = test::input_error([&] { r.read(r.tensors()[0], 0, 1, &x); });
  EXPECT_NE(e.find("tensor n"), std::string::npos) << e;
  EXPECT_NE(e.find("I64"), std::string::npos) << e;
}

TEST_F(SafetensorsTest, IndexMapsTensorsToFiles) {
  const std::string p = path("model.safetensors.index.json");
  test::write_file(p, R"({"metadata":{"total_size":8},"weight_map":)"
                      R"({"a":"model-00001-of-00002.safetensors",)"
                      R"("b":"model-00002-of-00002.safetensors"}})");
  const auto index = safetensors::read_index(p);
  ASSERT_EQ(index.size(), 2u);
  EXPECT_EQ(index[1].first, "b");
  EXPECT_EQ(index[1].second, "model-00002-of-00002.safetensors");
  test::write_file(p, R"({"weight_map":{"a":"../elsewhere.safetensors"}})");
  const std::string e = test::input_error([&] { safetensors::read_index(p); });
  EXPECT_NE(e.find(p), std::string::npos) << e;
  EXPECT_NE(e.find("entry a"), std::string::npos) << e;
}

}  // namespace
}  // namespace mpf
