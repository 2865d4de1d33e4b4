// The `debian-docs` corpus (data.corpus: debian-docs): English technical prose that Debian
// packages ship as plain-text sources, for convergence runs that must not run out of data
// (about 48 MB of text, 20 M+ tokens). The fortune corpus (data.h) stays the tests' corpus.
//
// Sources, one document per file (paths under `root`, normally /usr/share):
//   linux-doc-6.1   doc/linux-doc-*/Documentation/**/*.{rst,txt}.gz  (not translations/, not
//                   devicetree/: other languages and YAML schemas)
//   python3.11-doc  doc/python3.*/html/_sources/**/*.rst.txt          (the reST sources)
//   perl-doc        perl/5.*/pod/*.pod
//   postgresql-doc-15  doc/postgresql-doc-15/html/*.html                (DocBook HTML)
//   manpages, manpages-dev  their man/man*/*.gz (troff; from dpkg's list of the package's files)
//   git-doc         doc/git-doc/*.txt                                 (AsciiDoc sources)
// Why these: prose written by people about software (close to what the trainer's users train
// on), in English, in main, and mostly plain-text sources; together about 62 MB, the smallest
// set of such packages that passes 20 M tokens at vocab 1024 (the kernel and Python alone give
// 16 M). Not translations (a small vocabulary would spend itself on scripts).
//
// Cleaning: HTML tags, navigation bars and entities, troff requests and escapes go;
// markup-only lines go (reST heading underlines and `..` comment/directive lines,
// POD `=over`/`=back`/`=cut`, AsciiDoc `----` fences), POD/reST commands keep their text
// (`=head1 NAME` -> `NAME`), `:role:` prefixes of reST references go, SPDX lines go; whitespace
// is collapsed (one line per document). Deduplication: a paragraph of 64+ characters seen
// before (licence headers, repeated boilerplate) is dropped, then an empty or short (< 256
// characters) document, then a document identical to an earlier one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace meridian::trainer {

struct DocsCorpusStats {
  std::int64_t files = 0;
  std::int64_t input_bytes = 0;           // uncompressed bytes read
  std::int64_t duplicate_paragraphs = 0;  // dropped as seen before
  std::int64_t dropped_documents = 0;     // short or identical to an earlier one
};

// The cleaned, deduplicated documents in source order, then path order (deterministic).
// Throws ConfigError naming the missing package when a source has no file under `root`.
std::vector<std::string> read_debian_docs_documents(const std::string& root,
                                                    DocsCorpusStats* stats = nullptr);

// One file's cleaning (exposed for tests): `text` is its content, `kind` one of "rst", "pod",
// "asciidoc". Returns its paragraphs (blank-line separated), each with whitespace collapsed;
// a document is its paragraphs joined by one space.
std::vector<std::string> clean_paragraphs(const std::string& text, const std::string& kind);

}  // namespace meridian::trainer
