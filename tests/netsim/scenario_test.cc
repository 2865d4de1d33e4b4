// Scenario YAML and churn CSV parsing: defaults, derived model numbers, and errors that name
// the file, the key (or line and column) and the expectation.
#include "netsim/scenario.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/compose/compose.h"
#include "cli/compose/simulation.h"
#include "engine/core/error.h"
#include "netsim/churn.h"
#include "netsim/platform.h"
#include "netsim/simulation.h"
#include "netsim/worker_plugin.h"

namespace meridian::netsim {
namespace {

const char* kMinimal =
    "network:\n"
    "  sites: [{name: a}, {name: b}]\n"
    "  rtt: [{a: a, b: b, ms: 80, source: test}]\n"
    "  nodes: [{site: a, count: 2}, {site: b, count: 1, start: false}]\n";

// The ConfigError message of parsing `yaml`, or "" if it parsed.
std::string error_of(const std::string& yaml, std::vector<std::string> overrides = {}) {
  try {
    parse_scenario(yaml, "bad.yaml", overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Scenario, DefaultsAreIntellect1) {
  Scenario sc = parse_scenario(kMinimal, "min.yaml");
  EXPECT_EQ(sc.model.param_count(), 10'211'381'248u);  // intellect1.md §2.1
  EXPECT_NEAR(sc.model.flops_per_token(), 7.50e10, 0.01e10);
  EXPECT_EQ(sc.tokens_per_inner_step(), 1'048'576);
  EXPECT_EQ(sc.model.bucket_boundaries().size(), 45u);  // 44 buckets
  EXPECT_EQ(sc.model.bucket_boundaries().back(), sc.model.param_count());
  EXPECT_EQ(sc.network.model, "CM02");
  EXPECT_EQ(sc.network.tcp_gamma_bytes, 4194304.0);
  EXPECT_EQ(sc.diloco.H, 100);
  EXPECT_EQ(sc.run.name, "min");
  EXPECT_EQ(sc.output_dir, "runs/min");  // never results/, which holds committed outputs
  EXPECT_NEAR(sc.inner_step_s(), 22.96, 0.01);
  EXPECT_EQ(host_slot_names(sc), (std::vector<std::string>{"a-0", "a-1", "b-0"}));
}

// The default blocking checkpoint (INTELLECT-1's 60 s) is said when it weighs in a scenario's
// outer step (issue 34), and not when the scenario chose it or it is small.
TEST(Scenario, TheDefaultCheckpointIsNotedWhereItWeighs) {
  const auto notes = [](const std::vector<std::string>& overrides) {
    return parse_scenario(kMinimal, "min.yaml", overrides).notes_for(config::Mode::kSimulate);
  };
  const auto toy = notes({"hardware.step_time_s=0.5", "diloco.H=10"});  // 5 s of inner steps
  ASSERT_EQ(toy.size(), 1u);
  EXPECT_NE(toy[0].find("min.yaml: diloco.checkpoint_s: the default, INTELLECT-1's blocking 60 s "
                        "checkpoint per outer step, is 1200 % of this scenario's 5 s"),
            std::string::npos)
      << toy[0];
  EXPECT_TRUE(notes({"hardware.step_time_s=0.5", "diloco.H=10", "diloco.checkpoint_s=2"}).empty());
  EXPECT_TRUE(notes({"hardware.step_time_s=0.5", "diloco.H=10", "diloco.checkpoint_s=0"}).empty());
  EXPECT_TRUE(notes({}).empty());  // INTELLECT-1's own 38 minutes: 60 s is 2.6 %
  // A checkpoint the scenario chose is said only when it is longer than the compute it follows.
  const auto chosen = notes({"hardware.step_time_s=0.5", "diloco.H=10", "diloco.checkpoint_s=60"});
  ASSERT_EQ(chosen.size(), 1u);
  EXPECT_NE(chosen[0].find("min.yaml: diloco.checkpoint_s: a blocking 60 s checkpoint per outer "
                           "step is longer than the 5 s of inner steps it follows: compute "
                           "utilization at most 8 %"),
            std::string::npos)
      << chosen[0];
}

// transport.connections_per_peer is simulated (K connections per flow) and recorded in the
// configuration only when not 1, so every earlier record reproduces; the transport's kind is a
// real run's and is noted as unused; a bad K names the key and the range.
TEST(Scenario, ConnectionsPerPeerIsSimulatedAndTheTransportKindIsNoted) {
  const Scenario four = parse_scenario(kMinimal, "min.yaml", {"transport.connections_per_peer=4"});
  EXPECT_EQ(four.transport.connections_per_peer, 4);
  EXPECT_TRUE(four.notes_for(config::Mode::kSimulate).empty());
  EXPECT_EQ(nlohmann::json::parse(four.to_json().str())["transport"]["connections_per_peer"], 4);
  EXPECT_FALSE(nlohmann::json::parse(parse_scenario(kMinimal, "min.yaml").to_json().str())
                   .contains("transport"));
  const auto kind = parse_scenario(kMinimal, "min.yaml", {"transport.kind=nccl"})
                        .notes_for(config::Mode::kSimulate);
  ASSERT_EQ(kind.size(), 1u);
  EXPECT_EQ(kind[0], "min.yaml: transport.kind: not used by a simulation (ignored)");
  for (const char* bad : {"0", "65", "many"}) {
    const std::string e =
        error_of(kMinimal, {std::string("transport.connections_per_peer=") + bad});
    EXPECT_NE(
        e.find("key 'transport.connections_per_peer': expected an integer from 1 to 64, got '" +
               std::string(bad) + "'"),
        std::string::npos)
        << e;
  }
}

// INTELLECT-1's per-node defaults (8 GPUs, batch 128) on a small model are said, by key, unless
// the scenario (or its model config) gives them.
TEST(Scenario, IntellectPerNodeDefaultsOnASmallModelAreNoted) {
  const std::string small = std::string(kMinimal) +
                            "model: {layers: 2, hidden: 64, heads: 2, kv_heads: 1, ffn: 128, "
                            "vocab: 256, seq_len: 16}\ndiloco: {checkpoint_s: 0}\n";
  const auto notes = [&](const std::vector<std::string>& overrides) {
    return parse_scenario(small, "small.yaml", overrides).notes_for(config::Mode::kSimulate);
  };
  const auto both = notes({});
  ASSERT_EQ(both.size(), 1u);
  EXPECT_NE(both[0].find("small.yaml: the model has "), std::string::npos) << both[0];
  EXPECT_NE(both[0].find("keep INTELLECT-1's per-node defaults (a 10 B model on 8 H100s): "
                         "hardware.gpus_per_node 8, train.batch 128; set them"),
            std::string::npos)
      << both[0];
  const auto one = notes({"train.batch=4"});
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].find("train.batch"), std::string::npos) << one[0];
  EXPECT_TRUE(notes({"train.batch=4", "hardware.gpus_per_node=1"}).empty());
  // INTELLECT-1's own model (the default) is not small.
  EXPECT_TRUE(parse_scenario(kMinimal, "min.yaml").notes_for(config::Mode::kSimulate).empty());
}

// Every key the file or a --set gave is recorded with where it came from.
TEST(Scenario, EveryGivenKeySaysWhereItCameFrom) {
  const auto sc = parse_scenario(kMinimal, "min.yaml", {"diloco.H=7"});
  EXPECT_EQ(sc.given.at("diloco.H"), "--set diloco.H=7");
  EXPECT_EQ(sc.given.at("network.rtt[0].ms"), "min.yaml:3");
  EXPECT_EQ(sc.given.at("network.nodes[1].start"), "min.yaml:4");
  EXPECT_EQ(sc.given.count("diloco.retries"), 0u);  // a default
}

TEST(Scenario, OverridesApply) {
  Scenario sc = parse_scenario(kMinimal, "min.yaml", {"diloco.H=500", "run.seed=7"});
  EXPECT_EQ(sc.diloco.H, 500);
  EXPECT_EQ(sc.run.seed, 7u);
}

TEST(Scenario, UnknownKeyNamesFileKeyAndKnownKeys) {
  const std::string e = error_of(std::string(kMinimal) + "diloco: {Hh: 3}\n");
  EXPECT_NE(e.find("bad.yaml:5: unknown key 'diloco.Hh'; keys of diloco: H, "), std::string::npos)
      << e;
}

// Issue 21: an unknown or bad --set key was blamed on the file, at "line 0".
TEST(Scenario, UnknownOrBadSetKeyBlamesTheSet) {
  const std::string e = error_of(kMinimal, {"diloco.HH=5"});
  EXPECT_EQ(e.rfind("--set diloco.HH=5: unknown key 'diloco.HH'; keys of diloco: H, ", 0), 0u) << e;
  EXPECT_NE(e.find("codec"), std::string::npos) << e;
  EXPECT_EQ(e.find("bad.yaml"), std::string::npos) << e;
  EXPECT_EQ(e.find("line"), std::string::npos) << e;
  const std::string top = error_of(kMinimal, {"dilco.H=5"});
  EXPECT_EQ(top.rfind("--set dilco.H=5: unknown key 'dilco'; keys of a run file: ", 0), 0u) << top;
  const std::string bad = error_of(kMinimal, {"run.seed=1", "diloco.H=-1"});
  EXPECT_EQ(bad, "--set diloco.H=-1: key 'diloco.H': expected a positive integer, got '-1'");
  // A key in the file keeps the file's name and line even when other keys were --set.
  const std::string file = error_of(std::string(kMinimal) + "diloco: {H: 0}\n", {"run.seed=2"});
  EXPECT_EQ(file, "bad.yaml:5: key 'diloco.H': expected a positive integer, got '0'");
}

// Issue 21: an unknown site left out the value, the line and the valid sites.
TEST(Scenario, UnknownSiteGivesValueLineAndTheSites) {
  const std::string e = error_of(
      "network:\n  sites: [{name: us}, {name: eu}]\n  rtt: [{a: us, b: eu, ms: 80, source: x}]\n"
      "  nodes:\n    - {site: us}\n    - {site: asia}\n");
  EXPECT_EQ(e,
            "bad.yaml:6: key 'network.nodes[1].site': expected one of the sites listed in "
            "network.sites (us, eu), got 'asia'");
  const std::string rtt = error_of(
      "network:\n  sites: [{name: us}, {name: eu}]\n  rtt: [{a: us, b: e, ms: 80, source: x}]\n"
      "  nodes: [{site: us}]\n");
  EXPECT_NE(rtt.find("bad.yaml:3: key 'network.rtt[0].b': expected one of the sites listed in "
                     "network.sites (us, eu), got 'e'"),
            std::string::npos)
      << rtt;
  // A --set that gave a whole section is blamed for an error inside it.
  const std::string section = error_of(kMinimal, {"network.nodes=[{site: a}, {site: x}]"});
  EXPECT_EQ(section.rfind("--set network.nodes=[{site: a}, {site: x}]: key "
                          "'network.nodes[1].site': expected one of the sites listed in "
                          "network.sites (a, b), got 'x'",
                          0),
            0u)
      << section;
  const std::string coord = error_of(kMinimal, {"network.coordinator_site=c"});
  EXPECT_EQ(coord,
            "--set network.coordinator_site=c: key 'network.coordinator_site': expected one of "
            "the sites listed in network.sites (a, b), got 'c'");
}

// network.store: an etcd-like store's commit wait is the leader's quorum round trip (the leader
// on the coordinator's site counts itself), and its keys are checked.
TEST(Scenario, AnEtcdStoreWaitsForItsLeadersQuorumRoundTrip) {
  const std::string three =
      "network:\n  sites: [{name: a}, {name: b}, {name: c}]\n"
      "  rtt: [{a: a, b: b, ms: 80, source: t}, {a: a, b: c, ms: 150, source: t},\n"
      "        {a: b, b: c, ms: 200, source: t}]\n  nodes: [{site: a}]\n";
  const auto quorum_s = [&](const std::string& store) {
    return parse_scenario(three, "s.yaml", {"network.store=" + store}).network.store_quorum_rtt_s();
  };
  EXPECT_EQ(parse_scenario(three, "s.yaml").network.store_quorum_rtt_s(), 0.0);
  EXPECT_DOUBLE_EQ(quorum_s("{kind: etcd, members: [a, b, c]}"), 0.080);  // one ack of two
  EXPECT_DOUBLE_EQ(quorum_s("{kind: etcd, members: [c, b, a]}"), 0.080);
  EXPECT_DOUBLE_EQ(quorum_s("{kind: etcd, members: [a, c]}"), 0.150);  // quorum 2 of 2
  // Five members: two acks of four (a's second member is 1 ms away within the site).
  EXPECT_DOUBLE_EQ(quorum_s("{kind: etcd, members: [a, a, b, c, c]}"), 0.080);
  EXPECT_DOUBLE_EQ(quorum_s("{kind: etcd, members: [a]}"), 0.0);
  const auto error = [&](const std::string& store) {
    return error_of(three, {"network.store=" + store});
  };
  EXPECT_NE(error("{kind: raft}").find("'network.store.kind': expected single or etcd"),
            std::string::npos)
      << error("{kind: raft}");
  EXPECT_NE(error("{members: [a]}").find("no members unless store.kind is etcd"),
            std::string::npos);
  EXPECT_NE(error("{kind: etcd}").find("'network.store.members': expected the sites of the etcd"),
            std::string::npos)
      << error("{kind: etcd}");
  EXPECT_NE(error("{kind: etcd, members: [b, c]}").find("the coordinator's site 'a'"),
            std::string::npos);
  EXPECT_NE(error("{kind: etcd, members: [a, x]}").find("one of the sites listed"),
            std::string::npos)
      << error("{kind: etcd, members: [a, x]}");
}

// A value that network.sites_from brought in is blamed on that file, at its line.
TEST(Scenario, ErrorsInASitesFromFileNameThatFile) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("meridian_sites_from_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "sites.yaml") << "sites: [{name: a}, {name: b}]\n"
                                       "rtt:\n  - {a: a, b: c, ms: 80, source: x}\n";
  std::ofstream(dir / "run.yaml") << "network:\n  sites_from: sites.yaml\n  nodes: [{site: a}]\n";
  std::string e;
  try {
    load_scenario((dir / "run.yaml").string());
  } catch (const ConfigError& err) {
    e = err.what();
  }
  std::filesystem::remove_all(dir);
  EXPECT_EQ(e, (dir / "sites.yaml").string() +
                   ":3: key 'network.rtt[0].b': expected one of the sites listed in network.sites "
                   "(a, b), got 'c'");
}

// Issue 21: a SimGrid platform XML or a TOML file given as a scenario got a bare YAML error.
TEST(Scenario, PlatformXmlOrTomlGetsAHint) {
  const std::string xml = error_of(
      "<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
      "<platform version=\"4.1\">\n  <zone id=\"w\" routing=\"Full\"/>\n</platform>\n");
  EXPECT_EQ(xml.rfind("bad.yaml: this looks like a SimGrid platform XML, not a run file", 0), 0u)
      << xml;
  EXPECT_NE(xml.find("network.platform_xml"), std::string::npos) << xml;
  const std::string toml = error_of("# a run\n[run]\nname = \"x\"\n\n[diloco]\nH = 5\n");
  EXPECT_EQ(toml.rfind("bad.yaml: this looks like TOML, not a run file", 0), 0u) << toml;
  const std::string flat = error_of("name = \"x\"\nseed = 3\n");
  EXPECT_EQ(flat.rfind("bad.yaml: this looks like TOML", 0), 0u) << flat;
  // Broken YAML that looks like neither keeps the parser's message.
  EXPECT_NE(error_of("run: [unclosed").find("not valid YAML"), std::string::npos);
}

// Issue 21: values the engine refuses later (dead_after_s: 0 failed inside the mesh with a
// message naming no key) are refused by the scenario check, by key.
TEST(Scenario, ValuesTheEngineWouldRefuseAreRefusedByKey) {
  EXPECT_EQ(error_of(std::string(kMinimal) + "diloco:\n  dead_after_s: 0\n"),
            "bad.yaml:6: key 'diloco.dead_after_s': expected seconds > 0, got '0'");
  const std::string le = error_of(std::string(kMinimal) + "diloco:\n  dead_after_s: 2\n");
  EXPECT_EQ(le.rfind("bad.yaml:6: key 'diloco.dead_after_s': expected seconds > "
                     "diloco.heartbeat_s (2)",
                     0),
            0u)
      << le;
  EXPECT_EQ(error_of(kMinimal, {"diloco.heartbeat_s=0"}),
            "--set diloco.heartbeat_s=0: key 'diloco.heartbeat_s': expected seconds > 0, got '0'");
  // dead_after_s left at its default: the heartbeat that was set is the one blamed.
  EXPECT_EQ(error_of(kMinimal, {"diloco.heartbeat_s=10"})
                .rfind("--set diloco.heartbeat_s=10: key 'diloco.heartbeat_s': expected seconds < "
                       "diloco.dead_after_s (6)",
                       0),
            0u);
  EXPECT_NE(error_of(kMinimal, {"diloco.timeout_s=0"}).find("'diloco.timeout_s': expected"),
            std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"diloco.H=0"}).find("'diloco.H': expected"), std::string::npos);
  const std::string none =
      error_of("network:\n  sites: [{name: a}]\n  nodes: [{site: a, count: 2, start: false}]\n");
  EXPECT_NE(none.find("key 'network.nodes': expected at least one node group with start: true"),
            std::string::npos)
      << none;
}

TEST(Scenario, BadValueNamesExpectation) {
  const std::string e = error_of(std::string(kMinimal) + "hardware: {mfu: 1.5}\n");
  EXPECT_NE(e.find("'hardware.mfu'"), std::string::npos) << e;
  EXPECT_NE(e.find("a fraction in (0, 1]"), std::string::npos) << e;
  EXPECT_NE(e.find("'1.5'"), std::string::npos) << e;
  const std::string t = error_of(std::string(kMinimal) + "diloco: {H: many}\n");
  EXPECT_NE(t.find("'diloco.H': expected a positive integer, got 'many'"), std::string::npos) << t;
}

// The analytic `model` driver (formerly `netsim`) was removed (issue 20): naming it, in the file
// or by --set, is an error that says so; `engine` is still accepted.
TEST(Scenario, TheRemovedModelDriverIsAnErrorThatSaysSo) {
  for (const char* driver : {"model", "netsim"}) {
    const std::string e = error_of(std::string(kMinimal) + "run: {driver: " + driver + "}\n");
    EXPECT_NE(e.find("key 'run.driver'"), std::string::npos) << e;
    EXPECT_NE(e.find("the model driver, formerly netsim, was removed"), std::string::npos) << e;
    EXPECT_NE(e.find(std::string("got '") + driver + "'"), std::string::npos) << e;
  }
  EXPECT_EQ(parse_scenario(std::string(kMinimal) + "run: {driver: engine}\n", "e.yaml").run.driver,
            "engine");
  try {
    load_scenario(std::string(MERIDIAN_SOURCE_DIR) + "/scenarios/intellect1-usa.yaml",
                  {"run.driver=model"});
    ADD_FAILURE() << "run.driver=model was accepted";
  } catch (const ConfigError& err) {
    const std::string e = err.what();
    EXPECT_NE(e.find("--set"), std::string::npos) << e;
    EXPECT_NE(e.find("was removed"), std::string::npos) << e;
  }
}

TEST(Scenario, MissingRttPairIsAnError) {
  const std::string e = error_of(
      "network:\n  sites: [{name: a}, {name: b}, {name: c}]\n"
      "  rtt: [{a: a, b: b, ms: 80, source: x}]\n  nodes: [{site: a}]\n");
  EXPECT_NE(e.find("'network.rtt'"), std::string::npos) << e;
  EXPECT_NE(e.find("site pair a / c"), std::string::npos) << e;
}

// Two mechanisms that vary the access links' bandwidth cannot both be on: a link takes one
// bandwidth profile, and SimGrid aborted the whole process ("Refusing to define trace ... twice").
TEST(Scenario, AccessVariabilityAndAccessVariationAreOneOrTheOther) {
  const std::string both =
      "network:\n  sites: [{name: a}]\n  nodes: [{site: a, count: 2}]\n"
      "  variability: {period_s: 60, min_fraction: 0.5}\n"
      "  variation: {access_cv: 0.3, access_correlation_s: 60, source: x}\n";
  const std::string e = error_of(both);
  EXPECT_NE(e.find("'network.variation.access_cv': expected 0 when network.variability is on"),
            std::string::npos)
      << e;
  EXPECT_EQ(error_of(both, {"network.variation.access_cv=0"}), "");
  EXPECT_EQ(error_of(both, {"network.variability.min_fraction=1"}), "");
}

TEST(Scenario, RttNeedsASourceAndKnownSites) {
  EXPECT_NE(error_of("network:\n  sites: [{name: a}, {name: b}]\n"
                     "  rtt: [{a: a, b: b, ms: 80}]\n  nodes: [{site: a}]\n")
                .find("'network.rtt[0].source'"),
            std::string::npos);
  EXPECT_NE(error_of("network:\n  sites: [{name: a}]\n  nodes: [{site: z}]\n")
                .find("'network.nodes[0].site': expected one of the sites"),
            std::string::npos);
}

TEST(Scenario, BadOverrideAndBadYaml) {
  EXPECT_NE(error_of(kMinimal, {"diloco.H"}).find("expected key.path=value"), std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"diloco.codec=int4"}).find("'diloco.codec'"), std::string::npos);
  EXPECT_NE(error_of("run: [unclosed").find("not valid YAML"), std::string::npos);
  EXPECT_THROW(load_scenario("/nonexistent/x.yaml"), ConfigError);
}

// netsim/README.md opens with a scenario and a churn trace for users to copy: they must load;
// and it documents every key.
TEST(Scenario, TheReadmesScenarioAndChurnTraceLoad) {
  std::ifstream in(std::string(MERIDIAN_SOURCE_DIR) + "/netsim/README.md");
  std::stringstream text;
  text << in.rdbuf();
  const std::string md = text.str();
  const auto block = [&](const std::string& lang) {
    const std::size_t fence = md.find("```" + lang + "\n");
    EXPECT_NE(fence, std::string::npos) << "no ```" << lang << " block";
    const std::size_t start = fence + lang.size() + 4;
    return md.substr(start, md.find("```", start) - start);
  };
  const Scenario sc = parse_scenario(block("yaml"), "mine.yaml");
  EXPECT_EQ(sc.output_dir, "runs/mine");
  EXPECT_EQ(sc.churn_trace, "mine-churn.csv");
  EXPECT_EQ(sc.hardware.step_time_s, 1.5);
  const std::vector<std::string> hosts = host_slot_names(sc);
  EXPECT_EQ(hosts, (std::vector<std::string>{"us-0", "us-1", "eu-0", "eu-1"}));
  const ChurnTrace trace =
      parse_churn(block("csv"), "mine-churn.csv", hosts, {"us-0", "us-1", "eu-0"});
  ASSERT_EQ(trace.events.size(), 2u);
  EXPECT_EQ(trace.events[1].host, "eu-1");
  EXPECT_EQ(trace.events[1].kind, ChurnKind::kJoin);

  // Every key the reader accepts is in the README's table: the keys echoed into each run's
  // config record (all of them, less the file and the derived step time).
  const nlohmann::json echoed =
      nlohmann::json::parse(parse_scenario(kMinimal, "m").to_json().str());
  std::function<void(const nlohmann::json&, const std::string&)> documented =
      [&](const nlohmann::json& object, const std::string& prefix) {
        for (auto it = object.begin(); it != object.end(); ++it) {
          const std::string key = prefix + it.key();
          if (it->is_object()) {
            documented(*it, key + ".");
          } else if (key != "file" && key != "hardware.inner_step_s") {
            EXPECT_NE(md.find("| `" + key + "` |"), std::string::npos) << key << " undocumented";
          }
        }
      };
  documented(echoed, "");
}

const std::vector<std::string> kHosts{"a-0", "a-1", "b-0"};
const std::set<std::string> kRunning{"a-0", "a-1"};

std::string churn_error(const std::string& csv) {
  try {
    parse_churn(csv, "trace.csv", kHosts, kRunning);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Churn, ParsesAndSorts) {
  ChurnTrace t = parse_churn(
      "time_s,node,event,arg\n30,b-0,join,\n10,a-1,slow,0.5\n"
      "# comment\n40,a-0,fail\n",
      "trace.csv", kHosts, kRunning);
  EXPECT_FALSE(t.by_step);
  ASSERT_EQ(t.events.size(), 3u);
  EXPECT_EQ(t.events[0].kind, ChurnKind::kSlow);
  EXPECT_EQ(t.events[0].arg, 0.5);
  EXPECT_EQ(t.events[1].host, "b-0");
  EXPECT_TRUE(parse_churn("step,node,event\n500,a-0,leave\n", "t.csv", kHosts, kRunning).by_step);
}

TEST(Churn, ErrorsNameLineColumnAndExpectation) {
  EXPECT_NE(churn_error("when,node,event\n").find("trace.csv:1: expected the header"),
            std::string::npos);
  EXPECT_NE(churn_error("time_s,node,event\nsoon,a-0,fail\n")
                .find("trace.csv:2: column 'time_s': expected a number >= 0, got 'soon'"),
            std::string::npos);
  EXPECT_NE(
      churn_error("time_s,node,event\n1,z-9,fail\n").find("column 'node': no host named 'z-9'"),
      std::string::npos);
  EXPECT_NE(churn_error("time_s,node,event\n1,a-0,explode\n")
                .find("column 'event': expected join, leave, fail or slow"),
            std::string::npos);
  EXPECT_NE(churn_error("time_s,node,event,arg\n1,a-0,slow,2\n").find("speed factor in (0, 1]"),
            std::string::npos);
  EXPECT_NE(churn_error("time_s,node,event\n1,a-0,join\n").find("already running"),
            std::string::npos);
  EXPECT_NE(churn_error("time_s,node,event\n1,b-0,fail\n").find("not running"), std::string::npos);
  EXPECT_NE(churn_error("step,node,event\n1.5,a-0,fail\n").find("expected an integer"),
            std::string::npos);
  EXPECT_NE(churn_error("").find("empty trace"), std::string::npos);
  EXPECT_THROW(load_churn("/nonexistent.csv", kHosts, kRunning), ConfigError);
}

// worker: torch trains the run file's model (a model config by name, as a real run would): the
// former `trainer:` section is refused with what replaced it, and only the engine driver runs
// real parameters.
TEST(Scenario, WorkerTorchTrainsTheRunFilesModelAndRefusesTheOldTrainerSection) {
  Scenario sc = parse_scenario(std::string(kMinimal) +
                                   "worker: torch\nmodel: tiny\ntrain: {lr: 0.01}\n",
                               "emu.yaml");
  EXPECT_EQ(sc.worker, "torch");
  EXPECT_EQ(sc.model.config, "tiny");
  EXPECT_EQ(sc.model.layers, 2);       // from trainer/configs/tiny.yaml
  EXPECT_EQ(sc.train.batch, 4);        // tiny.yaml's train section
  EXPECT_DOUBLE_EQ(sc.train.lr, 0.01);  // the run file's key over it
  EXPECT_EQ(parse_scenario(kMinimal, "min.yaml").worker, "modeled");

  std::string e = error_of(std::string(kMinimal) + "worker: torch\ntrainer: {model: tiny}\n");
  EXPECT_NE(e.find("bad.yaml:"), std::string::npos) << e;
  EXPECT_NE(e.find("key 'trainer' is from an older form of the run file"), std::string::npos) << e;
  EXPECT_NE(e.find("model.config"), std::string::npos) << e;
  e = error_of(std::string(kMinimal) + "hardware: {batch_sequences: 3}\n");
  EXPECT_NE(e.find("key 'hardware.batch_sequences' is from an older form"), std::string::npos)
      << e;
  EXPECT_NE(e.find("train.batch"), std::string::npos) << e;
  e = error_of(std::string(kMinimal) + "run: {driver: model}\n");
  EXPECT_NE(e.find("key 'run.driver': expected engine (the model driver"), std::string::npos) << e;
  e = error_of(std::string(kMinimal) + "worker: jax\n");
  EXPECT_NE(e.find("key 'worker': expected modeled or torch, got 'jax'"), std::string::npos) << e;
  e = error_of(std::string(kMinimal) + "model: nosuch\n");
  EXPECT_NE(e.find("key 'model': expected a model config: one of"), std::string::npos) << e;
  EXPECT_NE(e.find("tiny"), std::string::npos) << e;
}

// Nothing in this test program registers `torch` (meridian does when built with LibTorch): the
// error says what is missing and how to get it.
TEST(Scenario, WorkerTorchWithoutTheTrainerIsAClearError) {
  Scenario sc = parse_scenario(std::string(kMinimal) + "worker: torch\n", "emu.yaml");
  try {
    resolve_worker(sc);
    FAIL() << "resolve_worker accepted worker: torch without the trainer";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("emu.yaml: key 'worker': 'torch' is not part of this build"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("MERIDIAN_WITH_TORCH=ON"), std::string::npos) << m;
  }
  NullEventSink sink;  // run_simulation refuses it too, before SimGrid starts
  SimOptions without_plugin;
  without_plugin.make_node = compose::make_node;
  EXPECT_THROW(run_simulation(sc, sink, without_plugin), ConfigError);
  Scenario modeled = parse_scenario(kMinimal, "min.yaml");
  EXPECT_EQ(resolve_worker(modeled).kind, "modeled");
  EXPECT_FALSE(resolve_worker(modeled).make_worker);
}

}  // namespace
}  // namespace meridian::netsim
