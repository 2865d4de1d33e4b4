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

}  // namespace meridian
