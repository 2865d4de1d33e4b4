// The `debian-docs` corpus: reading, cleaning and deduplicating the packages' documentation
// sources (see docs_corpus.h).
#include "trainer/docs_corpus.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <unordered_set>

#include "engine/core/error.h"
#include "trainer/data.h"

namespace meridian::trainer {
namespace fs = std::filesystem;
namespace {

std::string read_file(const fs::path& p) {
  if (p.extension() == ".gz") {
    gzFile f = gzopen(p.c_str(), "rb");
    if (!f) throw ConfigError("data: cannot open " + p.string());
    std::string out;
    char buf[1 << 16];
    int n;
    while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
    const bool failed = n < 0;
    gzclose(f);
    if (failed) throw ConfigError("data: " + p.string() + ": corrupt gzip stream");
    return out;
  }
  std::ifstream in(p, std::ios::binary);
  if (!in) throw ConfigError("data: cannot open " + p.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A line of one repeated punctuation character (reST underlines, AsciiDoc fences, tables).
bool markup_rule(const std::string& t) {
  if (t.size() < 3) return false;
  const char c = t[0];
  if (std::isalnum(static_cast<unsigned char>(c))) return false;
  return std::all_of(t.begin(), t.end(), [&](char x) { return x == c || x == '+' || x == ' '; });
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// Drops reST role prefixes (":ref:`x`" -> "`x`", ":c:func:`f`" -> "`f`").
std::string drop_roles(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == ':' && (i == 0 || !std::isalnum(static_cast<unsigned char>(s[i - 1])))) {
      std::size_t j = i + 1;
      while (j < s.size() && (std::islower(static_cast<unsigned char>(s[j])) || s[j] == ':' ||
                              s[j] == '-'))
        ++j;
      if (j > i + 1 && j < s.size() && s[j] == '`' && s[j - 1] == ':') {
        i = j - 1;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

// The text a line keeps ("" drops it; `drop` set for a line that is only markup).
std::string keep_line(const std::string& line, const std::string& kind, bool& drop) {
  const std::string t = trim(line);
  drop = false;
  if (t.find("SPDX-License-Identifier") != std::string::npos || markup_rule(t)) {
    drop = true;
    return "";
  }
  if (kind == "rst" && t.rfind("..", 0) == 0) {
    // Comments and directives (".. note::" keeps nothing; its indented body stays).
    drop = true;
    return "";
  }
  if (kind == "pod" && !t.empty() && t[0] == '=') {
    const auto sp = t.find(' ');
    drop = sp == std::string::npos;  // =over, =back, =cut, =pod
    return drop ? "" : t.substr(sp + 1);
  }
  return kind == "rst" ? drop_roles(t) : t;
}

// HTML (DocBook output) as text lines: the page's navigation bars and <head> go, block ends
// become blank lines, tags go, the common entities are decoded.
std::string html_text(const std::string& html) {
  std::string h = html;
  auto cut = [&h](const std::string& open, const std::string& close) {
    for (std::size_t b; (b = h.find(open)) != std::string::npos;) {
      const std::size_t e = h.find(close, b);
      h.erase(b, e == std::string::npos ? std::string::npos : e + close.size() - b);
    }
  };
  cut("<head>", "</head>");
  cut("<div class=\"navheader\">", "</div>");
  cut("<div class=\"navfooter\">", "</div>");
  std::string out;
  out.reserve(h.size());
  for (std::size_t i = 0; i < h.size(); ++i) {
    if (h[i] == '<') {
      const std::size_t e = h.find('>', i);
      if (e == std::string::npos) break;
      const std::string tag = h.substr(i + 1, std::min<std::size_t>(e - i - 1, 4));
      for (const char* block : {"/p", "/h", "/li", "/div", "/tr", "/dt", "/dd", "br", "/pre", "/tab"})
        if (tag.rfind(block, 0) == 0) {
          out += "\n\n";
          break;
        }
      i = e;
      continue;
    }
    if (h[i] == '&') {
      static const std::pair<const char*, const char*> entities[] = {
          {"&lt;", "<"}, {"&gt;", ">"}, {"&amp;", "&"}, {"&quot;", "\""}, {"&nbsp;", " "},
          {"&#160;", " "}, {"&#39;", "'"}};
      bool done = false;
      for (const auto& [name, text] : entities)
        if (h.compare(i, std::strlen(name), name) == 0) {
          out += text;
          i += std::strlen(name) - 1;
          done = true;
          break;
        }
      if (done) continue;
    }
    out.push_back(h[i]);
  }
  return out;
}

// A manual page's troff source as text lines: comments and layout requests go, the text of
// font and heading macros stays, escapes are resolved or dropped.
std::string man_text(const std::string& troff) {
  std::string out;
  std::istringstream in(troff);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(".\\\"", 0) == 0 || line.rfind("'\\\"", 0) == 0 || line == ".") continue;
    if (!line.empty() && line[0] == '.') {
      const std::size_t sp = line.find(' ');
      const std::string macro = line.substr(1, sp == std::string::npos ? std::string::npos : sp - 1);
      static const std::set<std::string> text_macros = {"SH", "SS", "B",  "I",  "BR", "BI",
                                                        "IB", "IR", "RB", "RI", "SM", "SB"};
      if (!text_macros.count(macro) || sp == std::string::npos) {
        if (macro == "PP" || macro == "P" || macro == "LP" || macro == "SH" || macro == "SS" ||
            macro == "TP" || macro == "IP" || macro == "sp")
          out += "\n";
        continue;
      }
      line = line.substr(sp + 1);
      std::erase(line, '"');
      if (macro == "SH" || macro == "SS") line = "\n" + line + "\n";
    }
    std::string t;
    for (std::size_t i = 0; i < line.size(); ++i) {
      if (line[i] != '\\' || i + 1 >= line.size()) {
        t.push_back(line[i]);
        continue;
      }
      const char c = line[++i];
      if (c == 'f' || c == 's') {  // font \fB \f(CW, size \s-1 \s0
        if (i + 1 < line.size() && line[i + 1] == '(') i += 2;
        else if (c == 's' && i + 1 < line.size() && (line[i + 1] == '-' || line[i + 1] == '+')) i += 2;
        else ++i;
      } else if (c == '(') {  // \(em, \(aq ...
        const std::string name = line.substr(i + 1, 2);
        t += name == "aq" ? "'" : name == "dq" ? "\"" : (name == "em" || name == "en") ? "-" : "";
        i += 2;
      } else if (c == '*') {  // strings: \*(lq \*x
        if (i + 1 < line.size() && line[i + 1] == '(') i += 3;
        else if (i + 1 < line.size() && line[i + 1] == '[') i = line.find(']', i);
        else ++i;
        if (i == std::string::npos) break;
      } else if (c == '-' || c == 'e' || c == ' ' || c == '~') {
        t.push_back(c == '-' ? '-' : c == 'e' ? '\\' : ' ');
      }  // \& \| \^ \c and the rest: nothing
    }
    out += t + "\n";
  }
  return out;
}

// The Debian package's files under `prefix` with `suffix`, from dpkg's list of what it
// installed (so the corpus does not depend on the other packages on the machine).
std::vector<fs::path> package_files(const fs::path& root, const std::string& package,
                                    const std::string& prefix, const std::string& suffix) {
  std::vector<fs::path> out;
  std::ifstream list(root / ".." / ".." / "var" / "lib" / "dpkg" / "info" / (package + ".list"));
  std::string line;
  while (std::getline(list, line))
    if (line.rfind(prefix, 0) == 0 && ends_with(line, suffix)) {
      const fs::path p = root / line.substr(std::string("/usr/share/").size());
      if (fs::is_regular_file(p) && !fs::is_symlink(p)) out.push_back(p);
    }
  std::sort(out.begin(), out.end());
  return out;
}

struct Source {
  std::string package;  // the Debian package that ships it
  std::string kind;
  std::vector<fs::path> files;
};

std::vector<fs::path> sorted_glob(const fs::path& dir, const std::function<bool(const fs::path&)>& keep,
                                  bool recursive,
                                  const std::function<bool(const fs::path&)>& skip_dir = {}) {
  std::vector<fs::path> out;
  if (!fs::is_directory(dir)) return out;
  if (recursive) {
    for (auto it = fs::recursive_directory_iterator(dir); it != fs::recursive_directory_iterator();
         ++it) {
      if (it->is_directory() && skip_dir && skip_dir(it->path())) {
        it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file() && keep(it->path())) out.push_back(it->path());
    }
  } else {
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file() && keep(e.path())) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The last (newest) directory under `parent` whose name starts with `prefix`, or "".
fs::path newest_dir(const fs::path& parent, const std::string& prefix) {
  std::vector<fs::path> found;
  if (fs::is_directory(parent))
    for (const auto& e : fs::directory_iterator(parent))
      if (e.is_directory() && e.path().filename().string().rfind(prefix, 0) == 0)
        found.push_back(e.path());
  std::sort(found.begin(), found.end());
  return found.empty() ? fs::path() : found.back();
}

std::vector<Source> sources(const fs::path& root) {
  std::vector<Source> s;
  const fs::path kernel = newest_dir(root / "doc", "linux-doc-") / "Documentation";
  s.push_back({"linux-doc-6.1", "rst",
               sorted_glob(
                   kernel,
                   [](const fs::path& p) {
                     const std::string n = p.filename().string();
                     return ends_with(n, ".rst.gz") || ends_with(n, ".txt.gz");
                   },
                   true,
                   [&](const fs::path& d) {
                     return d == kernel / "translations" || d == kernel / "devicetree";
                   })});
  s.push_back({"python3.11-doc", "rst",
               sorted_glob(newest_dir(root / "doc", "python3.") / "html" / "_sources",
                           [](const fs::path& p) { return ends_with(p.string(), ".rst.txt"); },
                           true)});
  s.push_back({"perl-doc", "pod",
               sorted_glob(newest_dir(root / "perl", "5.") / "pod",
                           [](const fs::path& p) { return p.extension() == ".pod"; }, false)});
  s.push_back({"postgresql-doc-15", "html",
               sorted_glob(root / "doc" / "postgresql-doc-15" / "html",
                           [](const fs::path& p) { return p.extension() == ".html"; }, false)});
  for (const char* package : {"manpages", "manpages-dev"})
    s.push_back({package, "man", package_files(root, package, "/usr/share/man/man", ".gz")});
  s.push_back({"git-doc", "asciidoc",
               sorted_glob(root / "doc" / "git-doc",
                           [](const fs::path& p) { return p.extension() == ".txt"; }, false)});
  return s;
}

}  // namespace

std::vector<std::string> clean_paragraphs(const std::string& text, const std::string& kind) {
  if (kind == "html") return clean_paragraphs(html_text(text), "asciidoc");
  if (kind == "man") return clean_paragraphs(man_text(text), "asciidoc");
  if (kind != "rst" && kind != "pod" && kind != "asciidoc")
    throw ConfigError("data: unknown document kind '" + kind + "'");
  std::vector<std::string> out;
  std::string para;
  auto flush = [&]() {
    if (!para.empty()) out.push_back(para);
    para.clear();
  };
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    bool drop = false;
    const std::string kept = keep_line(line, kind, drop);
    if (drop) continue;
    if (kept.empty()) {
      flush();
      continue;
    }
    append_collapsed(para, kept);
  }
  flush();
  trim_and_drop_empty(out);
  return out;
}

std::vector<std::string> read_debian_docs_documents(const std::string& root,
                                                    DocsCorpusStats* stats) {
  DocsCorpusStats st;
  std::vector<std::string> docs;
  std::unordered_set<std::size_t> seen_paragraphs, seen_documents;
  const std::hash<std::string> hash;
  for (const Source& src : sources(root)) {
    if (src.files.empty())
      throw ConfigError("data.corpus debian-docs: no " + src.kind + " sources of " + src.package +
                        " under " + root + " (fix: apt-get install -y " + src.package + ")");
    for (const fs::path& p : src.files) {
      const std::string text = read_file(p);
      ++st.files;
      st.input_bytes += static_cast<std::int64_t>(text.size());
      std::string doc;
      for (const std::string& para : clean_paragraphs(text, src.kind)) {
        if (para.size() >= 64 && !seen_paragraphs.insert(hash(para)).second) {
          ++st.duplicate_paragraphs;
          continue;
        }
        if (!doc.empty()) doc.push_back(' ');
        doc += para;
      }
      if (doc.size() < 256 || !seen_documents.insert(hash(doc)).second) {
        ++st.dropped_documents;
        continue;
      }
      docs.push_back(std::move(doc));
    }
  }
  if (stats) *stats = st;
  return docs;
}

}  // namespace meridian::trainer
