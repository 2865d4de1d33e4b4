// `meridian corpus`: builds (or finds in the cache) a tokenized training corpus and prints its
// size: documents and tokens per split. The same cache the trainer and `worker: torch` use, so a
// long tokenization runs once, before any run.
#include <cstdio>
#include <iostream>

#include "cli/args.h"
#include "cli/command.h"
#include "cli/options.h"
#include "cli/torch_commands.h"
#include "trainer/data.h"

namespace meridian::cli {
namespace {

std::unique_ptr<Options> options(trainer::DataOptions& d) {
  auto o = std::make_unique<Options>(
      "meridian corpus",
      std::vector<std::string>{"[--corpus=fortunes|debian-docs] [--vocab=N] [--cache-dir=DIR] "
                               "[--validation-every=K]"},
      "Tokenizes a corpus once into the cache (SentencePiece unigram) and prints its documents "
      "and tokens per split on stdout. A run selects it with the RUN.yaml / scenario key "
      "data.corpus and must use its model's vocab.");
  o->text("--corpus", "NAME",
          "debian-docs: the kernel's, Python's, Perl's and Git's documentation "
          "(trainer/docs_corpus.h; first build about 10 min on one core); fortunes: the tests' "
          "corpus",
          d.corpus)
      .integer("--vocab", "N", "the tokenizer's vocabulary (default 512)", d.vocab, 64, 1 << 20)
      .text("--cache-dir", "DIR", "the cache (default .cache/meridian-trainer)", d.cache_dir)
      .integer("--validation-every", "K",
               "every K-th document is held out for validation (default 20)", d.validation_every, 2,
               1 << 20);
  return o;
}

int run_corpus(const std::vector<std::string>& args) {
  trainer::DataOptions o;
  o.cache_dir = ".cache/meridian-trainer";
  options(o)->parse(args);
  o.on_slow_step = [](const std::string& step) { std::cerr << "meridian corpus: " << step << "\n"; };
  const trainer::TokenizedCorpus c = trainer::prepare_corpus(o);
  std::cout << "corpus: " << c.corpus << " (checksum " << c.corpus_checksum << ")\n"
            << "tokenizer: " << c.tokenizer_model << " (vocab " << c.vocab << ")\n"
            << "train: " << c.train_documents << " documents, " << c.train->size() << " tokens\n"
            << "validation: " << c.validation_documents << " documents, " << c.validation->size()
            << " tokens\n";
  return kExitOk;
}

MERIDIAN_COMMAND("corpus", torch_command_summary("corpus"), help_of<trainer::DataOptions>(options),
                 run_corpus);

}  // namespace
}  // namespace meridian::cli
