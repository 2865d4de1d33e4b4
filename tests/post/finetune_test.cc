// Tests of the LibTorch post-training loop on the tiny model and synthetic tokens: frozen
// tensors stay bit-exact and get no optimizer state, unknown names are refused, weights round
// trip through safetensors, and the domain corpus splits paragraphs.
#include "trainer/post/finetune/finetune.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>

#include "engine/core/error.h"
#include "tests/post/temp_dir_test_base.h"
#include "trainer/post/finetune/domain_corpus.h"

namespace post = meridian::post;
namespace trainer = meridian::trainer;

namespace {

trainer::TokenizedCorpus synthetic_corpus(int vocab, std::size_t tokens, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto ids = std::make_shared<std::vector<std::int32_t>>(tokens);
  for (auto& t : *ids) t = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(vocab));
  trainer::TokenizedCorpus c;
  c.vocab = vocab;
  c.train = ids;
  c.validation = ids;
  return c;
}

class Finetune : public meridian::testing::TempDirTest {};

TEST_F(Finetune, FrozenTensorsStayBitExactAndHaveNoOptimizerState) {
  post::FinetuneOptions o;
  o.config = trainer::load_named_config("tiny");
  o.seed = 3;
  const auto corpus = synthetic_corpus(o.config.model.vocab, 4000, 1);
  o.steps = 0;
  const std::vector<float> init = post::finetune(o, corpus).params;

  const auto layout = trainer::parameter_layout(o.config.model);
  o.trainable = {layout[1].name, layout.back().name};  // a block tensor and the output head
  o.steps = 3;
  const post::FinetuneResult r = post::finetune(o, corpus);
  ASSERT_EQ(r.train_loss.size(), 3u);
  std::uint64_t trainable = 0;
  for (const auto& s : layout) {
    const bool trained = s.name == layout[1].name || s.name == layout.back().name;
    const bool same = std::memcmp(init.data() + s.offset, r.params.data() + s.offset,
                                  s.numel * sizeof(float)) == 0;
    EXPECT_EQ(same, !trained) << s.name;
    if (trained) trainable += s.numel;
  }
  EXPECT_EQ(r.params_trainable, trainable);
  EXPECT_EQ(r.params_total, trainer::parameter_count(o.config.model));
  EXPECT_EQ(r.optimizer_state_bytes, 2 * 4 * trainable);
  EXPECT_EQ(r.optimizer_state_bytes_full, 2 * 4 * r.params_total);

  o.trainable = {"layers.0.attention.nonexistent.weight"};
  EXPECT_THROW(post::finetune(o, corpus), meridian::ConfigError);
}

TEST_F(Finetune, FullTrainingLowersTheLossAndWeightsRoundTrip) {
  post::FinetuneOptions o;
  o.config = trainer::load_named_config("tiny");
  // A corpus of one repeated 40-token pattern: learnable in a few dozen steps.
  auto ids = std::make_shared<std::vector<std::int32_t>>();
  for (int rep = 0; rep < 200; ++rep)
    for (int t = 0; t < 40; ++t) ids->push_back(2 + (t * 7) % 50);
  trainer::TokenizedCorpus c;
  c.vocab = o.config.model.vocab;
  c.train = ids;
  c.validation = ids;
  o.steps = 30;
  const auto r = post::finetune(o, c);
  const double before =
      post::evaluate(o.config, post::finetune({o.config, {}, {}, 0, 0}, c).params, c, 4);
  const double after = post::evaluate(o.config, r.params, c, 4);
  EXPECT_LT(after, before - 1.0);

  post::write_weights(dir_ / "w.safetensors", o.config.model, r.params);
  EXPECT_EQ(post::read_weights(dir_ / "w.safetensors", o.config.model), r.params);
  auto other = o.config.model;
  other.hidden = 32;
  other.heads = 2;
  other.kv_heads = 1;
  EXPECT_THROW(post::read_weights(dir_ / "w.safetensors", other), meridian::ConfigError);
}

TEST_F(Finetune, DomainCorpusSplitsParagraphsAndDropsDuplicates) {
  std::ofstream(dir_ / "a") << "First paragraph, line one\n  continues   here.\n\n"
                            << "Second paragraph of the licence text.\n\n\n1.\n\n"
                            << "First paragraph, line one continues here.\n";
  std::ofstream(dir_ / "b") << "Second paragraph of the licence text.\nA third one, long enough.\n";
  const auto docs = post::read_paragraph_documents(dir_.string());
  EXPECT_EQ(docs, (std::vector<std::string>{
                      "First paragraph, line one continues here.",
                      "Second paragraph of the licence text.",
                      "Second paragraph of the licence text. A third one, long enough."}));
  EXPECT_THROW(post::read_paragraph_documents((dir_ / "missing").string()), meridian::ConfigError);
}

}  // namespace
