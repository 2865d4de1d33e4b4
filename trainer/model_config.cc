// Model config loading (through engine/config), parameter layout and counting for the Llama-style decoder (no LibTorch).
// Not the model itself: trainer/model.cc builds tensors from the layout defined here.
#include "trainer/model_config.h"

#include <cmath>
#include <filesystem>
#include <ios>
#include <set>
#include <sstream>

#include "engine/config/run_file.h"
#include "engine/core/error.h"
#include "trainer/run_config.h"

namespace meridian::trainer {

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
  if (path.find('\0') != std::string::npos)
    throw ConfigError("trainer config path: contains a NUL byte");
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error))
    throw ConfigError(path + ": cannot open the trainer config file (not a regular file)");
  return trainer_config(config::load_model_config_file(path));
}

std::string config_dir() { return config::model_config_dir(); }

TrainerConfig load_named_config(const std::string& name_or_path) {
  return trainer_config(config::load_model_config(name_or_path));
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
  return config::prime_flops_per_token(non_embedding_parameter_count(m), m.layers, m.heads,
                                       m.head_dim(), m.seq_len);
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
