// The data pipeline: fortune documents, a deterministic SentencePiece tokenizer, held-out
// validation documents, disjoint shards that cover the stream, and exact resume from a position.
#include "trainer/data.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "engine/core/error.h"
#include "trainer/docs_corpus.h"

namespace meridian::trainer {
namespace {

DataOptions min_corpus(const std::string& cache) {
  DataOptions o;
  o.files = {"fortunes", "literature", "riddles"};  // fortunes-min: always installed
  o.vocab = 512;
  o.cache_dir = cache;
  return o;
}

TEST(Data, FortuneDocumentsAreSplitOnPercentLines) {
  const auto docs = read_fortune_documents(min_corpus(MERIDIAN_TRAINER_CACHE_DIR));
  EXPECT_GT(docs.size(), 400u);
  for (const auto& d : docs) {
    EXPECT_FALSE(d.empty());
    EXPECT_EQ(d.find('\n'), std::string::npos);
    EXPECT_NE(d, "%");
  }
}

TEST(Data, TokenizerIsDeterministicAndTheSplitsAreDisjoint) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("meridian_data_test_" + std::to_string(::getpid()));
  const auto a = prepare_corpus(min_corpus(MERIDIAN_TRAINER_CACHE_DIR));
  const auto b = prepare_corpus(min_corpus(dir.string()));  // trained again from scratch
  std::filesystem::remove_all(dir);
  EXPECT_EQ(*a.train, *b.train);
  EXPECT_EQ(*a.validation, *b.validation);
  EXPECT_EQ(a.corpus_checksum, b.corpus_checksum);
  EXPECT_GT(a.train->size(), 20000u);
  // Every 20th document is held out; eos separates documents.
  EXPECT_EQ(a.validation_documents, (a.train_documents + a.validation_documents + 19) / 20);
  EXPECT_EQ(std::count(a.train->begin(), a.train->end(), a.eos_id), a.train_documents);
  for (auto id : *a.train) ASSERT_TRUE(id >= 0 && id < 512);
}

TEST(Data, ShardsAreDisjointAndCoverTheStream) {
  auto tokens = std::make_shared<std::vector<std::int32_t>>(1000);
  for (std::size_t i = 0; i < tokens->size(); ++i) (*tokens)[i] = static_cast<int>(i);
  const int T = 10, world = 3;  // (1000 - 1) / 10 = 99 sequences
  std::set<std::int64_t> seen;
  for (int r = 0; r < world; ++r) {
    ShardReader reader(tokens, T, r, world, 42);
    EXPECT_EQ(reader.shard_sequences(), 33);
    const auto seqs = reader.peek_sequences(33);
    for (auto s : seqs) {
      EXPECT_EQ(s % world, r);
      EXPECT_TRUE(seen.insert(s).second) << "sequence " << s << " read twice";
    }
    std::vector<std::int64_t> batch;
    reader.next_batch(2, batch);
    ASSERT_EQ(batch.size(), 2u * (T + 1));
    EXPECT_EQ(batch[0], seqs[0] * T);    // packed: input starts at j * T
    EXPECT_EQ(batch[T], seqs[0] * T + T);  // and the target runs one token further
    EXPECT_EQ(batch[T + 1], seqs[1] * T);
  }
  EXPECT_EQ(seen.size(), 99u);
}

TEST(Data, PositionRestoresTheExactContinuationAcrossEpochs) {
  auto tokens = std::make_shared<std::vector<std::int32_t>>(500);
  for (std::size_t i = 0; i < tokens->size(); ++i) (*tokens)[i] = static_cast<int>(i * 7 % 501);
  ShardReader a(tokens, 8, 1, 2, 5);
  std::vector<std::int64_t> batch, want, got;
  for (int i = 0; i < 9; ++i) a.next_batch(4, batch);  // 36 reads: past the first epoch (31)
  const DataPosition pos = a.position();
  EXPECT_EQ(pos.epoch, 1);
  a.next_batch(4, want);
  ShardReader b(tokens, 8, 1, 2, 5);
  b.restore(pos);
  b.next_batch(4, got);
  EXPECT_EQ(got, want);
  // Another epoch is another permutation; another seed another order.
  ShardReader c(tokens, 8, 1, 2, 6);
  EXPECT_NE(c.peek_sequences(31), ShardReader(tokens, 8, 1, 2, 5).peek_sequences(31));
  EXPECT_THROW(b.restore({0, 1000}), ConfigError);
}

// The run's data order (elastic data): each epoch visits every sequence once, in a permutation
// drawn from (seed, epoch) alone, so every node maps a position to the same sequence, and an
// earlier epoch's position (owed again after a loss) reads what it read the first time.
TEST(Data, TheDataOrderVisitsEverySequenceOncePerEpoch) {
  auto tokens = std::make_shared<std::vector<std::int32_t>>(1000);
  for (std::size_t i = 0; i < tokens->size(); ++i) (*tokens)[i] = static_cast<int>(i);
  DataOrder a(tokens, 10, 42), b(tokens, 10, 42), other(tokens, 10, 43);
  ASSERT_EQ(a.sequences(), 99);
  std::vector<std::int64_t> e0, e1;
  for (std::int64_t g = 0; g < 99; ++g) e0.push_back(a.sequence_at(g));
  for (std::int64_t g = 99; g < 198; ++g) e1.push_back(a.sequence_at(g));
  std::vector<std::int64_t> sorted0 = e0, sorted1 = e1, all(99);
  std::sort(sorted0.begin(), sorted0.end());
  std::sort(sorted1.begin(), sorted1.end());
  for (std::int64_t j = 0; j < 99; ++j) all[static_cast<std::size_t>(j)] = j;
  EXPECT_EQ(sorted0, all);
  EXPECT_EQ(sorted1, all);
  EXPECT_NE(e0, e1);  // another epoch, another permutation
  // Epochs 2 and 3 push epoch 0 out of the cache; it is drawn again, the same.
  a.sequence_at(2 * 99);
  a.sequence_at(3 * 99 + 5);
  for (std::int64_t g = 0; g < 99; ++g)
    ASSERT_EQ(a.sequence_at(g), e0[static_cast<std::size_t>(g)]);
  // Another node with the same seed reads the same order, from any position first.
  EXPECT_EQ(b.sequence_at(150), e1[51]);
  EXPECT_EQ(b.sequence_at(7), e0[7]);
  bool differs = false;
  for (std::int64_t g = 0; g < 99; ++g)
    differs |= other.sequence_at(g) != e0[static_cast<std::size_t>(g)];
  EXPECT_TRUE(differs);
  std::vector<std::int64_t> seq;
  a.append_sequence(e0[3], seq);
  ASSERT_EQ(seq.size(), 11u);  // input and target: seq_len + 1 tokens from j * seq_len
  EXPECT_EQ(seq.front(), e0[3] * 10);
  EXPECT_EQ(seq.back(), e0[3] * 10 + 10);
  EXPECT_THROW(DataOrder(std::make_shared<std::vector<std::int32_t>>(5), 8, 0), ConfigError);
}

TEST(Data, BadInputIsRefusedWithTheReason) {
  DataOptions o = min_corpus(MERIDIAN_TRAINER_CACHE_DIR);
  o.corpus_dir = "/nonexistent/fortunes";
  EXPECT_THROW(read_fortune_documents(o), ConfigError);
  o = min_corpus(MERIDIAN_TRAINER_CACHE_DIR);
  o.files = {"no-such-file"};
  EXPECT_THROW(read_fortune_documents(o), ConfigError);
  auto tiny = std::make_shared<std::vector<std::int32_t>>(5);
  EXPECT_THROW(ShardReader(tiny, 8, 0, 1, 0), ConfigError);
  EXPECT_THROW(ShardReader(tiny, 2, 2, 2, 0), ConfigError);
}

// The debian-docs cleaning: markup goes, the prose stays, one paragraph per blank-line block.
TEST(DocsCorpus, CleaningKeepsTheProseAndDropsTheMarkup) {
  const auto rst = clean_paragraphs(
      ".. SPDX-License-Identifier: GPL-2.0\n\nBoot Interrupts\n===============\n\n"
      "See :ref:`the  guide <g>` and\n:c:func:`kmalloc` for details.\n\n.. note::\n\n"
      "   Indented body stays.\n",
      "rst");
  ASSERT_EQ(rst.size(), 3u);
  EXPECT_EQ(rst[0], "Boot Interrupts");
  EXPECT_EQ(rst[1], "See `the guide <g>` and `kmalloc` for details.");
  EXPECT_EQ(rst[2], "Indented body stays.");

  // POD commands keep their argument as text (=head1 NAME -> NAME; also =over 4 -> 4 and
  // =item * -> *, a few tokens of noise per page that the study's corpus f558c989 contains).
  const auto pod = clean_paragraphs(
      "=head1 NAME\n\nperlfunc - functions\n\n=item chomp\n\n=back\n\n=cut\n", "pod");
  ASSERT_EQ(pod.size(), 3u);
  EXPECT_EQ(pod[0], "NAME");
  EXPECT_EQ(pod[1], "perlfunc - functions");
  EXPECT_EQ(pod[2], "chomp");

  struct Case {
    const char* kind;
    std::string text;
    std::vector<std::string> paragraphs;
  };
  const Case cases[] = {
      {"html",
       "<html><head><title>T</title></head><body><div class=\"navheader\">Prev Next</div>"
       "<p>A &lt;b&gt; &amp; c</p><p>second</p></body></html>",
       {"A <b> & c", "second"}},
      {"man",
       ".\\\" comment\n.TH OPEN 2\n.SH NAME\nopen \\- open a file\n.PP\n"
       "The \\fBopen\\fP() call\n.BR close (2)\n",
       {"NAME", "open - open a file", "The open() call close (2)"}},
  };
  for (const Case& c : cases) EXPECT_EQ(clean_paragraphs(c.text, c.kind), c.paragraphs) << c.kind;
  EXPECT_THROW(clean_paragraphs("x", "latex"), ConfigError);
}

TEST(DocsCorpus, MissingPackagesAndUnknownCorporaAreNamed) {
  try {
    read_debian_docs_documents("/nonexistent/share");
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("apt-get install -y linux-doc-6.1"), std::string::npos)
        << e.what();
  }
  DataOptions o = min_corpus(MERIDIAN_TRAINER_CACHE_DIR);
  o.corpus = "wikipedia";
  try {
    prepare_corpus(o);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("data.corpus: 'wikipedia'"), std::string::npos)
        << e.what();
  }
}

// Spread validation sequences: evenly over the split, the first one first.
TEST(Data, SpreadValidationSequencesCoverTheSplit) {
  std::vector<std::int32_t> tokens(1001);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>(i);
  const auto first = validation_sequences(tokens, 10, 4);
  const auto spread = validation_sequences(tokens, 10, 4, true);
  ASSERT_EQ(spread.size(), 44u);
  EXPECT_EQ(first[11], 10);  // second sequence starts at token 10
  EXPECT_EQ(spread[0], 0);
  EXPECT_EQ(spread[11], 250);  // 100 sequences, every 25th
  EXPECT_EQ(spread[33], 750);
}

}  // namespace
}  // namespace meridian::trainer
