// Fuzz target: the TCP store client's reply parsing
// (engine/backends/store_tcp/tcp_store_client.cc). A fake server on loopback greets the client and
// proves the secret correctly, then answers the one request with the fuzzed bytes and closes.
// Input: byte 0 picks the Store operation; the rest is the reply stream (length-prefixed frames).
// The client returns or throws PeerLostError, TimeoutError, ProtocolError or Error (a declined
// request), never anything else.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>

#include "engine/backends/store_tcp/tcp_store.h"
#include "engine/backends/store_tcp/tcp_store_wire.h"
#include "engine/core/error.h"
#include "engine/core/util/hmac.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

using namespace meridian;
using store_wire::Type;
constexpr char kSecret[] = "fuzz secret";

int listen_loopback(std::uint16_t& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  MERIDIAN_CHECK(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  MERIDIAN_CHECK_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  MERIDIAN_CHECK_EQ(::listen(fd, 4), 0);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  port = ntohs(a.sin_port);
  return fd;
}

// The fake server's side of one connection: an honest handshake, then `reply` for the request.
void serve(int listen_fd, const std::string& reply) {
  const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return;
  try {
    const double deadline = store_wire::now_s() + 5;
    const store_wire::Nonce server_nonce{};
    store_wire::Writer hello(Type::kHello);
    hello.u32(store_wire::kMagic).u16(store_wire::kProtocolVersion).raw(server_nonce.data(), 32);
    store_wire::send_all(fd, hello.frame(), deadline);
    store_wire::Reader join(store_wire::recv_frame(fd, 4096, deadline));
    MERIDIAN_CHECK(join.type() == Type::kJoin);
    for (const char* f : {"id", "version", "config"}) join.str(f, 4096);
    store_wire::Nonce client_nonce;
    join.raw(client_nonce.data(), 32, "nonce");
    const auto proof =
        hmac_sha256(kSecret, store_wire::server_transcript(server_nonce, client_nonce));
    store_wire::Writer welcome(Type::kWelcome);
    welcome.raw(proof.data(), proof.size());
    store_wire::send_all(fd, welcome.frame(), deadline);
    store_wire::recv_frame(fd, 1 << 20, deadline);  // the request
    store_wire::send_all(fd, reply, deadline);
  } catch (const PeerLostError&) {  // the client gave up first
  }
  ::close(fd);
}

void call(TcpStore& s, std::uint8_t op) {
  switch (op % 14) {
    case 0:
      return s.set("k", "v");
    case 1:
      (void)s.get("k", 1);
      return;
    case 2:
      (void)s.try_get("k");
      return;
    case 3:
      return s.wait({"a", "b"}, 1);
    case 4:
      (void)s.add("n", 1);
      return;
    case 5:
      (void)s.compare_set("k", std::nullopt, "v");
      return;
    case 6:
      (void)s.erase("k");
      return;
    case 7:
      (void)s.list("p/");
      return;
    case 8:
      (void)s.read_prefix("p/");
      return;
    case 9:
      (void)s.lease_grant(5);
      return;
    case 10:
      (void)s.keepalive(1, 1);
      return;
    case 11:
      (void)s.lease_revoke(1);
      return;
    case 12:
      (void)s.compare_set_leased("k", std::string("v"), "w", 1);
      return;
    default:
      (void)s.watch({"p/"}, 0, 1);
      return;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::Input in(data, size);
  const std::uint8_t op = in.u8();
  const std::string reply = in.rest();
  std::uint16_t port = 0;
  const int listen_fd = listen_loopback(port);
  std::thread server([&] { serve(listen_fd, reply); });

  TcpStoreClientOptions o;
  o.port = port;
  o.client_id = "fuzz";
  o.identity = {kSecret, "0.1.0", ""};
  o.connect_timeout_s = 5;
  o.io_timeout_s = 5;
  o.limits.max_frame_bytes = 1 << 20;
  try {
    TcpStore store(o);
    call(store, op);
  } catch (const CheckError&) {
    throw;
  } catch (const Error&) {  // PeerLostError, TimeoutError, ProtocolError, or a declined request
  }
  server.join();
  ::close(listen_fd);
  return 0;
}
