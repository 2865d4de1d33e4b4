// Test support: a raw socket to the TCP store that speaks the handshake by hand, so that tests
// can send the server malformed or oversized frames from a joined (authenticated) connection.
// Not a client: engine/backends/store_tcp/tcp_store.h is the real one.
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "engine/backends/store_tcp/tcp_store_wire.h"
#include "engine/core/util/hmac.h"

namespace meridian::testing {

// A TCP socket connected to 127.0.0.1:`port` (nothing read or written yet).
inline int loopback_connect(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

// A raw socket connected to the store on 127.0.0.1:`port`, its greeting read; stores the
// server's nonce in `nonce` when given.
inline int raw_store_connect(std::uint16_t port, store_wire::Nonce* nonce = nullptr) {
  const int fd = loopback_connect(port);
  store_wire::Reader hello(store_wire::recv_frame(fd, 4096, store_wire::now_s() + 10));
  EXPECT_EQ(hello.type(), store_wire::Type::kHello);
  EXPECT_EQ(hello.u32("magic"), store_wire::kMagic);
  hello.u16("protocol");
  store_wire::Nonce n;
  hello.raw(n.data(), n.size(), "nonce");
  if (nonce) *nonce = n;
  return fd;
}

// A raw socket that has joined with the run's secret, version and configuration hash (so the
// server takes its next frames as requests).
inline int raw_store_join(std::uint16_t port, const std::string& secret,
                          const std::string& version, const std::string& config) {
  store_wire::Nonce server_nonce;
  const int fd = raw_store_connect(port, &server_nonce);
  const store_wire::Nonce client_nonce{};
  const auto proof = hmac_sha256(
      secret, store_wire::join_transcript(server_nonce, "raw", version, config, client_nonce));
  store_wire::Writer join(store_wire::Type::kJoin);
  join.str("raw").str(version).str(config).raw(client_nonce.data(), 32).raw(proof.data(), 32);
  store_wire::send_all(fd, join.frame(), store_wire::now_s() + 10);
  store_wire::Reader welcome(store_wire::recv_frame(fd, 4096, store_wire::now_s() + 10));
  EXPECT_EQ(welcome.type(), store_wire::Type::kWelcome);
  return fd;
}

// True once the server has closed `fd` (reads EOF or a reset; any reply is drained first).
inline bool closed_by_server(int fd) {
  char buf[256];
  for (;;) {
    const ssize_t rc = ::recv(fd, buf, sizeof(buf), 0);
    if (rc <= 0) return true;
  }
}

}  // namespace meridian::testing
