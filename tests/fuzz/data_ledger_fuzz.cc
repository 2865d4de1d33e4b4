// Fuzz target: DataLedger::decode, the elastic-data ledger a joiner receives from a source's
// live recovery and a resumed node reads from a checkpoint. Input: the ledger text. It decodes
// or throws ProtocolError; what decodes re-encodes to text that decodes to the same ledger, and
// planning and settling a step on it keeps every position handed out at most once.
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/core/diloco/data_plan.h"
#include "engine/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using meridian::DataLedger;
  DataLedger d;
  try {
    d = DataLedger::decode(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const meridian::ProtocolError&) {
    return 0;
  }
  const std::string text = d.encode();
  MERIDIAN_CHECK(DataLedger::decode(text) == d);
  // Plans stay disjoint (decode checks it) through a plan and a settlement; a per-node count
  // too large to hand out safely is left alone (a decoded `next` may be near the limit).
  if (d.per_node() > (std::int64_t{1} << 40) || d.next() > (std::int64_t{1} << 60)) return 0;
  const std::int64_t step = d.planned().empty() ? 0 : d.planned().rbegin()->first + 1;
  if (step > (std::int64_t{1} << 60)) return 0;
  d.plan(step, {1, 2, 3});
  d.settle(step, {2});
  MERIDIAN_CHECK(DataLedger::decode(d.encode()) == d);
  return 0;
}
