// fp32 <-> F16/BF16/F64 conversion for safetensors tensors (round to nearest even).
// Not vectorised: the post-training tools convert each tensor once.
#include "trainer/safetensors/float_convert.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include "engine/core/error.h"

namespace meridian::safetensors {

bool is_float_dtype(Dtype d) {
  return d == Dtype::kF16 || d == Dtype::kBF16 || d == Dtype::kF32 || d == Dtype::kF64;
}

float bf16_to_f32(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

std::uint16_t f32_to_bf16(float value) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return static_cast<std::uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  const std::uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>(rounded >> 16);
}

float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant × 2^-24, exact in fp32
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

std::uint16_t f32_to_f16(float value) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u)
    return static_cast<std::uint16_t>(sign | (abs > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520 -> inf
  if (abs < 0x38800000u) {
    // Below the smallest normal (2^-14): a subnormal count of 2^-24. The scaling is exact and
    // nearbyint rounds half to even in the default rounding mode; 1024 encodes 2^-14 correctly.
    const float scaled = std::bit_cast<float>(abs) * 16777216.0f;
    return static_cast<std::uint16_t>(sign | static_cast<std::uint32_t>(std::nearbyint(scaled)));
  }
  const std::uint32_t mant = abs & 0x7fffffu;
  std::uint32_t h = ((((abs >> 23) - 127 + 15)) << 10) | (mant >> 13);
  const std::uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry into the exponent is right
  return static_cast<std::uint16_t>(sign | h);
}

std::vector<float> to_f32(const Tensor& t) {
  const std::size_t n = t.data.size() / dtype_size(t.dtype);
  std::vector<float> out(n);
  const std::byte* p = t.data.data();
  switch (t.dtype) {
    case Dtype::kF32:
      std::memcpy(out.data(), p, n * 4);
      break;
    case Dtype::kF64:
      for (std::size_t i = 0; i < n; ++i) {
        double d;
        std::memcpy(&d, p + 8 * i, 8);
        out[i] = static_cast<float>(d);
      }
      break;
    case Dtype::kBF16:
    case Dtype::kF16:
      for (std::size_t i = 0; i < n; ++i) {
        std::uint16_t b;
        std::memcpy(&b, p + 2 * i, 2);
        out[i] = t.dtype == Dtype::kBF16 ? bf16_to_f32(b) : f16_to_f32(b);
      }
      break;
    default:
      throw ConfigError("tensor \"" + t.name + "\" has dtype " + std::string(dtype_name(t.dtype)) +
                        "; expected a floating-point dtype (F16, BF16, F32, F64)");
  }
  return out;
}

std::vector<std::byte> from_f32(std::span<const float> values, Dtype dtype) {
  std::vector<std::byte> out(values.size() * dtype_size(dtype));
  std::byte* p = out.data();
  switch (dtype) {
    case Dtype::kF32:
      std::memcpy(p, values.data(), values.size() * 4);
      break;
    case Dtype::kF64:
      for (std::size_t i = 0; i < values.size(); ++i) {
        const double d = values[i];
        std::memcpy(p + 8 * i, &d, 8);
      }
      break;
    case Dtype::kBF16:
    case Dtype::kF16:
      for (std::size_t i = 0; i < values.size(); ++i) {
        const std::uint16_t b =
            dtype == Dtype::kBF16 ? f32_to_bf16(values[i]) : f32_to_f16(values[i]);
        std::memcpy(p + 2 * i, &b, 2);
      }
      break;
    default:
      throw ConfigError("cannot encode fp32 values as " + std::string(dtype_name(dtype)) +
                        "; expected a floating-point dtype (F16, BF16, F32, F64)");
  }
  return out;
}

}  // namespace meridian::safetensors
