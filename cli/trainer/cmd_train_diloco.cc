// `meridian train-diloco`: N DiLoCo nodes as threads of one process, each a TorchWorker on the
// run's data plan, over the in-process transport and an in-memory store, with an optional churn
// schedule (a node fails at an outer step, a joiner arrives and recovers live). Prints the
// validation loss of the outer parameters per outer step as CSV. The emulation of the
// convergence study on one machine; not the simulator (no network model).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>

#include "cli/args.h"
#include "cli/build_info.h"
#include "cli/command.h"
#include "cli/compose/thread_world.h"
#include "cli/options.h"
#include "cli/progress.h"
#include "cli/torch_commands.h"
#include "engine/backends/event_sinks/sinks.h"
#include "engine/core/codec/codec.h"
#include "engine/core/error.h"
#include "engine/core/events/event_sink.h"
#include "trainer/diloco_emulation.h"
#include "trainer/run_config.h"

namespace meridian::cli {
namespace {

constexpr std::uint64_t kMaxCount = 1u << 30;  // bound of every count option

// What `meridian train-diloco` was asked, as given (checked as each option is read).
struct DilocoArgs {
  std::string run_file;                // RUN.yaml: the run's settings come from it
  std::vector<std::string> overrides;  // --set, with RUN.yaml
  std::string model = "small", cache = ".cache/meridian-trainer", csv, events, codec = "fp32";
  std::optional<double> lr;
  std::optional<std::int64_t> batch, seq_len, warmup;
  std::uint64_t seed = 0;
  std::int64_t val_sequences = 32, nodes = 4, inner_steps = 50, outer_steps = 4;
  std::multimap<std::int64_t, std::int64_t> fail_after;  // outer step -> node id
  std::vector<std::int64_t> join_after;
};

std::unique_ptr<Options> options(DilocoArgs& a) {
  auto o = std::make_unique<Options>(
      "meridian train-diloco",
      std::vector<std::string>{"RUN.yaml [--set KEY=VALUE]... [--fail NODE@STEP]... "
                               "[--join STEP]... [--csv FILE] [--events FILE]",
                               "[options]"},
      "N DiLoCo nodes as threads of one process, each a TorchWorker on the run's data plan, over "
      "the in-process transport and an in-memory store, with an optional churn schedule. Prints "
      "the validation loss of the outer parameters per outer step as CSV. The run is a run file, "
      "as `meridian train` and `meridian sim` take it (run.nodes nodes, its model, train, data "
      "and diloco sections; its network, store and transport are not used here), or the options "
      "below without one.");
  o->argument("RUN.yaml", "the run file (cli/train/README.md, \"The run file\")", a.run_file, false)
      .texts("--set", "KEY=VALUE", "with RUN.yaml: override a key of it (repeatable)", a.overrides);
  const auto count = [](std::optional<std::int64_t>& into, std::uint64_t lo) {
    return [&into, lo](const std::string& n, const std::string& v) {
      into = static_cast<std::int64_t>(opt::integer_in(n, v, lo, kMaxCount));
    };
  };
  o->text("--model", "NAME|FILE.yaml", "without RUN.yaml: the model config (default small)",
          a.model)
      .integer("--nodes", "N", "initial nodes (default 4)", a.nodes, 1, kMaxCount)
      .integer("--inner-steps", "H", "inner steps per outer step (default 50)", a.inner_steps, 1,
               kMaxCount)
      .integer("--outer-steps", "S", "outer steps (default 4)", a.outer_steps, 1, kMaxCount)
      .text("--codec", "C",
            "wire codec: fp32, bf16, int8, int8-minmax, fp4 or topk (default fp32; topk: 2 %, 2 "
            "bits, all-gathered, error feedback 0.95)",
            a.codec)
      .value("--batch", "B", "sequences per step (default: the model config's)", count(a.batch, 1))
      .value("--seq-len", "T", "sequence length (default: the model config's)", count(a.seq_len, 1))
      .value("--lr", "X", "peak learning rate (default: the model config's)",
             [&a](const std::string& n, const std::string& v) { a.lr = opt::number(n, v); })
      .value("--warmup", "N", "warmup steps (default: the model config's)", count(a.warmup, 0))
      .integer("--seed", "S", "the seed (default 0)", a.seed, 0, ~std::uint64_t{0})
      .integer("--val-sequences", "N", "validation set size (default 32)", a.val_sequences, 1,
               kMaxCount)
      .text("--cache", "DIR", "tokenizer and token cache (default .cache/meridian-trainer)",
            a.cache)
      .text("--csv", "FILE",
            "the loss curve, a row per outer step (default: stdout); its tokens and train_loss "
            "are what the workers had done when the step's first node reported it",
            a.csv)
      .text("--events", "FILE", "the run's events (JSON lines)", a.events)
      .value("--fail", "NODE@STEP", "node id NODE (1..N) dies after outer step STEP (repeatable)",
             [&a](const std::string& n, const std::string& v) {
               const auto at = v.find('@');
               if (at == std::string::npos)
                 throw ConfigError(n + ": expected NODE@STEP, got '" + v + "'");
               a.fail_after.emplace(static_cast<std::int64_t>(opt::integer_in(
                                        n + " STEP", v.substr(at + 1), 0, kMaxCount)),
                                    static_cast<std::int64_t>(opt::integer_in(
                                        n + " NODE", v.substr(0, at), 1, kMaxCount)));
             })
      .value(
          "--join", "STEP",
          "a new node joins after outer step STEP (repeatable); the run's data plan gives it a "
          "member's share",
          [&a](const std::string& n, const std::string& v) {
            a.join_after.push_back(static_cast<std::int64_t>(opt::integer_in(n, v, 0, kMaxCount)));
          });
  return o;
}

// The run's settings from the options (no run file); the model is loaded by load_model, after
// every check.
void from_options(const DilocoArgs& a, trainer::EmulationOptions& e) {
  auto& o = e.worker;
  auto& d = e.diloco;
  o.seed = a.seed;
  o.validation_sequences = static_cast<int>(a.val_sequences);
  o.data.cache_dir = a.cache;
  e.nodes = static_cast<int>(a.nodes);
  d.inner_steps = static_cast<int>(a.inner_steps);
  d.outer_steps = a.outer_steps;
  d.codec = parse_codec(a.codec);
  if (d.codec == CodecId::kTopk) d.error_feedback = kDefaultErrorFeedback;
}

// The options that say what a run file says: refused beside one (the file, or --set, says it).
constexpr const char* kRunFileKeys[][2] = {{"--model", "model"},
                                           {"--nodes", "run.nodes"},
                                           {"--inner-steps", "diloco.H"},
                                           {"--outer-steps", "run.outer_steps"},
                                           {"--codec", "diloco.codec"},
                                           {"--batch", "train.batch"},
                                           {"--seq-len", "model.seq_len"},
                                           {"--lr", "train.lr"},
                                           {"--warmup", "train.warmup_steps"},
                                           {"--seed", "run.seed"},
                                           {"--val-sequences", "data.validation_sequences"},
                                           {"--cache", "data.cache_dir"}};

// The run's settings from RUN.yaml, resolved as a real node resolves them (trainer/run_config.h):
// run.nodes nodes, the model and inner optimizer, the data, DilocoOptions.
void from_run_file(const DilocoArgs& a, const Options& opts, trainer::EmulationOptions& e) {
  for (const auto& [option, key] : kRunFileKeys)
    if (opts.given(option))
      throw ConfigError(std::string(option) + ": the run file says it (" + key +
                        "); set it there or with --set " + key + "=...");
  const trainer::RunConfig c = trainer::load_run_config(a.run_file, a.overrides);
  e.worker.config = c.trainer;
  e.worker.data = c.data;
  e.worker.seed = c.seed;
  e.worker.validation_sequences = c.validation_sequences;
  e.nodes = c.initial_nodes;
  e.diloco = c.diloco;
}

// The model config of the options, with their overrides.
void load_model(const DilocoArgs& a, trainer::TorchWorkerOptions& o) {
  o.config = trainer::load_named_config(a.model);
  auto& t = o.config.train;
  if (a.batch) t.batch = static_cast<int>(*a.batch);
  if (a.seq_len) o.config.model.seq_len = static_cast<int>(*a.seq_len);
  trainer::validate(o.config.model, "--seq-len");
  if (a.lr) t.optim.lr = *a.lr;
  if (a.warmup) t.optim.warmup_steps = *a.warmup;
}

// Reads the command line into `e` and the output paths. Every value is checked here, before
// the model or the corpus is touched; a ConfigError names the option and what it expects.
void parse_train_diloco_args(const std::vector<std::string>& argv, trainer::EmulationOptions& e,
                             std::string& csv_path, std::string& events_path) {
  DilocoArgs a;
  const auto opts = options(a);
  opts->parse(argv);
  if (!a.run_file.empty()) {
    from_run_file(a, *opts, e);
  } else {
    if (!a.overrides.empty()) throw ConfigError("--set: only with a run file (RUN.yaml)");
    from_options(a, e);
  }
  e.fail_after = a.fail_after;
  e.join_after = a.join_after;
  csv_path = a.csv;
  events_path = a.events;
  if (!csv_path.empty()) opt::check_writable("--csv", csv_path);
  if (!events_path.empty()) opt::check_writable("--events", events_path);
  trainer::validate_emulation(e);  // the churn schedule, before the model or the corpus
  e.worker.data.on_slow_step = [](const std::string& step) {
    std::cerr << "meridian train-diloco: " << step << "\n";
  };
  if (a.run_file.empty()) load_model(a, e.worker);
}

int run_train_diloco(const std::vector<std::string>& argv) {
  trainer::EmulationOptions e;
  auto& o = e.worker;
  auto& d = e.diloco;
  std::string csv_path, events_path;
  parse_train_diloco_args(argv, e, csv_path, events_path);
  // Nodes share one core here: bounds are generous, a failed node is cut off explicitly.
  d.allreduce_timeout_s = 1800;
  d.recovery.timeout_s = 1800;
  d.mesh.admission_timeout_s = 3600;
  d.mesh.round_timeout_s = 3600;
  d.mesh.outer_steps = d.outer_steps;
  try {
    std::ofstream csv_file, events_file;
    if (!csv_path.empty()) csv_file.open(csv_path);
    if (!events_path.empty()) events_file.open(events_path);
    NullEventSink null_sink;
    JsonlEventSink jsonl(events_file);
    EventSink& sink = events_path.empty() ? static_cast<EventSink&>(null_sink) : jsonl;
    std::cerr << trainer::describe(o.config.model);
    e.version = kVersion;
    e.command = "meridian train-diloco";
    for (const auto& arg : argv) e.command += " " + arg;
    std::ostream& csv = csv_path.empty() ? std::cout : csv_file;
    csv << "outer_step,inner_steps_per_node,members,tokens,train_loss,val_loss,fallback,elapsed_s\n";
    ProgressLine progress;
    progress.update(0, "outer step 0/" + std::to_string(d.outer_steps) + "  (first inner steps)",
                    true);
    compose::ThreadWorld world;
    const auto result = trainer::run_emulation(
        e, world, sink,
        [&](const trainer::EmulatedStep& s) {
          progress.clear();
          csv << s.outer_step << "," << d.inner_steps << "," << s.members << "," << s.tokens
              << "," << s.train_loss << "," << s.val_loss << "," << s.fallback << ","
              << s.elapsed_s << std::endl;
          char text[96];
          std::snprintf(text, sizeof text, "outer step %lld/%lld  %zu members  val loss %.3f",
                        static_cast<long long>(s.outer_step), static_cast<long long>(d.outer_steps),
                        s.members, s.val_loss);
          progress.update(double(s.outer_step) / d.outer_steps, text, true);
        },
        [&](const std::string& line) {
          progress.clear();
          std::cerr << line << "\n";
        });
    progress.finish();
    for (const auto& n : result.nodes)
      std::cerr << "node " << n.id << ": " << node_exit_name(n.result.exit) << " after "
                << n.result.outer_steps_applied << " outer steps " << n.result.what << "\n";
  } catch (const ConfigError& err) {
    std::cerr << "meridian train-diloco: " << err.what() << "\n";
    return kExitUsage;
  } catch (const Error& err) {
    std::cerr << "meridian train-diloco: " << err.what() << "\n";
    return kExitFailed;
  }
  return kExitOk;
}

MERIDIAN_COMMAND("train-diloco", torch_command_summary("train-diloco"),
                 help_of<DilocoArgs>(options), run_train_diloco);

}  // namespace
}  // namespace meridian::cli
