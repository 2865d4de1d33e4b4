// `meridian calibrate` (netsim/calibrate.h, cli/netsim/cmd_calibrate.cc): the fitted inputs, the
// observations and their errors, the residual, the search on a known function, and the
// synthetic recovery on the built binary: simulate with known inputs, calibrate from that run's
// events, and get the inputs back within a stated tolerance.
#include "netsim/calibrate.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/core/error.h"
#include "tests/post/temp_dir_test_base.h"

namespace meridian::netsim::calibrate {
namespace {

namespace fs = std::filesystem;

TEST(CalibrateFit, ParsesARangeAndMapsTheUnitIntervalOntoIt) {
  const FitInput lin = parse_fit("network.access_bandwidth_gbps[1]=2:10");
  EXPECT_EQ(lin.key, "network.access_bandwidth_gbps[1]");
  EXPECT_DOUBLE_EQ(lin.value_at(0.0), 2);
  EXPECT_DOUBLE_EQ(lin.value_at(0.25), 4);
  EXPECT_DOUBLE_EQ(lin.value_at(1.5), 10);  // clamped
  const FitInput lg = parse_fit("network.variation.access_correlation_s=30:3000:log");
  EXPECT_TRUE(lg.log);
  EXPECT_NEAR(lg.value_at(0.5), 300, 1e-9);
  EXPECT_NEAR(lg.value_at(1.0), 3000, 1e-9);
  EXPECT_EQ(settings({lin, lg}, {4, 300}),
            (std::vector<std::string>{"network.access_bandwidth_gbps[1]=4",
                                      "network.variation.access_correlation_s=300"}));
}

TEST(CalibrateFit, RefusesWhatIsNotARange) {
  for (const char* bad : {"key", "=1:2", "key=1", "key=2:1", "key=1:1", "key=a:2", "key=0:2:log",
                          "key=1:2:3", "key=1:inf"}) {
    try {
      parse_fit(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("--fit"), std::string::npos) << e.what();
    }
  }
}

TEST(CalibrateObservation, ReadsQuantilesAndAUtilizationGivenAsAPercentage) {
  const Observation o = observation_from_yaml(
      "allreduce_s: {p5: 77, p25: 93, p50: 103, p75: 119, p95: 182}\n"
      "outer_step_utilization: 95.7\nsource: paper\n",
      "obs.yaml");
  EXPECT_EQ(o.allreduce_s.size(), 5u);
  EXPECT_DOUBLE_EQ(o.allreduce_s.at("p50"), 103);
  ASSERT_TRUE(o.outer_step_utilization);
  EXPECT_NEAR(*o.outer_step_utilization, 0.957, 1e-12);
  EXPECT_EQ(o.source, "paper");
}

TEST(CalibrateObservation, NamesTheProblemInABadFile) {
  const auto message = [](const std::string& text) {
    try {
      observation_from_yaml(text, "obs.yaml");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message("allreduce_s: {p50: 100, p25: 120}").find("must not decrease"),
            std::string::npos);
  EXPECT_NE(message("allreduce_s: {p42: 1}").find("unknown quantile"), std::string::npos);
  EXPECT_NE(message("allreduce_s: {p50: -3}").find("seconds > 0"), std::string::npos);
  EXPECT_NE(message("allreduce_s: {p50: nan}").find("allreduce_s.p50"), std::string::npos);
  EXPECT_NE(message("median: 3").find("unknown key 'median'"), std::string::npos);
  EXPECT_NE(message("outer_step_utilization: 0").find("outer_step_utilization"), std::string::npos);
  EXPECT_NE(message("source: x").find("nothing to fit"), std::string::npos);
  EXPECT_NE(message("[1, 2").find("obs.yaml"), std::string::npos);
}

TEST(CalibrateObservation, FromASummaryNeedsEnoughOuterSteps) {
  nlohmann::json s = {
      {"allreduce_s", {{"count", 3}, {"p5", 1}, {"p25", 2}, {"p50", 3}, {"p75", 4}, {"p95", 5}}},
      {"outer_step_utilization", 0.9}};
  EXPECT_THROW(observation_from_summary(s, "run/summary.json"), ConfigError);
  s["allreduce_s"]["count"] = 10;
  const Observation o = observation_from_summary(s, "run/summary.json");
  EXPECT_DOUBLE_EQ(o.allreduce_s.at("p75"), 4);
  EXPECT_DOUBLE_EQ(*o.outer_step_utilization, 0.9);
}

TEST(CalibrateResidual, IsTheRmsOfLogRatiosAndZeroForAnExactFit) {
  Observation o;
  o.allreduce_s = {{"p25", 100}, {"p75", 200}};
  o.outer_step_utilization = 0.95;
  Simulated s;
  s.allreduce_s = {{"p25", 100}, {"p50", 150}, {"p75", 200}};
  s.outer_step_utilization = 0.95;
  EXPECT_NEAR(residual(o, s), 0, 1e-12);
  s.allreduce_s["p25"] = 200;      // ln 2
  s.outer_step_utilization = 0.9;  // idle 10 % against 5 %: ln 2
  EXPECT_NEAR(residual(o, s), std::log(2.0) * std::sqrt(2.0 / 3.0), 1e-12);
  s.allreduce_s.erase("p75");
  EXPECT_TRUE(std::isinf(residual(o, s)));
}

TEST(CalibrateSimulated, TakesEachFigureAsTheMedianOverTheRuns) {
  std::vector<nlohmann::json> runs;
  for (double x : {3.0, 1.0, 2.0, 10.0})
    runs.push_back(
        {{"allreduce_s", {{"p50", x}, {"p25", x / 2}}}, {"outer_step_utilization", x / 100}});
  const Simulated s = simulated_from_summaries(runs);
  EXPECT_DOUBLE_EQ(s.allreduce_s.at("p50"), 2.5);
  EXPECT_DOUBLE_EQ(s.allreduce_s.at("p25"), 1.25);
  EXPECT_FALSE(s.allreduce_s.count("p95"));  // no run has it
  EXPECT_DOUBLE_EQ(s.outer_step_utilization, 0.025);
  EXPECT_EQ(s.runs, 4u);
  EXPECT_THROW(simulated_from_summaries({}), ConfigError);
}

// A bowl with its minimum at (0.3, 0.7, 0.55): the design then the compass search get there
// within the budget, and the same seed asks the same points.
TEST(CalibrateSearch, FindsTheMinimumOfAKnownFunctionDeterministically) {
  const auto f = [](const std::vector<double>& x) {
    return std::pow(x[0] - 0.3, 2) + 2 * std::pow(x[1] - 0.7, 2) + std::pow(x[2] - 0.55, 2);
  };
  const auto run = [&](std::uint64_t seed) {
    Search s(3, 60, seed);
    std::vector<std::vector<double>> asked;
    while (auto x = s.next()) {
      asked.push_back(*x);
      for (double v : *x) EXPECT_TRUE(v >= 0 && v <= 1);
      s.tell(f(*x));
    }
    EXPECT_LE(s.evaluations(), 60);
    return std::make_pair(s.best(), asked);
  };
  const auto [best, asked] = run(7);
  EXPECT_NEAR(best[0], 0.3, 0.03);
  EXPECT_NEAR(best[1], 0.7, 0.03);
  EXPECT_NEAR(best[2], 0.55, 0.03);
  EXPECT_EQ(asked.front(), std::vector<double>(3, 0.5));  // the centre first
  EXPECT_EQ(run(7).second, asked);
  EXPECT_NE(run(8).second, asked);
}

TEST(CalibrateSearch, EndsWhenNoPointCouldBeSimulated) {
  Search s(2, 30, 1);
  int asked = 0;
  while (s.next()) {
    ++asked;
    s.tell(std::numeric_limits<double>::infinity());
  }
  EXPECT_LT(asked, 30);  // the design only: nothing to poll around
  EXPECT_TRUE(s.best().empty());
  EXPECT_THROW(Search(0, 10, 1), ConfigError);
}

class CalibrateRecovery : public testing::TempDirTest {
 protected:
  int meridian(const std::string& args) {
    const std::string command = "'" + std::string(MERIDIAN_BIN) + "' " + args + " >'" +
                                (dir_ / "stdout").string() + "' 2>'" + (dir_ / "stderr").string() +
                                "' </dev/null";
    const int status = std::system(command.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::string stderr_text() {
    std::ifstream in(dir_ / "stderr");
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }
};

// Known inputs: every access link 1.2 Gb/s, varying with a coefficient of variation of 0.3
// (correlation time 30 s, given). Calibrating both from that run's events over seeds 1-2 (the
// observed run is seed 1), 20 points, must give the bandwidth back within 10 % and the
// coefficient within 0.1 (it moves the all-reduce's spread, which 16 outer steps measure
// coarsely). About 25 s here: 42 simulations of a small scenario.
TEST_F(CalibrateRecovery, RecoversKnownInputsFromASimulatedRunsEvents) {
  const std::string scenario =
      std::string(MERIDIAN_SOURCE_DIR) + "/tests/netsim/data/calibrate-synthetic.yaml";
  const std::string fixed = " --set network.variation.access_correlation_s=30";
  const fs::path observed = dir_ / "observed";
  ASSERT_EQ(meridian("sim '" + scenario + "' --out '" + observed.string() + "'" + fixed +
                     " --set network.access_bandwidth_gbps=1.2"
                     " --set network.variation.access_cv=0.3"
                     " --set network.variation.source=synthetic"),
            0)
      << stderr_text();
  const fs::path out = dir_ / "calibration";
  ASSERT_EQ(meridian("calibrate '" + scenario + "' --observed '" + observed.string() + "'" + fixed +
                     " --fit network.access_bandwidth_gbps=0.3:3:log"
                     " --fit network.variation.access_cv=0:0.8"
                     " --seeds 1-2 --evaluations 20 --out '" +
                     out.string() + "'"),
            0)
      << stderr_text();
  std::ifstream in(out / "calibration.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  const nlohmann::json& v = j.at("best").at("values");
  EXPECT_NEAR(v.at("network.access_bandwidth_gbps").get<double>(), 1.2, 0.12) << j.dump(2);
  EXPECT_NEAR(v.at("network.variation.access_cv").get<double>(), 0.3, 0.1) << j.dump(2);
  EXPECT_LT(j.at("best").at("residual").get<double>(),
            j.at("as_given").at("residual").get<double>());
  EXPECT_EQ(j.at("evaluations").get<int>(), 20);
  // The calibrated scenario runs and carries the fitted values and their provenance.
  ASSERT_TRUE(fs::exists(out / "calibrated.yaml"));
  ASSERT_EQ(meridian("sim '" + (out / "calibrated.yaml").string() + "' --out '" +
                     (dir_ / "rerun").string() + "'"),
            0)
      << stderr_text();
  std::ifstream yaml(out / "calibrated.yaml");
  std::ostringstream text;
  text << yaml.rdbuf();
  EXPECT_NE(text.str().find("# observed: " + observed.string()), std::string::npos);
  EXPECT_NE(text.str().find("fitted by meridian calibrate"), std::string::npos);
  EXPECT_TRUE(fs::exists(out / "calibration.md"));
  EXPECT_FALSE(fs::exists(out / "work"));  // the points' runs are not kept
  // A real run's output folder (node-<ID>/events.jsonl, one per process) is observed the same
  // way; a folder with neither kind of events is refused, naming both.
  const fs::path real = dir_ / "real";
  fs::create_directories(real / "node-1");
  fs::copy_file(observed / "events.jsonl", real / "node-1" / "events.jsonl");
  ASSERT_EQ(meridian("calibrate '" + scenario + "' --observed '" + real.string() + "'" + fixed +
                     " --fit network.access_bandwidth_gbps=0.3:3:log --seeds 1 --evaluations 2"
                     " --out '" +
                     (dir_ / "from-real").string() + "'"),
            0)
      << stderr_text();
  std::ifstream from_real(dir_ / "from-real" / "calibration.json");
  EXPECT_EQ(nlohmann::json::parse(from_real).at("observed").at("allreduce_s"),
            j.at("observed").at("allreduce_s"));
  fs::create_directories(dir_ / "empty");
  EXPECT_EQ(meridian("calibrate '" + scenario + "' --observed '" + (dir_ / "empty").string() +
                     "' --fit network.access_bandwidth_gbps=0.3:3 --out '" +
                     (dir_ / "none").string() + "'"),
            2);
  EXPECT_NE(stderr_text().find("no node-<ID>/events.jsonl"), std::string::npos) << stderr_text();
  // A second calibration into the same folder is refused without --force.
  EXPECT_EQ(meridian("calibrate '" + scenario + "' --observed '" + observed.string() +
                     "' --fit network.access_bandwidth_gbps=0.3:3 --out '" + out.string() + "'"),
            2);
  EXPECT_NE(stderr_text().find("--force"), std::string::npos);
}

}  // namespace
}  // namespace meridian::netsim::calibrate
