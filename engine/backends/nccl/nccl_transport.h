// The NCCL transport: meridian::Transport over NCCL point-to-point (grouped ncclSend/ncclRecv on
// one CUDA stream), a new non-blocking communicator per membership epoch whose ncclUniqueId
// travels through the run's Store. Not a collective library and not a GPU training path by
// itself: the engine's ring runs on top of it, like on every transport.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/core/store.h"
#include "engine/core/transport.h"

namespace meridian::nccl_transport {

// Memory. The Transport seam passes spans of bytes. Device (or managed) memory is used in place;
// host memory is staged through stream-ordered device buffers (cudaMallocAsync, one per message,
// freed on the stream), because the ring all-reduce works on host fp32 buffers. A GPU trainer
// that keeps its pseudo-gradient on the device passes device spans and pays no copy.
//
// Ordering. NCCL matches point-to-point messages by order, not by tag: every message is a
// 16-byte header (tag, payload bytes) exchanged first, then exactly that many payload bytes. A
// header whose tag differs from the one expected, or whose size exceeds the receive buffer, is a
// ProtocolError (and aborts the communicator). Operations on one transport are serialised;
// callers on the two sides of a pair must issue them in the same order (the ring does).
//
// Failure. Every wait polls the stream and ncclCommGetAsyncError against its deadline; on a
// timeout or an NCCL error the communicator is aborted (ncclCommAbort) and TimeoutError /
// PeerLostError is raised. abort() also publishes "<prefix>aborted" in the Store, which peers'
// waits check every `abort_poll_s`, so they fail with PeerLostError instead of timing out.
struct NcclOptions {
  int cuda_device = 0;
  std::string store_prefix = "nccl";
  double abort_poll_s = 0.1;  // how often a wait looks for a peer's abort in the Store
};

// Thread-safety: connect() from one thread at a time.
class NcclTransportFactory final : public TransportFactory {
 public:
  // `store` must outlive the factory and every transport it builds.
  NcclTransportFactory(Store& store, NcclOptions options = {});
  ~NcclTransportFactory() override;
  // Throws TimeoutError when the communicator is not initialised within spec.timeout_s,
  // PeerLostError on an NCCL error, ConfigError when the CUDA device is unusable.
  std::unique_ptr<Transport> connect(const EpochSpec& spec) override;

 private:
  Store& store_;
  NcclOptions options_;
};

}  // namespace meridian::nccl_transport
