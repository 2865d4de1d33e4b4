// The fortune corpus, the SentencePiece tokenizer (run as the spm_train / spm_encode tools in
// a child process: Debian's libsentencepiece bundles a protobuf that clashes with LibTorch's),
// and the sharded sequence reader. Not a general dataset library.
#include "trainer/data.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/core/error.h"
#include "engine/core/util/crc32c.h"
#include "engine/core/util/files.h"
#include "engine/core/util/splitmix64.h"
#include "trainer/docs_corpus.h"

#ifndef MERIDIAN_SPM_TRAIN
#define MERIDIAN_SPM_TRAIN "spm_train"
#endif
#ifndef MERIDIAN_SPM_ENCODE
#define MERIDIAN_SPM_ENCODE "spm_encode"
#endif

extern char** environ;

namespace meridian::trainer {
namespace fs = std::filesystem;
namespace {

std::string hex8(std::uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

std::uint32_t crc_of(const std::string& s) {
  return crc32c(std::as_bytes(std::span<const char>(s.data(), s.size())));
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw ConfigError(p.string() + ": cannot open");
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// Runs argv[0] (searched in PATH when not absolute) with stdin/stdout redirected to files
// (empty: inherited / /dev/null) and stderr to `log`; throws Error with the log on failure.
void run_tool(const std::vector<std::string>& argv, const std::string& stdin_path,
              const std::string& stdout_path, const fs::path& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, stdin_path.empty() ? "/dev/null" : stdin_path.c_str(),
                                   O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (stdout_path.empty())
    posix_spawn_file_actions_adddup2(&actions, 2, 1);
  else
    posix_spawn_file_actions_addopen(&actions, 1, stdout_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0)
    throw ConfigError("cannot run " + argv[0] +
                      " (the SentencePiece tools; fix: apt-get install -y sentencepiece)");
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string tail = fs::exists(log) ? read_all(log) : "";
    if (tail.size() > 2000) tail = tail.substr(tail.size() - 2000);
    throw Error(argv[0] + " failed (status " + std::to_string(status) + "); log " +
                log.string() + ":\n" + tail);
  }
}

std::vector<std::int32_t> parse_ids(const std::string& text, int eos_id, int vocab,
                                    std::int64_t expected_docs, const std::string& source) {
  auto out = std::vector<std::int32_t>();
  out.reserve(text.size() / 3);
  std::int64_t docs = 0;
  std::int64_t value = -1;
  for (char c : text) {
    if (c >= '0' && c <= '9') {
      value = (value < 0 ? 0 : value * 10) + (c - '0');
      if (value >= vocab) throw ProtocolError(source + ": token id out of the vocabulary");
    } else if (c == ' ' || c == '\n') {
      if (value >= 0) out.push_back(static_cast<std::int32_t>(value));
      value = -1;
      if (c == '\n') {
        out.push_back(eos_id);
        ++docs;
      }
    } else {
      throw ProtocolError(source + ": unexpected character in the token id file");
    }
  }
  if (docs != expected_docs)
    throw ProtocolError(source + ": " + std::to_string(docs) + " documents, expected " +
                        std::to_string(expected_docs));
  return out;
}


std::function<void(const std::string&)> slow_step_of(const DataOptions& options) {
  return [&options](const std::string& step) {
    if (options.on_slow_step) options.on_slow_step(step);
  };
}

std::string tokenizer_sample(const std::vector<std::string>& docs, const DataOptions& options) {
  std::string out;
  std::size_t train_index = 0;
  for (std::size_t i = 0; i < docs.size(); ++i) {
    if (i % options.validation_every == 0) continue;  // held out
    if (train_index++ % 8 != 0) continue;
    const std::string& d = docs[i];
    for (std::size_t b = 0; b < d.size();) {
      std::size_t e = std::min(d.size(), b + 4000);
      if (e < d.size()) {
        const std::size_t sp = d.rfind(' ', e);
        if (sp != std::string::npos && sp > b) e = sp;
      }
      out.append(d, b, e - b).push_back('\n');
      b = e + (e < d.size() && d[e] == ' ' ? 1 : 0);
    }
  }
  return out;
}

}  // namespace

void append_collapsed(std::string& doc, const std::string& line) {
  for (char c : line) {
    const bool space = c == ' ' || c == '\t' || c == '\r';
    if (space) {
      if (!doc.empty() && doc.back() != ' ') doc.push_back(' ');
    } else {
      doc.push_back(c);
    }
  }
  if (!doc.empty() && doc.back() != ' ') doc.push_back(' ');
}

void trim_and_drop_empty(std::vector<std::string>& docs) {
  for (auto& d : docs)
    while (!d.empty() && d.back() == ' ') d.pop_back();
  std::erase_if(docs, [](const std::string& d) { return d.empty(); });
}

std::vector<std::string> read_fortune_documents(const DataOptions& options) {
  const fs::path dir(options.corpus_dir);
  if (!fs::is_directory(dir))
    throw ConfigError("data.corpus_dir: " + options.corpus_dir +
                      " is not a directory (fix: apt-get install -y fortunes-min fortunes)");
  std::vector<std::string> names = options.files;
  if (names.empty()) {
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file() && !e.is_symlink() && !e.path().has_extension())
        names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
  }
  std::vector<std::string> docs;
  for (const auto& name : names) {
    const fs::path p = dir / name;
    if (!fs::is_regular_file(p)) throw ConfigError("data.files: " + p.string() + " not found");
    std::istringstream in(read_all(p));
    std::string line, doc;
    auto flush = [&]() {
      if (!doc.empty()) docs.push_back(doc);
      doc.clear();
    };
    while (std::getline(in, line)) {
      if (line == "%") {
        flush();
        continue;
      }
      append_collapsed(doc, line);  // SentencePiece treats a line as a sentence
    }
    flush();
  }
  trim_and_drop_empty(docs);
  if (docs.empty()) throw ConfigError("data: no documents in " + options.corpus_dir);
  return docs;
}

TokenizedCorpus prepare_corpus(const DataOptions& options) {
  if (options.cache_dir.empty()) throw ConfigError("data.cache_dir: required");
  if (options.vocab < 64) throw ConfigError("data.vocab: expected >= 64");
  if (options.validation_every < 2) throw ConfigError("data.validation_every: expected >= 2");
  const bool fortunes = options.corpus == "fortunes";
  if (!fortunes && options.corpus != "debian-docs")
    throw ConfigError("data.corpus: '" + options.corpus +
                      "' is not a corpus (expected fortunes or debian-docs)");
  if (!fortunes) slow_step_of(options)("reading the Debian documentation sources");
  const auto docs =
      fortunes ? read_fortune_documents(options) : read_debian_docs_documents(options.docs_root);
  std::string train_text, val_text;
  TokenizedCorpus c;
  c.corpus = options.corpus;
  for (std::size_t i = 0; i < docs.size(); ++i) {
    const bool held_out = i % options.validation_every == 0;
    (held_out ? val_text : train_text) += docs[i] + "\n";
    ++(held_out ? c.validation_documents : c.train_documents);
  }
  c.vocab = options.vocab;
  c.corpus_checksum = hex8(crc_of(train_text) ^ (crc_of(val_text) * 31u));
  const fs::path cache(options.cache_dir);
  fs::create_directories(cache);
  const std::string key = (fortunes ? "fortunes_" : "debian-docs_") + c.corpus_checksum + "_v" + std::to_string(options.vocab);
  const fs::path train_txt = cache / (key + ".train.txt"), val_txt = cache / (key + ".val.txt");
  const fs::path model = cache / (key + ".model");
  if (!fs::exists(train_txt)) write_file_atomically(train_txt, train_text);
  if (!fs::exists(val_txt)) write_file_atomically(val_txt, val_text);
  const std::string tag = ".tmp" + std::to_string(::getpid());
  const auto slow_step = slow_step_of(options);
  // The tokenizer's input: the fortunes' training text; for the large corpus a deterministic
  // sample (every 8th training document, cut into lines of at most 4,000 characters at
  // spaces), which spm_train reads whole in a few minutes.
  fs::path spm_input = train_txt;
  if (!fortunes && !fs::exists(model)) {
    spm_input = cache / (key + ".spm.txt");
    if (!fs::exists(spm_input)) write_file_atomically(spm_input, tokenizer_sample(docs, options));
  }
  if (!fs::exists(model)) {
    slow_step("training the SentencePiece tokenizer on " + std::to_string(c.train_documents) +
              " documents (first run only; cached in " + cache.string() + ")");
    const fs::path prefix = cache / (key + tag);
    run_tool({MERIDIAN_SPM_TRAIN, "--input=" + spm_input.string(),
              "--model_prefix=" + prefix.string(), "--vocab_size=" + std::to_string(options.vocab),
              "--model_type=unigram", "--character_coverage=1.0", "--num_threads=1",
              "--input_sentence_size=0", "--shuffle_input_sentence=false",
              "--max_sentence_length=16384", "--unk_id=0", "--eos_id=1", "--bos_id=-1",
              "--pad_id=-1", "--minloglevel=1"},
             "", "", cache / (key + ".train.log"));
    fs::rename(prefix.string() + ".model", model);
    fs::remove(prefix.string() + ".vocab");
    if (spm_input != train_txt) fs::remove(spm_input);
  }
  c.tokenizer_model = model.string();
  auto encode = [&](const fs::path& text, const char* split, std::int64_t ndocs) {
    const fs::path ids = cache / (key + "." + split + ".ids");
    if (!fs::exists(ids)) {
      slow_step(std::string("encoding the ") + split + " split (first run only)");
      const fs::path tmp = ids.string() + tag;
      run_tool({MERIDIAN_SPM_ENCODE, "--model=" + model.string(), "--output_format=id"},
               text.string(), tmp.string(), cache / (key + ".encode.log"));
      fs::rename(tmp, ids);
    }
    return std::make_shared<const std::vector<std::int32_t>>(
        parse_ids(read_all(ids), c.eos_id, c.vocab, ndocs, ids.string()));
  };
  c.train = encode(train_txt, "train", c.train_documents);
  c.validation = encode(val_txt, "val", c.validation_documents);
  return c;
}

ShardReader::ShardReader(std::shared_ptr<const std::vector<std::int32_t>> tokens, int seq_len,
                         int rank, int world, std::uint64_t seed)
    : tokens_(std::move(tokens)), seq_len_(seq_len), seed_(seed) {
  MERIDIAN_CHECK(tokens_ != nullptr);
  if (seq_len <= 0) throw ConfigError("data: seq_len must be positive");
  if (world <= 0 || rank < 0 || rank >= world)
    throw ConfigError("data: shard rank " + std::to_string(rank) + " outside world " +
                      std::to_string(world));
  const std::int64_t n = static_cast<std::int64_t>(tokens_->size());
  const std::int64_t sequences = n > seq_len ? (n - 1) / seq_len : 0;
  for (std::int64_t j = rank; j < sequences; j += world) shard_.push_back(j);
  if (shard_.empty())
    throw ConfigError("data: the stream (" + std::to_string(n) + " tokens) gives shard " +
                      std::to_string(rank) + "/" + std::to_string(world) +
                      " no sequence of length " + std::to_string(seq_len));
  shuffle_for_epoch();
}

void ShardReader::shuffle_for_epoch() {
  order_ = shard_;
  std::uint64_t state = seed_ ^ (0xD1B54A32D192ED03ull * static_cast<std::uint64_t>(pos_.epoch + 1));
  for (std::size_t i = order_.size(); i > 1; --i) {
    const std::size_t j = splitmix64(state) % i;  // bias negligible for these sizes
    std::swap(order_[i - 1], order_[j]);
  }
}

void ShardReader::restore(const DataPosition& p) {
  if (p.epoch < 0 || p.index < 0 || p.index > shard_sequences())
    throw ConfigError("data position (epoch " + std::to_string(p.epoch) + ", index " +
                      std::to_string(p.index) + ") is outside this shard of " +
                      std::to_string(shard_sequences()) + " sequences");
  const bool new_epoch = p.epoch != pos_.epoch;
  pos_ = p;
  if (new_epoch) shuffle_for_epoch();
}

std::vector<std::int64_t> ShardReader::peek_sequences(int count) const {
  ShardReader copy = *this;
  std::vector<std::int64_t> out;
  for (int i = 0; i < count; ++i) {
    if (copy.pos_.index == copy.shard_sequences()) {
      ++copy.pos_.epoch;
      copy.pos_.index = 0;
      copy.shuffle_for_epoch();
    }
    out.push_back(copy.order_[copy.pos_.index++]);
  }
  return out;
}

void ShardReader::next_batch(int batch, std::vector<std::int64_t>& out) {
  out.clear();
  out.reserve(static_cast<std::size_t>(batch) * (seq_len_ + 1));
  for (int b = 0; b < batch; ++b) {
    if (pos_.index == shard_sequences()) {
      ++pos_.epoch;
      pos_.index = 0;
      shuffle_for_epoch();
    }
    const std::int64_t start = order_[pos_.index++] * seq_len_;
    out.insert(out.end(), tokens_->begin() + start, tokens_->begin() + start + seq_len_ + 1);
  }
}

DataOrder::DataOrder(std::shared_ptr<const std::vector<std::int32_t>> tokens, int seq_len,
                     std::uint64_t seed)
    : tokens_(std::move(tokens)), seq_len_(seq_len), seed_(seed) {
  MERIDIAN_CHECK(tokens_ != nullptr);
  if (seq_len <= 0) throw ConfigError("data: seq_len must be positive");
  const std::int64_t n = static_cast<std::int64_t>(tokens_->size());
  sequences_ = n > seq_len ? (n - 1) / seq_len : 0;
  if (sequences_ == 0)
    throw ConfigError("data: the stream (" + std::to_string(n) +
                      " tokens) has no sequence of length " + std::to_string(seq_len));
}

const std::vector<std::int64_t>& DataOrder::permutation(std::int64_t epoch) {
  for (int i = 0; i < 2; ++i)
    if (epochs_[i] == epoch) return perms_[i];
  const int slot = epochs_[0] < epochs_[1] ? 0 : 1;  // the older one goes
  std::vector<std::int64_t>& p = perms_[slot];
  p.resize(static_cast<std::size_t>(sequences_));
  for (std::int64_t j = 0; j < sequences_; ++j) p[static_cast<std::size_t>(j)] = j;
  // Its own stream, apart from ShardReader's: a different constant in the state.
  std::uint64_t state = seed_ ^ (0x9E6C63D0676A9A99ull * static_cast<std::uint64_t>(epoch + 1));
  for (std::size_t i = p.size(); i > 1; --i) std::swap(p[i - 1], p[splitmix64(state) % i]);
  epochs_[slot] = epoch;
  return p;
}

std::int64_t DataOrder::sequence_at(std::int64_t position) {
  MERIDIAN_CHECK_GE(position, 0);
  return permutation(position / sequences_)[static_cast<std::size_t>(position % sequences_)];
}

void DataOrder::append_sequence(std::int64_t j, std::vector<std::int64_t>& out) const {
  MERIDIAN_CHECK(j >= 0 && j < sequences_);
  const auto start = tokens_->begin() + j * seq_len_;
  out.insert(out.end(), start, start + seq_len_ + 1);
}

std::vector<std::int64_t> validation_sequences(const std::vector<std::int32_t>& tokens,
                                               int seq_len, int count, bool spread) {
  const std::int64_t available =
      tokens.size() > static_cast<std::size_t>(seq_len) ? (tokens.size() - 1) / seq_len : 0;
  if (available < count)
    throw ConfigError("data: the validation split has " + std::to_string(available) +
                      " sequences of length " + std::to_string(seq_len) + ", need " +
                      std::to_string(count));
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(count) * (seq_len + 1));
  for (int j = 0; j < count; ++j) {
    const std::int64_t k = spread ? j * available / count : j;
    out.insert(out.end(), tokens.begin() + k * seq_len, tokens.begin() + k * seq_len + seq_len + 1);
  }
  return out;
}

}  // namespace meridian::trainer
