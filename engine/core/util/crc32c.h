// CRC-32C (Castagnoli), the checksum of every chunk on the wire and every recovery piece.
// Hardware when the CPU has it (AVX-512 VPCLMULQDQ folding for 256 bytes and more, else the
// SSE4.2 crc32 instruction), a table otherwise; all give identical results.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace meridian {

// Extends `crc` (0 to start) over `data`.
std::uint32_t crc32c(std::span<const std::byte> data, std::uint32_t crc = 0);

// The kernels crc32c() can run, ordered: a later one needs more of the CPU.
enum class Crc32cKernel {
  kTable,  // portable: one table lookup per byte
  kCrc32,  // the SSE4.2 crc32 instruction, three interleaved streams (any x86-64-v2 CPU)
  kFold,   // AVX-512 VPCLMULQDQ folding for 256 bytes and more, else kCrc32
};

// The kernel crc32c() runs now: the best this CPU has, no later than the limit below.
Crc32cKernel crc32c_kernel();

// Process-wide cap for tests and benchmarks (default kFold, i.e. no cap), so that each kernel can
// be checked and timed on one machine; every kernel gives the same CRC. Atomic.
void set_crc32c_kernel_limit(Crc32cKernel limit);

// "table", "crc32" or "fold" (benchmark tables record which kernel ran).
const char* crc32c_kernel_name(Crc32cKernel kernel);

}  // namespace meridian
