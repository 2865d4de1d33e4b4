// Conversion between safetensors floating-point tensors (F32, F64, F16, BF16) and fp32 buffers,
// for the post-training tools that compute in fp32/fp64. Not a general dtype library: integer
// and F8 tensors are refused with a ConfigError.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "trainer/safetensors/safetensors.h"

namespace meridian::safetensors {

bool is_float_dtype(Dtype d);  // F16, BF16, F32, F64

// The tensor's values as fp32 (F64 is rounded to nearest). Throws ConfigError for non-float
// dtypes, naming the tensor.
std::vector<float> to_f32(const Tensor& t);

// fp32 values encoded as `dtype` (round to nearest even for F16/BF16; NaN stays NaN).
std::vector<std::byte> from_f32(std::span<const float> values, Dtype dtype);

float bf16_to_f32(std::uint16_t bits);
std::uint16_t f32_to_bf16(float value);
float f16_to_f32(std::uint16_t bits);
std::uint16_t f32_to_f16(float value);

}  // namespace meridian::safetensors
