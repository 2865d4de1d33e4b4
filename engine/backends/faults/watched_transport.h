// WatchedTransport: a transport that tells a callback the tag of each of this rank's outgoing
// messages (send() and the send half of start_exchange()) before sending it — the hook fault
// triggers count messages with (FaultTrigger, `meridian train --fault-pause-at-message`). The
// callback may block or end the process; it changes nothing it is told.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <utility>

#include "engine/core/transport.h"

namespace meridian {

class WatchedTransport final : public ForwardingTransport {
 public:
  using OnSend = std::function<void(Tag tag)>;
  WatchedTransport(std::unique_ptr<Transport> inner, OnSend on_send)
      : ForwardingTransport(std::move(inner)), on_send_(std::move(on_send)) {}

  void send(int to, Tag tag, Payload msg, double timeout_s) override {
    on_send_(tag);
    ForwardingTransport::send(to, tag, msg, timeout_s);
  }
  std::unique_ptr<PendingExchange> start_exchange(int to, Payload out, int from,
                                                  std::span<std::byte> into, Tag tag) override {
    on_send_(tag);
    return ForwardingTransport::start_exchange(to, out, from, into, tag);
  }

 private:
  OnSend on_send_;
};

}  // namespace meridian
