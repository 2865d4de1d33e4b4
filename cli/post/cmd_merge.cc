// `meridian merge`: merge safetensors checkpoints of one architecture (linear, SLERP, TIES,
// DARE) into a new checkpoint. Not a model converter: names, dtypes and shapes must match.
#include <filesystem>
#include <iostream>

#include "cli/args.h"
#include "cli/command.h"
#include "cli/options.h"
#include "engine/core/error.h"
#include "trainer/post/merge.h"
#include "trainer/safetensors/safetensors.h"

namespace meridian::cli {
namespace {

struct MergeArgs {
  post::MergeOptions merge;
  std::vector<std::string> inputs;
  std::string out, method, base;
};

std::unique_ptr<Options> options(MergeArgs& a) {
  auto o = std::make_unique<Options>(
      "meridian merge",
      std::vector<std::string>{"--method linear|slerp|ties|dare A B [C...] --out DIR "
                               "[--weights w1,w2,...] [--t T] [--density D] [--base N|PATH] "
                               "[--seed S]"},
      "Merges checkpoints of one architecture into DIR/model.safetensors (or DIR itself when it "
      "ends in .safetensors), written atomically. Checkpoints are safetensors files or "
      "directories holding model.safetensors. Methods:\n"
      "  linear   sum(w_i * theta_i) / sum(w_i); --weights one per model (default all 1)\n"
      "  slerp    two models, spherical interpolation per tensor at --t (default 0.5; 0 = A,\n"
      "           1 = B); linear when the tensors are nearly colinear (|cos| > 0.9995)\n"
      "  ties     task vectors against the base; keep the --density largest magnitudes of each\n"
      "           (default 0.5), elect the sign of the weighted sum, average the agreeing entries\n"
      "  dare     task vectors against the base; drop each entry with p = 1 - density and rescale\n"
      "           the kept ones by 1/(1 - p), seeded by --seed (default 0); base + weighted mean");
  post::MergeOptions& m = a.merge;
  o->arguments("A B", "the checkpoints (two or more)", a.inputs, 2)
      .text("--method", "M", "linear, slerp, ties or dare", a.method)
      .text("--out", "DIR", "where the merged checkpoint goes", a.out)
      .value(
          "--weights", "w1,w2,...",
          "linear: one per model; ties/dare: one per model other than the base",
          [&m](const std::string& n, const std::string& v) { m.weights = opt::number_list(n, v); })
      .number("--t", "T", "slerp's position (default 0.5)", m.t)
      .value("--density", "D", "ties/dare: the share kept (a fraction or a percentage)",
             [&m](const std::string& n, const std::string& v) { m.density = opt::fraction(n, v); })
      .integer("--seed", "S", "dare's seed (default 0)", m.seed, 0, ~std::uint64_t{0})
      .text("--base", "N|PATH",
            "ties/dare: the base model, by index among A B C... (default 0, the first) or a path "
            "(added as an extra model when it is not among them)",
            a.base);
  return o;
}

int run_merge_cmd(const std::vector<std::string>& args) {
  MergeArgs a;
  const auto o = options(a);
  o->parse(args);
  if (a.method.empty() || a.out.empty())
    throw ConfigError("needs --method and --out\n" + o->usage());
  post::MergeOptions& options = a.merge;
  const std::vector<std::string>& inputs = a.inputs;
  const std::string &out = a.out, &method = a.method, &base = a.base;
  options.method = post::parse_merge_method(method);

  std::vector<std::filesystem::path> paths;
  for (const auto& in : inputs) paths.push_back(post::resolve_checkpoint(in));
  if (!base.empty()) {
    if (base.find_first_not_of("0123456789") == std::string::npos) {
      options.base = static_cast<int>(opt::unsigned_integer("--base", base));
    } else {
      const auto bp = post::resolve_checkpoint(base);
      options.base = -1;
      for (std::size_t i = 0; i < paths.size(); ++i)
        if (std::filesystem::equivalent(paths[i], bp)) options.base = static_cast<int>(i);
      if (options.base < 0) {
        paths.insert(paths.begin(), bp);
        options.base = 0;
      }
    }
  }

  std::vector<safetensors::File> files;
  for (const auto& p : paths) files.push_back(safetensors::read(p));
  std::vector<const safetensors::File*> models;
  for (const auto& f : files) models.push_back(&f);

  std::filesystem::path target = out;
  if (target.extension() != ".safetensors") {
    std::filesystem::create_directories(target);
    target /= "model.safetensors";
  } else if (target.has_parent_path()) {
    std::filesystem::create_directories(target.parent_path());
  }
  const std::size_t n = post::merge_checkpoints(models, options, target);
  std::cout << "merged " << n << " tensors of " << models.size() << " checkpoints ("
            << post::merge_method_name(options.method) << ") into " << target.string() << "\n";
  return kExitOk;
}

MERIDIAN_COMMAND("merge", "merge checkpoints: linear, slerp, ties or dare",
                 help_of<MergeArgs>(options), run_merge_cmd);

}  // namespace
}  // namespace meridian::cli
