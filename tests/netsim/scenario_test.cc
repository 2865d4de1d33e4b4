// Scenario YAML and churn CSV parsing: defaults, derived model numbers, and errors that name
// the file, the key (or line and column) and the expectation.
#include "netsim/scenario.h"

#include <gtest/gtest.h>

#include "engine/error.h"
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
  EXPECT_EQ(sc.output_dir, "results/min");
  EXPECT_NEAR(sc.inner_step_s(), 22.96, 0.01);
  EXPECT_EQ(host_slot_names(sc), (std::vector<std::string>{"a-0", "a-1", "b-0"}));
}

TEST(Scenario, OverridesApply) {
  Scenario sc = parse_scenario(kMinimal, "min.yaml", {"diloco.H=500", "run.seed=7"});
  EXPECT_EQ(sc.diloco.H, 500);
  EXPECT_EQ(sc.run.seed, 7u);
}

TEST(Scenario, UnknownKeyNamesFileKeyAndKnownKeys) {
  const std::string e = error_of(std::string(kMinimal) + "diloco: {Hh: 3}\n");
  EXPECT_NE(e.find("bad.yaml"), std::string::npos) << e;
  EXPECT_NE(e.find("'diloco.Hh'"), std::string::npos) << e;
  EXPECT_NE(e.find("known keys here"), std::string::npos) << e;
}

TEST(Scenario, BadValueNamesExpectation) {
  const std::string e = error_of(std::string(kMinimal) + "hardware: {mfu: 1.5}\n");
  EXPECT_NE(e.find("'hardware.mfu'"), std::string::npos) << e;
  EXPECT_NE(e.find("a fraction in (0, 1]"), std::string::npos) << e;
  EXPECT_NE(e.find("'1.5'"), std::string::npos) << e;
  const std::string t = error_of(std::string(kMinimal) + "diloco: {H: many}\n");
  EXPECT_NE(t.find("'diloco.H': expected a positive integer, got 'many'"), std::string::npos) << t;
}

TEST(Scenario, MissingRttPairIsAnError) {
  const std::string e = error_of(
      "network:\n  sites: [{name: a}, {name: b}, {name: c}]\n"
      "  rtt: [{a: a, b: b, ms: 80, source: x}]\n  nodes: [{site: a}]\n");
  EXPECT_NE(e.find("'network.rtt'"), std::string::npos) << e;
  EXPECT_NE(e.find("site pair a / c"), std::string::npos) << e;
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

// worker: torch keeps the trainer section as text for the trainer's own parser; the model and
// the batch then come from it, and only the engine driver runs real parameters.
TEST(Scenario, WorkerTorchKeepsTheTrainerSectionAndRefusesWhatItReplaces) {
  Scenario sc =
      parse_scenario(std::string(kMinimal) + "worker: torch\ntrainer: {model: tiny}\n", "emu.yaml");
  EXPECT_EQ(sc.worker, "torch");
  EXPECT_NE(sc.trainer_yaml.find("model: tiny"), std::string::npos) << sc.trainer_yaml;
  EXPECT_EQ(parse_scenario(kMinimal, "min.yaml").worker, "modeled");

  std::string e = error_of(std::string(kMinimal) + "trainer: {model: tiny}\n");
  EXPECT_NE(e.find("bad.yaml: key 'trainer'"), std::string::npos) << e;
  EXPECT_NE(e.find("unless worker: torch"), std::string::npos) << e;
  e = error_of(std::string(kMinimal) + "worker: torch\nmodel: {layers: 2}\n");
  EXPECT_NE(e.find("key 'model'"), std::string::npos) << e;
  EXPECT_NE(e.find("trainer.model"), std::string::npos) << e;
  e = error_of(std::string(kMinimal) + "worker: torch\nhardware: {batch_sequences: 3}\n");
  EXPECT_NE(e.find("key 'hardware.batch_sequences'"), std::string::npos) << e;
  e = error_of(std::string(kMinimal) + "worker: torch\nrun: {driver: model}\n");
  EXPECT_NE(e.find("key 'run.driver'"), std::string::npos) << e;
  e = error_of(std::string(kMinimal) + "worker: jax\n");
  EXPECT_NE(e.find("key 'worker': expected modeled or torch, got 'jax'"), std::string::npos) << e;
  e = error_of(std::string(kMinimal) + "worker: torch\ntrainer: [1, 2]\n");
  EXPECT_NE(e.find("key 'trainer': expected a mapping"), std::string::npos) << e;
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
  EXPECT_THROW(run_simulation(sc, sink), ConfigError);
  Scenario modeled = parse_scenario(kMinimal, "min.yaml");
  EXPECT_EQ(resolve_worker(modeled).kind, "modeled");
  EXPECT_FALSE(resolve_worker(modeled).make_worker);
}

}  // namespace
}  // namespace meridian::netsim
