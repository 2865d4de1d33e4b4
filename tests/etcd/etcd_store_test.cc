// EtcdStore on 3-member etcd clusters started on loopback: the Store contract
// (tests/store/store_conformance.h), the run record's join proof (wrong secret, version and
// configuration refused with the reason), failover when members die (PeerLostError only once
// none answers), etcd auth, TLS with client certificates, and the etcd:// URL's errors.
#include "engine/backends/store_etcd/etcd_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "engine/backends/store_etcd/etcd_wire.h"
#include "engine/core/error.h"
#include "tests/mesh/store_size.h"
#include "tests/store/etcd_cluster.h"
#include "tests/store/store_conformance.h"

namespace meridian {
namespace {

using testing::StoreBackend;
using testing::StoreConformance;

using testing::ClusterOptions;
using testing::EtcdCluster;

constexpr char kSecret[] = "correct horse battery staple";
constexpr char kMissing[] =
    "etcd is not installed (/usr/bin/etcd, /usr/bin/etcdctl): apt-get install etcd-server "
    "etcd-client";

std::string unavailable() { return EtcdCluster::available() ? "" : kMissing; }

// The cluster the conformance cases share (each case under its own prefix).
EtcdCluster& shared_cluster() {
  static auto cluster = std::make_unique<EtcdCluster>(3);
  return *cluster;
}

EtcdStoreOptions options_for(const EtcdCluster& c, const std::string& prefix,
                             StoreIdentity identity = {kSecret, "0.1.0", "cfg-a"}) {
  EtcdStoreOptions o = parse_etcd_url(c.url(prefix), "test");
  o.client_id = "test";
  o.identity = std::move(identity);
  o.io_timeout_s = 15.0;
  return o;
}

INSTANTIATE_TEST_SUITE_P(Etcd, StoreConformance,
                         ::testing::Values(StoreBackend{
                             "etcd",
                             [] {
                               static std::atomic<int> n{0};
                               return std::make_shared<EtcdStore>(options_for(
                                   shared_cluster(), "conformance/" + std::to_string(n++)));
                             },
                             unavailable}));

TEST(EtcdStore, TheRunRecordRefusesAWrongSecretVersionOrConfigurationWithTheReason) {
  if (!EtcdCluster::available()) GTEST_SKIP() << kMissing;
  EtcdCluster& c = shared_cluster();
  EtcdStore first(options_for(c, "record"));
  first.set("k", "v");
  EtcdStore second(options_for(c, "record"));  // same run: admitted, sees the first's keys
  EXPECT_EQ(second.get("k", 1.0), "v");
  const auto refused = [&](StoreIdentity id, const std::string& reason) {
    try {
      EtcdStore s(options_for(c, "record", std::move(id)));
      ADD_FAILURE() << "admitted a node that should be refused for: " << reason;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
    }
  };
  refused({"guess", "0.1.0", "cfg-a"}, "not written with this node's secret");
  refused({kSecret, "0.2.0", "cfg-a"}, "the run uses meridian 0.1.0, this node is 0.2.0");
  refused({kSecret, "0.1.0", "cfg-b"}, "different configuration");
  // Another prefix is another run.
  EtcdStore other(options_for(c, "record-2", {kSecret, "0.1.0", "cfg-b"}));
  EXPECT_EQ(other.try_get("k"), std::nullopt);
}

// Calls go on while members die (one at a time, a quorum left), fail over to the members left,
// and raise PeerLostError only when none answers.
TEST(EtcdStore, FailsOverWhenMembersDieAndReportsPeerLostWhenNoneAnswers) {
  if (!EtcdCluster::available()) GTEST_SKIP() << kMissing;
  EtcdCluster c(3);
  auto o = options_for(c, "failover");
  o.io_timeout_s = 10.0;
  EtcdStore s(o);
  const std::int64_t lease = s.lease_grant(10.0);
  EXPECT_EQ(s.compare_set_leased("hb/1", std::nullopt, "1", lease), "1");
  c.kill(0);  // the endpoint the store used first
  s.set("a", "1");
  EXPECT_EQ(s.add("n", 1), 1);
  EXPECT_GT(s.keepalive(lease, 1.0), 0.0);
  c.restart(0);
  ASSERT_TRUE(c.wait_healthy(30.0));
  const int leader = c.leader();
  ASSERT_GE(leader, 0);
  const std::uint64_t r0 = s.revision();
  c.kill(leader);
  s.set("b", "2");  // after an election among the two left
  EXPECT_GT(s.watch({"b"}, r0, 5.0), r0);
  EXPECT_EQ(s.get("a", 1.0), "1");
  EXPECT_EQ(s.add("n", 1), 2);
  EXPECT_EQ(s.try_get("hb/1"), "1");  // the new leader kept the lease alive
  EXPECT_GT(s.keepalive(lease, 1.0), 0.0);
  o.io_timeout_s = 1.0;
  EtcdStore impatient(o);
  for (int i = 0; i < c.size(); ++i) c.kill(i);
  try {
    impatient.try_get("a");
    FAIL() << "expected PeerLostError with every member dead";
  } catch (const PeerLostError& e) {
    EXPECT_NE(std::string(e.what()).find("no endpoint"), std::string::npos) << e.what();
  }
}

// Quorum loss is not silent: with two of three members dead every endpoint fails in turn (the
// one left has no leader); the store logs the loss when it starts, again while it lasts with
// the time so far, and once the members are back and a call is answered, the end.
TEST(EtcdStore, LogsQuorumLossWhenItStartsWhileItLastsAndWhenItEnds) {
  if (!EtcdCluster::available()) GTEST_SKIP() << kMissing;
  EtcdCluster c(3);
  auto o = options_for(c, "quorum");
  o.io_timeout_s = 120.0;
  o.outage_log_interval_s = 0.5;
  std::mutex mu;
  std::vector<std::string> lines;
  o.log = [&](const std::string& line) {
    std::lock_guard<std::mutex> lock(mu);
    lines.push_back(line);
  };
  const auto count = [&](const std::string& needle) {
    std::lock_guard<std::mutex> lock(mu);
    return std::count_if(lines.begin(), lines.end(), [&](const std::string& l) {
      return l.find(needle) != std::string::npos;
    });
  };
  const auto wait_for = [&](const std::string& needle, long n) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (count(needle) < n && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polls the log, deadline
    return count(needle) >= n;
  };
  EtcdStore s(o);
  s.set("a", "1");
  EXPECT_EQ(count("quorum"), 0);
  c.kill(1);
  c.kill(2);
  std::string outcome = "pending";
  std::thread writer([&] {
    try {
      s.set("b", "2");  // waits out the loss: the call's deadline is 120 s
      outcome = "ok";
    } catch (const std::exception& e) {
      outcome = e.what();
    }
  });
  const bool started = wait_for("no quorum: no endpoint answered", 1);
  const bool lasting = started && wait_for("still no quorum after", 2);
  c.restart(1);
  c.restart(2);
  writer.join();
  EXPECT_TRUE(started) << "no line when the quorum was lost";
  EXPECT_TRUE(lasting) << "no line while the loss lasted";
  EXPECT_EQ(outcome, "ok");
  EXPECT_TRUE(wait_for("quorum back after", 1));
  EXPECT_EQ(s.get("b", 1.0), "2");
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(std::count_if(lines.begin(), lines.end(),
                          [](const std::string& l) { return l.find("no quorum:") != std::string::npos; }),
            1);
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(lines.back().find("quorum back after"), std::string::npos) << lines.back();
  for (const std::string& l : lines) std::printf("%s\n", l.c_str());
}

// The store's size over a long run on etcd: the thread-level cluster (tests/mesh/store_size.h:
// 3 nodes, a leave and two joins, one of them crashing, every 10 outer steps) with every node on
// one EtcdStore. The key count stays under the same bound as on the in-memory store.
TEST(EtcdStore, MeshKeysStayBoundedOverALongRunWithChurn) {
  if (!EtcdCluster::available()) GTEST_SKIP() << kMissing;
  EtcdStore store(options_for(shared_cluster(), "store-size"));
  ClusterOptions o;
  o.outer_steps = 100;
  o.inner_steps = 1;
  o.heartbeat_s = 0.5;  // etcd counts a lease's time to live in whole seconds
  o.dead_after_s = 2.0;
  o.allreduce_timeout_s = 10.0;
  o.store = &store;
  const auto seen = testing::run_with_churn(o);
  EXPECT_GE(seen.size(), 9u);
}

TEST(EtcdStore, AuthenticatesWithTheUsersPasswordAndRefusesAWrongOne) {
  if (!EtcdCluster::available()) GTEST_SKIP() << kMissing;
  EtcdCluster c(1);
  const std::string endpoint = "--endpoints=http://127.0.0.1:" + std::to_string(c.client_port(0));
  const std::string ctl = std::string(EtcdCluster::kEtcdctl) + " " + endpoint + " ";
  ASSERT_EQ(std::system((ctl + "user add root:rootpw >/dev/null").c_str()), 0);
  ASSERT_EQ(std::system((ctl + "auth enable >/dev/null").c_str()), 0);
  const std::filesystem::path dir = std::filesystem::temp_directory_path();
  const auto password_file = [&](const std::string& name, const std::string& text) {
    const std::filesystem::path p = dir / (name + "-" + std::to_string(::getpid()));
    std::ofstream(p) << text << "\n";
    std::filesystem::permissions(
        p, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    return p.string();
  };
  const std::string good = password_file("etcd-good", "rootpw");
  const std::string bad = password_file("etcd-bad", "nope");
  EtcdStoreOptions o = parse_etcd_url(c.url("auth") + "?user=root&password-file=" + good, "test");
  o.identity = {kSecret, "0.1.0", "cfg-a"};
  EtcdStore s(o);
  s.set("x", "1");
  EXPECT_EQ(s.get("x", 1.0), "1");
  o = parse_etcd_url(c.url("auth") + "?user=root&password-file=" + bad, "test");
  o.identity = {kSecret, "0.1.0", "cfg-a"};
  try {
    EtcdStore refused(o);
    ADD_FAILURE() << "logged in with a wrong password";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("could not log in"), std::string::npos) << e.what();
  }
  // Without credentials etcd itself refuses every request.
  EXPECT_THROW(EtcdStore(options_for(c, "auth")), Error);
  std::filesystem::remove(good);
  std::filesystem::remove(bad);
}

// etcds://: the server's certificate is checked against the CA file for the endpoint's
// address, and the client presents its certificate (the cluster requires one).
TEST(EtcdStore, SpeaksTlsToAVerifiedServerWithAClientCertificate) {
  if (!EtcdCluster::available()) GTEST_SKIP() << kMissing;
  EtcdCluster c(1, /*tls=*/true);
  EtcdStore s(options_for(c, "tls"));
  s.set("a", "1");
  EXPECT_EQ(s.get("a", 1.0), "1");
  const std::int64_t lease = s.lease_grant(10.0);
  EXPECT_GT(s.keepalive(lease, 1.0), 0.0);
  const std::uint64_t r0 = s.revision();
  std::thread writer([&] { s.set("w", "x"); });
  EXPECT_GT(s.watch({"w"}, r0, 10.0), r0);
  writer.join();
  // Without the test CA the server's certificate does not verify: no endpoint answers.
  const std::string port = std::to_string(c.client_port(0));
  EtcdStoreOptions o =
      parse_etcd_url("etcds://127.0.0.1:" + port + "/tls?cert=" + c.file("client.pem") +
                         "&key=" + c.file("client.key"),
                     "test");
  o.identity = {kSecret, "0.1.0", "cfg-a"};
  o.connect_timeout_s = 1.0;
  try {
    EtcdStore unverified(o);
    ADD_FAILURE() << "trusted a server whose CA it does not know";
  } catch (const PeerLostError& e) {
    EXPECT_NE(std::string(e.what()).find("failed verification"), std::string::npos) << e.what();
  }
}

// What etcd answers is untrusted input: a field of the wrong type is a ProtocolError (it was an
// nlohmann type_error or std::invalid_argument that no caller handled), a truncated or lying
// HTTP answer too (the fuzz target tests/fuzz/etcd_answer_fuzz.cc runs these and more).
TEST(EtcdWire, MalformedAnswersAreProtocolErrorsOrRefusedRecords) {
  using namespace etcd_wire;
  WatchState state{7, false};
  EXPECT_THROW(watch_message(R"({"result":{"created":"yes"}})", {"/p/"}, 7, state, "t"),
               ProtocolError);
  EXPECT_FALSE(watch_message(R"({"result":5})", {"/p/"}, 7, state, "t"));
  EXPECT_THROW(watch_message(R"({"error":{"message":"gone"}})", {"/p/"}, 7, state, "t"),
               PeerLostError);
  EXPECT_THROW(compare_set_result(json::parse(R"({"succeeded":"yes"})"), "v"), ProtocolError);
  EXPECT_EQ(compare_set_result(json::parse(R"({"succeeded":true})"), "v"), "v");
  EXPECT_THROW(i64_of(json::parse(R"({"ID":"12abc"})"), "ID"), ProtocolError);
  EXPECT_EQ(i64_of(json::parse(R"({"ID":"-12"})"), "ID"), -12);
  EXPECT_EQ(i64_of(json::parse(R"({"TTL":5})"), "ID"), 0);
  EXPECT_FALSE(parse_run_record(R"({"version":"v","config_hash":"c","nonce":"zz","proof":"00"})"));
  EXPECT_FALSE(parse_run_record(R"({"version":1,"config_hash":"c","nonce":"00","proof":"00"})"));
  EXPECT_EQ(parse_run_record(R"({"version":"v","config_hash":"c","nonce":"00ff","proof":"9"})")
                ->nonce,
            std::string("\x00\xff", 2));
  const auto http = [](std::string text) {
    std::string buf = std::move(text);
    HttpAnswer a(buf, [](double) { return false; }, 0.0);
    std::string body;
    while (a.next(body, 0.0)) {
    }
    return std::make_pair(a.status, body);
  };
  EXPECT_EQ(http("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"), std::make_pair(200, std::string("{}")));
  EXPECT_EQ(http("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;x=1\r\nab\r\n0\r\n\r\n"),
            std::make_pair(200, std::string("ab")));
  EXPECT_THROW(http("HTTP/1.1 2x0 OK\r\n\r\n"), ProtocolError);
  EXPECT_THROW(http("HTTP/1.1 200 OK\r\nContent-Length: 2z\r\n\r\n{}"), ProtocolError);
  EXPECT_THROW(http("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n{}"), PeerLostError);
  EXPECT_THROW(http("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n0\r\n\r\n"),
               ProtocolError);
}

TEST(EtcdUrl, ParsesEndpointsPrefixAndOptions) {
  const EtcdStoreOptions o = parse_etcd_url("etcd://h1:2379,10.0.0.2:2380,[::1]:2381/runs/a", "k");
  ASSERT_EQ(o.endpoints.size(), 3u);
  EXPECT_EQ(o.endpoints[0].host, "h1");
  EXPECT_EQ(o.endpoints[1].port, 2380);
  EXPECT_EQ(o.endpoints[2].host, "::1");
  EXPECT_EQ(o.prefix, "/runs/a/");
  EXPECT_EQ(parse_etcd_url("etcd://h:1", "k").prefix, "/meridian/");
  EXPECT_FALSE(parse_etcd_url("etcd://h:1", "k").tls);
  const EtcdStoreOptions t =
      parse_etcd_url("etcds://h:1?cacert=/ca.pem&cert=/c.pem&key=/c.key", "k");
  EXPECT_TRUE(t.tls);
  EXPECT_EQ(t.ca_file, "/ca.pem");
  EXPECT_EQ(t.cert_file, "/c.pem");
  EXPECT_EQ(t.key_file, "/c.key");
  EXPECT_TRUE(is_etcd_url("etcd://h:1"));
  EXPECT_FALSE(is_etcd_url("h:1"));
}

TEST(EtcdUrl, MalformedUrlsNameTheKeyAndTheProblem) {
  const auto error_of = [](const std::string& url) -> std::string {
    try {
      parse_etcd_url(url, "run.yaml: store");
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "(accepted)";
  };
  for (const auto& [url, problem] : std::vector<std::pair<std::string, std::string>>{
           {"etcd://", "no endpoint"},
           {"etcd://h1:2379,,h2:2379", "an empty endpoint"},
           {"etcd://h1", "is not HOST:PORT"},
           {"etcd://h1:99999", "not in 1..65535"},
           {"etcd://h1:x", "not in 1..65535"},
           {"etcd://h1:2379?cacert=/ca.pem", "option 'cacert' needs TLS: etcds://"},
           {"etcds://h1:2379?cert=/c.pem", "cert and key go together"},
           {"etcd://h1:2379?color=blue", "unknown option 'color'"},
           {"etcd://h1:2379?user=root", "go together"},
           {"etcd://h1:2379/a b", "prefix 'a b'"},
           {"http://h1:2379", "not an etcd:// or etcds:// URL"}}) {
    const std::string e = error_of(url);
    EXPECT_EQ(e.rfind("run.yaml: store: ", 0), 0u) << url << ": " << e;
    EXPECT_NE(e.find(problem), std::string::npos) << url << ": " << e;
  }
}

}  // namespace
}  // namespace meridian
