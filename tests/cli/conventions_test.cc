// The conventions every `meridian` command follows (issue 21), checked on the built binary:
// --help/-h (usage on stdout, exit 0) for each command `meridian help` lists, --version,
// --key=value, and a run folder that holds another run is refused unless --force.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/post/temp_dir_test_base.h"

namespace meridian {
namespace {

namespace fs = std::filesystem;

struct Ran {
  int rc = -1;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

class CliTest : public testing::TempDirTest {
 protected:
  // Runs `meridian ARGS` (ARGS as shell words) in `cwd` (default: this test's folder).
  Ran meridian(const std::string& args, const fs::path& cwd = {}) {
    return run(MERIDIAN_BIN, args, cwd);
  }
  // Runs `ENV BINARY ARGS` (ENV: assignments such as "LD_DEBUG=libs", or "").
  Ran run(const std::string& binary, const std::string& args, const fs::path& cwd = {},
          const std::string& env = "") {
    const fs::path out = dir_ / "stdout", err = dir_ / "stderr";
    const std::string command = "cd '" + (cwd.empty() ? dir_ : cwd).string() + "' && " + env +
                                " '" + binary + "' " + args + " >'" + out.string() + "' 2>'" +
                                err.string() + "' </dev/null";
    const int status = std::system(command.c_str());
    Ran r;
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
  }

  // The command names `meridian help` lists: the lines after "commands:" up to the blank one.
  std::vector<std::string> listed_commands() {
    const Ran help = meridian("help");
    EXPECT_EQ(help.rc, 0) << help.err;
    std::vector<std::string> names;
    std::istringstream in(help.out);
    bool in_list = false;
    for (std::string line; std::getline(in, line);) {
      if (line == "commands:") {
        in_list = true;
      } else if (in_list && line.empty()) {
        break;
      } else if (in_list) {
        std::istringstream words(line);
        std::string name;
        words >> name;
        names.push_back(name);
      }
    }
    return names;
  }

  bool has_command(const std::string& name) {
    for (const std::string& n : listed_commands())
      if (n == name) return true;
    return false;
  }

  // A scenario that simulates in well under a second: 2 nodes, a small model, one outer step.
  void write_tiny_scenario(const fs::path& path) {
    std::ofstream(path) << "run: {name: tiny, outer_steps: 1}\n"
                           "model: {layers: 2, hidden: 64, heads: 4, kv_heads: 4, ffn: 128,\n"
                           "        vocab: 256, seq_len: 16}\n"
                           "hardware: {step_time_s: 1}\n"
                           "train: {batch: 1}\n"
                           "network:\n"
                           "  sites: [{name: a}]\n"
                           "  nodes: [{site: a, count: 2, bandwidth_gbps: 1}]\n"
                           "diloco: {H: 2, checkpoint_s: 0}\n";
  }
};

// Issue 21: --help worked on sim, plot, report and sweep only. Every command `meridian help`
// lists (so a new command is covered without touching this test) prints its usage on stdout and
// exits 0, for --help and for -h after other arguments, and `meridian help NAME` agrees. (Two
// runs per command: a binary linked with LibTorch takes most of a second to start.)
TEST_F(CliTest, EveryCommandAnswersHelp) {
  const std::vector<std::string> names = listed_commands();
  // version and store are in every configuration (they need only the engine).
  const std::set<std::string> listed(names.begin(), names.end());
  ASSERT_TRUE(listed.count("version") && listed.count("store")) << "help lists too little";
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    const Ran help = meridian(name + " --help");
    EXPECT_EQ(help.rc, 0) << help.err;
    EXPECT_EQ(help.out.rfind("usage: meridian ", 0), 0u) << help.out;
    EXPECT_EQ(help.err, "");
    const Ran late = meridian(name + " some-file.yaml --out x -h");
    EXPECT_EQ(late.rc, 0) << late.err;
    EXPECT_EQ(late.out, help.out);
  }
  EXPECT_EQ(meridian("help version").out, meridian("version --help").out);
}

// Issue 33: the front `meridian` loads no LibTorch (a timing-only process starts in ~0.08 s, not
// ~0.8: results/bench/startup.md); the commands that need it run in meridian-torch beside it,
// listed, answered and run the same from either.
TEST_F(CliTest, TheFrontLoadsNoLibTorchAndHandsTorchCommandsOn) {
  const fs::path torch = fs::path(MERIDIAN_BIN).parent_path() / "meridian-torch";
  if (!fs::exists(torch)) GTEST_SKIP() << "built without the trainer: one executable";
  const Ran help = meridian("help");
  EXPECT_EQ(help.out, run(torch, "help").out);
  EXPECT_NE(help.out.find("\n  train "), std::string::npos) << help.out;
  for (const char* args : {"train --help", "help train", "train-diloco -h"}) {
    const Ran front = meridian(args), there = run(torch, args);
    EXPECT_EQ(front.rc, 0) << args << ": " << front.err;
    EXPECT_EQ(front.out, there.out) << args;
    EXPECT_EQ(front.out.rfind("usage: meridian ", 0), 0u) << front.out;
  }
  const Ran model = meridian("model tiny");
  EXPECT_EQ(model.rc, 0) << model.err;
  EXPECT_EQ(model.out, run(torch, "model tiny").out);
  EXPECT_NE(model.out.find("parameters: "), std::string::npos) << model.out;
  const Ran bad = meridian("model");
  EXPECT_EQ(bad.rc, run(torch, "model").rc);

  // What the dynamic loader opened (LD_DEBUG=libs names every library it loads).
  const Ran front_libs = run(MERIDIAN_BIN, "--version", {}, "LD_DEBUG=libs");
  ASSERT_NE(front_libs.err.find("libc.so"), std::string::npos) << "LD_DEBUG had no effect";
  EXPECT_EQ(front_libs.err.find("libtorch"), std::string::npos) << "the front loads LibTorch";
  EXPECT_NE(run(torch, "--version", {}, "LD_DEBUG=libs").err.find("libtorch"), std::string::npos);
}

// Issue 33: `train` and `train-node` were one command in two. `meridian train` is the one: its
// help gives a real run's node first, then the single worker, and the old name is gone.
TEST_F(CliTest, TrainIsOneCommandWithOneHelpText) {
  if (!has_command("train")) GTEST_SKIP() << "built without the trainer";
  const Ran help = meridian("train --help");
  EXPECT_EQ(help.rc, 0) << help.err;
  EXPECT_EQ(help.out.rfind("usage: meridian train FILE --node-id ID", 0), 0u) << help.out;
  EXPECT_NE(help.out.find("usage: meridian train [options]   one LibTorch worker alone"),
            std::string::npos)
      << help.out;
  EXPECT_FALSE(has_command("train-node"));
  const Ran gone = meridian("train-node --help");
  EXPECT_EQ(gone.rc, 2);
  EXPECT_NE(gone.err.find("unknown command 'train-node'"), std::string::npos) << gone.err;
  // A node's own errors still name `meridian train`.
  const Ran node = meridian("train missing.yaml --node-id 1");
  EXPECT_EQ(node.rc, 2);
  EXPECT_NE(node.err.find("meridian train: "), std::string::npos) << node.err;
}

TEST_F(CliTest, VersionAndTopLevelHelp) {
  const Ran version = meridian("--version");
  EXPECT_EQ(version.rc, 0) << version.err;
  EXPECT_EQ(version.out.rfind("meridian ", 0), 0u) << version.out;
  EXPECT_NE(version.out.find("backends: "), std::string::npos) << version.out;
  EXPECT_EQ(meridian("version").out, version.out);
  const Ran help = meridian("--help");
  EXPECT_EQ(help.rc, 0);
  EXPECT_EQ(help.out.rfind("usage: meridian COMMAND", 0), 0u) << help.out;
  EXPECT_EQ(meridian("help --help").out, help.out);
  const Ran none = meridian("");
  EXPECT_EQ(none.rc, 2);
  EXPECT_EQ(none.out, "");
}

TEST_F(CliTest, UnknownOptionsAreUsageErrors) {
  const Ran r = meridian("store --no-such-option");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--no-such-option"), std::string::npos) << r.err;
}

// A bad value is refused before any work, naming the option (train-diloco said "a numeric option
// has a non-numeric value" and checked some only after loading the model).
TEST_F(CliTest, TrainDilocoNamesTheBadOptionBeforeLoadingAnything) {
  if (!has_command("train-diloco")) GTEST_SKIP() << "built without the trainer";
  const Ran r = meridian("train-diloco --model nosuch --nodes=0 --cache no-cache");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--nodes: expected an integer in [1, "), std::string::npos) << r.err;
  EXPECT_NE(meridian("train-diloco --inner-steps x").err.find("--inner-steps: expected an integer"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(dir_ / "no-cache"));
  // An output file that cannot be written is found with the arguments, not after the training.
  const Ran csv = meridian("train-diloco --model tiny --csv missing/loss.csv --cache no-cache");
  EXPECT_EQ(csv.rc, 2);
  EXPECT_NE(csv.err.find("--csv: cannot write 'missing/loss.csv'"), std::string::npos) << csv.err;
  EXPECT_FALSE(fs::exists(dir_ / "no-cache"));
}

// Issue 33: `train-diloco` reads a run file like `sim` and `train`; the same run given by its
// options trains the same losses. An option the file says is refused, naming the key.
TEST_F(CliTest, TrainDilocoRunsARunFileAsItsOptionsWouldSay) {
  if (!has_command("train-diloco")) GTEST_SKIP() << "built without the trainer";
  std::ofstream(dir_ / "run.yaml") << "run: {name: t, seed: 3, nodes: 2, outer_steps: 2}\n"
                                      "model: tiny\n"
                                      "train: {batch: 2}\n"
                                      "data: {cache_dir: cache, validation_sequences: 16}\n"
                                      "diloco: {H: 2, codec: int8}\n";
  const Ran file = meridian("train-diloco run.yaml --csv file.csv");
  ASSERT_EQ(file.rc, 0) << file.err;
  const Ran flags = meridian(
      "train-diloco --model tiny --nodes 2 --inner-steps 2 --outer-steps 2 --codec int8 "
      "--batch 2 --seed 3 --val-sequences 16 --cache cache --csv flags.csv");
  ASSERT_EQ(flags.rc, 0) << flags.err;
  // The columns a run decides: outer_step, inner_steps_per_node, members, val_loss (the outer
  // parameters' loss) and fallback. Not tokens and train_loss: they are what every node's worker
  // has done when the step's first node reports it, and a node may have begun its next inner
  // steps by then (a race with the step's other members, not a property of the run); nor
  // elapsed_s.
  const auto losses = [](const std::string& csv) {
    std::istringstream in(csv);
    std::string out;
    for (std::string line; std::getline(in, line);) {
      std::istringstream fields(line);
      std::vector<std::string> f;
      for (std::string x; std::getline(fields, x, ',');) f.push_back(x);
      if (f.size() != 8) return "a line of " + std::to_string(f.size()) + " columns: " + line;
      out += f[0] + "," + f[1] + "," + f[2] + "," + f[5] + "," + f[6] + "\n";
    }
    return out;
  };
  const std::string trained = losses(slurp(dir_ / "file.csv"));
  EXPECT_EQ(std::count(trained.begin(), trained.end(), '\n'), 3) << trained;  // header, 2 steps
  EXPECT_EQ(trained, losses(slurp(dir_ / "flags.csv")));
  const Ran both = meridian("train-diloco run.yaml --nodes 3");
  EXPECT_EQ(both.rc, 2);
  EXPECT_NE(both.err.find("--nodes: the run file says it (run.nodes)"), std::string::npos)
      << both.err;
  const Ran set_alone = meridian("train-diloco --set run.nodes=3");
  EXPECT_EQ(set_alone.rc, 2);
  EXPECT_NE(set_alone.err.find("--set: only with a run file"), std::string::npos) << set_alone.err;
}

// Issue 21: `--out=DIR` was refused. `--key=value` reaches the command as `--key value`; here
// the refusal names DIR, which shows that sim read --out=DIR as --out DIR (and --set=k=v).
TEST_F(CliTest, KeyEqualsValueIsTheSameAsKeySpaceValue) {
  if (!has_command("sim")) GTEST_SKIP() << "built without the simulator";
  write_tiny_scenario(dir_ / "tiny.yaml");
  fs::create_directories(dir_ / "old");
  std::ofstream(dir_ / "old" / "events.jsonl") << "{}\n";
  const Ran eq = meridian("sim tiny.yaml --out=old --set=diloco.H=3");
  EXPECT_EQ(eq.rc, 2) << eq.err;
  EXPECT_NE(eq.err.find("old already holds a run (events.jsonl)"), std::string::npos) << eq.err;
  EXPECT_EQ(meridian("sim tiny.yaml --out old --set diloco.H=3").err, eq.err);
  const Ran bad_set = meridian("sim tiny.yaml --out=new --set=diloco.HH=3");
  EXPECT_EQ(bad_set.rc, 2);
  EXPECT_NE(bad_set.err.find("--set diloco.HH=3: unknown key 'diloco.HH'"), std::string::npos)
      << bad_set.err;
  EXPECT_FALSE(fs::exists(dir_ / "new"));  // arguments are checked before anything is written
}

// Issue 21: without --out, sim wrote into results/<name> and silently over a committed run.
// The default is runs/<name>; a folder that holds a run is refused before any work, unless
// --force.
TEST_F(CliTest, SimWritesRunsNameAndNeverOverAnotherRunUnlessForced) {
  if (!has_command("sim")) GTEST_SKIP() << "built without the simulator";
  write_tiny_scenario(dir_ / "tiny.yaml");
  const Ran first = meridian("sim tiny.yaml");
  ASSERT_EQ(first.rc, 0) << first.err;
  EXPECT_TRUE(fs::exists(dir_ / "runs" / "tiny" / "events.jsonl"));
  EXPECT_TRUE(fs::exists(dir_ / "runs" / "tiny" / "summary.json"));
  EXPECT_FALSE(fs::exists(dir_ / "results"));
  const std::string events = slurp(dir_ / "runs" / "tiny" / "events.jsonl");

  const Ran again = meridian("sim tiny.yaml --seed 5");
  EXPECT_EQ(again.rc, 2);
  EXPECT_NE(again.err.find("runs/tiny already holds a run (events.jsonl)"), std::string::npos)
      << again.err;
  EXPECT_NE(again.err.find("--force"), std::string::npos) << again.err;
  EXPECT_EQ(slurp(dir_ / "runs" / "tiny" / "events.jsonl"), events);  // untouched

  const Ran forced = meridian("sim tiny.yaml --seed 5 --force");
  EXPECT_EQ(forced.rc, 0) << forced.err;
  EXPECT_NE(slurp(dir_ / "runs" / "tiny" / "events.jsonl"), events);

  // An existing folder that holds no run is fine (e.g. one made for it beforehand).
  fs::create_directories(dir_ / "empty");
  std::ofstream(dir_ / "empty" / "notes.txt") << "mine\n";
  EXPECT_EQ(meridian("sim tiny.yaml --out empty").rc, 0);
  EXPECT_EQ(slurp(dir_ / "empty" / "notes.txt"), "mine\n");
}

// A scenario whose seeds draw different bandwidths (a U[0.5, 4] Gb/s range), so that their runs
// differ: dir_/ens.yaml.
static void write_ensemble_scenario(const fs::path& dir) {
  std::ofstream(dir / "ens.yaml") << "run: {name: ens, outer_steps: 2}\n"
                                     "model: {layers: 2, hidden: 256, heads: 4, kv_heads: 4,\n"
                                     "        ffn: 512, vocab: 1000, seq_len: 128}\n"
                                     "hardware: {step_time_s: 1}\n"
                                     "network:\n"
                                     "  access_bandwidth_gbps: [0.5, 4.0]\n"
                                     "  sites: [{name: a}, {name: b}]\n"
                                     "  rtt: [{a: a, b: b, ms: 80, source: test}]\n"
                                     "  nodes: [{site: a, count: 2}, {site: b, count: 2}]\n"
                                     "diloco: {H: 2, buckets: \"1\", local_ranks: 1, "
                                     "checkpoint_s: 0}\n";
}

// An ensemble.json without its command line (which names the folder it was run into).
static std::string without_command(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text);
  j.erase("command");
  return j.dump();
}

// Issue 18: an ensemble over seeds. Draw-dependent bandwidths (a U[0.5, 4] Gb/s range) make the
// seeds' runs differ; the same seed list gives a byte-identical ensemble.json.
TEST_F(CliTest, SimSeedsRunsAnEnsembleDeterministically) {
  if (!has_command("sim")) GTEST_SKIP() << "built without the simulator";
  write_ensemble_scenario(dir_);
  const Ran first = meridian("sim ens.yaml --seeds 1-3 --out e1");
  ASSERT_EQ(first.rc, 0) << first.err;
  for (int seed = 1; seed <= 3; ++seed)
    EXPECT_TRUE(fs::exists(dir_ / "e1" / ("seed-" + std::to_string(seed)) / "summary.json"));
  EXPECT_NE(first.out.find("90 % interval"), std::string::npos) << first.out;
  const std::string ensemble = slurp(dir_ / "e1" / "ensemble.json");
  EXPECT_NE(ensemble.find("\"seeds\": [\n    1,\n    2,\n    3\n  ]"), std::string::npos)
      << ensemble;

  // Its figures are drawn at the end, as `meridian plot e1` draws them.
  EXPECT_TRUE(fs::exists(dir_ / "e1" / "plots" / "ensemble_box.png"));
  EXPECT_TRUE(fs::exists(dir_ / "e1" / "plots" / "ensemble_allreduce_steps.png"));

  // Three at a time (the first ran one per CPU): the same ensemble.
  const Ran second = meridian("sim ens.yaml --seeds=1-3 --out e2 --no-plots --jobs=3");
  ASSERT_EQ(second.rc, 0) << second.err;
  EXPECT_FALSE(fs::exists(dir_ / "e2" / "plots"));
  // Everything but the command line (which names the other folder) is the same.
  EXPECT_EQ(without_command(slurp(dir_ / "e2" / "ensemble.json")), without_command(ensemble));

  // The seeds drew different bandwidths, so their all-reduce times differ.
  const std::string s1 = slurp(dir_ / "e1" / "seed-1" / "summary.json");
  const std::string s2 = slurp(dir_ / "e1" / "seed-2" / "summary.json");
  EXPECT_NE(s1, s2);

  // Two ensembles side by side, and an ensemble's report.
  const Ran plot = meridian("plot e1 e2 --label A --label B --out cmp --no-svg");
  ASSERT_EQ(plot.rc, 0) << plot.err;
  EXPECT_TRUE(fs::exists(dir_ / "cmp" / "compare_ensemble_box.png"));
  EXPECT_TRUE(fs::exists(dir_ / "cmp" / "compare_ensemble_allreduce_steps.png"));
  const Ran report = meridian("report e1");
  ASSERT_EQ(report.rc, 0) << report.err;
  EXPECT_NE(slurp(dir_ / "e1" / "report.html").find("<a href=\"seed-3/\">"), std::string::npos);
  // A folder that is neither a run nor an ensemble is named; runs and ensembles do not mix.
  fs::create_directories(dir_ / "nothing");
  const Ran neither = meridian("report nothing");
  EXPECT_EQ(neither.rc, 2);
  EXPECT_NE(neither.err.find("nothing: neither a run"), std::string::npos) << neither.err;
  const Ran mixed = meridian("plot e1 e1/seed-1");
  EXPECT_EQ(mixed.rc, 2);
  EXPECT_NE(mixed.err.find("give runs or ensembles, not both: e1 is an ensemble, e1/seed-1 a run"),
            std::string::npos)
      << mixed.err;

  EXPECT_EQ(meridian("sim ens.yaml --seeds 1-3 --out e1").rc, 2);  // holds an ensemble
  const Ran bad = meridian("sim ens.yaml --seeds 3-1 --out e3");
  EXPECT_EQ(bad.rc, 2);
  EXPECT_NE(bad.err.find("--seeds: range '3-1' runs backwards"), std::string::npos) << bad.err;
  const Ran one = meridian("sim ens.yaml --out e4 --jobs 2");
  EXPECT_EQ(one.rc, 2);
  EXPECT_NE(one.err.find("--jobs: only with --seeds"), std::string::npos) << one.err;
  const Ran zero = meridian("sim ens.yaml --seeds 1-2 --out e5 --jobs 0");
  EXPECT_EQ(zero.rc, 2);
  EXPECT_NE(zero.err.find("--jobs"), std::string::npos) << zero.err;
}

// Issue 34: a sweep in parts (`--part I/N`, a job array's tasks), then gathered: the table one
// process writes; a gather before every part ran names the points missing.
TEST_F(CliTest, SweepInPartsGathersToTheSameTable) {
  if (!has_command("sim")) GTEST_SKIP() << "built without the simulator";
  write_ensemble_scenario(dir_);
  const std::string grid = "sweep ens.yaml --set diloco.H=1,2,3 --no-plots";
  const Ran whole = meridian(grid + " --out whole");
  ASSERT_EQ(whole.rc, 0) << whole.err;
  const Ran part1 = meridian(grid + " --out parts --part 1/2");
  ASSERT_EQ(part1.rc, 0) << part1.err;
  EXPECT_NE(part1.out.find("part 1 of 2: 1 of 1 points ok"), std::string::npos) << part1.out;
  EXPECT_FALSE(fs::exists(dir_ / "parts" / "sweep.csv"));
  const Ran early = meridian(grid + " --out parts --gather");
  EXPECT_EQ(early.rc, 2);
  EXPECT_NE(early.err.find("no finished run of point(s) diloco.H=1, diloco.H=3"), std::string::npos)
      << early.err;
  ASSERT_EQ(meridian(grid + " --out parts --part 0/2").rc, 0);
  const Ran gathered = meridian(grid + " --out parts --gather");
  ASSERT_EQ(gathered.rc, 0) << gathered.err;
  EXPECT_EQ(slurp(dir_ / "parts" / "sweep.csv"), slurp(dir_ / "whole" / "sweep.csv"));
  EXPECT_EQ(meridian(grid + " --out parts --part 0/2 --gather").rc, 2);
}

// Issue 34: an ensemble in parts (the tasks of a job array, `--part I/N`), then gathered: the
// same ensemble.json as one process makes, and a gather that names the seeds no part ran.
TEST_F(CliTest, SimSeedsInPartsGatherToTheSameEnsemble) {
  if (!has_command("sim")) GTEST_SKIP() << "built without the simulator";
  write_ensemble_scenario(dir_);
  const Ran whole = meridian("sim ens.yaml --seeds 1-5 --out whole --no-plots --jobs 1");
  ASSERT_EQ(whole.rc, 0) << whole.err;

  const Ran part1 = meridian("sim ens.yaml --seeds 1-5 --out parts --no-plots --part 1/2");
  ASSERT_EQ(part1.rc, 0) << part1.err;
  EXPECT_NE(part1.out.find("part 1 of 2: seeds 2,4 ran, 2 ok, 0 failed"), std::string::npos)
      << part1.out;
  EXPECT_FALSE(fs::exists(dir_ / "parts" / "ensemble.json"));
  EXPECT_FALSE(fs::exists(dir_ / "parts" / "seed-1"));
  EXPECT_EQ(slurp(dir_ / "parts" / "seed-4.exit"), "0\n");
  // Gathered before part 0 ran: refused, naming its seeds.
  const Ran early = meridian("sim ens.yaml --seeds 1-5 --out parts --no-plots --gather");
  EXPECT_EQ(early.rc, 2);
  EXPECT_NE(early.err.find("has no finished run of seed(s) 1, 3, 5"), std::string::npos)
      << early.err;

  const Ran part0 = meridian("sim ens.yaml --seeds=1-5 --out=parts --no-plots --part=0/2");
  ASSERT_EQ(part0.rc, 0) << part0.err;
  const Ran gathered = meridian("sim ens.yaml --seeds 1-5 --out parts --no-plots --gather");
  ASSERT_EQ(gathered.rc, 0) << gathered.err;
  EXPECT_EQ(without_command(slurp(dir_ / "parts" / "ensemble.json")),
            without_command(slurp(dir_ / "whole" / "ensemble.json")));

  // Malformed parts, a part outside a job array, and the options' company.
  for (const char* bad : {"2/2", "1", "a/3", "1/0"}) {
    const Ran r = meridian(std::string("sim ens.yaml --seeds 1-5 --out bad --part ") + bad);
    EXPECT_EQ(r.rc, 2) << bad;
    EXPECT_NE(r.err.find("--part: expected I/N"), std::string::npos) << r.err;
  }
  const Ran outside = meridian("sim ens.yaml --seeds 1-5 --out bad --part slurm");
  EXPECT_EQ(outside.rc, 2);
  EXPECT_NE(outside.err.find("not a task of a Slurm job array"), std::string::npos) << outside.err;
  const Ran single = meridian("sim ens.yaml --out bad --part 0/2");
  EXPECT_EQ(single.rc, 2);
  EXPECT_NE(single.err.find("--part: only with --seeds"), std::string::npos) << single.err;
  const Ran both = meridian("sim ens.yaml --seeds 1-5 --out parts --part 0/2 --gather");
  EXPECT_EQ(both.rc, 2);
  EXPECT_NE(both.err.find("--part and --gather: give one of them"), std::string::npos) << both.err;
}

TEST_F(CliTest, FinetuneRefusesAFolderThatHoldsARunBeforeTraining) {
  if (!has_command("finetune")) GTEST_SKIP() << "built without the trainer";
  fs::create_directories(dir_ / "ft");
  std::ofstream(dir_ / "ft" / "result.json") << "{}\n";
  const Ran r = meridian("finetune --config tiny --out ft --steps 0 --cache no-cache");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("ft already holds a run (result.json)"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "no-cache"));  // refused before the corpus was touched
}

// Issue 21: a SimGrid platform XML given to sim got a bare YAML parse error.
TEST_F(CliTest, SimGivenAPlatformXmlSaysWhatAScenarioIs) {
  if (!has_command("sim")) GTEST_SKIP() << "built without the simulator";
  const Ran r = meridian("sim '" + std::string(MERIDIAN_SOURCE_DIR) + "/scenarios/two-sites.xml'");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("two-sites.xml: this looks like a SimGrid platform XML, not a run file"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("network.platform_xml"), std::string::npos) << r.err;
}

// `sim --print-config` shows the resolved configuration, defaults included, and runs nothing
// (issue 34: defaults arrived silently).
TEST_F(CliTest, SimPrintConfigShowsTheResolvedConfigurationAndRunsNothing) {
  const std::string scenario = std::string(MERIDIAN_SOURCE_DIR) + "/scenarios/intellect1-usa.yaml";
  const Ran r = meridian("sim '" + scenario + "' --print-config --set diloco.H=7");
  ASSERT_EQ(r.rc, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["diloco"]["H"], 7);                      // the --set
  EXPECT_EQ(j["diloco"]["retries"], 3);                // the file
  EXPECT_EQ(j["diloco"]["nonfinite_evict_after"], 3);  // a default the file does not give
  EXPECT_FALSE(fs::exists(dir_ / "runs"));
}

// Issue 34: `meridian check` validates without running, lists every resolved value with where
// it came from, and says what looks wrong, for every mode the file is for.
TEST_F(CliTest, CheckListsEveryValueWithItsOriginAndWarns) {
  write_tiny_scenario(dir_ / "tiny.yaml");
  const auto line_of = [](const std::string& text, const std::string& key) {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
      if (line.rfind(key + ": ", 0) == 0) return line;
    return std::string("(no line for " + key + ")");
  };
  const Ran r = meridian("check tiny.yaml --set diloco.H=3");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("valid for simulate (meridian sim) and real (meridian train)"),
            std::string::npos)
      << r.out;
  // "KEY: VALUE" then padding then "# ORIGIN", one line per key.
  const auto says = [&](const std::string& key, const std::string& value,
                        const std::string& origin) {
    const std::string line = line_of(r.out, key);
    return line.rfind(key + ": " + value + " ", 0) == 0 && line.size() >= origin.size() + 2 &&
           line.compare(line.size() - origin.size() - 2, std::string::npos, "# " + origin) == 0;
  };
  EXPECT_TRUE(says("diloco.H", "3", "--set diloco.H=3")) << r.out;
  EXPECT_TRUE(says("diloco.checkpoint_s", "0", "tiny.yaml:9")) << r.out;
  EXPECT_TRUE(says("hardware.step_time_s", "1", "tiny.yaml:4")) << r.out;
  EXPECT_TRUE(says("diloco.retries", "3", "default")) << r.out;
  EXPECT_TRUE(says("network.nodes[0].count", "2", "tiny.yaml:8")) << r.out;
  EXPECT_TRUE(says("network.nodes[0].start", "true", "default")) << r.out;
  // The warnings: INTELLECT-1's per-node defaults on a tiny model (simulate), and the sections
  // a real run does not use.
  EXPECT_NE(r.err.find("(a 10 B model on 8 H100s): hardware.gpus_per_node 8; set them"),
            std::string::npos)
      << r.err;  // train.batch is not named: the file gave it
  EXPECT_NE(
      r.err.find("warning (real (meridian train)): tiny.yaml: network: not used by a real run"),
      std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "runs"));  // nothing ran

  const Ran real = meridian("check tiny.yaml --mode real");
  ASSERT_EQ(real.rc, 0) << real.err;
  EXPECT_NE(real.out.find("valid for real (meridian train)\n"), std::string::npos) << real.out;
  if (has_command("train")) {  // the trainer resolves the file as a node does
    const std::string key = "# configuration hash (what a node sends its store): ";
    const std::size_t at = real.out.find(key);
    ASSERT_NE(at, std::string::npos) << real.out;
    EXPECT_EQ(real.out.find('\n', at) - at - key.size(), 64u) << real.out;  // SHA-256, hex
  }
  const Ran bad = meridian("check tiny.yaml --set diloco.H=0");
  EXPECT_EQ(bad.rc, 2);
  EXPECT_NE(bad.err.find("--set diloco.H=0: key 'diloco.H'"), std::string::npos) << bad.err;
  EXPECT_TRUE(bad.out.empty()) << bad.out;
}

}  // namespace
}  // namespace meridian
