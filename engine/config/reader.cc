// The strict YAML reader (reader.h): origins, the one error format, --set overrides.
#include "engine/config/reader.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/core/error.h"

namespace meridian::config {
namespace {

// Whether `key_path` is `prefix` or lies below it ("a.b" under "a", "a[2].c" under "a").
bool under(const std::string& key_path, const std::string& prefix) {
  return key_path == prefix || key_path.rfind(prefix + ".", 0) == 0 ||
         key_path.rfind(prefix + "[", 0) == 0;
}

const Origin::Other* other_of(const Origin& o, const std::string& key_path) {
  for (const Origin::Other& other : o.other_files)
    if (under(key_path, other.key_path)) return &other;
  return nullptr;
}

}  // namespace

const std::string& Origin::file_of(const std::string& key_path) const {
  const Other* o = other_of(*this, key_path);
  return o ? o->file : file;
}

const std::string& Origin::base_dir_of(const std::string& key_path) const {
  const Other* o = other_of(*this, key_path);
  return o ? o->base_dir : base_dir;
}

const std::string* Origin::override_of(const std::string& key_path) const {
  for (auto it = overrides.rbegin(); it != overrides.rend(); ++it)  // the last one wins
    if (under(it->first, key_path) || under(key_path, it->first)) return &it->second;
  return nullptr;
}

std::string where(const std::string& file, const YAML::Node* node) {
  if (node && node->IsDefined() && node->Mark().line >= 0)
    return file + ":" + std::to_string(node->Mark().line + 1);
  return file;
}

Reader::Reader(const YAML::Node& node, const Origin& origin, std::string path, std::string what)
    : node_(node), origin_(&origin), path_(std::move(path)), what_(std::move(what)) {
  if (node_ && !node_.IsNull() && !node_.IsMap()) fail(path_, "a mapping", &node_);
}

void Reader::fail(const std::string& key, const std::string& expected,
                  const YAML::Node* got) const {
  const std::string* ov = origin_->override_of(key);
  std::string msg = (ov ? "--set " + *ov : where(origin_->file_of(key), got)) + ": key '" + key +
                    "': expected " + expected;
  if (got && got->IsDefined() && got->IsScalar()) msg += ", got '" + got->Scalar() + "'";
  throw ConfigError(msg);
}

YAML::Node Reader::get(const std::string& k) {
  seen_.insert(k);
  if (!node_ || !node_.IsMap()) return YAML::Node();
  YAML::Node n = node_[k];
  if (origin_->given && n.IsDefined() && !n.IsNull()) {
    const std::string path = key_path(k);
    const std::string* ov = origin_->override_of(path);
    (*origin_->given)[path] = ov ? "--set " + *ov : where(origin_->file_of(path), &n);
  }
  return n;
}

bool Reader::present(const std::string& k) const {
  if (!node_ || !node_.IsMap()) return false;
  const YAML::Node n = node_[k];
  return n.IsDefined() && !n.IsNull();
}

void Reader::path_value(const std::string& k, std::string& out, const std::string& expected) {
  std::string v;
  scalar<std::string>(k, v, expected);
  if (v.empty()) return;
  std::filesystem::path p(v);
  const std::string& dir = origin_->base_dir_of(key_path(k));
  // A --set path is the user's, typed in the working directory.
  if (p.is_relative() && !dir.empty() && !origin_->override_of(key_path(k))) p = dir / p;
  out = p.lexically_normal().string();
}

void Reader::string_list(const std::string& k, std::vector<std::string>& out,
                         const std::string& expected) {
  YAML::Node n = get(k);
  if (!n || n.IsNull()) return;
  std::vector<std::string> v;
  if (n.IsScalar()) {
    v.push_back(n.Scalar());
  } else if (n.IsSequence()) {
    for (std::size_t i = 0; i < n.size(); ++i) {
      if (!n[i].IsScalar()) fail(key_path(k) + "[" + std::to_string(i) + "]", expected, &n);
      v.push_back(n[i].Scalar());
    }
  } else {
    fail(key_path(k), expected, &n);
  }
  out = std::move(v);
}

YAML::Node Reader::sequence(const std::string& k) {
  YAML::Node s = get(k);
  if (s && !s.IsNull() && !s.IsSequence()) fail(key_path(k), "a list", &s);
  return s;
}

void Reader::moved(const std::string& k, const std::string& now) {
  if (!node_ || !node_.IsMap() || !node_[k].IsDefined()) return;
  seen_.insert(k);
  const std::string key = key_path(k);
  const std::string* ov = origin_->override_of(key);
  YAML::Node key_node;
  for (auto it = node_.begin(); it != node_.end(); ++it)
    if (it->first.IsScalar() && it->first.Scalar() == k) key_node = it->first;
  throw ConfigError((ov ? "--set " + *ov : where(origin_->file_of(key), &key_node)) + ": key '" +
                    key + "' is from an older form of the run file: " + now +
                    " (the run file reference: cli/train/README.md, \"The run file\")");
}

Reader Reader::child(const std::string& k) { return Reader(get(k), *origin_, key_path(k)); }

Reader Reader::element(const YAML::Node& node, const std::string& path) const {
  return Reader(node, *origin_, path);
}

void Reader::finish() const {
  if (!node_ || !node_.IsMap()) return;
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    const YAML::Node key_node = it->first;
    if (!key_node.IsScalar())  // yaml-cpp accepts a list or a map as a key
      throw ConfigError(where(origin_->file, &key_node) + ": a key of " +
                        (path_.empty() ? what_ : path_) + " is not a name (a list or a map)");
    const std::string k = key_node.Scalar();
    if (seen_.count(k)) continue;
    std::string known;
    for (auto& s : seen_) known += (known.empty() ? "" : ", ") + s;
    const std::string* ov = origin_->override_of(key_path(k));
    throw ConfigError((ov ? "--set " + *ov : where(origin_->file_of(key_path(k)), &key_node)) +
                      ": unknown key '" + key_path(k) + "'; keys of " +
                      (path_.empty() ? what_ : path_) + ": " + known);
  }
}

std::string apply_override(YAML::Node& root, const std::string& ov, const std::string& file) {
  const auto eq = ov.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ConfigError("--set '" + ov + "': expected key.path=value (list items as key[N])");
  const std::string path = ov.substr(0, eq), value = ov.substr(eq + 1);
  // Components: names, each with any number of [N] list indices ("nodes[1]").
  struct Step {
    std::string key;  // "" for an index step
    std::size_t index = 0;
  };
  std::vector<Step> steps;
  std::stringstream ss(path);
  for (std::string part; std::getline(ss, part, '.');) {
    const std::size_t br = part.find('[');
    const std::string name = part.substr(0, br);
    if (name.empty()) throw ConfigError("--set '" + ov + "': empty component in key path");
    steps.push_back({name, 0});
    for (std::size_t at = br; at != std::string::npos;) {
      const std::size_t close = part.find(']', at);
      const std::string digits = close == std::string::npos ? "" : part.substr(at + 1, close - at - 1);
      if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos ||
          digits.size() > 6)
        throw ConfigError("--set '" + ov + "': '" + part +
                          "': expected a list index as name[N] with N a number");
      steps.push_back({"", static_cast<std::size_t>(std::stoul(digits))});
      at = close + 1 < part.size() ? close + 1 : std::string::npos;
      if (at != std::string::npos && part[at] != '[')
        throw ConfigError("--set '" + ov + "': '" + part + "': unexpected text after ']'");
    }
  }
  if (path.back() == '.' || steps.empty())
    throw ConfigError("--set '" + ov + "': empty component in key path");
  YAML::Node parsed;
  try {
    parsed = YAML::Load(value);
  } catch (const YAML::Exception& e) {
    throw ConfigError("--set '" + ov + "': value is not valid YAML: " + e.what());
  }
  // yaml-cpp's operator[] returns proxies and operator= assigns content: walk with reset().
  YAML::Node cur;
  cur.reset(root);
  std::string done;  // the key path walked so far, for messages
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const Step& s = steps[i];
    const bool last = i + 1 == steps.size();
    if (s.key.empty()) {
      if (!cur.IsSequence() || s.index >= cur.size())
        throw ConfigError("--set " + ov + ": '" + done + "' has no item [" +
                          std::to_string(s.index) + "] in " + file +
                          (cur.IsSequence() ? " (it has " + std::to_string(cur.size()) + ")"
                                            : " (it is not a list)"));
      done += "[" + std::to_string(s.index) + "]";
      if (last) {
        cur[s.index] = parsed;
        return path;
      }
      YAML::Node next = cur[s.index];
      cur.reset(next);  // rebinds the handle (operator= would overwrite the node's content)
      continue;
    }
    if (cur.IsDefined() && !cur.IsNull() && !cur.IsMap())
      throw ConfigError("--set " + ov + ": '" + done + "' is not a mapping in " + file);
    done += (done.empty() ? "" : ".") + s.key;
    if (last) {
      cur[s.key] = parsed;
      return path;
    }
    YAML::Node next = cur[s.key];
    if (!next.IsDefined() || next.IsNull()) {
      if (steps[i + 1].key.empty())
        throw ConfigError("--set " + ov + ": '" + done + "' is not a list in " + file);
      cur[s.key] = YAML::Node(YAML::NodeType::Map);
      next.reset(cur[s.key]);
    }
    cur.reset(next);
  }
  return path;
}

Document::Document(const std::string& text, const std::string& file, const std::string& base_dir,
                   const std::vector<std::string>& overrides, const Hint& hint) {
  origin_.file = file;
  origin_.base_dir = base_dir;
  try {
    root_ = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    const std::string h = hint ? hint(text) : "";
    throw ConfigError(file + ": " + (h.empty() ? "not valid YAML: " + std::string(e.what()) : h));
  }
  if (!root_ || root_.IsNull()) root_ = YAML::Node(YAML::NodeType::Map);
  if (!root_.IsMap()) {
    const std::string h = hint ? hint(text) : "";
    throw ConfigError(file + ": " + (h.empty() ? "expected a mapping of sections" : h));
  }
  for (const std::string& ov : overrides)
    origin_.overrides.emplace_back(apply_override(root_, ov, file), ov);
}

Document Document::load(const std::string& path, const std::vector<std::string>& overrides,
                        const std::string& what, const Hint& hint) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw ConfigError(path + ": is a folder; expected a " + what + " (YAML)");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path + ": cannot open the " + what);
  std::ostringstream text;
  text << in.rdbuf();
  return Document(text.str(), path, std::filesystem::path(path).parent_path().string(), overrides,
                  hint);
}

}  // namespace meridian::config
