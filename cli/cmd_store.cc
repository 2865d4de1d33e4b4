// `meridian store`: the run's key-value store as a standalone process (the first node embeds the
// same server by default). Serves until SIGINT or SIGTERM. Not a node: it trains nothing.
#include <signal.h>

#include <iostream>

#include "cli/args.h"
#include "cli/build_info.h"
#include "cli/command.h"
#include "cli/run_config_hash.h"
#include "engine/backends/store_tcp/tcp_store.h"
#include "engine/core/error.h"

namespace meridian::cli {
namespace {

constexpr char kUsage[] =
    "usage: meridian store --port P --secret-file F [--bind HOST]\n"
    "                      [--config RUN.yaml [--set KEY=VALUE]... | --config-hash H]\n"
    "\n"
    "Serves the run's rendezvous and membership store on HOST:P (default HOST 127.0.0.1, this\n"
    "machine only; --bind 0.0.0.0 serves every interface; P = 0 picks a free port). Nodes join\n"
    "by proving they hold the secret in F (challenge-response HMAC-SHA256; the secret never\n"
    "crosses the network). A node running another meridian version is refused, and so is a node\n"
    "whose run configuration differs: each node sends the hash of its resolved configuration\n"
    "(RUN.yaml with its --set overrides and --transport). The run's hash is, in this order:\n"
    "  --config RUN.yaml     RUN.yaml resolved as `meridian train RUN.yaml` resolves it, with\n"
    "                        the same --set overrides (repeatable) as the nodes\n"
    "  --config-hash H       H, as a refused node's error names it\n"
    "  (neither)             the hash of the first node to join\n"
    "Connections that have not joined are bounded (256 in all, 32 per address): a newcomer sheds\n"
    "one, first one stalled mid-handshake, else the oldest idle; one not joined within 10 s is\n"
    "closed. Each refused client gets one line on stderr (at most 5 a second, the rest counted).\n"
    "Prints 'store listening on HOST:PORT' once ready.\n";

int run_store(const std::vector<std::string>& args) {
  TcpStoreServerOptions options;
  options.identity.version = kVersion;
  bool have_port = false;
  std::string secret_file, run_yaml;
  std::vector<std::string> overrides;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const auto value = [&]() -> const std::string& { return opt::value(args, i, kUsage); };
    if (a == "--port") {
      options.port = opt::port("--port", value());
      have_port = true;
    } else if (a == "--secret-file") {
      secret_file = value();
    } else if (a == "--bind") {
      options.bind_host = value();
    } else if (a == "--config-hash") {
      options.identity.config_hash = value();
      if (options.identity.config_hash.empty()) throw ConfigError("--config-hash: empty hash");
    } else if (a == "--config") {
      run_yaml = value();
    } else if (a == "--set") {
      overrides.push_back(value());
    } else {
      throw ConfigError("unknown argument '" + a + "'\n" + kUsage);
    }
  }
  if (!run_yaml.empty() && !options.identity.config_hash.empty())
    throw ConfigError("give one of --config and --config-hash\n" + std::string(kUsage));
  if (!overrides.empty() && run_yaml.empty())
    throw ConfigError("--set overrides a key of --config RUN.yaml, and there is none\n" +
                      std::string(kUsage));
  if (!run_yaml.empty()) {
    if (!run_config_hash_fn())
      throw ConfigError(
          "--config: this meridian was built without the trainer, which resolves a "
          "run file; give --config-hash H (a refused node's error names its hash)");
    options.identity.config_hash = run_config_hash_fn()(run_yaml, overrides);
  }
  if (!have_port || secret_file.empty()) {
    throw ConfigError(std::string("--port and --secret-file are required\n") + kUsage);
  }
  options.identity.secret = read_secret_file(secret_file);
  options.log = [](const std::string& line) { std::cerr << line << std::endl; };

  // Block the stop signals before the serving thread starts, so only sigwait sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  TcpStoreServer server(options);
  const std::uint16_t port = server.start();
  std::cout << "store listening on " << options.bind_host << ":" << port << " (meridian "
            << kVersion << ", configuration "
            << (options.identity.config_hash.empty() ? std::string("of the first node to join")
                                                     : options.identity.config_hash)
            << ")" << std::endl;
  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  server.stop();
  const auto s = server.stats();
  std::cout << "store stopped: " << s.joined << " joined, " << s.refused << " refused, "
            << s.cut_off << " cut off, " << s.requests << " requests" << std::endl;
  return kExitOk;
}

MERIDIAN_COMMAND("store", "serve the run's rendezvous store (standalone)", kUsage, run_store);

}  // namespace
}  // namespace meridian::cli
