// Fuzz target: the safetensors reader (trainer/safetensors, no LibTorch) on whole files: the
// 8-byte header length, the JSON header, dtypes, shapes, offsets and the checksum. Input: byte 0
// says whether to verify the checksum, the rest is the file. It parses or throws ProtocolError or
// ConfigError; every tensor of a parsed file lies inside the file and matches its shape.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/core/error.h"
#include "tests/fuzz/fuzz_input.h"
#include "trainer/safetensors/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace meridian;
  fuzz::Input in(data, size);
  const bool verify = in.u8() & 1;
  const std::string rest = in.rest();
  const auto* begin = reinterpret_cast<const std::byte*>(rest.data());
  std::vector<std::byte> bytes(begin, begin + rest.size());
  try {
    const safetensors::File f = safetensors::parse(std::move(bytes), "fuzz.safetensors", verify);
    for (const safetensors::Tensor& t : f.tensors()) {
      MERIDIAN_CHECK_EQ(t.data.size(),
                        static_cast<std::size_t>(t.numel()) * safetensors::dtype_size(t.dtype));
      MERIDIAN_CHECK(f.find(t.name) != nullptr);
    }
  } catch (const ProtocolError&) {
  } catch (const ConfigError&) {
  }
  return 0;
}
