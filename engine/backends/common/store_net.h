// What the two real stores (engine/backends/store_tcp, engine/backends/store_etcd) share on the
// wire: deadline-bounded blocking socket I/O, a listening socket (also the process probe's,
// engine/backends/common/socket_process_probe.h) and the join proof's transcripts. The TCP store's
// own framing (Writer, Reader, recv_frame) is in engine/backends/store_tcp/tcp_store_wire.h.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

struct addrinfo;

namespace meridian::store_wire {

using Nonce = std::array<std::uint8_t, 32>;

// The bytes both sides MAC for a join; ties the proof to this server's nonce and to everything
// the client claims, each field length-prefixed so no two claims share a transcript. The etcd
// store MACs its run record with the same transcript (engine/backends/store_etcd).
std::string join_transcript(const Nonce& server_nonce, const std::string& client_id,
                            const std::string& version, const std::string& config_hash,
                            const Nonce& client_nonce);
std::string server_transcript(const Nonce& server_nonce, const Nonce& client_nonce);
Nonce random_nonce();

// Blocking I/O on a socket with an absolute deadline (seconds on a monotonic clock, see
// now_s()). Throw PeerLostError on close or error, TimeoutError on the deadline.
double now_s();
// Waits until `fd` is ready for poll `events`; `doing` completes the TimeoutError's message.
void wait_ready(int fd, short events, double deadline_s, const char* doing);
// One non-blocking connect to `address` (a getaddrinfo result), waited for until deadline_s:
// the connected socket, or -1 with `error` the OS error (ETIMEDOUT at the deadline). Never throws.
int connect_until(const addrinfo& address, double deadline_s, int& error);
// One connection attempt to host:port (connect_until for each address it resolves to,
// TCP_NODELAY set); returns the socket, or PeerLostError naming host:port and the OS error.
int dial_once(const std::string& host, std::uint16_t port, double deadline_s);
// dial_once then `handshake(fd)` (none when empty), the pair retried with backoff while either
// throws PeerLostError (a server not up yet, refused or unreachable: nodes may start before the
// store; or one that closes the connection before its welcome) until the deadline, when the
// last PeerLostError is rethrown. Any other error closes the socket and propagates at once.
// `on_wait(error, waited_s)`, when given, is told while it keeps failing: once 2 s in, then every
// 10 s (so that a person is not left with half a minute of silence).
int dial(const std::string& host, std::uint16_t port, double deadline_s,
         const std::function<void(int fd)>& handshake = {},
         const std::function<void(const std::string& error, double waited_s)>& on_wait = {});
// A listening socket (non-blocking, close-on-exec, SO_REUSEADDR) on `host`:`port` (0: an
// ephemeral port), on the first address `host` resolves to that binds. ConfigError when none
// does, its message opened by `what` ("store server", "process probe").
struct Listener {
  int fd = -1;
  std::uint16_t port = 0;  // the port it got
  std::string address;     // where others reach it: "ip:port", or "[ipv6]:port"
};
Listener listen_on(const std::string& host, std::uint16_t port, int backlog, const char* what);
void send_all(int fd, std::string_view data, double deadline_s);
// Reads exactly `n` bytes into `out`.
void recv_exact(int fd, char* out, std::size_t n, double deadline_s);

}  // namespace meridian::store_wire
