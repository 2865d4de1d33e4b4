// `meridian merge`: merge safetensors checkpoints of one architecture (linear, SLERP, TIES,
// DARE) into a new checkpoint. Not a model converter: names, dtypes and shapes must match.
#include <filesystem>
#include <iostream>

#include "cli/command.h"
#include "cli/args.h"
#include "trainer/post/merge.h"
#include "trainer/safetensors/safetensors.h"

namespace meridian::cli {
namespace {

constexpr const char* kUsage =
    "usage: meridian merge --method linear|slerp|ties|dare A B [C...] --out DIR\n"
    "                      [--weights w1,w2,...] [--t T] [--density D] [--base N|PATH] [--seed S]\n"
    "\n"
    "Checkpoints are safetensors files or directories holding model.safetensors; the result is\n"
    "DIR/model.safetensors (or DIR itself when it ends in .safetensors), written atomically.\n"
    "  linear   sum(w_i * theta_i) / sum(w_i); --weights one per model (default all 1)\n"
    "  slerp    two models, spherical interpolation per tensor at --t (default 0.5; 0 = A,\n"
    "           1 = B); linear when the tensors are nearly colinear (|cos| > 0.9995)\n"
    "  ties     task vectors against the base; keep the --density largest magnitudes of each\n"
    "           (default 0.5), elect the sign of the weighted sum, average the agreeing entries\n"
    "  dare     task vectors against the base; drop each entry with p = 1 - density and rescale\n"
    "           the kept ones by 1/(1 - p), seeded by --seed (default 0); base + weighted mean\n"
    "  --base   ties/dare: the base model, by index among A B C... (default 0, the first) or a\n"
    "           path (added as an extra model when it is not among them)\n"
    "  --weights for ties/dare: one per model other than the base\n";

int run_merge_cmd(const std::vector<std::string>& args) {
  post::MergeOptions options;
  std::vector<std::string> inputs;
  std::string out, method, base;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--method") {
      method = opt::value(args, i);
    } else if (a == "--weights") {
      options.weights = opt::number_list(a, opt::value(args, i));
    } else if (a == "--t") {
      options.t = opt::number(a, opt::value(args, i));
    } else if (a == "--density") {
      options.density = opt::fraction(a, opt::value(args, i));
    } else if (a == "--seed") {
      options.seed = opt::unsigned_integer(a, opt::value(args, i));
    } else if (a == "--base") {
      base = opt::value(args, i);
    } else if (a == "--out") {
      out = opt::value(args, i);
    } else if (!a.empty() && a[0] == '-') {
      std::cerr << "meridian merge: unknown option " << a << "\n" << kUsage;
      return kExitUsage;
    } else {
      inputs.push_back(a);
    }
  }
  if (method.empty() || out.empty() || inputs.size() < 2) {
    std::cerr << "meridian merge: needs --method, --out and at least two checkpoints\n" << kUsage;
    return kExitUsage;
  }
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

MERIDIAN_COMMAND("merge", "merge checkpoints: linear, slerp, ties or dare", kUsage, run_merge_cmd);

}  // namespace
}  // namespace meridian::cli
