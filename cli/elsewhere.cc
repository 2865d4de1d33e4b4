// The front `meridian` (cli/CMakeLists.txt): the commands that need LibTorch, and `meridian sim`
// of a `worker: torch` scenario, run in meridian-torch, the same program with the trainer linked
// in, which lives beside this executable. This process becomes it (execv: the same pid,
// arguments, streams and signals), so scripts and tests that start `meridian train` and signal
// or wait for it see one process. Compiled into the front only.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/torch_commands.h"
#include "engine/core/error.h"
#ifdef MERIDIAN_HAVE_NETSIM
#include "netsim/worker_plugin.h"
#endif

namespace meridian::cli {
namespace {

// Replaces this process by meridian-torch with this process's own arguments; returns only when
// that fails (ConfigError naming the file: a build without it, or one moved away alone).
[[noreturn]] void become_meridian_torch(const std::string& why) {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::filesystem::path torch =
      (ec ? std::filesystem::path() : self.parent_path()) / "meridian-torch";
  std::vector<std::string> args = invocation();
  args.at(0) = torch.string();
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::cout.flush();
  std::cerr.flush();
  ::execv(torch.c_str(), argv.data());
  throw ConfigError(why + " runs in meridian-torch, which this meridian cannot start (" +
                    torch.string() + ": " + std::strerror(errno) +
                    "); keep the two executables side by side");
}

// The commands of meridian-torch: listed by `meridian help` here, run there (their --help too).
const bool kRegistered = [] {
  for (const TorchCommand& t : kTorchCommands) {
    const std::string name = t.name;
    register_command(Command{name,
                             t.summary,
                             {},
                             [name](const std::vector<std::string>&) -> int {
                               become_meridian_torch("`meridian " + name + "`");
                             },
                             true});
  }
  return true;
}();

#ifdef MERIDIAN_HAVE_NETSIM
// `worker: torch`: the simulation goes on in meridian-torch from the start (nothing has run
// yet when the worker kind is resolved).
const bool kTorchWorker = netsim::register_worker_kind(
    "torch", [](netsim::Scenario&, const netsim::SlowStepFn&) -> netsim::WorkerPlugin {
      become_meridian_torch("a scenario with `worker: torch`");
    });
#endif

}  // namespace
}  // namespace meridian::cli
