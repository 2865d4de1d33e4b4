// Training data: a real English corpus from a Debian package (the fortune cookie files,
// /usr/share/games/fortunes), a SentencePiece tokenizer trained on it, packed fixed-length
// sequences, disjoint deterministic shards per node and a held-out validation split.
// Pure C++ (no LibTorch). Nothing is downloaded; tokenizer and token ids are cached on disk.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace meridian::trainer {

struct DataOptions {
  // Which corpus: "fortunes" (the tests' corpus: corpus_dir and files below) or "debian-docs"
  // (trainer/docs_corpus.h: 20 M+ tokens of the packages' documentation under docs_root).
  std::string corpus = "fortunes";
  std::string docs_root = "/usr/share";
  // Fortune files: every regular file in corpus_dir without an extension, in name order,
  // unless `files` names some of them.
  std::string corpus_dir = "/usr/share/games/fortunes";
  std::vector<std::string> files;
  int vocab = 512;             // SentencePiece (unigram) vocabulary; must equal the model's
  std::string cache_dir;       // required: tokenizer model and token ids, keyed by content
  int validation_every = 20;   // document i is held out when i % validation_every == 0
  // Told each slow step of prepare_corpus before it starts (only when the cache misses: training
  // the tokenizer, encoding a split), so that a command can say why its first run is slow.
  std::function<void(const std::string& step)> on_slow_step;
};

struct TokenizedCorpus {
  // Documents joined with eos_id between them (the packed stream).
  std::shared_ptr<const std::vector<std::int32_t>> train;
  std::shared_ptr<const std::vector<std::int32_t>> validation;
  int vocab = 0;
  int eos_id = 1;
  std::int64_t train_documents = 0;
  std::int64_t validation_documents = 0;
  std::string tokenizer_model;  // path of the SentencePiece model used
  std::string corpus_checksum;  // CRC-32C of the training text (8 hex digits)
  std::string corpus;           // DataOptions::corpus
};

// Splits fortune files into documents (entries separated by a line "%"), whitespace
// collapsed. Throws ConfigError when the directory or a named file is missing or empty.
std::vector<std::string> read_fortune_documents(const DataOptions& options);

// Appends `line` to `doc` with every run of spaces, tabs and CRs as one space, and one space
// after it (so the next line's text is separated). The corpora's documents are single lines.
void append_collapsed(std::string& doc, const std::string& line);
// Trailing spaces off every document, empty ones dropped.
void trim_and_drop_empty(std::vector<std::string>& docs);

// Trains the tokenizer on the training documents (spm_train, one thread, deterministic;
// cached in cache_dir) and encodes both splits (spm_encode; cached). Safe to call from several
// processes at once: cache files are written under temporary names and renamed.
TokenizedCorpus prepare_corpus(const DataOptions& options);

// Where a shard's reader stands: the epoch and the next sequence within its permutation.
struct DataPosition {
  std::int64_t epoch = 0;
  std::int64_t index = 0;
  bool operator==(const DataPosition&) const = default;
};

// Packed sequences of seq_len + 1 tokens (input and shifted target) cut at stride seq_len from
// the token stream; sequence j belongs to shard j % world. Each epoch visits the shard's
// sequences in a permutation drawn from (seed, epoch), so two nodes never read the same
// sequence and a position fully determines what comes next.
class ShardReader {
 public:
  ShardReader(std::shared_ptr<const std::vector<std::int32_t>> tokens, int seq_len, int rank,
              int world, std::uint64_t seed);

  // Appends batch * (seq_len + 1) token ids to `out` (cleared first), row-major.
  void next_batch(int batch, std::vector<std::int64_t>& out);
  // The stream indices (sequence numbers) the next `count` reads would return; for tests.
  std::vector<std::int64_t> peek_sequences(int count) const;

  DataPosition position() const { return pos_; }
  void restore(const DataPosition& p);
  std::int64_t shard_sequences() const { return static_cast<std::int64_t>(shard_.size()); }
  int seq_len() const { return seq_len_; }

 private:
  void shuffle_for_epoch();

  std::shared_ptr<const std::vector<std::int32_t>> tokens_;
  int seq_len_;
  std::uint64_t seed_;
  std::vector<std::int64_t> shard_;  // sequence numbers of this shard, in stream order
  std::vector<std::int64_t> order_;  // this epoch's permutation of shard_
  DataPosition pos_;
};

// The run's data order (elastic data, engine/core/diloco/data_plan.h): every packed sequence of the
// stream once per epoch, in a permutation drawn from (seed, epoch); position g is sequence
// perm_{g / S}[g mod S] of the S sequences. The same on every node: which positions a node reads
// is the engine's plan, so a node id never decides what it trains.
class DataOrder {
 public:
  DataOrder(std::shared_ptr<const std::vector<std::int32_t>> tokens, int seq_len,
            std::uint64_t seed);
  std::int64_t sequences() const { return sequences_; }  // S, per epoch
  // The sequence number at position g (>= 0).
  std::int64_t sequence_at(std::int64_t position);
  // Appends the seq_len + 1 token ids of sequence `j` to `out`.
  void append_sequence(std::int64_t j, std::vector<std::int64_t>& out) const;

 private:
  const std::vector<std::int64_t>& permutation(std::int64_t epoch);

  std::shared_ptr<const std::vector<std::int32_t>> tokens_;
  int seq_len_;
  std::uint64_t seed_;
  std::int64_t sequences_ = 0;
  // The two most recent epochs' permutations: owed positions of an earlier epoch are read
  // beside the current one's (an older epoch is drawn again when asked for).
  std::int64_t epochs_[2] = {-1, -1};
  std::vector<std::int64_t> perms_[2];
};

// `count` sequences of `tokens` as count * (seq_len + 1) ids: the fixed validation set every
// node evaluates identically. The first `count` in order, or with `spread` evenly spaced over
// the whole split (a large corpus's first sequences would all come from one document).
std::vector<std::int64_t> validation_sequences(const std::vector<std::int32_t>& tokens,
                                               int seq_len, int count, bool spread = false);

}  // namespace meridian::trainer
