// The fp32 codec's fused kernels used by the ring (copy or add, optional backup and CRC-32C in
// one walk) against the plain encode / decode / decode_add and crc32c they replace.
// Not a speed test: bench/gloo measures them inside the ring.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

#include "engine/core/codec/fp32_codec.h"
#include "engine/core/util/crc32c.h"

namespace meridian {
namespace {

std::vector<float> values(std::size_t n, float scale) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>((i * 37) % 101) - 7.5f;
  return v;
}

// Sizes around the kernels' 3072-value block.
class Fp32FusedTest : public ::testing::TestWithParam<std::size_t> {};

TEST_P(Fp32FusedTest, MatchTheUnfusedKernelsAndChecksum) {
  const std::size_t n = GetParam();
  const Fp32Codec codec;
  const std::uint32_t seed = 0x1234567u;
  const auto in = values(n, 0.25f);

  std::vector<std::byte> fused(codec.encoded_bytes(n)), plain(codec.encoded_bytes(n));
  const std::uint32_t crc = codec.encode_crc(in, fused, seed);
  codec.encode(in, plain);
  EXPECT_EQ(fused, plain);
  EXPECT_EQ(crc, crc32c(plain, seed));

  const auto acc0 = values(n, -0.5f);
  std::vector<float> acc = acc0, want = acc0, backup(n, 99.0f);
  EXPECT_EQ(codec.decode_add_crc(plain, acc, backup, seed), crc);
  codec.decode_add(plain, want);
  EXPECT_EQ(std::memcmp(acc.data(), want.data(), n * sizeof(float)), 0);
  EXPECT_EQ(backup, acc0);

  std::vector<float> out = acc0, backup2(n, 99.0f);
  EXPECT_EQ(codec.decode_crc(plain, out, backup2, seed), crc);
  EXPECT_EQ(out, in);
  EXPECT_EQ(backup2, acc0);

  // Without a backup.
  acc = acc0;
  EXPECT_EQ(codec.decode_add_crc(plain, acc, {}, seed), crc);
  EXPECT_EQ(std::memcmp(acc.data(), want.data(), n * sizeof(float)), 0);
}

// The backup is written with aligned streaming stores after a scalar head: every start offset
// within a 32-byte line, and the values around it untouched.
TEST_P(Fp32FusedTest, BackUpAtAnyAlignment) {
  const std::size_t n = GetParam();
  const Fp32Codec codec;
  const auto in = values(n, 0.25f);
  std::vector<std::byte> plain(codec.encoded_bytes(n));
  codec.encode(in, plain);
  const auto acc0 = values(n, -0.5f);
  for (std::size_t shift = 0; shift < 8; ++shift) {
    std::vector<float> storage(n + 16, 99.0f), acc = acc0;
    const std::span<float> backup = std::span(storage).subspan(shift, n);
    codec.decode_add_crc(plain, acc, backup, 0);
    EXPECT_TRUE(std::equal(backup.begin(), backup.end(), acc0.begin())) << "shift " << shift;
    for (std::size_t i = 0; i < shift; ++i) EXPECT_EQ(storage[i], 99.0f);
    for (std::size_t i = shift + n; i < storage.size(); ++i) EXPECT_EQ(storage[i], 99.0f);
  }
}

// The reduce-scatter's forward step: the add, the incoming CRC, and over the sums their CRC
// from the caller's seed and their non-finite count, as the base codec's unfused walks give
// them; with NaN and Inf sums placed around the block edges.
TEST_P(Fp32FusedTest, ForwardStepChecksumsAndCountsTheSums) {
  const std::size_t n = GetParam();
  const Fp32Codec codec;
  const auto in = values(n, 0.25f);
  std::vector<std::byte> plain(codec.encoded_bytes(n));
  codec.encode(in, plain);
  std::vector<float> acc0 = values(n, -0.5f);
  std::uint64_t planted = 0;
  for (std::size_t i : {std::size_t{0}, std::size_t{3071}, std::size_t{3072}, n - 1})
    if (i < n && std::isfinite(acc0[i])) {
      acc0[i] = planted % 2 ? std::numeric_limits<float>::infinity() : std::nanf("");
      ++planted;
    }
  std::vector<float> acc = acc0, want = acc0, backup(n, 99.0f);
  std::uint32_t out = 0xabcdefu;
  std::uint64_t bad = 12345;
  EXPECT_EQ(codec.decode_add_crc_forward(plain, acc, backup, 7u, out, bad), crc32c(plain, 7u));
  codec.decode_add(plain, want);
  EXPECT_EQ(std::memcmp(acc.data(), want.data(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(backup.data(), acc0.data(), n * sizeof(float)), 0);
  EXPECT_EQ(out, crc32c(std::as_bytes(std::span(want)), 0xabcdefu));
  EXPECT_EQ(bad, planted);
  // The base codec's walks (what every other codec runs) agree.
  std::vector<float> acc2 = acc0;
  std::uint32_t out2 = 0xabcdefu;
  std::uint64_t bad2 = 0;
  EXPECT_EQ(codec.Codec::decode_add_crc_forward(plain, acc2, {}, 7u, out2, bad2),
            crc32c(plain, 7u));
  EXPECT_EQ(out2, out);
  EXPECT_EQ(bad2, planted);
}

INSTANTIATE_TEST_SUITE_P(Sizes, Fp32FusedTest, ::testing::Values(0, 1, 7, 3071, 3072, 3073, 10000));

}  // namespace
}  // namespace meridian
