// The events.jsonl reader: typed fields, forward compatibility (unknown fields and types), and
// clear errors that name the file, the line and the field. Not the statistics: summary_test.cc.
#include "analysis/events.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/core/error.h"
#include "tests/analysis/synthetic_run.h"

namespace meridian::analysis {
namespace {

const std::string kData = MERIDIAN_ANALYSIS_TEST_DATA;
const std::string kConfig =
    R"({"t":0,"node":-1,"type":"config","mode":"simulate","metrics":{"param_count":1,)"
    R"("flops_per_token":6,"tokens_per_inner_step":1,"gpus_per_node":1,)"
    R"("peak_flops_per_gpu":1,"H":5}})";

// The ConfigError message for reading `text` as file "run/events.jsonl".
std::string error_of(const std::string& text) {
  std::istringstream in(text);
  try {
    read_events(in, "run/events.jsonl");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Events, ReadsTypedRecords) {
  const auto events = read_events_file(kData + "/small_run.jsonl");
  ASSERT_EQ(events.size(), 41u);
  const auto* config = events[0].as<ConfigRecord>();
  ASSERT_NE(config, nullptr);
  EXPECT_EQ(config->metrics.H, 2);
  EXPECT_EQ(config->metrics.codec, "int8");
  EXPECT_EQ(config->config["diloco"]["codec"], "int8");
  const auto* ar = events[10].as<AllreduceRecord>();
  ASSERT_NE(ar, nullptr);
  EXPECT_EQ(ar->bucket, -1);
  EXPECT_DOUBLE_EQ(ar->bytes_sent, 1000);
  EXPECT_FALSE(ar->relative_error.has_value());
  EXPECT_DOUBLE_EQ(*events[11].as<AllreduceRecord>()->relative_error, 0.01);
  EXPECT_EQ(events[10].line, 11);
  // An unknown type is kept as UnknownRecord, an unknown field is ignored.
  EXPECT_NE(events[7].as<UnknownRecord>(), nullptr);
  EXPECT_EQ(events[7].type, "future_record_type");
  EXPECT_NE(events[12].as<OuterStepRecord>(), nullptr);
}

TEST(Events, ReadsADirectoryOrAFile) {
  const std::string dir = ::testing::TempDir() + "/events_test_run";
  testing::write_synthetic_run(dir, {});
  const auto from_dir = read_events_file(dir);
  const auto from_file = read_events_file(dir + "/events.jsonl");
  EXPECT_EQ(from_dir.size(), from_file.size());
  EXPECT_GT(from_dir.size(), 100u);
}

// A real run: one file per process, each on its own clock (t = 0 at its own start).
std::string real_config(double origin_unix_s) {
  return R"({"t":0,"node":-1,"type":"config","mode":"real","clock_origin_unix_s":)" +
         std::to_string(origin_unix_s) +
         R"(,"metrics":{"param_count":1,"flops_per_token":6,"tokens_per_inner_step":1,)"
         R"("gpus_per_node":0,"peak_flops_per_gpu":0,"H":5}})";
}

void write_file(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

TEST(Events, ARealRunsNodeFilesAreMergedOnOneClock) {
  const std::string dir = ::testing::TempDir() + "/events_test_real";
  std::filesystem::remove_all(dir);
  // Node 1 started at Unix time 1000, node 2 2.5 s later.
  write_file(dir + "/node-1/events.jsonl",
             real_config(1000) + "\n" +
                 R"({"t":0.5,"node":1,"type":"node_started","initial":true})"
                 "\n"
                 R"({"t":4,"node":1,"type":"node_left","graceful":true})"
                 "\n"
                 R"({"t":4.25,"node":-1,"type":"run_finished","simulated_s":4.25,"outer_steps":3})"
                 "\n");
  write_file(dir + "/node-2/events.jsonl",
             real_config(1002.5) + "\n" +
                 R"({"t":0.25,"node":2,"type":"node_started","initial":true})"
                 "\n"
                 R"({"t":0.5,"node":2,"type":"inner_steps","outer_step":0,"steps":1,"tokens":1,)"
                 R"("start_s":0.3,"compute_s":0.2,"loss":null})"
                 "\n"
                 R"({"t":1,"node":2,"type":"node_left","graceful":true})"
                 "\n"
                 R"({"t":1.25,"node":-1,"type":"run_finished","simulated_s":1.25,"outer_steps":2})"
                 "\n");
  std::filesystem::create_directories(dir + "/node-x");  // not a node directory: ignored
  const auto events = read_events_file(dir);
  std::vector<std::pair<std::string, double>> got;
  for (const auto& e : events) got.push_back({e.type + "@" + std::to_string(e.node), e.t_s});
  const std::vector<std::pair<std::string, double>> want = {
      {"config@-1", 0},         {"node_started@1", 0.5}, {"node_started@2", 2.75},
      {"inner_steps@2", 3.0},   {"node_left@2", 3.5},    {"node_left@1", 4},
      {"run_finished@-1", 4.25}};
  EXPECT_EQ(got, want);
  EXPECT_DOUBLE_EQ(events[3].as<InnerStepsRecord>()->start_s, 2.8);  // moved with the clock
  const auto* fin = events.back().as<RunFinishedRecord>();
  ASSERT_NE(fin, nullptr);
  EXPECT_DOUBLE_EQ(fin->simulated_s, 4.25);  // the run's span on node 1's clock
  EXPECT_EQ(fin->outer_steps, 3);
  EXPECT_DOUBLE_EQ(*events.front().as<ConfigRecord>()->clock_origin_unix_s, 1000);
}

// One process stopped by a signal makes the merged run interrupted; the plan is kept.
TEST(Events, OneInterruptedProcessMakesTheMergedRunInterrupted) {
  const std::string dir = ::testing::TempDir() + "/events_test_interrupted";
  std::filesystem::remove_all(dir);
  write_file(dir + "/node-1/events.jsonl",
             real_config(1000) + "\n" +
                 R"({"t":4,"node":-1,"type":"run_finished","simulated_s":4,"outer_steps":3,)"
                 R"("outer_steps_planned":10})"
                 "\n");
  write_file(dir + "/node-2/events.jsonl",
             real_config(1001) + "\n" +
                 R"({"t":2,"node":-1,"type":"run_interrupted","reason":"SIGTERM",)"
                 R"("simulated_s":2,"outer_steps":2,"outer_steps_planned":10})"
                 "\n");
  const auto events = read_events_file(dir);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events.back().type, "run_interrupted");
  const auto* x = events.back().as<RunInterruptedRecord>();
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->reason, "SIGTERM");
  EXPECT_EQ(x->outer_steps, 3);
  EXPECT_EQ(x->outer_steps_planned, 10);
  EXPECT_DOUBLE_EQ(x->simulated_s, 4);
}

// A node restarted with --resume appends its new life to its file: each life is a stream on its
// own clock, and an interruption the run was resumed from does not make it interrupted.
std::string two_lives_of_node_1() {
  return real_config(1000) + "\n" +
         R"({"t":0.5,"node":1,"type":"node_started","initial":true})"
         "\n"
         R"({"t":3,"node":-1,"type":"run_interrupted","reason":"SIGTERM",)"
         R"("simulated_s":3,"outer_steps":4,"outer_steps_planned":10})"
         "\n" +
         real_config(1100) + "\n" +
         R"({"t":0.25,"node":1,"type":"run_resumed","life":2,"via":"checkpoint",)"
         R"("from_outer_step":4,"checkpoint":"ckpt/node-1/00000000000000004"})"
         "\n"
         R"({"t":0.5,"node":1,"type":"node_started","initial":true})"
         "\n"
         R"({"t":9,"node":-1,"type":"run_finished","simulated_s":9,"outer_steps":10,)"
         R"("outer_steps_planned":10})"
         "\n";
}

TEST(Events, AResumedNodesLivesAreOneHistoryOnOneClock) {
  const std::string dir = ::testing::TempDir() + "/events_test_resumed";
  std::filesystem::remove_all(dir);
  write_file(dir + "/node-1/events.jsonl", two_lives_of_node_1());
  for (const std::string& path : {dir, dir + "/node-1/events.jsonl"}) {
    SCOPED_TRACE(path);
    const auto events = read_events_file(path);
    std::vector<std::pair<std::string, double>> got;
    for (const auto& e : events) got.push_back({e.type, e.t_s});
    const std::vector<std::pair<std::string, double>> want = {{"config", 0},
                                                              {"node_started", 0.5},
                                                              {"run_resumed", 100.25},
                                                              {"node_started", 100.5},
                                                              {"run_finished", 109}};
    EXPECT_EQ(got, want);
    const auto* resumed = events[2].as<RunResumedRecord>();
    ASSERT_NE(resumed, nullptr);
    EXPECT_EQ(resumed->life, 2);
    EXPECT_EQ(resumed->via, "checkpoint");
    EXPECT_EQ(resumed->from_outer_step, 4);
    const auto* fin = events.back().as<RunFinishedRecord>();
    ASSERT_NE(fin, nullptr);  // the SIGTERM was resumed from: the run finished
    EXPECT_EQ(fin->outer_steps, 10);
    EXPECT_DOUBLE_EQ(fin->simulated_s, 109);
  }
}

// A resumed life that was killed in turn: the run has not ended (the earlier life's final record
// is not the run's).
TEST(Events, AResumedRunWhoseLastLifeStopsIsIncomplete) {
  const std::string dir = ::testing::TempDir() + "/events_test_resumed_killed";
  std::filesystem::remove_all(dir);
  std::string text = two_lives_of_node_1();
  text.erase(text.rfind(R"({"t":9)"));
  write_file(dir + "/node-1/events.jsonl", text);
  const auto events = read_events_file(dir);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().type, "node_started");
  for (const auto& e : events) {
    EXPECT_EQ(e.as<RunInterruptedRecord>(), nullptr);
    EXPECT_EQ(e.as<RunFinishedRecord>(), nullptr);
  }
}

TEST(Events, RunResumedFieldsAreChecked) {
  const std::string line = R"({"t":1,"node":1,"type":"run_resumed","life":2,"via":"magic"})";
  EXPECT_NE(error_of(kConfig + "\n" + line + "\n").find("via"), std::string::npos);
  const std::string no_step =
      R"({"t":1,"node":1,"type":"run_resumed","life":2,"via":"checkpoint"})";
  EXPECT_NE(error_of(kConfig + "\n" + no_step + "\n").find("from_outer_step"), std::string::npos);
  const std::string live =
      R"({"t":1,"node":1,"type":"run_resumed","life":3,"via":"live_recovery"})";
  EXPECT_EQ(error_of(kConfig + "\n" + live + "\n"), "(no error)");
}

TEST(Events, NodeFilesWithoutAClockOriginAreRefused) {
  const std::string dir = ::testing::TempDir() + "/events_test_real_old";
  std::filesystem::remove_all(dir);
  write_file(dir + "/node-1/events.jsonl", real_config(1000) + "\n");
  write_file(dir + "/node-2/events.jsonl", kConfig + "\n");
  try {
    read_events_file(dir);
    FAIL() << "merged streams without a common clock";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("node-2/events.jsonl"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("clock_origin_unix_s"), std::string::npos) << e.what();
  }
}

TEST(Events, NoGpusIsValidOnlyForARealRun) {
  std::istringstream real(real_config(0) + "\n");
  EXPECT_EQ(read_events(real, "x").front().as<ConfigRecord>()->metrics.gpus_per_node, 0);
  std::string sim = kConfig;
  sim.replace(sim.find("\"gpus_per_node\":1"), 17, "\"gpus_per_node\":0");
  EXPECT_NE(error_of(sim + "\n").find("gpus_per_node"), std::string::npos);
}

TEST(Events, BlankLinesAreSkippedAndLinesCounted) {
  std::istringstream in(kConfig + "\n\n" + R"({"t":1,"node":0,"type":"join_requested"})" + "\n");
  const auto events = read_events(in, "x");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].line, 3);
}

TEST(Events, MalformedJsonNamesFileAndLine) {
  const std::string msg = error_of(kConfig + "\n" + R"({"t":1,"node":0,"type":"join_req)" + "\n");
  EXPECT_NE(msg.find("run/events.jsonl:2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not valid JSON"), std::string::npos) << msg;
}

TEST(Events, MissingFieldIsNamed) {
  const std::string msg =
      error_of(kConfig + "\n" + R"({"t":1,"node":0,"type":"outer_step","outer_step":0,"epoch":0,)" +
               R"("participants":2,"inner_s":1,"outer_opt_s":0,"tokens":1,"loss":null})" + "\n");
  EXPECT_NE(msg.find("run/events.jsonl:2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'outer_step' record"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'allreduce_s' is missing"), std::string::npos) << msg;
}

TEST(Events, WrongTypesAreNamed) {
  EXPECT_NE(error_of(R"({"t":"soon","node":0,"type":"join_requested"})")
                .find("field 't' must be a number"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"t":1,"node":0.5,"type":"join_requested"})")
                .find("field 'node' must be an integer"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"t":1,"node":0,"type":"node_left","graceful":"yes"})")
                .find("'graceful' must be true or false"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"t":1,"node":0})").find("field 'type' is missing"), std::string::npos);
  EXPECT_NE(error_of("[1,2]").find("must be a JSON object"), std::string::npos);
  EXPECT_NE(error_of(R"({"t":0,"node":-1,"type":"config","mode":"dream","metrics":{}})")
                .find("must be simulate, emulate or real"),
            std::string::npos);
}

TEST(Events, MissingMetricInConfigIsNamed) {
  const std::string msg =
      error_of(R"({"t":0,"node":-1,"type":"config","mode":"real","metrics":{"param_count":1}})");
  EXPECT_NE(msg.find("run/events.jsonl:1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'config.metrics' record: field 'flops_per_token' is missing"),
            std::string::npos)
      << msg;
}

// Records are read without a tree of maps where they hold only scalars and arrays of scalars, and
// the ordinary way otherwise (an object inside, an error): both read every record alike.
TEST(Events, ARecordReadsTheSameWhicheverWayItIsRead) {
  const std::string base = R"({"t":2.5,"node":3,"type":"epoch_formed","epoch":4,)"
                           R"("outer_step":7,"members":[1,3,5])";
  for (const std::string extra : {"", R"(,"note":{"why":"the ordinary way"})"}) {
    const EventRecord r = parse_event_line(base + extra + "}", "x:1");
    const auto* e = r.as<EpochFormedRecord>();
    ASSERT_NE(e, nullptr) << extra;
    EXPECT_EQ(r.t_s, 2.5);
    EXPECT_EQ(r.node, 3);
    EXPECT_EQ(e->epoch, 4);
    EXPECT_EQ(e->outer_step, 7);
    EXPECT_EQ(e->members, (std::vector<std::int64_t>{1, 3, 5}));
    // A repeated field: the later value counts, as in any JSON object.
    const EventRecord d = parse_event_line(base + R"(,"epoch":9)" + extra + "}", "x:1");
    EXPECT_EQ(d.as<EpochFormedRecord>()->epoch, 9) << extra;
  }
}

TEST(Events, AnythingButTheRecordsShapeIsNamed) {
  EXPECT_NE(error_of(R"({"t":1,"node":0,"type":"epoch_formed","epoch":0,"outer_step":0,)"
                     R"("members":[[1]]})")
                .find("'members' must hold integer node ids"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"t":1,"node":0,"type":"join_requested"} trailing)").find("not valid JSON"),
            std::string::npos);
  EXPECT_NE(error_of("7").find("must be a JSON object, got 7"), std::string::npos);
  // Found by tests/fuzz/events_fuzz: a number beyond a double's range ended the process.
  EXPECT_NE(error_of(R"({"t":1.7e988888885,"node":0,"type":"join_requested"})")
                .find("not valid JSON ([json.exception.out_of_range.406] number overflow"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"t":1,"node":0,"type":"join_requested")").find("not valid JSON"),
            std::string::npos);
}

TEST(Events, MissingFileIsAConfigError) {
  EXPECT_THROW(read_events_file("/nonexistent/run"), ConfigError);
}

}  // namespace
}  // namespace meridian::analysis
