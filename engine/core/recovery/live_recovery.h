// Live recovery: a joiner fetches a serving peer's state in checksummed chunks (CRC-32C), from
// several sources in parallel, each over its own two-member Transport; when a source is lost
// the chunks it still owed are fetched from the others. Not a checkpoint format and not a
// policy: DiLoCo decides what goes into the state and who serves (engine/core/diloco).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/mesh/round_record.h"
#include "engine/core/runtime.h"
#include "engine/core/transport.h"

namespace meridian {

struct RecoveryOptions {
  std::size_t chunk_bytes = std::size_t{4} << 20;  // payload of one chunk message
  double timeout_s = 60.0;                         // bound on every connect, request and reply
  int max_sources = 2;                             // sources one joiner fetches from in parallel
  bool blocking = false;  // PRIME's blocking mode: sources finish serving before their
                          // inner steps (otherwise they train while they serve)
  // Bound on the connections once both ends have arrived (EpochSpec::connect_timeout_s);
  // <= 0: timeout_s. DiLoCo sets it from the lease.
  double connect_timeout_s = 0.0;
  // Why the other end (a source, for the joiner; the joiner, for a source) is gone, or "" while
  // it is alive: a connect that waits for it gives up at once (EpochSpec::abandon). DiLoCo asks
  // the mesh (lease and deathrattle); empty: wait for timeout_s.
  std::function<std::string(std::int64_t node)> peer_gone;
};

// The state shipped to a joiner. `shared` is identical on every source (outer parameters and
// outer optimizer state), so its chunks may come from any of them; `priv` belongs to one source
// (inner optimizer state, progress) and is always taken whole from a single source.
// A phantom state (timing-only workers) has sizes but no bytes; its chunks are phantom messages.
struct RecoveryState {
  bool phantom = false;
  std::uint64_t shared_bytes = 0;
  std::uint64_t private_bytes = 0;
  std::vector<std::byte> shared;  // shared_bytes bytes unless phantom
  std::vector<std::byte> priv;    // private_bytes bytes unless phantom
};

// The sources that serve `joiner` in round `r`: r.sources rotated by the joiner's index among
// r.joiners (spreads joiners over sources), at most max_sources. Empty if `joiner` is not one.
std::vector<std::int64_t> recovery_sources_for(const RoundRecord& r, std::int64_t joiner,
                                               int max_sources);

// The EpochSpec of the transport between `joiner` (rank 0) and `source` (rank 1) in round `r`.
// Its epoch number has bit 62 set so it never meets a collective epoch. Its bounds and its
// abandon rule (the other end gone) come from `options`.
EpochSpec recovery_spec(const RoundRecord& r, std::int64_t joiner, std::int64_t source,
                        bool as_source, const RecoveryOptions& options);

// Source side: answers the joiner's requests from `state` until the joiner says it is done.
// Returns the payload bytes served. Throws PeerLostError / TimeoutError / ProtocolError.
std::uint64_t serve_recovery(TransportFactory& factory, const EpochSpec& spec,
                             std::shared_ptr<const RecoveryState> state,
                             const RecoveryOptions& options);

struct FetchResult {
  RecoveryState state;
  std::vector<std::int64_t> served_by;  // sources that delivered at least one chunk, in order
  int resumed = 0;                      // times a lost source's work moved to another source
  std::uint64_t bytes = 0;              // payload bytes received
};

// Joiner side: fetches the state from `sources` in parallel (one activity each). The shared part
// must be `expected_shared_bytes`; the private part at most `max_private_bytes`. Throws
// PeerLostError when every source was lost before the state was complete.
FetchResult fetch_recovery(TransportFactory& factory, Runtime& runtime, const RoundRecord& r,
                           std::int64_t joiner, const std::vector<std::int64_t>& sources,
                           std::uint64_t expected_shared_bytes, std::uint64_t max_private_bytes,
                           bool phantom, const RecoveryOptions& options);

}  // namespace meridian
