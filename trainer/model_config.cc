// YAML loading, parameter layout and counting for the Llama-style decoder (no LibTorch).
// Not the model itself: trainer/model.cc builds tensors from the layout defined here.
#include "trainer/model_config.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <filesystem>
#include <ios>
#include <set>
#include <sstream>

#include "engine/error.h"

#ifndef MERIDIAN_TRAINER_CONFIG_DIR
#define MERIDIAN_TRAINER_CONFIG_DIR "trainer/configs"
#endif

namespace meridian::trainer {
namespace {

// Reads the keys of one YAML map into typed fields, refusing keys it does not know.
class MapReader {
 public:
  MapReader(const YAML::Node& node, std::string where) : node_(node), where_(std::move(where)) {
    if (!node_.IsMap()) throw ConfigError(where_ + ": expected a map of keys");
  }
  ~MapReader() = default;

  template <typename T>
  void read(const std::string& key, T& out) {
    known_.insert(key);
    const YAML::Node v = node_[key];
    if (!v) return;
    try {
      out = v.as<T>();
    } catch (const YAML::Exception&) {
      throw ConfigError(where_ + "." + key + ": expected " + type_name<T>() + ", got '" +
                        (v.IsScalar() ? v.Scalar() : std::string("a non-scalar")) + "'");
    }
  }

  // true, false (any YAML boolean) or auto.
  void read(const std::string& key, Bf16Autocast& out) {
    known_.insert(key);
    const YAML::Node v = node_[key];
    if (!v) return;
    bool on = false;
    if (v.IsScalar() && v.Scalar() == "auto") {
      out = Bf16Autocast::kAuto;
    } else if (YAML::convert<bool>::decode(v, on)) {
      out = on ? Bf16Autocast::kOn : Bf16Autocast::kOff;
    } else {
      throw ConfigError(where_ + "." + key + ": expected true, false or auto, got '" +
                        (v.IsScalar() ? v.Scalar() : std::string("a non-scalar")) + "'");
    }
  }

  void positive(const std::string& key, double v) const {
    if (!(v > 0)) throw ConfigError(where_ + "." + key + ": expected a positive value");
  }

  void finish() const {
    for (const auto& kv : node_) {
      const std::string k = yaml_key(kv.first, where_);
      if (!known_.count(k)) {
        std::string list;
        for (const auto& n : known_) list += (list.empty() ? "" : ", ") + n;
        throw ConfigError(where_ + ": unknown key '" + k + "' (known: " + list + ")");
      }
    }
  }

 private:
  template <typename T>
  static const char* type_name() {
    if constexpr (std::is_same_v<T, bool>) return "true or false";
    if constexpr (std::is_integral_v<T>) return "an integer";
    if constexpr (std::is_floating_point_v<T>) return "a number";
    return "a string";
  }
  YAML::Node node_;
  std::string where_;
  std::set<std::string> known_;
};

ModelConfig read_model(const YAML::Node& node, const std::string& where) {
  ModelConfig m;
  MapReader r(node, where);
  r.read("name", m.name);
  r.read("layers", m.layers);
  r.read("hidden", m.hidden);
  r.read("heads", m.heads);
  r.read("kv_heads", m.kv_heads);
  r.read("ffn", m.ffn);
  r.read("vocab", m.vocab);
  r.read("seq_len", m.seq_len);
  r.read("rope_theta", m.rope_theta);
  r.read("norm_eps", m.norm_eps);
  r.read("init_std", m.init_std);
  r.finish();
  validate(m, where);
  return m;
}

}  // namespace

TrainConfig read_train_config(const YAML::Node& node, const std::string& where, TrainConfig t) {
  MapReader r(node, where);
  r.read("batch", t.batch);
  r.read("bf16_autocast", t.bf16_autocast);
  r.read("lr", t.optim.lr);
  r.read("beta1", t.optim.beta1);
  r.read("beta2", t.optim.beta2);
  r.read("eps", t.optim.eps);
  r.read("weight_decay", t.optim.weight_decay);
  r.read("grad_clip", t.optim.grad_clip);
  r.read("warmup_steps", t.optim.warmup_steps);
  r.read("decay_start_step", t.optim.decay_start_step);
  r.read("total_steps", t.optim.total_steps);
  r.read("z_loss_weight", t.optim.z_loss_weight);
  r.finish();
  if (t.batch <= 0) throw ConfigError(where + ".batch: expected a positive integer");
  r.positive("lr", t.optim.lr);
  if (!(t.optim.beta1 >= 0 && t.optim.beta1 < 1 && t.optim.beta2 >= 0 && t.optim.beta2 < 1))
    throw ConfigError(where + ".beta1/beta2: expected values in [0, 1)");
  if (t.optim.weight_decay < 0) throw ConfigError(where + ".weight_decay: expected >= 0");
  if (t.optim.warmup_steps < 0) throw ConfigError(where + ".warmup_steps: expected >= 0");
  if (t.optim.decay_start_step >= 0 && t.optim.total_steps <= t.optim.decay_start_step)
    throw ConfigError(where + ".total_steps: expected > decay_start_step when decay is on");
  if (t.optim.z_loss_weight < 0) throw ConfigError(where + ".z_loss_weight: expected >= 0");
  return t;
}

void validate(const ModelConfig& m, const std::string& where) {
  auto need = [&](bool ok, const char* key, const char* what) {
    if (!ok) throw ConfigError(where + "." + key + ": expected " + what);
  };
  need(m.layers > 0, "layers", "a positive integer");
  need(m.hidden > 0, "hidden", "a positive integer");
  need(m.heads > 0 && m.hidden % m.heads == 0, "heads", "a positive divisor of hidden");
  need(m.head_dim() % 2 == 0, "heads", "hidden / heads to be even (rotary pairs)");
  need(m.kv_heads > 0 && m.heads % m.kv_heads == 0, "kv_heads", "a positive divisor of heads");
  need(m.ffn > 0, "ffn", "a positive integer");
  need(m.vocab > 1, "vocab", "an integer > 1");
  need(m.seq_len > 0, "seq_len", "a positive integer");
  need(m.rope_theta > 0, "rope_theta", "a positive number");
  need(m.norm_eps > 0, "norm_eps", "a positive number");
  need(m.init_std > 0, "init_std", "a positive number");
}

TrainerConfig load_trainer_config(const std::string& path) {
  // A path with a NUL byte would name a shorter one (the configs folder itself: found by the
  // run_config fuzz target); a folder or a device is no config file either.
  if (path.find('\0') != std::string::npos)
    throw ConfigError("trainer config path: contains a NUL byte");
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error))
    throw ConfigError(path + ": cannot open the trainer config file (not a regular file)");
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw ConfigError(path + ": cannot open the trainer config file");
  } catch (const YAML::Exception& e) {
    throw ConfigError(path + ": not valid YAML: " + e.what());
  } catch (const std::ios_base::failure& e) {
    throw ConfigError(path + ": cannot read the trainer config file: " + e.what());
  }
  if (!root.IsMap()) throw ConfigError(path + ": expected a map with 'model' and 'train'");
  TrainerConfig c;
  for (const auto& kv : root) {
    const std::string k = yaml_key(kv.first, path);
    if (k != "model" && k != "train")
      throw ConfigError(path + ": unknown key '" + k + "' (known: model, train)");
  }
  if (!root["model"]) throw ConfigError(path + ": missing the 'model' section");
  c.model = read_model(root["model"], path + ": model");
  if (root["train"]) c.train = read_train_config(root["train"], path + ": train");
  return c;
}

std::string yaml_key(const YAML::Node& key, const std::string& where) {
  if (!key.IsScalar()) throw ConfigError(where + ": a key that is not a name (a list or a map)");
  return key.Scalar();
}

std::string config_dir() { return MERIDIAN_TRAINER_CONFIG_DIR; }

TrainerConfig load_named_config(const std::string& name_or_path) {
  if (name_or_path.find('\0') != std::string::npos)
    throw ConfigError("model config name: contains a NUL byte");
  if (name_or_path.size() > 5 && name_or_path.ends_with(".yaml"))
    return load_trainer_config(name_or_path);
  const auto path = std::filesystem::path(config_dir()) / (name_or_path + ".yaml");
  std::error_code error;  // a name the file system rejects (too long, ...) is not found either
  if (!std::filesystem::exists(path, error)) {
    std::string names;
    if (std::filesystem::is_directory(config_dir(), error))
      for (const auto& e : std::filesystem::directory_iterator(config_dir()))
        if (e.path().extension() == ".yaml") names += " " + e.path().stem().string();
    throw ConfigError("model config '" + name_or_path + "' not found in " + config_dir() +
                      " (available:" + names + ")");
  }
  return load_trainer_config(path.string());
}

std::vector<ParamSpec> parameter_layout(const ModelConfig& m) {
  validate(m, "model " + m.name);
  std::vector<ParamSpec> out;
  std::uint64_t offset = 0;
  auto add = [&](std::string name, std::vector<std::int64_t> shape, int group) {
    std::uint64_t n = 1;
    for (auto d : shape) n *= static_cast<std::uint64_t>(d);
    out.push_back(ParamSpec{std::move(name), std::move(shape), offset, n, group});
    offset += n;
  };
  const std::int64_t d = m.hidden, kv = static_cast<std::int64_t>(m.kv_heads) * m.head_dim();
  add("tok_embeddings.weight", {m.vocab, d}, 0);
  for (int l = 0; l < m.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    add(p + "attention_norm.weight", {d}, l + 1);
    add(p + "attention.wq.weight", {d, d}, l + 1);
    add(p + "attention.wk.weight", {kv, d}, l + 1);
    add(p + "attention.wv.weight", {kv, d}, l + 1);
    add(p + "attention.wo.weight", {d, d}, l + 1);
    add(p + "ffn_norm.weight", {d}, l + 1);
    add(p + "feed_forward.w1.weight", {m.ffn, d}, l + 1);
    add(p + "feed_forward.w2.weight", {d, m.ffn}, l + 1);
    add(p + "feed_forward.w3.weight", {m.ffn, d}, l + 1);
  }
  add("norm.weight", {d}, m.layers + 1);
  add("output.weight", {m.vocab, d}, m.layers + 1);
  return out;
}

std::vector<std::uint64_t> group_boundaries(const ModelConfig& m) {
  const auto layout = parameter_layout(m);
  std::vector<std::uint64_t> b{0};
  for (std::size_t i = 0; i < layout.size(); ++i) {
    const bool last_of_group = i + 1 == layout.size() || layout[i + 1].group != layout[i].group;
    if (last_of_group) b.push_back(layout[i].offset + layout[i].numel);
  }
  return b;
}

std::uint64_t parameter_count(const ModelConfig& m) {
  const auto layout = parameter_layout(m);
  return layout.back().offset + layout.back().numel;
}

std::uint64_t non_embedding_parameter_count(const ModelConfig& m) {
  return parameter_count(m) -
         static_cast<std::uint64_t>(m.vocab) * static_cast<std::uint64_t>(m.hidden);
}

double flops_per_token(const ModelConfig& m) {
  return 6.0 * static_cast<double>(non_embedding_parameter_count(m)) +
         12.0 * m.layers * m.heads * m.head_dim() * static_cast<double>(m.seq_len);
}

std::string describe(const ModelConfig& m) {
  std::ostringstream os;
  os << "model " << m.name << ": " << m.layers << " layers, hidden " << m.hidden << ", heads "
     << m.heads << "/" << m.kv_heads << " (head dim " << m.head_dim() << "), ffn " << m.ffn
     << ", vocab " << m.vocab << ", seq_len " << m.seq_len << ", rope theta " << m.rope_theta
     << "\n"
     << "parameters: " << parameter_count(m) << " (non-embedding "
     << non_embedding_parameter_count(m) << ")\n"
     << "flops_per_token: " << flops_per_token(m)
     << " (6*N_non_embedding + 12*L*H*d_head*T)\n";
  return os.str();
}

}  // namespace meridian::trainer
