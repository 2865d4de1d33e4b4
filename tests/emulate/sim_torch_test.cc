// `worker: torch` end to end: scenarios/emulate-tiny.yaml (three nodes train `tiny` over the
// simulated WAN; us-0 crashes after outer step 2 and its host rejoins after step 3) run twice
// with the same seed (and once with another), each in a forked child; and the trainer
// section's errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "analysis/summary.h"
#include "cli/compose/simulation.h"
#include "cli/compose/thread_world.h"
#include "cli/emulation/torch_sim_worker.h"
#include "engine/backends/event_sinks/sinks.h"
#include "engine/core/error.h"
#include "engine/core/events/event_sink.h"
#include "netsim/scenario.h"
#include "netsim/simulation.h"
#include "netsim/worker_plugin.h"
#include "tests/netsim/sim_test_util.h"
#include "trainer/diloco_emulation.h"
#include "trainer/model_config.h"

namespace meridian::trainer {
namespace {

using nlohmann::json;
namespace nt = netsim::testing;

const std::string kScenario = std::string(MERIDIAN_SOURCE_DIR) + "/scenarios/emulate-tiny.yaml";

// Runs emulate-tiny in a child as `meridian sim` does (resolve_worker, then run_simulation),
// with `--set`-style overrides.
std::string emulate(const std::string& tag, std::vector<std::string> overrides = {}) {
  const std::string out = nt::temp_path(tag + ".jsonl");
  overrides.push_back(std::string("data.cache_dir=") + MERIDIAN_TRAINER_CACHE_DIR);
  const int rc = nt::run_in_child([&] {
    netsim::register_worker_kind("torch", &emulation::torch_worker_plugin);
    netsim::Scenario sc = netsim::load_scenario(kScenario, overrides);
    const netsim::SimOptions options = compose::simulation_options(sc);
    std::ofstream f(out, std::ios::binary);
    JsonlEventSink sink(f);
    netsim::run_simulation(sc, sink, options);
  });
  EXPECT_EQ(rc, 0);
  return out;
}

class EmulateTiny : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    first_ = new std::string(emulate("a"));
    second_ = new std::string(emulate("b"));
    events_ = new std::vector<json>(nt::read_events(*first_));
  }
  static void TearDownTestSuite() {
    std::remove(first_->c_str());
    std::remove(second_->c_str());
    delete first_;
    delete second_;
    delete events_;
  }
  static const std::vector<json>& events() { return *events_; }

  static std::string* first_;
  static std::string* second_;
  static std::vector<json>* events_;
};
std::string* EmulateTiny::first_ = nullptr;
std::string* EmulateTiny::second_ = nullptr;
std::vector<json>* EmulateTiny::events_ = nullptr;

TEST_F(EmulateTiny, SameSeedGivesIdenticalEvents) {
  const std::string a = nt::read_file(*first_), b = nt::read_file(*second_);
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a, b);
}

// Per outer step, the validation losses of its `evaluation` records (one per member).
std::map<std::int64_t, std::vector<double>> validation_losses(const std::vector<json>& events) {
  std::map<std::int64_t, std::vector<double>> val;
  for (const auto& e : nt::of_type(events, "evaluation"))
    val[e["outer_step"].get<std::int64_t>()].push_back(e["val_loss"].get<double>());
  return val;
}

// The validation losses are the seed's: the same in both same-seed runs, step by step and
// member by member, and different at every step with another seed (weight init and data
// order), so the identity above is not that of a run that ignores its seed.
TEST_F(EmulateTiny, TheSeedDecidesTheValidationLosses) {
  const auto a = validation_losses(events());
  const auto b = validation_losses(nt::read_events(*second_));
  ASSERT_EQ(a.size(), 6u);
  EXPECT_EQ(a, b);

  const std::string other = emulate("seed1", {"run.seed=1"});
  const auto c = validation_losses(nt::read_events(other));
  std::remove(other.c_str());
  ASSERT_EQ(c.size(), a.size());
  for (const auto& [step, losses] : a) {
    ASSERT_TRUE(c.count(step)) << "outer step " << step;
    EXPECT_NE(c.at(step).front(), losses.front()) << "outer step " << step;
  }
}

TEST_F(EmulateTiny, ThreeNodesTrainTinyAndTheLossFalls) {
  const auto config = nt::of_type(events(), "config");
  ASSERT_EQ(config.size(), 1u);
  EXPECT_EQ(config[0]["mode"], "emulate");
  EXPECT_EQ(config[0]["config"]["worker"], "torch");
  EXPECT_EQ(config[0]["config"]["trainer"]["model"]["name"], "tiny");
  EXPECT_EQ(config[0]["metrics"]["param_count"].get<std::uint64_t>(),
            parameter_count(load_named_config("tiny").model));
  EXPECT_EQ(nt::of_type(events(), "node_started").size(), 4u);  // 3 initial + the rejoin

  // Real losses on every inner-step batch; the modelled step time on the simulated clock.
  const double step_s = config[0]["config"]["hardware"]["step_time_s"];
  const int H = config[0]["config"]["diloco"]["H"];
  for (const auto& e : nt::of_type(events(), "inner_steps")) {
    ASSERT_TRUE(e["loss"].is_number()) << e;
    EXPECT_NEAR(e["compute_s"].get<double>(), H * step_s, 1e-9) << e;
  }
  // Training loss (mean over the members of an outer step) falls from the first outer step to
  // the last.
  std::map<std::int64_t, std::pair<double, int>> train;
  for (const auto& e : nt::of_type(events(), "outer_step")) {
    auto& t = train[e["outer_step"].get<std::int64_t>()];
    t.first += e["loss"].get<double>();
    ++t.second;
  }
  ASSERT_EQ(train.size(), 6u);
  const double train_first = train.begin()->second.first / train.begin()->second.second;
  const double train_last = train.rbegin()->second.first / train.rbegin()->second.second;
  EXPECT_LT(train_last, train_first - 0.25)
      << "training loss " << train_first << " -> " << train_last;
  // Validation loss of the outer parameters per outer step: identical on every member.
  std::map<std::int64_t, std::set<double>> val;
  for (const auto& e : nt::of_type(events(), "evaluation"))
    val[e["outer_step"].get<std::int64_t>()].insert(e["val_loss"].get<double>());
  ASSERT_EQ(val.size(), 6u);
  for (const auto& [step, losses] : val) EXPECT_EQ(losses.size(), 1u) << "outer step " << step;
  const double first = *val.begin()->second.begin(), last = *val.rbegin()->second.begin();
  EXPECT_LT(last, first) << "validation loss " << first << " -> " << last;
  EXPECT_LT(last, std::log(512.0) - 0.5);  // well below uniform over tiny's 512 tokens

  const auto s = analysis::summarize(analysis::read_events_file(*first_));
  EXPECT_EQ(s.outer_steps, 6);
  ASSERT_TRUE(s.loss.has_value());
  EXPECT_TRUE(std::isfinite(*s.loss));
}

// summary.json's validation curve and time-to-target, recomputed here from the raw events:
// per outer step the mean `val_loss` of its `evaluation` records, at the last record's modelled
// time, with all nodes' tokens to the end of that step (Σ outer_step.tokens).
TEST_F(EmulateTiny, TimeToTargetLossInTheSummaryMatchesTheEvents) {
  std::map<std::int64_t, std::pair<double, int>> val;
  std::map<std::int64_t, double> val_t, step_tokens;
  for (const auto& e : nt::of_type(events(), "evaluation")) {
    const auto k = e["outer_step"].get<std::int64_t>();
    val[k].first += e["val_loss"].get<double>();
    ++val[k].second;
    val_t[k] = std::max(val_t[k], e["t"].get<double>());
    ASSERT_TRUE(e["tokens"].is_number_integer()) << e;
  }
  for (const auto& e : nt::of_type(events(), "outer_step"))
    step_tokens[e["outer_step"].get<std::int64_t>()] += e["tokens"].get<double>();
  ASSERT_GE(val.size(), 4u);
  // A target between the second and the third step's loss: reached at a middle step.
  auto it = val.begin();
  const double second = std::next(it, 1)->second.first / std::next(it, 1)->second.second;
  const double third = std::next(it, 2)->second.first / std::next(it, 2)->second.second;
  ASSERT_LT(third, second);
  const double target = (second + third) / 2;
  std::int64_t expected_step = -1;
  double tokens = 0;
  for (const auto& [k, v] : val) {
    tokens += step_tokens[k];
    if (v.first / v.second <= target) {
      expected_step = k;
      break;
    }
  }
  ASSERT_GE(expected_step, 0);

  // The same events with the run file's train.target_loss in the config record (config.trainer).
  const auto with_target = [&](double t) {
    const std::string file = nt::temp_path("target.jsonl");
    {
      std::ofstream out(file);
      for (json e : events()) {
        if (e["type"] == "config") e["config"]["trainer"]["target_loss"] = t;
        out << e.dump() << "\n";
      }
    }
    auto summary = analysis::summarize(analysis::read_events_file(file));
    std::remove(file.c_str());
    return summary;
  };
  const auto s = with_target(target);
  ASSERT_EQ(s.val_curve.size(), val.size());
  for (const auto& p : s.val_curve) {
    EXPECT_DOUBLE_EQ(p.val_loss, val[p.outer_step].first / val[p.outer_step].second);
    EXPECT_DOUBLE_EQ(p.t_s, val_t[p.outer_step] - s.run_start_s);
  }
  ASSERT_TRUE(s.target_loss.has_value());
  EXPECT_DOUBLE_EQ(*s.target_loss, target);
  ASSERT_TRUE(s.target_reached.has_value());
  EXPECT_EQ(s.target_reached->outer_step, expected_step);
  EXPECT_DOUBLE_EQ(s.target_reached->t_s, val_t[expected_step] - s.run_start_s);
  EXPECT_DOUBLE_EQ(s.target_reached->tokens, tokens);
  const auto j = analysis::to_json(s);
  EXPECT_EQ(j["target"]["reached"], true);
  EXPECT_EQ(j["target"]["outer_step"], expected_step);
  EXPECT_DOUBLE_EQ(j["target"]["time_s"].get<double>(), val_t[expected_step] - s.run_start_s);
  EXPECT_EQ(j["val_curve"].size(), val.size());

  // A target below every loss: not reached, and said so; without one: no `target` key.
  const auto unreached = analysis::to_json(with_target(0.5));
  EXPECT_EQ(unreached["target"]["reached"], false);
  EXPECT_TRUE(unreached["target"]["time_s"].is_null());
  const auto none = analysis::summarize(analysis::read_events_file(*first_));
  EXPECT_FALSE(none.target_loss.has_value());  // emulate-tiny.yaml sets none
  EXPECT_FALSE(analysis::to_json(none).contains("target"));
}

TEST_F(EmulateTiny, RejoinedHostRecoversRealStateAndMatchesItsPeersBitForBit) {
  // us-0 (slot 2, node 2) crashes; its host comes back as node 3.
  const auto left = nt::of_type(events(), "node_left");
  bool crashed = false;
  for (const auto& e : left) crashed |= e["node"] == 2 && e["graceful"] == false;
  EXPECT_TRUE(crashed);
  const auto recovered = nt::of_type(events(), "recovery_finished");
  ASSERT_EQ(recovered.size(), 1u);
  EXPECT_EQ(recovered[0]["node"], 3);
  // Parameters, outer momentum and the two AdamW moments in fp32, plus the progress JSON.
  const std::uint64_t p = parameter_count(load_named_config("tiny").model);
  EXPECT_GT(recovered[0]["bytes"].get<std::uint64_t>(), 4 * 4 * p);
  EXPECT_LT(recovered[0]["bytes"].get<std::uint64_t>(), 4 * 4 * p + 4096);
  const auto admitted = nt::of_type(events(), "admitted");
  ASSERT_EQ(admitted.size(), 1u);
  const std::int64_t first_step = admitted[0]["outer_step"];

  // Every outer step: all members' parameters have one checksum. The joiner's first applied
  // step is among them, with the joiner in it.
  std::map<std::int64_t, std::map<std::int64_t, std::string>> crc;  // step -> node -> crc
  for (const auto& e : nt::of_type(events(), "evaluation"))
    crc[e["outer_step"]][e["node"]] = e["params_crc32c"];
  for (const auto& [step, by_node] : crc) {
    std::set<std::string> distinct;
    for (const auto& [node, c] : by_node) distinct.insert(c);
    EXPECT_EQ(distinct.size(), 1u) << "outer step " << step;
  }
  ASSERT_TRUE(crc.count(first_step));
  ASSERT_TRUE(crc[first_step].count(3)) << "the joiner did not apply outer step " << first_step;
  EXPECT_GE(crc[first_step].size(), 3u);
  EXPECT_EQ(crc[first_step][3], crc[first_step][0]);
  EXPECT_EQ(crc.rbegin()->second.size(), 3u);  // nodes 0, 1 and 3 finish the run
}

// The same run as `meridian train-diloco` (threads over the in-process transport, no network
// model): emulate-tiny's configuration (tiny.yaml's batch, lr and warmup; seed 0; H 20; int8;
// 16 validation sequences; node 3 of 1..3 fails after outer step 2, a joiner after step 3).
// Returns the events file; `val` receives the validation loss per outer step.
std::string threaded(std::vector<double>& val) {
  const std::string out = nt::temp_path("threads.jsonl"), val_out = nt::temp_path("val.txt");
  const int rc = nt::run_in_child([&] {
    EmulationOptions e;
    e.worker.config = load_named_config("tiny");
    e.worker.seed = 0;
    e.worker.validation_sequences = 16;
    e.worker.data.cache_dir = MERIDIAN_TRAINER_CACHE_DIR;
    e.nodes = 3;
    e.diloco.inner_steps = 20;
    e.diloco.outer_steps = 6;
    e.diloco.codec = CodecId::kInt8Prime;
    e.diloco.allreduce_timeout_s = e.diloco.recovery.timeout_s = 1800;
    e.diloco.mesh.admission_timeout_s = e.diloco.mesh.round_timeout_s = 3600;
    e.fail_after.emplace(2, 3);
    e.join_after.push_back(3);
    std::ofstream f(out, std::ios::binary), v(val_out);
    JsonlEventSink sink(f);
    v.precision(17);
    compose::ThreadWorld world;
    for (const auto& step : run_emulation(e, world, sink).steps) v << step.val_loss << "\n";
  });
  EXPECT_EQ(rc, 0);
  std::ifstream in(val_out);
  for (double x; in >> x;) val.push_back(x);
  return out;
}

// (outer step, node) -> the node's mean inner loss of that step, from `outer_step` records.
std::map<std::pair<std::int64_t, std::int64_t>, double> step_losses(
    const std::vector<json>& events, const std::map<std::int64_t, std::int64_t>& ids = {}) {
  std::map<std::pair<std::int64_t, std::int64_t>, double> out;
  for (const auto& e : nt::of_type(events, "outer_step")) {
    std::int64_t node = e["node"];
    if (ids.count(node)) node = ids.at(node);
    out[{e["outer_step"], node}] = e["loss"];
  }
  return out;
}

// The simulated network changes when things happen, not what is computed: with the same data,
// seeds, codec, ring order and churn, every node's loss is bit-identical to the threaded run's.
TEST_F(EmulateTiny, MatchesTheThreadedEmulationBitForBit) {
  std::vector<double> val;
  const auto threads = nt::read_events(threaded(val));
  // The threaded joiner's arrival races with the survivors' inner steps: it normally enters the
  // same outer step as the simulated one; if not, only the steps before the join can agree.
  const auto thr_admitted = nt::of_type(threads, "admitted");
  ASSERT_EQ(thr_admitted.size(), 1u);
  const std::int64_t sim_join = nt::of_type(events(), "admitted")[0]["outer_step"];
  const std::int64_t thr_join = thr_admitted[0]["outer_step"];
  const std::int64_t until = sim_join == thr_join ? 6 : std::min(sim_join, thr_join);
  if (sim_join != thr_join)
    std::printf("threaded joiner entered outer step %lld, the simulated one %lld\n",
                static_cast<long long>(thr_join), static_cast<long long>(sim_join));

  // Simulated node ids 0, 1, 2 and the rejoin 3 are the threaded run's 1, 2, 3 and 103.
  const auto sim = step_losses(events(), {{0, 1}, {1, 2}, {2, 3}, {3, 103}});
  const auto thr = step_losses(threads);
  int compared = 0;
  for (const auto& [key, loss] : sim) {
    if (key.first >= until) continue;
    ASSERT_TRUE(thr.count(key)) << "outer step " << key.first << ", node " << key.second;
    EXPECT_EQ(loss, thr.at(key)) << "outer step " << key.first << ", node " << key.second;
    ++compared;
  }
  EXPECT_GE(compared, 9);  // outer steps 0..3 at least (the failed node dies at another time)
  ASSERT_EQ(val.size(), 6u);
  std::map<std::int64_t, double> sim_val;
  for (const auto& e : nt::of_type(events(), "evaluation"))
    sim_val[e["outer_step"]] = e["val_loss"];
  for (std::int64_t k = 0; k < until; ++k) EXPECT_EQ(val[k], sim_val.at(k)) << "outer step " << k;
}

// The model, train and data sections of an emulated run: unknown keys and bad values are errors
// naming the file, the line and the key, as for every section of a run file.
std::string plugin_error(const std::string& sections) {
  try {
    netsim::Scenario sc = netsim::parse_scenario(
        "worker: torch\n" + sections +
            "\nnetwork: {sites: [{name: a}], nodes: [{site: a, count: 2}]}\n",
        "emu.yaml");
    emulation::torch_worker_plugin(sc);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(EmulateConfig, SectionErrorsNameFileAndKey) {
  std::string e = plugin_error("model: tiny\ndata: {batchh: 2}");
  EXPECT_NE(e.find("emu.yaml:3: unknown key 'data.batchh'"), std::string::npos) << e;
  e = plugin_error("model: tiny\ntrain: {batch: many}");
  EXPECT_NE(e.find("emu.yaml:3: key 'train.batch': expected a positive number of sequences, "
                   "got 'many'"),
            std::string::npos)
      << e;
  e = plugin_error("model: tiny\ntrain: {lr: -1}");
  EXPECT_NE(e.find("key 'train.lr': expected a positive learning rate, got '-1'"),
            std::string::npos)
      << e;
  e = plugin_error("model: nosuch");
  EXPECT_NE(e.find("emu.yaml:2: key 'model': expected a model config: one of"), std::string::npos)
      << e;
  e = plugin_error("model: tiny\ndiloco: {outer_momentum: 1.5}");
  EXPECT_NE(e.find("key 'diloco.outer_momentum': expected a value in [0, 1)"), std::string::npos)
      << e;
  e = plugin_error("model: {config: tiny, tied_embeddings: true}");
  EXPECT_NE(e.find("model.tied_embeddings: expected false"), std::string::npos) << e;
  e = plugin_error("model: tiny\ntrain: {target_loss: -2}");
  EXPECT_NE(e.find("key 'train.target_loss': expected a validation loss > 0"), std::string::npos)
      << e;
  e = plugin_error("model: tiny\ndata: {corpus: wikipedia}");
  EXPECT_NE(e.find("key 'data.corpus': expected fortunes or debian-docs, got 'wikipedia'"),
            std::string::npos)
      << e;
}

}  // namespace
}  // namespace meridian::trainer
