// The typed option values every `meridian` subcommand shares (cli/args.h): what each accepts,
// and that everything else is a ConfigError naming the option; the options themselves
// (cli/options.h: --key=value, order, repetition, the errors, the generated help); --help, and the
// run-folder rule (cli/run_folder.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/options.h"
#include "cli/run_folder.h"

namespace meridian::cli {
namespace {

// The ConfigError's message for `f`, or "" when it did not throw one.
template <typename F>
std::string config_error(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(CliArgs, IntegerInAcceptsItsRangeAndDigitsOnly) {
  EXPECT_EQ(opt::integer_in("--n", "1", 1, 10), 1u);
  EXPECT_EQ(opt::integer_in("--n", "10", 1, 10), 10u);
  EXPECT_EQ(opt::integer_in("--node-id", "1099511627776", 1, std::uint64_t{1} << 40),
            std::uint64_t{1} << 40);
  for (const std::string bad :
       {"0", "11", "", "-1", "+5", " 5", "5 ", "5x", "1e3", "99999999999999999999999"}) {
    SCOPED_TRACE("'" + bad + "'");
    const std::string e = config_error([&] { opt::integer_in("--n", bad, 1, 10); });
    EXPECT_NE(e.find("--n: expected an integer in [1, 10]"), std::string::npos) << e;
  }
}

TEST(CliArgs, PortIsZeroTo65535) {
  EXPECT_EQ(opt::port("--port", "0"), 0);
  EXPECT_EQ(opt::port("--port", "65535"), 65535);
  for (const std::string bad : {"65536", "-1", "", "80a", " 80", "+80", "123456"}) {
    SCOPED_TRACE("'" + bad + "'");
    EXPECT_NE(config_error([&] { opt::port("--port", bad); }).find("--port: expected a port"),
              std::string::npos);
  }
}

TEST(CliArgs, NumbersFractionsAndLists) {
  EXPECT_EQ(opt::number("--x", "2.5"), 2.5);
  EXPECT_NE(config_error([&] { opt::number("--x", "2.5s"); }).find("--x"), std::string::npos);
  EXPECT_EQ(opt::fraction("--f", "25%"), 0.25);
  EXPECT_EQ(opt::fraction("--f", "0.25"), 0.25);
  EXPECT_NE(config_error([&] { opt::fraction("--f", "25"); }).find("percentage"),
            std::string::npos);
  EXPECT_EQ(opt::number_list("--l", "1,0.5,2"), (std::vector<double>{1, 0.5, 2}));
  EXPECT_NE(config_error([&] { opt::number_list("--l", "1,,2"); }).find("--l"), std::string::npos);
  EXPECT_EQ(opt::unsigned_integer("--u", "18446744073709551615"), ~std::uint64_t{0});
  EXPECT_NE(config_error([&] { opt::unsigned_integer("--u", "-1"); }).find("non-negative"),
            std::string::npos);
}

using Args = std::vector<std::string>;

// A command's options as the commands declare them (cli/options.h).
struct Declared {
  std::string out;
  double rate = 0;
  int count = 0;
  bool force = false;
  std::vector<std::string> sets;
  std::string file;
  std::unique_ptr<Options> options() {
    auto o = std::make_unique<Options>("meridian demo", Args{"FILE [options]"},
                                       "Does what a test needs.");
    o->argument("FILE", "the input", file)
        .text("--out", "DIR", "where it goes", out)
        .number("--rate", "R", "a number", rate)
        .integer("--count", "N", "an integer in [1, 10]", count, 1, 10)
        .flag("--force", "a flag", force)
        .texts("--set", "K=V", "repeatable", sets);
    return o;
  }
  std::string parse(const Args& args) {
    return config_error([&] { options()->parse(args); });
  }
};

TEST(CliOptions, KeyValueInEitherSpellingAnyOrderEachOccurrenceApplied) {
  Declared d;
  EXPECT_EQ(d.parse({"--out=runs/x", "in.yaml", "--rate", "2.5", "--set=diloco.H=5", "--set", "a=b",
                     "--count=3", "--force", "--count", "4"}),
            "");
  EXPECT_EQ(d.file, "in.yaml");
  EXPECT_EQ(d.out, "runs/x");
  EXPECT_EQ(d.rate, 2.5);
  EXPECT_EQ(d.count, 4);  // the later one wins
  EXPECT_TRUE(d.force);
  EXPECT_EQ(d.sets, (Args{"diloco.H=5", "a=b"}));  // in order, split at the first '=' only
  Declared after;
  EXPECT_EQ(after.parse({"--", "--out"}), "");  // after `--`, an argument
  EXPECT_EQ(after.file, "--out");
  Declared negative;
  EXPECT_EQ(negative.parse({"f", "--rate", "-0.5"}), "");
  EXPECT_EQ(negative.rate, -0.5);
}

TEST(CliOptions, EveryErrorNamesTheOptionOrArgument) {
  Declared d;
  EXPECT_EQ(d.parse({"f", "--out"}).rfind("--out needs a value\nusage: meridian demo FILE", 0), 0u);
  EXPECT_EQ(Declared()
                .parse({"f", "--no-such-option", "5"})
                .rfind("unknown option '--no-such-option'", 0),
            0u);
  EXPECT_EQ(Declared().parse({"f", "g"}).rfind("unexpected argument 'g'", 0), 0u);
  EXPECT_EQ(Declared().parse({"--force"}).rfind("missing FILE", 0), 0u);
  EXPECT_EQ(Declared().parse({"f", "--count", "11"}),
            "--count: expected an integer in [1, 10], got '11'");
  EXPECT_EQ(Declared().parse({"f", "--rate", "fast"}), "--rate: expected a number, got 'fast'");
}

TEST(CliOptions, HelpIsGeneratedFromTheDeclarations) {
  Declared d;
  const std::string help = d.options()->help();
  EXPECT_EQ(help.rfind("usage: meridian demo FILE [options]\n\nDoes what a test needs.\n", 0), 0u)
      << help;
  for (const char* line : {"\narguments:\n  FILE ", "\noptions:\n  --out DIR ", "\n  --rate R ",
                           "\n  --count N ", "\n  --force ", "\n  --set K=V "})
    EXPECT_NE(help.find(line), std::string::npos) << line << "\n" << help;
  std::istringstream lines(help);
  for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 100u) << line;
}

TEST(CliArgs, HelpAnywhereBeforeDoubleDash) {
  EXPECT_TRUE(opt::asks_for_help({"--help"}));
  EXPECT_TRUE(opt::asks_for_help({"a.yaml", "--out", "x", "-h"}));
  EXPECT_FALSE(opt::asks_for_help({"a.yaml", "--", "--help"}));
  EXPECT_FALSE(opt::asks_for_help({"--helpful", "help"}));
  EXPECT_FALSE(opt::asks_for_help({}));
}

TEST(CliArgs, CheckWritableCreatesNothingAndNamesTheOption) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("meridian_writable_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  opt::check_writable("--csv", (dir / "new.csv").string());
  EXPECT_FALSE(fs::exists(dir / "new.csv"));
  std::ofstream(dir / "old.csv") << "kept";
  opt::check_writable("--csv", (dir / "old.csv").string());
  std::ifstream old(dir / "old.csv");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(old), {}), "kept");
  EXPECT_EQ(config_error([&] { opt::check_writable("--csv", (dir / "no" / "x.csv").string()); }),
            "--csv: cannot write '" + (dir / "no" / "x.csv").string() + "'");
  EXPECT_NE(config_error([&] { opt::check_writable("--out", dir.string()); }), "");
  fs::remove_all(dir);
}

TEST(CliRunFolder, RefusesAFolderHoldingARunUnlessForced) {
  namespace fs = std::filesystem;
  const fs::path root =
      fs::temp_directory_path() / ("meridian_run_folder_" + std::to_string(::getpid()));
  fs::remove_all(root);
  claim_run_folder(root / "new" / "deep", false);  // created, parents too
  EXPECT_TRUE(fs::is_directory(root / "new" / "deep"));
  claim_run_folder(root / "new" / "deep", false);  // empty: fine again
  std::ofstream(root / "new" / "deep" / "notes.txt") << "x";
  claim_run_folder(root / "new" / "deep", false);  // holds no run: fine
  for (const char* marker : kRunFolderMarkers) {
    SCOPED_TRACE(marker);
    const fs::path dir = root / marker;
    fs::create_directories(dir);
    std::ofstream(dir / marker) << "{}";
    const std::string e = config_error([&] { claim_run_folder(dir, false, "--out"); });
    EXPECT_EQ(e, dir.string() + " already holds a run (" + marker +
                     "); choose another folder with --out DIR, or pass --force to write over it");
    EXPECT_EQ(config_error([&] { claim_run_folder(dir, true); }), "");
  }
  std::ofstream(root / "file") << "x";
  EXPECT_NE(config_error([&] { claim_run_folder(root / "file", true); }).find("is a file"),
            std::string::npos);
  fs::remove_all(root);
}

}  // namespace
}  // namespace meridian::cli
