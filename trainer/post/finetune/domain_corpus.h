// A second-domain corpus for continual pre-training, encoded with an existing tokenizer (the
// base model's): paragraphs of plain-text files (e.g. the licence texts of Debian's base-files,
// /usr/share/common-licenses). Pure C++; the SentencePiece spm_encode tool does the encoding.
// Not a tokenizer trainer: prepare_corpus() in trainer/data.h trains the base tokenizer.
#pragma once

#include <string>
#include <vector>

#include "trainer/data.h"

namespace meridian::post {

// Paragraphs (blocks separated by blank lines, whitespace collapsed) of every regular,
// non-symlink file in `dir` (name order), exact duplicates dropped (licence texts repeat each
// other). ConfigError when the directory is missing or yields no paragraph.
std::vector<std::string> read_paragraph_documents(const std::string& dir);

// Encodes `docs` with the SentencePiece model `tokenizer_model`: document i is held out for
// validation when i % validation_every == 0; documents are joined with eos_id. `like` gives the
// vocabulary and eos id (the base corpus). Work files go to `cache_dir`.
trainer::TokenizedCorpus encode_documents(const std::vector<std::string>& docs,
                                          const trainer::TokenizedCorpus& like,
                                          const std::string& cache_dir, int validation_every);

}  // namespace meridian::post
