// `meridian store`: the run's key-value store as a standalone process (the first node embeds the
// same server by default). Serves until SIGINT or SIGTERM. Not a node: it trains nothing.
#include <signal.h>

#include <iostream>

#include "cli/args.h"
#include "cli/build_info.h"
#include "cli/command.h"
#include "cli/options.h"
#include "cli/run_config_hash.h"
#include "engine/backends/store_tcp/tcp_store.h"
#include "engine/core/error.h"

namespace meridian::cli {
namespace {

struct StoreArgs {
  TcpStoreServerOptions server;
  bool have_port = false;
  std::string secret_file, run_yaml;
  std::vector<std::string> overrides;
};

std::unique_ptr<Options> options(StoreArgs& a) {
  auto o = std::make_unique<Options>(
      "meridian store",
      std::vector<std::string>{
          "--port P --secret-file F [--bind HOST]",
          "--port P --secret-file F [--config RUN.yaml [--set KEY=VALUE]... | --config-hash H]"},
      "Serves the run's rendezvous and membership store on HOST:P. Nodes join by proving they "
      "hold the secret in F (challenge-response HMAC-SHA256; the secret never crosses the "
      "network). A node running another meridian version is refused, and so is a node whose run "
      "configuration differs: each node sends the hash of its resolved configuration (RUN.yaml "
      "with its --set overrides and --transport). The run's hash is that of --config, else "
      "--config-hash, else the hash of the first node to join.");
  o->value("--port", "P", "the port to serve (0 picks a free one)",
           [&a](const std::string& n, const std::string& v) {
             a.server.port = opt::port(n, v);
             a.have_port = true;
           })
      .text("--secret-file", "F", "the run's secret", a.secret_file)
      .text("--bind", "HOST",
            "the address to serve (default 127.0.0.1, this machine only; 0.0.0.0 serves every "
            "interface)",
            a.server.bind_host)
      .text("--config", "RUN.yaml",
            "the run's hash: RUN.yaml resolved as `meridian train RUN.yaml` resolves it, with "
            "the same --set overrides as the nodes",
            a.run_yaml)
      .texts("--set", "KEY=VALUE", "an override of --config's RUN.yaml (repeatable)", a.overrides)
      .value("--config-hash", "H", "the run's hash, as a refused node's error names it",
             [&a](const std::string& n, const std::string& v) {
               if (v.empty()) throw ConfigError(n + ": empty hash");
               a.server.identity.config_hash = v;
             })
      .notes(
          "Connections that have not joined are bounded (256 in all, 32 per address): a "
          "newcomer sheds one, first one stalled mid-handshake, else the oldest idle; one not "
          "joined within 10 s is closed. Each refused client gets one line on stderr (at most "
          "5 a second, the rest counted). Prints 'store listening on HOST:PORT' once ready.");
  return o;
}

int run_store(const std::vector<std::string>& args) {
  StoreArgs a;
  a.server.identity.version = kVersion;
  const auto o = options(a);
  o->parse(args);
  TcpStoreServerOptions& options = a.server;
  if (!a.run_yaml.empty() && !options.identity.config_hash.empty())
    throw ConfigError("give one of --config and --config-hash\n" + o->usage());
  if (!a.overrides.empty() && a.run_yaml.empty())
    throw ConfigError("--set overrides a key of --config RUN.yaml, and there is none\n" +
                      o->usage());
  if (!a.run_yaml.empty()) {
    if (!run_config_hash_fn())
      throw ConfigError(
          "--config: this meridian was built without the trainer, which resolves a "
          "run file; give --config-hash H (a refused node's error names its hash)");
    options.identity.config_hash = run_config_hash_fn()(a.run_yaml, a.overrides);
  }
  if (!a.have_port || a.secret_file.empty())
    throw ConfigError("--port and --secret-file are required\n" + o->usage());
  const std::string& secret_file = a.secret_file;
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

MERIDIAN_COMMAND("store", "serve the run's rendezvous store (standalone)",
                 help_of<StoreArgs>(options), run_store);

}  // namespace
}  // namespace meridian::cli
