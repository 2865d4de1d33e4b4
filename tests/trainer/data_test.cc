// The data pipeline: fortune documents, a deterministic SentencePiece tokenizer, held-out
// validation documents, disjoint shards that cover the stream, and exact resume from a position.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "engine/error.h"
#include "trainer/data.h"

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

}  // namespace
}  // namespace meridian::trainer
