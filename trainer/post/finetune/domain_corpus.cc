// Paragraph documents from plain-text files, encoded with the base model's SentencePiece model.
// Not cached: encoding a few hundred kilobytes takes well under a second.
#include "trainer/post/finetune/domain_corpus.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "engine/core/error.h"
#include "engine/core/util/crc32c.h"

#ifndef MERIDIAN_POST_SPM_ENCODE
#define MERIDIAN_POST_SPM_ENCODE "spm_encode"
#endif

namespace meridian::post {
namespace fs = std::filesystem;

std::vector<std::string> read_paragraph_documents(const std::string& dir) {
  if (!fs::is_directory(dir)) throw ConfigError("domain corpus: " + dir + " is not a directory");
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && !e.is_symlink()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<std::string> docs;
  std::set<std::string> seen;
  for (const auto& f : files) {
    std::ifstream in(f);
    std::string line, doc;
    auto flush = [&] {
      while (!doc.empty() && doc.back() == ' ') doc.pop_back();
      if (doc.size() >= 20 && seen.insert(doc).second) docs.push_back(doc);  // skip "1." lines
      doc.clear();
    };
    while (std::getline(in, line)) {
      if (line.find_first_not_of(" \t\r\f") == std::string::npos) {
        flush();
        continue;
      }
      for (char c : line) {
        const bool space = c == ' ' || c == '\t' || c == '\r' || c == '\f';
        if (!space)
          doc.push_back(c);
        else if (!doc.empty() && doc.back() != ' ')
          doc.push_back(' ');
      }
      if (!doc.empty() && doc.back() != ' ') doc.push_back(' ');
    }
    flush();
  }
  if (docs.empty()) throw ConfigError("domain corpus: no paragraphs in " + dir);
  return docs;
}

namespace {

std::vector<std::int32_t> encode(const std::vector<std::string>& docs, const std::string& model,
                                 const fs::path& work, int vocab, int eos_id) {
  {
    std::ofstream out(work);
    for (const auto& d : docs) out << d << "\n";
    if (!out) throw Error("domain corpus: cannot write " + work.string());
  }
  // Paths come from our own cache directory; quote them for the shell all the same.
  auto quote = [](const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
  };
  const std::string cmd = std::string(MERIDIAN_POST_SPM_ENCODE) + " --model=" + quote(model) +
                          " --output_format=id < " + quote(work.string());
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe)
    throw ConfigError("domain corpus: cannot run spm_encode (apt-get install -y sentencepiece)");
  std::vector<std::int32_t> ids;
  std::int64_t value = -1, lines = 0;
  for (int c; (c = std::fgetc(pipe)) != EOF;) {
    if (c >= '0' && c <= '9') {
      value = (value < 0 ? 0 : value * 10) + (c - '0');
      if (value >= vocab) {
        ::pclose(pipe);
        throw ProtocolError("domain corpus: spm_encode produced an id outside the vocabulary");
      }
    } else {
      if (value >= 0) ids.push_back(static_cast<std::int32_t>(value));
      value = -1;
      if (c == '\n') {
        ids.push_back(eos_id);
        ++lines;
      }
    }
  }
  const int status = ::pclose(pipe);
  fs::remove(work);
  if (status != 0 || lines != static_cast<std::int64_t>(docs.size()))
    throw Error("domain corpus: spm_encode failed (status " + std::to_string(status) + ", " +
                std::to_string(lines) + " of " + std::to_string(docs.size()) + " documents)");
  return ids;
}

}  // namespace

trainer::TokenizedCorpus encode_documents(const std::vector<std::string>& docs,
                                          const trainer::TokenizedCorpus& like,
                                          const std::string& cache_dir, int validation_every) {
  if (validation_every < 2) throw ConfigError("domain corpus: validation_every must be >= 2");
  std::vector<std::string> train, val;
  std::uint32_t crc = 0;
  for (std::size_t i = 0; i < docs.size(); ++i) {
    (i % validation_every == 0 ? val : train).push_back(docs[i]);
    crc = crc32c(std::as_bytes(std::span(docs[i].data(), docs[i].size())), crc);
  }
  if (train.empty() || val.empty())
    throw ConfigError("domain corpus: too few documents for a validation split");
  fs::create_directories(cache_dir);
  const fs::path work = fs::path(cache_dir) / ("domain." + std::to_string(::getpid()) + ".txt");
  trainer::TokenizedCorpus c;
  c.vocab = like.vocab;
  c.eos_id = like.eos_id;
  c.tokenizer_model = like.tokenizer_model;
  c.train_documents = static_cast<std::int64_t>(train.size());
  c.validation_documents = static_cast<std::int64_t>(val.size());
  char hex[9];
  std::snprintf(hex, sizeof(hex), "%08x", crc);
  c.corpus_checksum = hex;
  c.train = std::make_shared<const std::vector<std::int32_t>>(
      encode(train, like.tokenizer_model, work, c.vocab, c.eos_id));
  c.validation = std::make_shared<const std::vector<std::int32_t>>(
      encode(val, like.tokenizer_model, work, c.vocab, c.eos_id));
  return c;
}

}  // namespace meridian::post
