// `meridian train`: trains one TorchWorker on its data shard (no network), printing a CSV of
// train and validation loss; optional checkpoint and resume. The baseline of the convergence
// study; DiLoCo runs go through the engine's node loop.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "cli/args.h"
#include "cli/command.h"
#include "cli/options.h"
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

// What the standalone worker was asked; unset numbers keep the model config's.
struct WorkerArgs {
  std::string model = "small", shard, csv, cache = ".cache/meridian-trainer", corpus_files;
  std::string checkpoint, resume;
  std::optional<double> batch, seq_len, lr, warmup, decay_start, total_steps, z_loss;
  double seed = 0, val_sequences = 32, steps = 100, eval_every = 25;
  bool bf16 = false;
};

std::unique_ptr<Options> worker_options_of(WorkerArgs& a) {
  auto o = std::make_unique<Options>(
      "meridian train",
      std::vector<std::string>{"[options]   one LibTorch worker alone, no network"},
      "One LibTorch worker alone, no network: the baseline of the convergence study (a node of a "
      "real run: above). Prints the loss curve as CSV.");
  const auto optional = [](std::optional<double>& into) {
    return [&into](const std::string& n, const std::string& v) { into = opt::number(n, v); };
  };
  o->text("--model", "NAME|FILE.yaml", "model and train config (default small)", a.model)
      .number("--steps", "N", "inner steps to run (default 100)", a.steps)
      .value("--batch", "B", "sequences per step (default: the config's)", optional(a.batch))
      .value("--seq-len", "T", "sequence length (default: the config's)", optional(a.seq_len))
      .value("--lr", "X", "peak learning rate (default: the config's)", optional(a.lr))
      .value("--warmup", "N", "warmup steps (default: the config's)", optional(a.warmup))
      .value("--decay-start", "N", "1-sqrt decay to 0 from this step", optional(a.decay_start))
      .value("--total-steps", "N", "... to this one", optional(a.total_steps))
      .value("--z-loss", "W", "max-z-loss weight (default 0)", optional(a.z_loss))
      .flag("--bf16",
            "bf16 autocast even on a CPU without native bf16 (slow); default: the config's "
            "train.bf16_autocast (small: auto)",
            a.bf16)
      .number("--seed", "S", "init and shuffling seed (default 0)", a.seed)
      .text("--shard", "R/W", "data shard R of W (default 0/1)", a.shard)
      .number("--eval-every", "K", "validation loss every K steps (default 25)", a.eval_every)
      .number("--val-sequences", "N", "validation set size (default 32)", a.val_sequences)
      .text("--csv", "FILE", "write the loss curve there (default: stdout)", a.csv)
      .text("--cache", "DIR", "tokenizer and token cache (default .cache/meridian-trainer)",
            a.cache)
      .text("--corpus-files", "a,b", "fortune files to use (default: all installed)",
            a.corpus_files)
      .text("--checkpoint", "DIR", "save a checkpoint there at the end", a.checkpoint)
      .text("--resume", "DIR",
            "start from a checkpoint (verified against its manifest.json: size and SHA-256 of "
            "every file; refused when any check fails)",
            a.resume);
  return o;
}

// One help text for both forms: a node of a real run (when this build has it), then the worker.
std::string help() {
  WorkerArgs a;
  const std::string worker = worker_options_of(a)->help();
#ifdef MERIDIAN_HAVE_TRAIN_NODE
  return train_node_help() + "\n" + worker;
#else
  return worker;
#endif
}

// The standalone run's worker, step count, evaluation interval and CSV path from its options;
// a ConfigError names the option that is wrong.
trainer::TorchWorkerOptions worker_options(const WorkerArgs& a, int& steps, int& eval_every,
                                           std::string& csv_path) {
  trainer::TorchWorkerOptions o;
  o.config = trainer::load_named_config(a.model);
  auto& t = o.config.train;
  t.batch = static_cast<int>(a.batch.value_or(t.batch));
  o.config.model.seq_len = static_cast<int>(a.seq_len.value_or(o.config.model.seq_len));
  trainer::validate(o.config.model, "--seq-len");
  t.optim.lr = a.lr.value_or(t.optim.lr);
  t.optim.warmup_steps =
      static_cast<std::int64_t>(a.warmup.value_or(static_cast<double>(t.optim.warmup_steps)));
  t.optim.decay_start_step = static_cast<std::int64_t>(
      a.decay_start.value_or(static_cast<double>(t.optim.decay_start_step)));
  t.optim.total_steps =
      static_cast<std::int64_t>(a.total_steps.value_or(static_cast<double>(t.optim.total_steps)));
  t.optim.z_loss_weight = a.z_loss.value_or(t.optim.z_loss_weight);
  if (a.bf16) t.bf16_autocast = trainer::Bf16Autocast::kOn;
  o.seed = static_cast<std::uint64_t>(a.seed);
  o.validation_sequences = static_cast<int>(a.val_sequences);
  o.data.cache_dir = a.cache;
  if (!a.corpus_files.empty()) {
    std::stringstream ss(a.corpus_files);
    for (std::string f; std::getline(ss, f, ',');) o.data.files.push_back(f);
  }
  if (!a.shard.empty()) {
    const auto& s = a.shard;
    const auto slash = s.find('/');
    if (slash == std::string::npos) throw ConfigError("--shard: expected R/W, got '" + s + "'");
    o.world = static_cast<int>(opt::integer_in("--shard W", s.substr(slash + 1), 1, 1 << 20));
    o.rank = static_cast<int>(opt::integer_in("--shard R", s.substr(0, slash), 0, o.world - 1));
  }
  steps = static_cast<int>(a.steps);
  eval_every = static_cast<int>(a.eval_every);
  if (steps < 0 || eval_every <= 0 || t.batch <= 0)
    throw ConfigError("--steps must be >= 0, --eval-every and --batch > 0");
  csv_path = a.csv;
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
  WorkerArgs a;
  worker_options_of(a)->parse(argv);
  o = worker_options(a, steps, eval_every, csv_path);
  try {
    o.data.on_slow_step = [](const std::string& step) {
      std::cerr << "meridian train: " << step << "\n";
    };
    trainer::TorchWorker w(o);
    if (!a.resume.empty()) w.load_checkpoint(a.resume);
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
    if (!a.checkpoint.empty()) w.save_checkpoint(a.checkpoint);
  } catch (const ConfigError& e) {
    std::cerr << "meridian train: " << e.what() << "\n";
    return kExitUsage;
  } catch (const Error& e) {
    std::cerr << "meridian train: " << e.what() << "\n";
    return kExitFailed;
  }
  return kExitOk;
}

MERIDIAN_COMMAND("train", torch_command_summary("train"), help, run_train);

}  // namespace
}  // namespace meridian::cli
