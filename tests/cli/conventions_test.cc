// The conventions every `meridian` command follows (issue 21), checked on the built binary:
// --help/-h (usage on stdout, exit 0) for each command `meridian help` lists, --version.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <fstream>
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
    const fs::path out = dir_ / "stdout", err = dir_ / "stderr";
    const std::string command = "cd '" + (cwd.empty() ? dir_ : cwd).string() + "' && '" +
                                MERIDIAN_BIN + "' " + args + " >'" + out.string() + "' 2>'" +
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
};

// Issue 21: --help worked on sim, plot, report and sweep only. Every command `meridian help`
// lists (so a new command is covered without touching this test) prints its usage on stdout and
// exits 0, for --help and for -h after other arguments, and `meridian help NAME` agrees. (Two
// runs per command: a binary linked with LibTorch takes most of a second to start.)
TEST_F(CliTest, EveryCommandAnswersHelp) {
  const std::vector<std::string> names = listed_commands();
  ASSERT_GE(names.size(), 5u);
  const std::set<std::string> listed(names.begin(), names.end());
  EXPECT_TRUE(listed.count("version") && listed.count("store")) << "help lists too little";
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

}  // namespace
}  // namespace meridian
