// The typed option values every `meridian` subcommand shares (cli/args.h): what each accepts,
// and that everything else is a ConfigError naming the option; the conventions main() applies
// (--key=value, --help) and the run-folder rule (cli/run_folder.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli/args.h"
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

TEST(CliArgs, AMissingValueNamesTheOption) {
  const std::vector<std::string> args = {"--port"};
  std::size_t i = 0;
  EXPECT_NE(config_error([&] { opt::value(args, i); }).find("--port needs a value"),
            std::string::npos);
}

using Args = std::vector<std::string>;

TEST(CliArgs, KeyEqualsValueSplitsAtTheFirstEquals) {
  EXPECT_EQ(opt::split_key_value({"sim", "a.yaml", "--out=runs/x", "--set=diloco.H=5"}),
            (Args{"sim", "a.yaml", "--out", "runs/x", "--set", "diloco.H=5"}));
  // Values and positionals with '=' stay whole; so does all after `--`, and `--k=` / `--=v`.
  EXPECT_EQ(opt::split_key_value({"--set", "a=b", "x=y", "-o=1", "--k=", "--=v", "--", "--a=b"}),
            (Args{"--set", "a=b", "x=y", "-o=1", "--k=", "--=v", "--", "--a=b"}));
  EXPECT_EQ(opt::split_key_value({}), Args{});
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
