// NcclTransport: header-then-payload messages over grouped ncclSend/ncclRecv on one stream,
// non-blocking communicators polled against deadlines, ncclCommAbort on any failure. NCCL and
// CUDA errors become Meridian errors here. See nccl_transport.h for the memory and ordering
// contract.
#include "engine/backends/nccl/nccl_transport.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <thread>

#include "engine/backends/common/deadline.h"
#include "engine/core/error.h"
#include "engine/core/util/epoch_keys.h"

namespace meridian::nccl_transport {
namespace {

using Clock = std::chrono::steady_clock;

struct Header {
  std::uint64_t tag = 0;
  std::uint64_t payload_bytes = 0;
};
static_assert(sizeof(Header) == 16);

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw Error(std::string("nccl transport: ") + what + ": " + cudaGetErrorString(e));
  }
}

bool is_device_memory(const void* p) {
  if (p == nullptr) return false;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();  // plain host memory on old drivers: clear the sticky-free error
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

// Polls a non-blocking communicator until its pending call (init, group end, finalize) is no
// longer in progress. Returns the final state; ncclInProgress means the deadline passed.
ncclResult_t settle(ncclComm_t comm, Clock::time_point deadline) {
  for (;;) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t rc = ncclCommGetAsyncError(comm, &state);
    if (rc != ncclSuccess) return rc;
    if (state != ncclInProgress) return state;
    if (Clock::now() >= deadline) return ncclInProgress;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

class NcclTransport;

// One in-flight message pair: device staging, the header exchange already done, the payload
// exchange enqueued, completion marked by `done`.
class NcclExchange final : public PendingExchange {
 public:
  NcclExchange(NcclTransport& t, int peer, std::size_t received_bytes, cudaEvent_t done)
      : t_(t), peer_(peer), received_bytes_(received_bytes), done_(done) {}
  ~NcclExchange() override;
  Received wait(double timeout_s) override;

 private:
  NcclTransport& t_;
  int peer_;
  std::size_t received_bytes_;
  cudaEvent_t done_;
  bool waited_ = false;
};

class NcclTransport final : public Transport {
 public:
  NcclTransport(ncclComm_t comm, cudaStream_t stream, Store& store, std::string prefix,
                const EpochSpec& spec, const NcclOptions& options)
      : comm_(comm),
        stream_(stream),
        store_(store),
        prefix_(std::move(prefix)),
        epoch_(spec.epoch),
        rank_(spec.rank),
        size_(static_cast<int>(spec.members.size())),
        setup_timeout_s_(spec.timeout_s),
        options_(options) {}

  ~NcclTransport() override {
    cudaSetDevice(options_.cuda_device);
    if (!aborted_.load()) {
      // Flush, then destroy; a finalize that cannot finish in time is aborted instead.
      if (ncclCommFinalize(comm_) == ncclSuccess &&
          settle(comm_, deadline_after(setup_timeout_s_)) == ncclSuccess) {
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
      }
    }
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::uint64_t epoch() const override { return epoch_; }

  void send(int to, Tag tag, Payload msg, double timeout_s) override {
    exchange(to, msg.bytes, -1, {}, tag, deadline_after(timeout_s))->wait(timeout_s);
  }

  Received recv(int from, Tag tag, std::span<std::byte> into, double timeout_s) override {
    return exchange(-1, {}, from, into, tag, deadline_after(timeout_s))->wait(timeout_s);
  }

  std::unique_ptr<PendingExchange> start_exchange(int to, Payload out, int from,
                                                  std::span<std::byte> into, Tag tag) override {
    return exchange(to, out.bytes, from, into, tag, deadline_after(setup_timeout_s_));
  }

  void abort() override {
    if (aborted_.exchange(true)) return;
    try {
      store_.set(prefix_ + "aborted", std::to_string(rank_));
    } catch (const std::exception&) {
      // Best effort: peers then fail by their own timeout.
    }
    cudaSetDevice(options_.cuda_device);
    ncclCommAbort(comm_);
  }

  // Waits for `done`, watching NCCL's asynchronous errors, peers' aborts and the deadline.
  void wait_event(cudaEvent_t done, int peer, Clock::time_point deadline, const std::string& what) {
    auto next_store_poll = Clock::now();
    for (;;) {
      if (aborted_.load())
        fail_peer(peer, what + ": epoch " + std::to_string(epoch_) + " was aborted");
      const cudaError_t q = cudaEventQuery(done);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) {
        abort();
        throw Error("nccl transport: " + what + ": CUDA error " + cudaGetErrorString(q));
      }
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm_, &state);
      if (state != ncclSuccess && state != ncclInProgress) {
        const std::string detail = ncclGetLastError(comm_);
        abort();
        fail_peer(peer, what + ": " + ncclGetErrorString(state) + " " + detail);
      }
      const auto now = Clock::now();
      if (now >= deadline) {
        abort();
        throw TimeoutError("nccl transport: " + what + " (epoch " + std::to_string(epoch_) +
                           "): timed out");
      }
      if (now >= next_store_poll) {
        next_store_poll = now + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(options_.abort_poll_s));
        if (const auto who = store_.try_get(prefix_ + "aborted")) {
          abort();
          fail_peer(std::atoi(who->c_str()),
                    what + ": rank " + *who + " aborted epoch " + std::to_string(epoch_));
        }
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  void release_event(cudaEvent_t e) { cudaEventDestroy(e); }

 private:
  [[noreturn]] static void fail_peer(int peer, const std::string& what) {
    throw PeerLostError(peer, "nccl transport: " + what);
  }

  void check_peer(int peer, const char* what) const {
    if (peer < 0 || peer >= size_ || peer == rank_) {
      throw ConfigError(std::string("nccl transport: cannot ") + what + " rank " +
                        std::to_string(peer) + " (this is rank " + std::to_string(rank_) + " of " +
                        std::to_string(size_) + ")");
    }
  }

  // Enqueues one grouped round: optional send of `send_bytes` at `send_dev` to `to`, optional
  // receive of `recv_bytes` into `recv_dev` from `from`.
  void grouped(int to, const void* send_dev, std::size_t send_bytes, int from, void* recv_dev,
               std::size_t recv_bytes, Clock::time_point deadline, const std::string& what) {
    ncclResult_t rc = ncclGroupStart();
    if (rc == ncclSuccess && to >= 0 && send_bytes > 0) {
      rc = ncclSend(send_dev, send_bytes, ncclUint8, to, comm_, stream_);
    }
    if (rc == ncclSuccess && from >= 0 && recv_bytes > 0) {
      rc = ncclRecv(recv_dev, recv_bytes, ncclUint8, from, comm_, stream_);
    }
    const ncclResult_t end = ncclGroupEnd();
    if (rc == ncclSuccess) rc = end;
    if (rc == ncclInProgress) rc = settle(comm_, deadline);
    if (rc == ncclInProgress) {
      abort();
      throw TimeoutError("nccl transport: " + what + ": enqueue timed out");
    }
    if (rc != ncclSuccess) {
      const std::string detail = ncclGetLastError(comm_);
      abort();
      fail_peer(to >= 0 ? to : from, what + ": " + ncclGetErrorString(rc) + " " + detail);
    }
  }

  std::unique_ptr<NcclExchange> exchange(int to, std::span<const std::byte> out, int from,
                                         std::span<std::byte> into, Tag tag,
                                         Clock::time_point deadline) {
    if (to >= 0) check_peer(to, "send to");
    if (from >= 0) check_peer(from, "receive from");
    const std::string what = tag_text(tag) + (to >= 0 ? " to rank " + std::to_string(to) : "") +
                             (from >= 0 ? " from rank " + std::to_string(from) : "");
    if (aborted_.load()) fail_peer(to >= 0 ? to : from, what + ": epoch was aborted");
    std::lock_guard<std::mutex> lock(mutex_);
    check_cuda(cudaSetDevice(options_.cuda_device), "cudaSetDevice");

    // Round 1: headers (device staging, 16 bytes each way).
    Header out_header{tag, out.size()}, in_header{};
    void* header_dev = nullptr;
    check_cuda(cudaMallocAsync(&header_dev, 2 * sizeof(Header), stream_), "cudaMallocAsync");
    auto* send_header = static_cast<std::byte*>(header_dev);
    auto* recv_header = send_header + sizeof(Header);
    check_cuda(
        cudaMemcpyAsync(send_header, &out_header, sizeof(Header), cudaMemcpyHostToDevice, stream_),
        "header copy");
    grouped(to, send_header, sizeof(Header), from, recv_header, sizeof(Header), deadline,
            "header " + what);
    check_cuda(
        cudaMemcpyAsync(&in_header, recv_header, sizeof(Header), cudaMemcpyDeviceToHost, stream_),
        "header copy");
    check_cuda(cudaFreeAsync(header_dev, stream_), "cudaFreeAsync");
    cudaEvent_t header_done = nullptr;
    check_cuda(cudaEventCreateWithFlags(&header_done, cudaEventDisableTiming), "event");
    cudaEventRecord(header_done, stream_);
    try {
      wait_event(header_done, to >= 0 ? to : from, deadline, "header " + what);
    } catch (...) {
      cudaEventDestroy(header_done);
      throw;
    }
    cudaEventDestroy(header_done);
    std::size_t incoming = 0;
    if (from >= 0) {
      if (in_header.tag != tag) {
        abort();
        throw ProtocolError("nccl transport: " + what + ": the peer sent " +
                                tag_text(in_header.tag) + " (messages out of order)",
                            from);
      }
      if (in_header.payload_bytes > into.size()) {
        abort();
        throw ProtocolError(
            "nccl transport: " + what + ": message of " + std::to_string(in_header.payload_bytes) +
                " bytes exceeds the receive buffer's " + std::to_string(into.size()),
            from);
      }
      incoming = in_header.payload_bytes;
    }

    // Round 2: payloads, staged through device memory unless already there.
    const bool out_on_device = is_device_memory(out.data());
    const bool in_on_device = is_device_memory(into.data());
    const void* send_dev = out.data();
    void* recv_dev = into.data();
    void* send_stage = nullptr;
    void* recv_stage = nullptr;
    if (to >= 0 && !out.empty() && !out_on_device) {
      check_cuda(cudaMallocAsync(&send_stage, out.size(), stream_), "cudaMallocAsync");
      check_cuda(
          cudaMemcpyAsync(send_stage, out.data(), out.size(), cudaMemcpyHostToDevice, stream_),
          "payload copy");
      send_dev = send_stage;
    }
    if (incoming > 0 && !in_on_device) {
      check_cuda(cudaMallocAsync(&recv_stage, incoming, stream_), "cudaMallocAsync");
      recv_dev = recv_stage;
    }
    grouped(to, send_dev, out.size(), from, recv_dev, incoming, deadline, what);
    if (recv_stage != nullptr) {
      check_cuda(
          cudaMemcpyAsync(into.data(), recv_stage, incoming, cudaMemcpyDeviceToHost, stream_),
          "payload copy");
    }
    if (send_stage != nullptr) cudaFreeAsync(send_stage, stream_);
    if (recv_stage != nullptr) cudaFreeAsync(recv_stage, stream_);
    cudaEvent_t done = nullptr;
    check_cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "event");
    cudaEventRecord(done, stream_);
    return std::make_unique<NcclExchange>(*this, to >= 0 ? to : from, incoming, done);
  }

  ncclComm_t comm_;
  cudaStream_t stream_;
  Store& store_;
  std::string prefix_;
  std::uint64_t epoch_;
  int rank_;
  int size_;
  double setup_timeout_s_;
  NcclOptions options_;
  std::atomic<bool> aborted_{false};
  std::mutex mutex_;  // serialises enqueueing on the communicator and stream
};

NcclExchange::~NcclExchange() {
  // Never waited for: the stream may still write into caller memory, so the epoch ends here.
  if (!waited_) t_.abort();
  t_.release_event(done_);
}

Received NcclExchange::wait(double timeout_s) {
  waited_ = true;
  t_.wait_event(done_, peer_, deadline_after(timeout_s), "payload exchange");
  return {received_bytes_, received_bytes_};
}

}  // namespace

NcclTransportFactory::NcclTransportFactory(Store& store, NcclOptions options)
    : store_(store), options_(std::move(options)) {
  int count = 0;
  check_cuda(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (options_.cuda_device < 0 || options_.cuda_device >= count) {
    throw ConfigError("nccl transport: CUDA device " + std::to_string(options_.cuda_device) +
                      " does not exist (" + std::to_string(count) + " visible)");
  }
}

NcclTransportFactory::~NcclTransportFactory() = default;

std::unique_ptr<Transport> NcclTransportFactory::connect(const EpochSpec& spec) {
  const int size = static_cast<int>(spec.members.size());
  if (size < 1 || spec.rank < 0 || spec.rank >= size) {
    throw ConfigError("nccl transport: epoch " + std::to_string(spec.epoch) + " has rank " +
                      std::to_string(spec.rank) + " of " + std::to_string(size) + " members");
  }
  const auto deadline = deadline_after(spec.timeout_s);
  check_cuda(cudaSetDevice(options_.cuda_device), "cudaSetDevice");

  const std::string prefix = epoch_store_prefix(options_.store_prefix, spec);
  ncclUniqueId id{};
  if (spec.rank == 0) {
    if (const ncclResult_t rc = ncclGetUniqueId(&id); rc != ncclSuccess) {
      throw PeerLostError(
          -1, std::string("nccl transport: ncclGetUniqueId: ") + ncclGetErrorString(rc));
    }
    store_.set(prefix + "unique_id", std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
  } else {
    const std::string bytes = store_.get(prefix + "unique_id", spec.timeout_s);
    if (bytes.size() != sizeof(id)) {
      throw ProtocolError("nccl transport: the epoch's unique id has " +
                          std::to_string(bytes.size()) + " bytes, expected " +
                          std::to_string(sizeof(id)));
    }
    std::memcpy(&id, bytes.data(), sizeof(id));
  }

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t rc = ncclCommInitRankConfig(&comm, size, id, spec.rank, &config);
  if (rc == ncclInProgress || (rc == ncclSuccess && comm != nullptr)) rc = settle(comm, deadline);
  if (rc != ncclSuccess) {
    const std::string detail = comm != nullptr ? ncclGetLastError(comm) : "";
    if (comm != nullptr) ncclCommAbort(comm);
    if (rc == ncclInProgress) {
      throw TimeoutError("nccl transport: epoch " + std::to_string(spec.epoch) +
                         " communicator not initialised within " + std::to_string(spec.timeout_s) +
                         " s");
    }
    throw PeerLostError(-1, "nccl transport: epoch " + std::to_string(spec.epoch) +
                                " communicator: " + ncclGetErrorString(rc) + " " + detail);
  }
  cudaStream_t stream = nullptr;
  if (const cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      e != cudaSuccess) {
    ncclCommAbort(comm);
    check_cuda(e, "cudaStreamCreate");
  }
  return std::make_unique<NcclTransport>(comm, stream, store_, prefix, spec, options_);
}

}  // namespace meridian::nccl_transport
