// `meridian corpus`: builds (or finds in the cache) a tokenized training corpus and prints its
// size: documents and tokens per split. The same cache the trainer and `worker: torch` use, so a
// long tokenization runs once, before any run.
#include <cstdio>
#include <iostream>

#include "cli/args.h"
#include "cli/command.h"
#include "cli/torch_commands.h"
#include "trainer/data.h"

namespace meridian::cli {
namespace {

constexpr const char* kUsage =
    "usage: meridian corpus [--corpus=fortunes|debian-docs] [--vocab=N] [--cache-dir=DIR]\n"
    "                       [--validation-every=K]\n"
    "  Tokenizes a corpus once into the cache (SentencePiece unigram, vocab N; default 512)\n"
    "  and prints its documents and tokens per split on stdout. debian-docs: the kernel's,\n"
    "  Python's, Perl's and Git's documentation (trainer/docs_corpus.h; first build about\n"
    "  10 min on one core); fortunes: the tests' corpus. A run selects it with the RUN.yaml /\n"
    "  scenario key data.corpus and must use its model's vocab. Every K-th document (default\n"
    "  20) is held out for validation. --cache-dir defaults to .cache/meridian-trainer.\n";

int run_corpus(const std::vector<std::string>& args) {
  trainer::DataOptions o;
  o.cache_dir = ".cache/meridian-trainer";
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--corpus") {
      o.corpus = opt::value(args, i, kUsage);
    } else if (a == "--vocab") {
      o.vocab = static_cast<int>(opt::integer_in(a, opt::value(args, i, kUsage), 64, 1 << 20));
    } else if (a == "--cache-dir") {
      o.cache_dir = opt::value(args, i, kUsage);
    } else if (a == "--validation-every") {
      o.validation_every =
          static_cast<int>(opt::integer_in(a, opt::value(args, i, kUsage), 2, 1 << 20));
    } else {
      std::cerr << "meridian corpus: unknown argument '" << a << "'\n" << kUsage;
      return kExitUsage;
    }
  }
  o.on_slow_step = [](const std::string& step) { std::cerr << "meridian corpus: " << step << "\n"; };
  const trainer::TokenizedCorpus c = trainer::prepare_corpus(o);
  std::cout << "corpus: " << c.corpus << " (checksum " << c.corpus_checksum << ")\n"
            << "tokenizer: " << c.tokenizer_model << " (vocab " << c.vocab << ")\n"
            << "train: " << c.train_documents << " documents, " << c.train->size() << " tokens\n"
            << "validation: " << c.validation_documents << " documents, " << c.validation->size()
            << " tokens\n";
  return kExitOk;
}

MERIDIAN_COMMAND("corpus", torch_command_summary("corpus"), kUsage, run_corpus);

}  // namespace
}  // namespace meridian::cli
