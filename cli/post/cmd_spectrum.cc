// `meridian spectrum`: Spectrum layer selection on a safetensors checkpoint — the SNR of every
// weight matrix and a YAML of the modules to train. Not the training itself (the trainer reads
// the YAML).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include "cli/args.h"
#include "cli/command.h"
#include "cli/options.h"
#include "trainer/post/merge.h"
#include "trainer/post/spectrum.h"
#include "trainer/safetensors/safetensors.h"

namespace meridian::cli {
namespace {

struct SpectrumArgs {
  post::SpectrumOptions spectrum;
  std::string checkpoint, out = "spectrum.yaml";
};

std::unique_ptr<Options> options(SpectrumArgs& a) {
  auto o = std::make_unique<Options>(
      "meridian spectrum",
      std::vector<std::string>{
          "CHECKPOINT [--top 25%] [--by-type] [--freeze-vectors] [--out FILE]"},
      "For every 2-D weight matrix of a safetensors checkpoint (a file, or a directory with "
      "model.safetensors): singular values (Eigen BDCSVD), noise scale sigma from the median "
      "singular value, the Marchenko-Pastur edge sigma*(sqrt(m)+sqrt(n)), SNR = energy above the "
      "edge / energy below. Selects the top fraction of matrices by SNR and writes a YAML whose "
      "`train:` list the trainer trains (everything else frozen).");
  post::SpectrumOptions& sp = a.spectrum;
  o->argument("CHECKPOINT", "a safetensors file, or a directory with model.safetensors",
              a.checkpoint)
      .value("--top", "F", "share of matrices to train: 25% or 0.25 (default 25%)",
             [&sp](const std::string& n, const std::string& v) {
               sp.top_fraction = opt::fraction(n, v);
             })
      .flag("--by-type",
            "rank within each module type (q, k, v, o, gate, up, down, embed, lm_head)", sp.by_type)
      .flag("--freeze-vectors",
            "also freeze 1-D tensors (norms, biases); by default they are trained",
            [&sp] { sp.train_vectors = false; })
      .text("--out", "FILE", "YAML output (default spectrum.yaml)", a.out);
  return o;
}

int run_spectrum_cmd(const std::vector<std::string>& args) {
  SpectrumArgs a;
  options(a)->parse(args);
  const post::SpectrumOptions& options = a.spectrum;
  const std::string &checkpoint = a.checkpoint, &out = a.out;
  opt::check_writable("--out", out);  // before the decompositions, not after
  const auto start = std::chrono::steady_clock::now();
  const safetensors::File file = safetensors::read(post::resolve_checkpoint(checkpoint));
  const post::SpectrumReport report = post::run_spectrum(file, options);
  const double elapsed_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::printf("%-48s %-7s %11s %9s %9s %5s %9s %s\n", "matrix", "type", "shape", "sigma", "mp_edge",
              "rank", "snr", "train");
  for (std::size_t i = 0; i < report.matrices.size(); ++i) {
    const auto& m = report.matrices[i];
    const std::string shape = std::to_string(m.rows) + "x" + std::to_string(m.cols);
    std::printf("%-48s %-7s %11s %9.3g %9.3g %5d %9.4g %s\n", m.name.c_str(), m.module_type.c_str(),
                shape.c_str(), m.sigma, m.mp_edge, m.signal_rank, m.snr,
                report.selected[i] ? "yes" : "-");
  }
  const double share =
      report.matrix_params ? 100.0 * report.selected_matrix_params / report.matrix_params : 0.0;
  std::printf(
      "%zu matrices, %zu selected (%.1f%% of %lld matrix parameters); %zu 1-D tensors (%s); "
      "%.2f s\n",
      report.matrices.size(),
      static_cast<std::size_t>(std::count(report.selected.begin(), report.selected.end(), true)),
      share, static_cast<long long>(report.matrix_params), report.vectors.size(),
      options.train_vectors ? "trained" : "frozen", elapsed_s);
  std::ofstream os(out);
  if (!os) throw ConfigError("spectrum: cannot write --out '" + out + "'");
  post::write_yaml(report, os);
  os.close();
  if (!os) throw ConfigError("spectrum: writing '" + out + "' failed");
  std::printf("wrote %s\n", out.c_str());
  return kExitOk;
}

MERIDIAN_COMMAND("spectrum", "rank weight matrices by SNR (Spectrum) and list the ones to train",
                 help_of<SpectrumArgs>(options), run_spectrum_cmd);

}  // namespace
}  // namespace meridian::cli
