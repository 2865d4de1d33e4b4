// Tests of the safetensors reader/writer: round trips, a file built by hand from the format
// specification (python3 has no `safetensors` here), and one test per class of malformed input.
#include "trainer/safetensors/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "tests/post/temp_dir_test_base.h"
#include "trainer/safetensors/float_convert.h"

namespace fs = std::filesystem;
namespace st = meridian::safetensors;

namespace {

class SafetensorsTest : public meridian::testing::TempDirTest {};

template <typename T>
std::span<const std::byte> as_bytes(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}

std::vector<std::byte> file_bytes(const std::string& header, const std::vector<std::byte>& data) {
  std::vector<std::byte> out(8);
  const std::uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  for (char c : header) out.push_back(static_cast<std::byte>(c));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

void write_raw(const fs::path& p, const std::vector<std::byte>& bytes) {
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

// Expects parse() to throw ProtocolError whose message contains `fragment` and the source name.
void expect_bad(const std::string& header, std::size_t data_len, const std::string& fragment) {
  std::vector<std::byte> data(data_len, std::byte{7});
  try {
    st::parse(file_bytes(header, data), "model.safetensors");
    FAIL() << "accepted a malformed file, expected an error containing: " << fragment;
  } catch (const meridian::ProtocolError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
  }
}

TEST_F(SafetensorsTest, RoundTripKeepsNamesDtypesShapesBytesAndMetadata) {
  const std::vector<float> w = {1.5f, -2.0f, 3.25f, 0.0f, 5.0f, -6.5f};
  const std::vector<std::int64_t> step = {42};
  const std::vector<std::uint16_t> h = {st::f32_to_bf16(1.0f), st::f32_to_bf16(-0.5f)};
  const std::vector<st::TensorView> views = {
      {"layers.0.attn.wq.weight", st::Dtype::kF32, {2, 3}, as_bytes(w)},
      {"step", st::Dtype::kI64, {}, as_bytes(step)},
      {"norm.weight", st::Dtype::kBF16, {2}, as_bytes(h)},
      {"empty", st::Dtype::kF32, {0, 4}, {}},
  };
  const fs::path p = dir_ / "ckpt.safetensors";
  st::write(p, views, {{"format", "pt"}});
  EXPECT_FALSE(fs::exists(dir_ / ("ckpt.safetensors.tmp." + std::to_string(::getpid()))));

  const st::File f = st::read(p, {.require_checksum = true});
  ASSERT_EQ(f.tensors().size(), 4u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().count(std::string(st::kChecksumKey)), 1u);
  for (const auto& v : views) {
    const st::Tensor& t = f.at(v.name);
    EXPECT_EQ(t.dtype, v.dtype) << v.name;
    EXPECT_EQ(t.shape, v.shape) << v.name;
    ASSERT_EQ(t.data.size(), v.data.size()) << v.name;
    EXPECT_EQ(std::memcmp(t.data.data(), v.data.data(), v.data.size()), 0) << v.name;
  }
  EXPECT_EQ(f.at("step").numel(), 1);
  EXPECT_EQ(st::to_f32(f.at("layers.0.attn.wq.weight")), w);
  EXPECT_EQ(st::to_f32(f.at("norm.weight")), (std::vector<float>{1.0f, -0.5f}));
  EXPECT_EQ(f.find("missing"), nullptr);
  EXPECT_THROW(f.at("missing"), meridian::ConfigError);

  // The header is padded to a multiple of 8 so the data section is aligned.
  std::ifstream in(p, std::ios::binary);
  std::uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), 8);
  EXPECT_EQ(header_len % 8, 0u);
}

TEST_F(SafetensorsTest, ReadsAFileBuiltByHandFromTheSpecification) {
  // Header out of data order, with metadata, padded with spaces: all allowed by the format.
  const std::vector<float> a = {1, 2, 3, 4};  // "b" occupies [0, 8), "a" [8, 24)
  const std::vector<std::uint16_t> b = {0x3c00, 0xc000, 0x7c00, 0x0001};  // F16: 1, -2, inf, 2^-24
  std::vector<std::byte> data(24);
  std::memcpy(data.data(), b.data(), 8);
  std::memcpy(data.data() + 8, a.data(), 16);
  const std::string header =
      R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[8,24]},)"
      R"("__metadata__":{"format":"pt"},"b":{"dtype":"F16","shape":[4],"data_offsets":[0,8]}}   )";
  write_raw(dir_ / "hand.safetensors", file_bytes(header, data));
  const st::File f = st::read(dir_ / "hand.safetensors");
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.tensors()[0].name, "b");  // data-offset order
  EXPECT_EQ(st::to_f32(f.at("a")), a);
  const auto bv = st::to_f32(f.at("b"));
  EXPECT_EQ(bv[0], 1.0f);
  EXPECT_EQ(bv[1], -2.0f);
  EXPECT_TRUE(std::isinf(bv[2]));
  EXPECT_EQ(bv[3], std::ldexp(1.0f, -24));
  EXPECT_EQ(f.metadata().at("format"), "pt");
}

TEST_F(SafetensorsTest, MissingFileIsAConfigErrorNamingIt) {
  try {
    st::read(dir_ / "nope.safetensors");
    FAIL();
  } catch (const meridian::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("nope.safetensors"), std::string::npos);
  }
}

TEST(SafetensorsMalformed, Truncated) {
  try {
    st::parse({std::byte{1}, std::byte{2}}, "model.safetensors");
    FAIL();
  } catch (const meridian::ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos);
  }
  // A valid file cut short in the data section.
  expect_bad(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 12,
             "beyond the 12-byte data section");
}

TEST(SafetensorsMalformed, HeaderLengthPastEndOrOverLimit) {
  std::vector<std::byte> bytes = file_bytes("{}", {});
  const std::uint64_t too_long = 1000;
  std::memcpy(bytes.data(), &too_long, 8);
  EXPECT_THROW(st::parse(bytes, "x"), meridian::ProtocolError);
  try {
    st::parse(bytes, "model.safetensors");
  } catch (const meridian::ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("runs past the end"), std::string::npos) << e.what();
  }
  const std::uint64_t huge = st::kMaxHeaderBytes + 1;
  std::memcpy(bytes.data(), &huge, 8);
  try {
    st::parse(bytes, "model.safetensors");
    FAIL();
  } catch (const meridian::ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds the limit"), std::string::npos) << e.what();
  }
}

TEST_F(SafetensorsTest, HeaderLengthIsCheckedBeforeReadingTheFile) {
  std::vector<std::byte> bytes = file_bytes("{}", {});
  const std::uint64_t huge = ~0ull;
  std::memcpy(bytes.data(), &huge, 8);
  write_raw(dir_ / "huge.safetensors", bytes);
  EXPECT_THROW(st::read(dir_ / "huge.safetensors"), meridian::ProtocolError);
}

TEST(SafetensorsMalformed, BadJson) {
  expect_bad(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})", 4, "not valid JSON");
  expect_bad(R"([1,2,3])", 0, "does not start with '{'");
  expect_bad(
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
      8, "the key \"a\" twice");
  expect_bad(R"({"a":{"dtype":"Q4","shape":[1],"data_offsets":[0,4]}})", 4,
             "unknown safetensors dtype \"Q4\"");
  expect_bad(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4,
             "non-negative integer");
  expect_bad(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4,
             "non-negative integer");
  expect_bad(R"({"a":{"dtype":"F32","shape":[1]}})", 4, "data_offsets");
  expect_bad(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":1}})", 4,
             "unknown key \"extra\"");
  expect_bad(R"({"__metadata__":{"k":1}})", 0, "must be a string");
}

TEST(SafetensorsMalformed, OffsetsOutOfRangeOverlappingOrWithHoles) {
  expect_bad(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", 8,
             "beyond the 8-byte data section");
  expect_bad(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
      12, "overlap");
  expect_bad(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8, "hole of 4 bytes");
  expect_bad(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8, "4 trailing bytes");
  expect_bad(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", 8, "end 4 < begin 8");
}

TEST(SafetensorsMalformed, WrongSizeOrOverflow) {
  expect_bad(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8, "needs 12");
  expect_bad(R"({"a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,16]}})", 16, "needs 8");
  expect_bad(R"({"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8,
             "overflows");
}

TEST_F(SafetensorsTest, ChecksumMismatchIsDetected) {
  const std::vector<float> w(64, 1.0f);
  const std::vector<st::TensorView> views = {{"w", st::Dtype::kF32, {8, 8}, as_bytes(w)}};
  const fs::path p = dir_ / "c.safetensors";
  st::write(p, views);
  // Flip one bit of the last data byte.
  {
    std::fstream io(p, std::ios::binary | std::ios::in | std::ios::out);
    io.seekg(-1, std::ios::end);
    char c;
    io.get(c);
    io.seekp(-1, std::ios::end);
    io.put(static_cast<char>(c ^ 1));
  }
  try {
    st::read(p);
    FAIL();
  } catch (const meridian::ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("checksum mismatch"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(st::read(p, {.verify_checksum = false}));
}

TEST_F(SafetensorsTest, RequireChecksumRefusesAFileWithout) {
  const std::vector<float> w(4, 1.0f);
  const std::vector<st::TensorView> views = {{"w", st::Dtype::kF32, {4}, as_bytes(w)}};
  st::write(dir_ / "n.safetensors", views, {}, {.checksum = false});
  EXPECT_NO_THROW(st::read(dir_ / "n.safetensors"));
  EXPECT_THROW(st::read(dir_ / "n.safetensors", {.require_checksum = true}),
               meridian::ProtocolError);
}

TEST_F(SafetensorsTest, WriterRefusesBadInputNamingTheTensor) {
  const std::vector<float> w(4, 1.0f);
  auto expect_refused = [&](std::vector<st::TensorView> views, const std::string& fragment) {
    try {
      st::write(dir_ / "w.safetensors", views);
      FAIL() << fragment;
    } catch (const meridian::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(dir_ / "w.safetensors"));
  };
  expect_refused({{"w", st::Dtype::kF32, {5}, as_bytes(w)}}, "\"w\": 16 bytes given");
  expect_refused(
      {{"w", st::Dtype::kF32, {4}, as_bytes(w)}, {"w", st::Dtype::kF32, {4}, as_bytes(w)}},
      "duplicate");
  expect_refused({{"__metadata__", st::Dtype::kF32, {4}, as_bytes(w)}}, "reserved");
}

TEST(FloatConvert, HalfPrecisionRoundsToNearestEven) {
  EXPECT_EQ(st::f32_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125: ties to even (1.0).
  EXPECT_EQ(st::f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(st::f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(st::bf16_to_f32(st::f32_to_bf16(NAN))));
  EXPECT_EQ(st::f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(st::f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(st::f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(st::f32_to_f16(65520.0f), 0x7c00);
  EXPECT_EQ(st::f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(st::f32_to_f16(std::ldexp(1.0f, -26)), 0x0000);  // below half the smallest subnormal
  EXPECT_EQ(st::f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie -> even
  // Every finite f16 survives f16 -> f32 -> f16.
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00) continue;
    ASSERT_EQ(st::f32_to_f16(st::f16_to_f32(static_cast<std::uint16_t>(h))), h) << h;
  }
}

}  // namespace
