// The TCP store over loopback: the Store contract (tests/store/store_conformance.h), the join
// handshake (wrong secret, version and configuration mismatches refused with their reason), and
// peers that send garbage or lie about sizes being cut off while the server keeps serving
// others. Ephemeral ports, no sleeps.
#include "engine/backends/store_tcp/tcp_store.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "engine/backends/store_tcp/tcp_store_wire.h"
#include "engine/core/error.h"
#include "tests/gloo/raw_store_client.h"
#include "tests/store/store_conformance.h"

namespace meridian {
namespace {

using testing::StoreBackend;
using testing::StoreConformance;

using store_wire::Type;
using store_wire::Writer;

constexpr char kSecret[] = "correct horse battery staple";

class TcpStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TcpStoreServerOptions o;
    o.identity = {kSecret, "0.1.0", "cfg-a"};
    o.handshake_timeout_s = 5.0;
    o.log = [](const std::string&) {};
    server_ = std::make_unique<TcpStoreServer>(o);
    port_ = server_->start();
    ASSERT_NE(port_, 0);
  }

  TcpStoreClientOptions client_options(const std::string& id = "node-0") {
    TcpStoreClientOptions o;
    o.port = port_;
    o.client_id = id;
    o.identity = {kSecret, "0.1.0", "cfg-a"};
    o.io_timeout_s = 10.0;
    return o;
  }

  int raw_connect() { return testing::raw_store_connect(port_); }
  int raw_joined() { return testing::raw_store_join(port_, kSecret, "0.1.0", "cfg-a"); }

  static void send_raw(int fd, const std::string& bytes) {
    ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }

  // The server closed `fd` for breaking the protocol and still serves a well-behaved client.
  void expect_cut_off_and_server_alive(int fd) {
    EXPECT_TRUE(testing::closed_by_server(fd));
    ::close(fd);
    EXPECT_EQ(server_->stats().cut_off, 1u);
    expect_server_still_serves();
  }

  void expect_server_still_serves() {
    TcpStore healthy(client_options("healthy"));
    healthy.set("alive", "yes");
    EXPECT_EQ(healthy.get("alive", 5.0), "yes");
  }

  std::unique_ptr<TcpStoreServer> server_;
  std::uint16_t port_ = 0;
};

TEST_F(TcpStoreTest, SequentialCallsShareOneJoinedConnection) {
  TcpStore s(client_options());
  s.set("a", "1");
  EXPECT_EQ(s.get("a", 1.0), "1");
  EXPECT_EQ(s.add("n", 2), 2);
  EXPECT_EQ(server_->stats().joined, 1u);
}

// A lease is held on a connection of its own: when its holder goes away without revoking it (a
// killed process: its sockets close), the server ends it at once, whatever its time to live, and
// erases its keys; a lease of a client that stays keeps living.
TEST_F(TcpStoreTest, ALeaseEndsWhenTheConnectionItIsHeldOnCloses) {
  TcpStore watcher(client_options("watcher"));
  auto holder = std::make_unique<TcpStore>(client_options("holder"));
  const std::int64_t gone = holder->lease_grant(3600.0);
  ASSERT_EQ(holder->compare_set_leased("hb/1", std::nullopt, "1", gone), "1");
  const std::int64_t kept = watcher.lease_grant(3600.0);
  ASSERT_EQ(watcher.compare_set_leased("hb/2", std::nullopt, "1", kept), "1");
  EXPECT_EQ(watcher.try_get("hb/1"), "1");
  std::uint64_t revision = watcher.revision();
  holder.reset();  // closes its connections; no revoke is sent
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (watcher.try_get("hb/1") && std::chrono::steady_clock::now() < deadline)
    revision = watcher.watch({"hb/"}, revision, 1.0);
  EXPECT_EQ(watcher.try_get("hb/1"), std::nullopt) << "the lease outlived its connection";
  EXPECT_EQ(watcher.try_get("hb/2"), "1");
  EXPECT_GT(watcher.keepalive(kept, 1.0), 0.0);
  EXPECT_LT(watcher.keepalive(gone, 1.0), 0.0);
  EXPECT_TRUE(watcher.lease_revoke(kept));
  EXPECT_EQ(watcher.try_get("hb/2"), std::nullopt);
  EXPECT_FALSE(watcher.lease_revoke(gone));
}

// The Store contract (tests/store/store_conformance.h) over loopback: a server per test.
INSTANTIATE_TEST_SUITE_P(Tcp, StoreConformance,
                         ::testing::Values(StoreBackend{"tcp",
                                                        [] {
                                                          TcpStoreServerOptions so;
                                                          so.identity = {kSecret, "0.1.0", "cfg-a"};
                                                          so.log = [](const std::string&) {};
                                                          auto server =
                                                              std::make_shared<TcpStoreServer>(so);
                                                          TcpStoreClientOptions co;
                                                          co.port = server->start();
                                                          co.client_id = "conformance";
                                                          co.identity = so.identity;
                                                          co.io_timeout_s = 10.0;
                                                          return std::shared_ptr<Store>(
                                                              new TcpStore(co),
                                                              [server](Store* s) { delete s; });
                                                        },
                                                        {}}));

TEST_F(TcpStoreTest, WrongSecretIsRefused) {
  auto o = client_options("intruder");
  o.identity.secret = "guess";
  try {
    TcpStore s(o);
    FAIL() << "joined with a wrong secret";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("wrong secret"), std::string::npos) << e.what();
  }
  EXPECT_EQ(server_->stats().refused, 1u);
  EXPECT_EQ(server_->stats().joined, 0u);
}

TEST_F(TcpStoreTest, VersionMismatchIsRefusedWithTheReason) {
  auto o = client_options();
  o.identity.version = "0.2.0";
  try {
    TcpStore s(o);
    FAIL() << "joined with another version";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("version mismatch"), std::string::npos) << what;
    EXPECT_NE(what.find("0.1.0"), std::string::npos) << what;
    EXPECT_NE(what.find("0.2.0"), std::string::npos) << what;
  }
}

TEST_F(TcpStoreTest, ConfigurationMismatchIsRefusedWithTheReason) {
  auto o = client_options();
  o.identity.config_hash = "cfg-b";
  try {
    TcpStore s(o);
    FAIL() << "joined with another configuration";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("configuration differs"), std::string::npos) << what;
    EXPECT_NE(what.find("cfg-b"), std::string::npos) << what;
  }
}

TEST_F(TcpStoreTest, AClientRefusesAServerThatCannotProveTheSecret) {
  TcpStoreServerOptions o;
  o.identity = {"another run's secret", "0.1.0", ""};
  TcpStoreServer other(o);
  auto c = client_options();
  c.port = other.start();
  // The server refuses first (the client's proof is wrong for it); either way no join.
  EXPECT_THROW(TcpStore s(c), ConfigError);
}

TEST_F(TcpStoreTest, GarbageBeforeJoiningIsCutOff) {
  const int fd = raw_connect();
  send_raw(fd, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");  // "GET " = a 1.2 GB length prefix
  expect_cut_off_and_server_alive(fd);
}

TEST_F(TcpStoreTest, AJoinedPeerAnnouncingAHugeFrameIsCutOff) {
  const int fd = raw_joined();
  send_raw(fd, std::string("\x7f\xff\xff\xff", 4));  // 2 GiB, far above the limit
  expect_cut_off_and_server_alive(fd);
}

TEST_F(TcpStoreTest, AFieldLongerThanItsFrameIsCutOff) {
  const int fd = raw_joined();
  Writer lie(Type::kSet);
  lie.u32(100u << 20).raw("k", 1);  // key length 100 MiB inside a 10-byte frame
  send_raw(fd, lie.frame());
  expect_cut_off_and_server_alive(fd);
}

TEST_F(TcpStoreTest, AWaitWithALyingKeyCountIsCutOff) {
  const int fd = raw_joined();
  Writer lie(Type::kWait);
  lie.u32(60000).str("k").u32(10);
  send_raw(fd, lie.frame());
  expect_cut_off_and_server_alive(fd);
}

TEST_F(TcpStoreTest, AnUnknownRequestTypeIsCutOff) {
  const int fd = raw_joined();
  Writer junk(static_cast<Type>(99));
  junk.str("x");
  send_raw(fd, junk.frame());
  expect_cut_off_and_server_alive(fd);
}

TEST(TcpStoreServerTest, APeerThatNeverJoinsIsClosedAtTheHandshakeDeadline) {
  TcpStoreServerOptions o;
  o.identity = {kSecret, "0.1.0", ""};
  o.handshake_timeout_s = 0.05;
  TcpStoreServer server(o);
  const std::uint16_t port = server.start();
  const int fd = testing::loopback_connect(port);
  char buf[256];
  while (::recv(fd, buf, sizeof(buf), 0) > 0) {
  }  // the greeting, then EOF once the deadline passes
  ::close(fd);
  EXPECT_EQ(server.stats().cut_off, 1u);
}

TEST(TcpStoreServerTest, AStoppedServerSurfacesAsPeerLostError) {
  TcpStoreServerOptions o;
  o.identity = {kSecret, "0.1.0", ""};
  auto server = std::make_unique<TcpStoreServer>(o);
  TcpStoreClientOptions c;
  c.port = server->start();
  c.identity = {kSecret, "0.1.0", "any"};  // the first node to join fixes the run's hash
  TcpStore s(c);
  s.set("k", "v");
  server.reset();
  EXPECT_THROW(s.get("k", 1.0), PeerLostError);
}

// Issue 36, item 6: a store given no configuration hash (`meridian store` without --config) took
// every node. Now the first node to join fixes the run's hash, as an embedded store's serving node
// does; a later node with another is refused with an error naming both, and one with the same
// (a second pooled connection included) is admitted.
TEST(TcpStoreServerTest, WithoutAConfigurationHashTheFirstNodeToJoinFixesTheRuns) {
  TcpStoreServerOptions o;
  o.identity = {kSecret, "0.1.0", ""};
  TcpStoreServer server(o);
  TcpStoreClientOptions c;
  c.port = server.start();
  c.client_id = "node-1";
  c.identity = {kSecret, "0.1.0", "cfg-first"};
  TcpStore first(c);
  c.client_id = "node-2";
  c.identity.config_hash = "cfg-other";
  try {
    TcpStore other(c);
    FAIL() << "a node with another configuration joined";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("run configuration differs: the run's configuration hash is cfg-first "
                        "(from node 'node-1', the first to join), the node's is cfg-other"),
              std::string::npos)
        << what;
  }
  c.client_id = "node-3";
  c.identity.config_hash = "cfg-first";
  TcpStore same(c);
  same.set("k", "v");
  EXPECT_EQ(first.get("k", 5.0), "v");
  EXPECT_EQ(server.stats().refused, 1u);
}

// Binds an ephemeral loopback port without listening: connections to it are refused until
// `holder` is closed (then the port may be handed to a server). `c`: a client of that port
// with the tests' identity.
void hold_a_refusing_port(int& holder, TcpStoreClientOptions& c) {
  holder = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(holder, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  ASSERT_EQ(::getsockname(holder, reinterpret_cast<sockaddr*>(&a), &len), 0);
  c.port = ntohs(a.sin_port);
  c.identity = {kSecret, "0.1.0", ""};
}

TEST(TcpStoreServerTest, AClientStartedBeforeTheServerJoinsOnceItListens) {
  // Hold an ephemeral port without listening (connections to it are refused), start the client,
  // then hand the port to the server: the client's refused attempts are retried until it joins.
  int holder = -1;
  TcpStoreClientOptions c;
  ASSERT_NO_FATAL_FAILURE(hold_a_refusing_port(holder, c));
  c.connect_timeout_s = 30.0;
  std::string seen;
  std::thread early([&] { seen = TcpStore(c).get("k", 30.0); });
  TcpStoreServerOptions o;
  o.port = c.port;
  o.identity = {kSecret, "0.1.0", ""};
  TcpStoreServer server(o);
  ::close(holder);
  ASSERT_EQ(server.start(), c.port);
  TcpStore late(c);
  late.set("k", "v");
  early.join();
  EXPECT_EQ(seen, "v");
  EXPECT_EQ(server.stats().joined, 2u);
}

// A store that is not there is said while the client waits (issue 34: half a minute of silence,
// then "Connection refused"): a line about 2 s in naming the address and the error, then the
// deadline's PeerLostError. The port is held bound but not listening, so it refuses.
TEST(TcpStoreServerTest, AClientWaitingForAnAbsentStoreSaysSoBeforeItsDeadline) {
  int holder = -1;
  TcpStoreClientOptions c;
  ASSERT_NO_FATAL_FAILURE(hold_a_refusing_port(holder, c));
  c.connect_timeout_s = 6.0;
  std::vector<std::string> lines;
  c.on_wait = [&](const std::string& line) { lines.push_back(line); };
  EXPECT_THROW(TcpStore{c}, PeerLostError);
  ::close(holder);
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(
      lines[0].find("the store at 127.0.0.1:" + std::to_string(c.port) + " is not reachable for "),
      std::string::npos)
      << lines[0];
  EXPECT_NE(lines[0].find(" s more ("), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("refused"), std::string::npos) << lines[0];
}

TEST(TcpStoreServerTest, AnEmptySecretIsAConfigurationError) {
  TcpStoreServerOptions o;
  EXPECT_THROW(TcpStoreServer server(o), ConfigError);
}

TEST(ConfigHash, IsTheSha256HexOfTheText) {
  EXPECT_EQ(config_hash_of("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace meridian
