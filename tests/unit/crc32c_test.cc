// CRC-32C against a bit-by-bit reference: the standard check value, every length around the
// three-stream block of the hardware path and the folding block, unaligned starts and chained
// (non-zero) start values, for every kernel this CPU has (each capped in turn).
#include "engine/core/util/crc32c.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace meridian {
namespace {

std::uint32_t reference(std::span<const std::byte> data, std::uint32_t crc) {
  std::uint32_t c = ~crc;
  for (const std::byte b : data) {
    c ^= static_cast<std::uint8_t>(b);
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}

TEST(Crc32c, CheckValue) {
  const char text[] = "123456789";
  EXPECT_EQ(crc32c(std::as_bytes(std::span(text, 9))), 0xE3069283u);
}

// Caps the kernel for one scope; the process default (no cap) comes back after.
struct KernelCap {
  explicit KernelCap(Crc32cKernel k) { set_crc32c_kernel_limit(k); }
  ~KernelCap() { set_crc32c_kernel_limit(Crc32cKernel::kFold); }
};

class Crc32cKernels : public testing::TestWithParam<Crc32cKernel> {};

TEST_P(Crc32cKernels, MatchesTheReferenceForEveryLengthOffsetAndStart) {
  const KernelCap cap(GetParam());
  if (crc32c_kernel() != GetParam())
    GTEST_SKIP() << "this CPU lacks the " << crc32c_kernel_name(GetParam()) << " kernel";
  std::mt19937 rng(7);
  std::vector<std::byte> buf(3 * 3 * 4096 + 200);
  for (auto& b : buf) b = static_cast<std::byte>(rng());
  // Lengths around the folding block (256 bytes), one and two three-stream blocks
  // (3 x 4096 bytes) and small tails.
  std::vector<std::size_t> lengths = {0,     1,     7,     8,     9,    63,    255,
                                      256,   257,   511,   512,   4096, 12287, 12288,
                                      12289, 24575, 24576, 24583, 36864};
  for (int i = 0; i < 40; ++i) lengths.push_back(rng() % (buf.size() - 8));
  for (const std::size_t n : lengths) {
    for (const std::size_t offset : {0, 1, 5}) {
      for (const std::uint32_t start : {0u, 0xDEADBEEFu}) {
        const auto data = std::span<const std::byte>(buf).subspan(offset, n);
        EXPECT_EQ(crc32c(data, start), reference(data, start))
            << crc32c_kernel_name(GetParam()) << " length " << n << " offset " << offset
            << " start " << start;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryKernel, Crc32cKernels,
                         testing::Values(Crc32cKernel::kTable, Crc32cKernel::kCrc32,
                                         Crc32cKernel::kFold),
                         [](const testing::TestParamInfo<Crc32cKernel>& info) {
                           return std::string(crc32c_kernel_name(info.param));
                         });

TEST(Crc32c, ChainingEqualsOneShot) {
  std::vector<std::byte> buf(50000);
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<std::byte>(i * 31 + 7);
  const auto all = std::span<const std::byte>(buf);
  EXPECT_EQ(crc32c(all.subspan(12345), crc32c(all.first(12345))), crc32c(all));
}

}  // namespace
}  // namespace meridian
