// `meridian train`: trains one TorchWorker on its data shard (no network), printing a CSV of
// train and validation loss; optional checkpoint and resume. The baseline of the convergence
// study; DiLoCo runs go through the engine's node loop.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "cli/args.h"
#include "cli/command.h"
#include "cli/progress.h"
#include "cli/torch_commands.h"
#ifdef MERIDIAN_HAVE_TRAIN_NODE
#include "cli/train/train_node.h"
#endif
#include "engine/core/error.h"
#include "trainer/adamw.h"
#include "trainer/torch_worker.h"

namespace meridian::cli {
namespace {

constexpr const char* kWorkerUsage =
    "usage: meridian train [options]   one LibTorch worker alone, no network (the baseline of\n"
    "                                  the convergence study; a node of a real run: above)\n"
    "  --model NAME|FILE.yaml   model and train config (default small)\n"
    "  --steps N                inner steps to run (default 100)\n"
    "  --batch B                sequences per step (default: the config's)\n"
    "  --seq-len T              sequence length (default: the config's)\n"
    "  --lr X --warmup N        peak learning rate, warmup steps (default: the config's)\n"
    "  --decay-start N --total-steps N   1-sqrt decay to 0 between these steps\n"
    "  --z-loss W               max-z-loss weight (default 0)\n"
    "  --bf16                   bf16 autocast even on a CPU without native bf16 (slow);\n"
    "                           default: the config's train.bf16_autocast (small: auto)\n"
    "  --seed S                 init and shuffling seed (default 0)\n"
    "  --shard R/W              data shard R of W (default 0/1)\n"
    "  --eval-every K           validation loss every K steps (default 25)\n"
    "  --val-sequences N        validation set size (default 32)\n"
    "  --csv FILE               write the loss curve there (default: stdout)\n"
    "  --cache DIR              tokenizer and token cache (default .cache/meridian-trainer)\n"
    "  --corpus-files a,b       fortune files to use (default: all installed)\n"
    "  --checkpoint DIR         save a checkpoint there at the end\n"
    "  --resume DIR             start from a checkpoint (verified against its manifest.json:\n"
    "                           size and SHA-256 of every file; refused when any check fails)\n";

// One help text for both forms: a node of a real run (when this build has it), then the worker.
#ifdef MERIDIAN_HAVE_TRAIN_NODE
const std::string kUsage = std::string(kTrainNodeUsage) + "\n" + kWorkerUsage;
#else
const std::string kUsage = kWorkerUsage;
#endif

struct Args {
  std::map<std::string, std::string> kv;
  bool has(const std::string& k) const { return kv.count(k) > 0; }
  std::string str(const std::string& k, const std::string& d) const {
    return has(k) ? kv.at(k) : d;
  }
  double num(const std::string& k, double d) const {
    if (!has(k)) return d;
    try {
      std::size_t used = 0;
      const double v = std::stod(kv.at(k), &used);
      if (used != kv.at(k).size()) throw std::invalid_argument("trailing");
      return v;
    } catch (const std::exception&) {
      throw ConfigError("--" + k + ": expected a number, got '" + kv.at(k) + "'");
    }
  }
};

Args parse(const std::vector<std::string>& argv) {
  static const std::map<std::string, bool> known = {
      {"model", true},  {"steps", true}, {"seq-len", true},      {"batch", true},        {"lr", true},
      {"warmup", true}, {"decay-start", true}, {"total-steps", true}, {"z-loss", true},
      {"bf16", false},  {"seed", true},        {"shard", true},       {"eval-every", true},
      {"val-sequences", true}, {"csv", true},  {"cache", true},       {"corpus-files", true},
      {"checkpoint", true}, {"resume", true}};
  Args a;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    if (argv[i].rfind("--", 0) != 0) throw ConfigError("unexpected argument '" + argv[i] + "'");
    const std::string k = argv[i].substr(2);
    const auto it = known.find(k);
    if (it == known.end()) throw ConfigError("unknown option --" + k);
    if (!it->second) {
      a.kv[k] = "1";
    } else {
      a.kv[k] = opt::value(argv, i);
    }
  }
  return a;
}

// The standalone run's worker, step count, evaluation interval and CSV path from its options;
// a ConfigError names the option that is wrong.
trainer::TorchWorkerOptions worker_options(const Args& a, int& steps, int& eval_every,
                                           std::string& csv_path) {
  trainer::TorchWorkerOptions o;
  o.config = trainer::load_named_config(a.str("model", "small"));
  auto& t = o.config.train;
  t.batch = static_cast<int>(a.num("batch", t.batch));
  o.config.model.seq_len = static_cast<int>(a.num("seq-len", o.config.model.seq_len));
  trainer::validate(o.config.model, "--seq-len");
  t.optim.lr = a.num("lr", t.optim.lr);
  t.optim.warmup_steps = static_cast<std::int64_t>(a.num("warmup", t.optim.warmup_steps));
  t.optim.decay_start_step =
      static_cast<std::int64_t>(a.num("decay-start", t.optim.decay_start_step));
  t.optim.total_steps = static_cast<std::int64_t>(a.num("total-steps", t.optim.total_steps));
  t.optim.z_loss_weight = a.num("z-loss", t.optim.z_loss_weight);
  if (a.has("bf16")) t.bf16_autocast = trainer::Bf16Autocast::kOn;
  o.seed = static_cast<std::uint64_t>(a.num("seed", 0));
  o.validation_sequences = static_cast<int>(a.num("val-sequences", 32));
  o.data.cache_dir = a.str("cache", ".cache/meridian-trainer");
  if (a.has("corpus-files")) {
    std::stringstream ss(a.kv.at("corpus-files"));
    for (std::string f; std::getline(ss, f, ',');) o.data.files.push_back(f);
  }
  if (a.has("shard")) {
    const auto s = a.kv.at("shard");
    const auto slash = s.find('/');
    if (slash == std::string::npos) throw ConfigError("--shard: expected R/W, got '" + s + "'");
    o.world = static_cast<int>(opt::integer_in("--shard W", s.substr(slash + 1), 1, 1 << 20));
    o.rank = static_cast<int>(opt::integer_in("--shard R", s.substr(0, slash), 0, o.world - 1));
  }
  steps = static_cast<int>(a.num("steps", 100));
  eval_every = static_cast<int>(a.num("eval-every", 25));
  if (steps < 0 || eval_every <= 0 || t.batch <= 0)
    throw ConfigError("--steps must be >= 0, --eval-every and --batch > 0");
  csv_path = a.str("csv", "");
  if (!csv_path.empty()) opt::check_writable("--csv", csv_path);
  return o;
}

int run_train(const std::vector<std::string>& argv) {
  // `meridian train RUN.yaml ...`: one node of a real run (cli/train/, built with Gloo).
  if (!argv.empty() && argv[0].rfind("--", 0) != 0) {
#ifdef MERIDIAN_HAVE_TRAIN_NODE
    return run_train_node(argv);
#else
    std::cerr << "meridian train RUN.yaml: this build has no Gloo transport "
                 "(configure with -DMERIDIAN_WITH_GLOO=ON)\n";
    return kExitUsage;
#endif
  }
  trainer::TorchWorkerOptions o;
  int steps = 0, eval_every = 0;
  std::string csv_path;
  Args a;
  try {
    a = parse(argv);
    o = worker_options(a, steps, eval_every, csv_path);
  } catch (const ConfigError& e) {
    std::cerr << "meridian train: " << e.what() << "\n" << kUsage;
    return kExitUsage;
  }
  try {
    o.data.on_slow_step = [](const std::string& step) {
      std::cerr << "meridian train: " << step << "\n";
    };
    trainer::TorchWorker w(o);
    if (a.has("resume")) w.load_checkpoint(a.kv.at("resume"));
    std::ofstream file;
    if (!csv_path.empty()) file.open(csv_path);
    std::ostream& out = csv_path.empty() ? std::cout : file;
    std::cerr << trainer::describe(o.config.model) << "corpus: " << w.corpus().train->size()
              << " train tokens, " << w.corpus().validation->size() << " validation tokens\n";
    out << "step,tokens,train_loss,val_loss,lr,elapsed_s\n";
    const auto t0 = std::chrono::steady_clock::now();
    auto elapsed = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    out << w.step() << "," << w.tokens() << ",," << w.evaluate() << ",,"
        << elapsed() << "\n";
    ProgressLine progress;
    for (int done = 0; done < steps;) {
      const int n = std::min(eval_every, steps - done);
      const double lr = trainer::scheduled_lr(o.config.train.optim, w.step() + n - 1);
      // One step at a time for the progress line; the sum runs in the order run_inner_steps(n)
      // adds, so the mean loss is the same.
      double loss_sum = 0;
      for (int k = 0; k < n; ++k) {
        const double loss = w.run_inner_steps(1).loss;
        loss_sum += loss;
        char text[80];
        std::snprintf(text, sizeof text, "step %d/%d  loss %.3f", done + k + 1, steps, loss);
        progress.update(double(done + k + 1) / steps, text);
      }
      done += n;
      const double val_loss = w.evaluate();
      progress.clear();
      out << w.step() << "," << w.tokens() << "," << loss_sum / n << "," << val_loss << "," << lr
          << "," << elapsed() << std::endl;
    }
    progress.finish();
    if (a.has("checkpoint")) w.save_checkpoint(a.kv.at("checkpoint"));
  } catch (const ConfigError& e) {
    std::cerr << "meridian train: " << e.what() << "\n";
    return kExitUsage;
  } catch (const Error& e) {
    std::cerr << "meridian train: " << e.what() << "\n";
    return kExitFailed;
  }
  return kExitOk;
}

MERIDIAN_COMMAND("train", torch_command_summary("train"), kUsage, run_train);

}  // namespace
}  // namespace meridian::cli
