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
#include "cli/progress.h"
#include "cli/torch_commands.h"
#include "engine/backends/event_sinks/sinks.h"
#include "engine/core/codec/codec.h"
#include "engine/core/error.h"
#include "engine/core/events/event_sink.h"
#include "trainer/diloco_emulation.h"

namespace meridian::cli {
namespace {

constexpr std::uint64_t kMaxCount = 1u << 30;  // bound of every count option

constexpr const char* kUsage =
    "usage: meridian train-diloco [options]\n"
    "  --model NAME|FILE.yaml   (default small)\n"
    "  --nodes N                initial nodes (default 4)\n"
    "  --inner-steps H          (default 50)   --outer-steps S (default 4)\n"
    "  --codec fp32|bf16|int8|int8-minmax|fp4|topk   wire codec (default fp32; topk: 2 %,\n"
    "                           2 bits, all-gathered, error feedback 0.95)\n"
    "  --batch B --seq-len T --lr X --warmup N   override the model config\n"
    "  --seed S --val-sequences N --cache DIR --csv FILE --events FILE\n"
    "  --fail NODE@STEP         node id NODE (1..N) dies after outer step STEP (repeatable)\n"
    "  --join STEP              a new node joins after outer step STEP (repeatable); the\n"
    "                           run's data plan gives it a member's share\n";

// Reads the command line into `e` and the output paths. Every value is checked here, before
// the model or the corpus is touched; a ConfigError names the option and what it expects.
void parse_train_diloco_args(const std::vector<std::string>& argv, trainer::EmulationOptions& e,
                             std::string& csv_path, std::string& events_path) {
  auto& o = e.worker;
  auto& d = e.diloco;
  int& nodes = e.nodes;
  std::map<std::string, std::string> kv;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    if (argv[i].rfind("--", 0) != 0 || i + 1 >= argv.size())
      throw ConfigError("expected --option VALUE pairs, got '" + argv[i] + "'");
    const std::string k = argv[i].substr(2), v = argv[++i];
    if (k == "fail") {
      const auto at = v.find('@');
      if (at == std::string::npos) throw ConfigError("--fail: expected NODE@STEP, got '" + v + "'");
      e.fail_after.emplace(opt::integer_in("--fail STEP", v.substr(at + 1), 0, kMaxCount),
                           opt::integer_in("--fail NODE", v.substr(0, at), 1, kMaxCount));
    } else if (k == "join") {
      e.join_after.push_back(opt::integer_in("--join", v, 0, kMaxCount));
    } else {
      kv[k] = v;
    }
  }
  auto take = [&](const std::string& k, const std::string& def) {
    auto it = kv.find(k);
    std::string v = it == kv.end() ? def : it->second;
    if (it != kv.end()) kv.erase(it);
    return v;
  };
  const auto count = [&](const std::string& k, std::uint64_t lo) -> std::optional<std::int64_t> {
    const auto it = kv.find(k);
    if (it == kv.end()) return std::nullopt;
    const auto v = static_cast<std::int64_t>(opt::integer_in("--" + k, it->second, lo, kMaxCount));
    kv.erase(it);
    return v;
  };
  const std::string model = take("model", "small");
  const auto batch = count("batch", 1), seq_len = count("seq-len", 1);
  const auto warmup = count("warmup", 0);
  const std::string lr = take("lr", "");
  const double lr_value = lr.empty() ? 0.0 : opt::number("--lr", lr);
  o.seed = opt::unsigned_integer("--seed", take("seed", "0"));
  o.validation_sequences = static_cast<int>(count("val-sequences", 1).value_or(32));
  o.data.cache_dir = take("cache", ".cache/meridian-trainer");
  nodes = static_cast<int>(count("nodes", 1).value_or(4));
  d.inner_steps = static_cast<int>(count("inner-steps", 1).value_or(50));
  d.outer_steps = count("outer-steps", 1).value_or(4);
  d.codec = parse_codec(take("codec", "fp32"));
  if (d.codec == CodecId::kTopk) d.error_feedback = kDefaultErrorFeedback;
  csv_path = take("csv", "");
  events_path = take("events", "");
  if (!csv_path.empty()) opt::check_writable("--csv", csv_path);
  if (!events_path.empty()) opt::check_writable("--events", events_path);
  if (!kv.empty()) throw ConfigError("unknown option --" + kv.begin()->first);
  trainer::validate_emulation(e);  // the churn schedule, before the model or the corpus
  o.data.on_slow_step = [](const std::string& step) {
    std::cerr << "meridian train-diloco: " << step << "\n";
  };

  o.config = trainer::load_named_config(model);
  auto& t = o.config.train;
  if (batch) t.batch = static_cast<int>(*batch);
  if (seq_len) o.config.model.seq_len = static_cast<int>(*seq_len);
  trainer::validate(o.config.model, "--seq-len");
  if (!lr.empty()) t.optim.lr = lr_value;
  if (warmup) t.optim.warmup_steps = *warmup;
}

int run_train_diloco(const std::vector<std::string>& argv) {
  trainer::EmulationOptions e;
  auto& o = e.worker;
  auto& d = e.diloco;
  std::string csv_path, events_path;
  try {
    parse_train_diloco_args(argv, e, csv_path, events_path);
  } catch (const ConfigError& err) {
    std::cerr << "meridian train-diloco: " << err.what() << "\n" << kUsage;
    return kExitUsage;
  }
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

MERIDIAN_COMMAND("train-diloco", torch_command_summary("train-diloco"), kUsage, run_train_diloco);

}  // namespace
}  // namespace meridian::cli
