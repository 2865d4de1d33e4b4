// Fuzz target: the TCP store server's frame parser and request handlers, reached the way a peer
// reaches them: over a loopback socket to a real TcpStoreServer (a fresh one per input, so an
// input's effect does not depend on earlier ones). Input: byte 0 bit 0 set = join with the
// right secret first (the fuzzed bytes are then requests), clear = the fuzzed bytes are the
// handshake itself; the rest is the byte stream sent. The harness then half-closes and reads
// until the server closes; the server must neither crash, leak, nor allocate from a length
// before checking it (-malloc_limit_mb), and must keep serving: a well-behaved client joins and
// round-trips a key afterwards.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "engine/backends/store_tcp/tcp_store.h"
#include "engine/backends/store_tcp/tcp_store_wire.h"
#include "engine/core/error.h"
#include "engine/core/util/hmac.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

using namespace meridian;
constexpr char kSecret[] = "fuzz secret";
constexpr char kVersion[] = "0.1.0";

// Connects to the input's server. Thousands of inputs a second leave as many loopback connections
// in TIME_WAIT, and when a second program does the same (another fuzzer, a test) the kernel can
// run short of local ports for a while: EADDRNOTAVAIL is waited out (bounded), as any client
// would; any other failure, or a shortage that lasts, stops the harness with the reason. The
// harness's own connection ends with a reset (SO_LINGER 0), so it leaves no TIME_WAIT behind.
int loopback_connect(std::uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const double deadline = store_wire::now_s() + 10;
  for (;;) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    MERIDIAN_CHECK(fd >= 0);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
      const linger reset{1, 0};
      ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
      return fd;
    }
    const int error = errno;
    ::close(fd);
    if (error != EADDRNOTAVAIL || store_wire::now_s() > deadline)
      throw std::runtime_error("harness: connect to 127.0.0.1:" + std::to_string(port) + ": " +
                               std::strerror(error));
    ::usleep(10'000);
  }
}

// Reads the greeting and joins with the right secret, as tests/gloo/raw_store_client.h does.
void join(int fd) {
  const double deadline = store_wire::now_s() + 5;
  store_wire::Reader hello(store_wire::recv_frame(fd, 4096, deadline));
  MERIDIAN_CHECK(hello.type() == store_wire::Type::kHello);
  hello.u32("magic");
  hello.u16("protocol");
  store_wire::Nonce server_nonce;
  hello.raw(server_nonce.data(), server_nonce.size(), "nonce");
  const store_wire::Nonce client_nonce{};
  const auto proof = hmac_sha256(
      kSecret, store_wire::join_transcript(server_nonce, "fuzz", kVersion, "", client_nonce));
  store_wire::Writer w(store_wire::Type::kJoin);
  w.str("fuzz").str(kVersion).str("").raw(client_nonce.data(), 32).raw(proof.data(), 32);
  store_wire::send_all(fd, w.frame(), deadline);
  store_wire::Reader welcome(store_wire::recv_frame(fd, 4096, deadline));
  MERIDIAN_CHECK(welcome.type() == store_wire::Type::kWelcome);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::Input in(data, size);
  const bool joined = in.u8() & 1;
  const std::string stream = in.rest();

  TcpStoreServerOptions o;
  o.identity = {kSecret, kVersion, ""};
  o.handshake_timeout_s = 5;
  o.limits.max_frame_bytes = 1 << 20;
  o.limits.max_stored_bytes = 4 << 20;
  TcpStoreServer server(o);
  const std::uint16_t port = server.start();

  const int fd = loopback_connect(port);
  if (joined) join(fd);
  // Inputs are small (libFuzzer's -max_len), so this never blocks on a full socket buffer; the
  // server may have cut the connection already, hence no check.
  [[maybe_unused]] const ssize_t sent = ::send(fd, stream.data(), stream.size(), MSG_NOSIGNAL);
  ::shutdown(fd, SHUT_WR);
  char buf[4096];
  while (::recv(fd, buf, sizeof buf, 0) > 0) {
  }
  ::close(fd);

  TcpStoreClientOptions c;
  c.port = port;
  c.client_id = "check";
  c.identity = {kSecret, kVersion, ""};
  TcpStore store(c);
  store.set("after", "fuzz");
  MERIDIAN_CHECK_EQ(store.get("after", 5), "fuzz");
  return 0;
}
