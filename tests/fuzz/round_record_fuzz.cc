// Fuzz target: RoundRecord::decode, the text every member reads from the store each round.
// Input: the record text. It decodes or throws ProtocolError; what decodes re-encodes to text
// that decodes to the same record (encode() is then a fixed point).
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/core/error.h"
#include "engine/core/mesh/round_record.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using meridian::RoundRecord;
  RoundRecord r;
  try {
    r = RoundRecord::decode(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const meridian::ProtocolError&) {
    return 0;
  }
  const std::string text = r.encode();
  MERIDIAN_CHECK_EQ(RoundRecord::decode(text).encode(), text);
  return 0;
}
