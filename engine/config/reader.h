// The one strict reader of Meridian's YAML files (run files, the sites tables they name, the
// trainer's model configs): a Document is a parsed file with its `--set` overrides applied, and a
// Reader walks one mapping of it, typed and range-checked, refusing keys it was not asked for.
// Every error has one format:
//   FILE:LINE: key 'diloco.H': expected a positive integer, got '0'
//   --set diloco.H=0: key 'diloco.H': expected a positive integer, got '0'
// and names the file that gave the key (a key merged from another file names that file).
// Not the schema: engine/config/run_file.h says which keys exist.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace meridian::config {

// Where the values being read came from: the file, the --set overrides applied on top of it, and
// the key paths merged in from other files, so that an error blames the one that gave the key.
struct Origin {
  std::string file;
  std::string base_dir;  // the file's directory: relative paths in it resolve against it
  std::vector<std::pair<std::string, std::string>> overrides;  // key path, the --set text
  struct Other {
    std::string key_path, file, base_dir;
  };
  std::vector<Other> other_files;

  const std::string& file_of(const std::string& key_path) const;
  const std::string& base_dir_of(const std::string& key_path) const;
  // The override that set `key_path`, a key below it or the section it is in; nullptr when a
  // file did.
  const std::string* override_of(const std::string& key_path) const;

  // When not null, Reader::get records here where each key it found came from, by key path:
  // "FILE:LINE" or "--set TEXT" (`meridian check` prints it beside the resolved values).
  std::map<std::string, std::string>* given = nullptr;
};

// "file:LINE" where the node has a position in the file, else "file".
std::string where(const std::string& file, const YAML::Node* node);

// A mapping being read: remembers which keys were consumed so the rest can be reported.
class Reader {
 public:
  // `what` names the mapping in an unknown-key message at the top level ("a run file").
  Reader(const YAML::Node& node, const Origin& origin, std::string path,
         std::string what = "a run file");

  [[noreturn]] void fail(const std::string& key, const std::string& expected,
                         const YAML::Node* got = nullptr) const;

  std::string key_path(const std::string& k) const { return path_.empty() ? k : path_ + "." + k; }
  const std::string& path() const { return path_; }
  const Origin& origin() const { return *origin_; }

  // The value under `k` (undefined when absent); `k` counts as read.
  YAML::Node get(const std::string& k);
  bool present(const std::string& k) const;

  // Reads a scalar of type T into `out` when `k` is present (else `out` keeps its default);
  // `expected` is what the error says was expected, `ok` a range check.
  template <typename T>
  void scalar(const std::string& k, T& out, const std::string& expected,
              std::function<bool(const T&)> ok = nullptr) {
    YAML::Node n = get(k);
    if (!n || n.IsNull()) return;  // default stays
    if (!n.IsScalar()) fail(key_path(k), expected, &n);
    T v;
    try {
      v = n.as<T>();
    } catch (const YAML::Exception&) {
      fail(key_path(k), expected, &n);
    }
    if constexpr (std::is_floating_point_v<T>) {
      if (!std::isfinite(v)) fail(key_path(k), expected, &n);
    }
    if constexpr (std::is_same_v<T, std::string>) {
      if (v.find('\0') != std::string::npos) fail(key_path(k), expected, &n);
    }
    if (ok && !ok(v)) fail(key_path(k), expected, &n);
    out = v;
  }

  // A file path, resolved against the directory of the file that gave it (absolute paths stay).
  void path_value(const std::string& k, std::string& out, const std::string& expected);
  // A list of scalars (or one scalar, as a list of one).
  void string_list(const std::string& k, std::vector<std::string>& out,
                   const std::string& expected);
  // The list under `k` (undefined when absent); an error when it is not a list.
  YAML::Node sequence(const std::string& k);

  // A key of an older form of the file: when present, an error that says what replaced it.
  void moved(const std::string& k, const std::string& now);

  Reader child(const std::string& k);
  // The mapping `node`, an element of a list under this one, read as `path`.
  Reader element(const YAML::Node& node, const std::string& path) const;

  // Every key not read so far is an error ("unknown key 'diloco.HH'; keys of diloco: H, ...").
  void finish() const;

 private:
  YAML::Node node_;
  const Origin* origin_;
  std::string path_, what_;
  std::set<std::string> seen_;
};

template <typename T>
std::function<bool(const T&)> positive() {
  return [](const T& v) { return v > 0; };
}
template <typename T>
std::function<bool(const T&)> non_negative() {
  return [](const T& v) { return v >= 0; };
}

// A parsed file: its YAML tree with the --set overrides ("a.b.c=value", "a.list[2].key=value",
// YAML values) applied, and its origin. `file` names it in messages; `base_dir` is its directory.
class Document {
 public:
  // `hint` explains text that is not YAML or not a mapping (e.g. "this looks like TOML"); it
  // returns "" when it has nothing to say.
  using Hint = std::function<std::string(const std::string& text)>;
  Document(const std::string& text, const std::string& file, const std::string& base_dir,
           const std::vector<std::string>& overrides = {}, const Hint& hint = nullptr);
  // Reads `path`; `what` names the kind of file in errors ("cannot open the run file").
  static Document load(const std::string& path, const std::vector<std::string>& overrides = {},
                       const std::string& what = "run file", const Hint& hint = nullptr);

  YAML::Node& root() { return root_; }
  Origin& origin() { return origin_; }
  const Origin& origin() const { return origin_; }
  Reader reader(const std::string& what = "a run file") const {
    return Reader(root_, origin_, "", what);
  }

 private:
  YAML::Node root_;
  Origin origin_;
};

// Applies one "--set" override to `root`; returns the key path it set ("network.nodes[1].count").
std::string apply_override(YAML::Node& root, const std::string& ov, const std::string& file);

}  // namespace meridian::config
