// `meridian finetune`: pre-training, continual pre-training and Spectrum fine-tuning of the
// trainer's model on the general (fortune) or domain (licence texts) corpus, with validation
// loss on both. Writes the weights and a result.json. Not DiLoCo: one process, one shard.
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/command.h"
#include "cli/options.h"
#include "cli/progress.h"
#include "cli/run_folder.h"
#include "cli/torch_commands.h"
#include "engine/core/error.h"
#include "trainer/post/finetune/domain_corpus.h"
#include "trainer/post/finetune/finetune.h"
#include "trainer/post/merge.h"
#include "trainer/post/spectrum.h"

namespace meridian::cli {
namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// What `meridian finetune` was asked.
struct FinetuneArgs {
  std::string config_name, out, corpus_name = "general", init, spectrum_yaml;
  std::string domain_dir = "/usr/share/common-licenses", cache = ".cache/meridian-data";
  int steps = 100, eval_sequences = 32, batch = 0, seq_len = 0;
  std::uint64_t seed = 0;
  double lr = -1, warmup = -1;  // < 0: the model configuration's
  bool force = false;
};

std::unique_ptr<Options> options(FinetuneArgs& f) {
  auto o = std::make_unique<Options>(
      "meridian finetune",
      std::vector<std::string>{"--config NAME|FILE.yaml --out DIR [--force] [--corpus "
                               "general|domain] [--init WEIGHTS] [--spectrum YAML] [--steps N] "
                               "[--lr X] [--warmup N] [--seed S] [--batch B] [--seq-len T] "
                               "[--eval-sequences N] [--domain-dir DIR] [--cache DIR]"},
      "Trains the trainer's model (from --init weights, or the seeded init) for --steps on the "
      "general corpus (the fortune files, whose SentencePiece tokenizer every run uses) or the "
      "domain corpus (paragraphs of --domain-dir). With --spectrum only the YAML's `train:` "
      "tensors are trained and only they get AdamW state. Writes DIR/model.safetensors and "
      "DIR/result.json (per-step loss and time, parameters and optimizer bytes, peak RSS, and "
      "the validation loss on both corpora).");
  o->text("--config", "NAME|FILE.yaml", "the model config (trainer/configs, or a file)",
          f.config_name)
      .text("--out", "DIR", "the output folder", f.out)
      .flag("--force", "write into a DIR that already holds a run (result.json, ...)", f.force)
      .value("--corpus", "general|domain", "the corpus to train on (default general)",
             [&f](const std::string& n, const std::string& v) {
               if (v != "general" && v != "domain")
                 throw ConfigError(n + ": expected general or domain, got '" + v + "'");
               f.corpus_name = v;
             })
      .text("--init", "WEIGHTS",
            "start from these weights: a safetensors file or checkpoint "
            "directory (default: the seeded init)",
            f.init)
      .text("--spectrum", "YAML", "train only the YAML's `train:` tensors (meridian spectrum)",
            f.spectrum_yaml)
      .integer("--steps", "N", "training steps (default 100; 0 only evaluates)", f.steps, 0,
               1u << 30)
      .number("--lr", "X", "the learning rate (default: the model config's)", f.lr)
      .number("--warmup", "N", "warm-up steps (default: the model config's)", f.warmup)
      .integer("--seed", "S", "the seed (default 0)", f.seed, 0, ~std::uint64_t{0})
      .integer("--batch", "B", "sequences per step (default: the model config's)", f.batch, 0,
               1u << 30)
      .integer("--seq-len", "T", "tokens per sequence, at most the model's (default: the model's)",
               f.seq_len, 0, 1u << 30)
      .integer("--eval-sequences", "N", "validation sequences per corpus (default 32)",
               f.eval_sequences, 0, 1u << 30)
      .text("--domain-dir", "DIR",
            "the domain corpus's folder (default /usr/share/common-licenses, from base-files)",
            f.domain_dir)
      .text("--cache", "DIR", "the tokenized corpora's cache (default .cache/meridian-data)",
            f.cache);
  return o;
}

int run_finetune(const std::vector<std::string>& args) {
  FinetuneArgs f;
  const auto opts = options(f);
  opts->parse(args);
  if (f.config_name.empty() || f.out.empty())
    throw ConfigError("--config and --out are required\n" + opts->usage());
  claim_run_folder(f.out, f.force);  // before hours of training, not after
  post::FinetuneOptions o;
  o.config = trainer::load_named_config(f.config_name);
  if (f.lr >= 0) o.config.train.optim.lr = f.lr;
  if (f.warmup >= 0) o.config.train.optim.warmup_steps = static_cast<std::int64_t>(f.warmup);
  if (f.batch > 0) o.config.train.batch = f.batch;
  if (f.seq_len > 0) {
    if (f.seq_len > o.config.model.seq_len)
      throw ConfigError("--seq-len " + std::to_string(f.seq_len) + " exceeds the model's " +
                        std::to_string(o.config.model.seq_len));
    o.config.model.seq_len = f.seq_len;  // shorter sequences only: RoPE tables shrink, weights stay
  }
  o.steps = f.steps;
  o.seed = f.seed;

  // The files the arguments name are read before the corpora are tokenized.
  if (!f.init.empty()) {
    std::filesystem::path p = post::resolve_checkpoint(f.init);
    o.init_params = post::read_weights(p, o.config.model);
  }
  if (!f.spectrum_yaml.empty()) o.trainable = post::read_trainable(f.spectrum_yaml);

  trainer::DataOptions data;
  data.vocab = o.config.model.vocab;
  data.cache_dir = f.cache;
  data.on_slow_step = [](const std::string& step) {
    std::cerr << "meridian finetune: " << step << "\n";
  };
  const trainer::TokenizedCorpus general = trainer::prepare_corpus(data);
  const trainer::TokenizedCorpus domain = post::encode_documents(
      post::read_paragraph_documents(f.domain_dir), general, f.cache, /*validation_every=*/10);

  ProgressLine progress;
  o.on_step = [&](int done, double loss) {
    char text[80];
    std::snprintf(text, sizeof text, "step %d/%d  loss %.3f", done, f.steps, loss);
    progress.update(f.steps > 0 ? double(done) / f.steps : -1, text);
  };
  const post::FinetuneResult r = post::finetune(o, f.corpus_name == "general" ? general : domain);
  progress.finish();
  const double val_general = post::evaluate(o.config, r.params, general, f.eval_sequences);
  const double val_domain = post::evaluate(o.config, r.params, domain, f.eval_sequences);
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);

  std::filesystem::create_directories(f.out);
  post::write_weights(std::filesystem::path(f.out) / "model.safetensors", o.config.model, r.params);
  std::vector<double> steady(r.step_s.begin() + std::min<std::size_t>(r.step_s.size(), 3),
                             r.step_s.end());
  nlohmann::json j = {
      {"command", "meridian finetune"},
      {"config", o.config.model.name},
      {"corpus", f.corpus_name},
      {"init", f.init},
      {"spectrum", f.spectrum_yaml},
      {"steps", f.steps},
      {"lr", o.config.train.optim.lr},
      {"warmup_steps", o.config.train.optim.warmup_steps},
      {"batch", o.config.train.batch},
      {"seq_len", o.config.model.seq_len},
      {"seed", f.seed},
      {"general_corpus",
       {{"train_tokens", general.train->size()},
        {"validation_tokens", general.validation->size()}}},
      {"domain_corpus",
       {{"dir", f.domain_dir},
        {"train_tokens", domain.train->size()},
        {"validation_tokens", domain.validation->size()}}},
      {"params_total", r.params_total},
      {"params_trainable", r.params_trainable},
      {"optimizer_state_bytes", r.optimizer_state_bytes},
      {"optimizer_state_bytes_full", r.optimizer_state_bytes_full},
      {"peak_rss_bytes", static_cast<std::uint64_t>(ru.ru_maxrss) * 1024},
      {"step_s_median", median(steady)},
      {"train_loss", r.train_loss},
      {"step_s", r.step_s},
      {"val_loss_general", val_general},
      {"val_loss_domain", val_domain},
  };
  std::ofstream(std::filesystem::path(f.out) / "result.json") << j.dump(1) << "\n";
  std::cout << "finetune " << o.config.model.name << " on " << f.corpus_name << ": " << f.steps
            << " steps, trainable " << r.params_trainable << "/" << r.params_total << ", step "
            << median(steady) << " s, final train loss "
            << (r.train_loss.empty() ? 0.0 : r.train_loss.back()) << ", val general " << val_general
            << ", val domain " << val_domain << "\n";
  return kExitOk;
}

MERIDIAN_COMMAND("finetune", torch_command_summary("finetune"), help_of<FinetuneArgs>(options),
                 run_finetune);

}  // namespace
}  // namespace meridian::cli
