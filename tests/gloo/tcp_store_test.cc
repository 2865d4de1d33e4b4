// The TCP store over loopback: every operation, the join handshake (wrong secret, version and
// configuration mismatches refused with their reason), leases and watches, and peers that send garbage or lie about
// sizes being cut off while the server keeps serving others. Ephemeral ports, no sleeps.
#include "engine/store/tcp_store.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "engine/error.h"
#include "engine/store/tcp_store_wire.h"
#include "tests/gloo/raw_store_client.h"

namespace meridian {
namespace {

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

TEST_F(TcpStoreTest, EveryOperation) {
  TcpStore s(client_options());
  s.set("a/1", "one");
  s.set("a/2", std::string("t\0o", 3));
  s.set("b", "");
  EXPECT_EQ(s.get("a/1", 5.0), "one");
  EXPECT_EQ(s.get("a/2", 5.0), std::string("t\0o", 3));
  EXPECT_EQ(s.try_get("b"), std::optional<std::string>(""));
  EXPECT_EQ(s.try_get("absent"), std::nullopt);
  s.wait({"a/1", "a/2", "b"}, 5.0);

  EXPECT_EQ(s.add("n", 5), 5);
  EXPECT_EQ(s.add("n", -7), -2);
  EXPECT_EQ(s.get("n", 1.0), "-2");

  EXPECT_EQ(s.compare_set("c", std::nullopt, "first"), std::optional<std::string>("first"));
  EXPECT_EQ(s.compare_set("c", std::nullopt, "second"), std::optional<std::string>("first"));
  EXPECT_EQ(s.compare_set("c", std::string("wrong"), "third"), std::optional<std::string>("first"));
  EXPECT_EQ(s.compare_set("c", std::string("first"), "fourth"),
            std::optional<std::string>("fourth"));
  EXPECT_EQ(s.compare_set("absent", std::string("x"), "y"), std::nullopt);
  EXPECT_EQ(s.try_get("absent"), std::nullopt);

  EXPECT_EQ(s.list("a/"), (std::vector<std::string>{"a/1", "a/2"}));
  EXPECT_EQ(s.list(""), (std::vector<std::string>{"a/1", "a/2", "b", "c", "n"}));
  using KV = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(s.read_prefix("a/"), (KV{{"a/1", "one"}, {"a/2", std::string("t\0o", 3)}}));
  EXPECT_EQ(s.read_prefix("zz"), KV{});
  EXPECT_TRUE(s.erase("a/1"));
  EXPECT_FALSE(s.erase("a/1"));
  EXPECT_EQ(s.list("a/"), (std::vector<std::string>{"a/2"}));
  EXPECT_EQ(server_->stats().joined, 1u);
}

// Leases end on the server's clock even when nobody calls, erasing their keys, which wakes a
// watcher of them; a revoke does so at once; a watch of other prefixes sleeps through both.
TEST_F(TcpStoreTest, LeasesEndAndWakeWatchers) {
  TcpStore s(client_options());
  const std::int64_t short_lived = s.lease_grant(0.1);
  const std::int64_t long_lived = s.lease_grant(3600.0);
  EXPECT_EQ(s.compare_set_leased("hb/1", std::nullopt, "1", short_lived), "1");
  EXPECT_EQ(s.compare_set_leased("leader", std::nullopt, "2", long_lived), "2");
  EXPECT_EQ(s.compare_set_leased("leader", std::nullopt, "3", short_lived), "2");  // taken
  EXPECT_EQ(s.keepalive(short_lived, 0.05), 0.05);
  const std::uint64_t r0 = s.revision();
  EXPECT_EQ(s.watch({"zz/"}, r0, 0.01), r0);  // nothing under it: returns at its timeout
  const std::uint64_t r1 = s.watch({"hb/"}, r0, 10.0);
  EXPECT_EQ(r1, r0 + 1);
  EXPECT_EQ(s.try_get("hb/1"), std::nullopt);
  EXPECT_LT(s.keepalive(short_lived, 0.05), 0.0);
  EXPECT_EQ(s.compare_set_leased("hb/1", std::nullopt, "1", short_lived), std::nullopt);
  s.lease_revoke(long_lived);
  EXPECT_EQ(s.watch({"leader"}, r1, 10.0), r1 + 1);
  EXPECT_EQ(s.try_get("leader"), std::nullopt);
}

TEST_F(TcpStoreTest, AddOnANonIntegerIsAnErrorAndTheConnectionStaysUsable) {
  TcpStore s(client_options());
  s.set("text", "hello");
  EXPECT_THROW(s.add("text", 1), Error);
  EXPECT_EQ(s.get("text", 1.0), "hello");
}

TEST_F(TcpStoreTest, GetWaitsForASetFromAnotherCallerOfTheSameClient) {
  TcpStore s(client_options());
  std::string seen;
  std::thread waiter([&] { seen = s.get("late", 30.0); });
  s.set("late", "value");  // a second pooled connection: the parked get does not block it
  waiter.join();
  EXPECT_EQ(seen, "value");
  std::thread many([&] { s.wait({"k1", "k2"}, 30.0); });
  s.set("k1", "x");
  s.add("k2", 1);
  many.join();
  EXPECT_EQ(s.get("k2", 1.0), "1");
}

TEST_F(TcpStoreTest, WaitsRunOutWithTimeoutError) {
  TcpStore s(client_options());
  EXPECT_THROW(s.get("never", 0.05), TimeoutError);
  s.set("one", "1");
  EXPECT_THROW(s.wait({"one", "never"}, 0.05), TimeoutError);
  EXPECT_EQ(s.get("one", 1.0), "1");  // the connection survived the timeout
}

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
  c.identity = {kSecret, "0.1.0", "any"};  // the server checks no configuration hash
  TcpStore s(c);
  s.set("k", "v");
  server.reset();
  EXPECT_THROW(s.get("k", 1.0), PeerLostError);
}

TEST(TcpStoreServerTest, AClientStartedBeforeTheServerJoinsOnceItListens) {
  // Hold an ephemeral port without listening (connections to it are refused), start the client,
  // then hand the port to the server: the client's refused attempts are retried until it joins.
  const int holder = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(holder, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  ASSERT_EQ(::getsockname(holder, reinterpret_cast<sockaddr*>(&a), &len), 0);
  TcpStoreClientOptions c;
  c.port = ntohs(a.sin_port);
  c.identity = {kSecret, "0.1.0", ""};
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
