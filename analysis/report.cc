// report.html: static HTML and CSS only; images as data URIs so the file can be mailed or
// opened from disk. Every number shown comes from summarize(); nothing is recomputed here.
#include "analysis/report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "analysis/ensemble.h"
#include "engine/core/error.h"
#include "engine/core/util/base64.h"

namespace meridian::analysis {
namespace fs = std::filesystem;

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

namespace {

std::string fmt(double v, const char* format = "%.4g") {
  if (!std::isfinite(v)) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}
std::string pct(double v) { return std::isfinite(v) ? fmt(v * 100.0, "%.1f") + " %" : "n/a"; }
std::string bytes(double v) {
  if (!std::isfinite(v)) return "n/a";
  const char* units[] = {"B", "KB", "MB", "GB", "TB", "PB"};
  int u = 0;
  while (std::abs(v) >= 1000 && u < 5) v /= 1000, ++u;
  return fmt(v, "%.3g") + " " + units[u];
}
std::string count(double v) {
  if (!std::isfinite(v)) return "n/a";
  const char* units[] = {"", " k", " M", " G", " T"};
  int u = 0;
  while (std::abs(v) >= 1000 && u < 4) v /= 1000, ++u;
  return fmt(v, "%.4g") + units[u];
}
std::string seconds(double v) {
  if (!std::isfinite(v)) return "n/a";
  if (std::abs(v) >= 3 * 3600) return fmt(v / 3600, "%.2f") + " h";
  if (std::abs(v) >= 180) return fmt(v / 60, "%.1f") + " min";
  return fmt(v, "%.3g") + " s";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path + ": cannot read the plot");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

const char* caption(const std::string& name) {
  if (name == "nodes") return "Active nodes (participants of each outer step) over inner steps.";
  if (name == "allreduce_hist")
    return "Histogram of the all-reduce time per outer step (the slowest node's, all attempts).";
  if (name == "allreduce_box") return "Distribution of the all-reduce time per outer step.";
  if (name == "utilization")
    return "Left: compute utilization per outer step, in the report's form T_inner / (T_inner + "
           "T_allreduce) and as inner compute over the step's wall time. Right: MFU per outer "
           "step.";
  if (name == "timeline")
    return "What each node did during one outer step: compute, all-reduce, outer optimizer, "
           "recovery; grey is alive but idle (waiting for the slowest node, membership).";
  if (name == "bytes")
    return "All-reduce bytes per node over the run, and the send bandwidth "
           "while in all-reduce.";
  if (name == "loss_vs_tokens")
    return "Training and (emulation) validation loss and perplexity, mean over nodes, against "
           "all nodes' tokens.";
  if (name == "loss_vs_time")
    return "The same against time: the modelled cluster's clock in an emulation, wall-clock time "
           "in a real run.";
  if (name == "ensemble_box")
    return "Across the seeds (one draw of the access bandwidths each): compute utilization, MFU "
           "and each run's median all-reduce time per outer step. Box: p25 to p75, black line: "
           "median, whiskers: p5 to p95 (type-7 percentiles over the seeds that ran); dots: one "
           "seed each.";
  if (name == "ensemble_allreduce_steps")
    return "All-reduce time of each outer step (the slowest node's): at each step the band spans "
           "p10 to p90 over the seeds whose run has that step, the line is their median.";
  return "";
}

const char* kStyle = R"(
body { font-family: 'DejaVu Sans', Arial, sans-serif; margin: 2em auto; max-width: 1250px;
       color: #222; line-height: 1.4; padding: 0 1em; }
h1 { font-size: 1.7em; margin-bottom: 0.2em; }
h2 { border-bottom: 2px solid #0072b2; padding-bottom: 0.2em; margin-top: 1.6em; }
.meta { color: #555; }
table { border-collapse: collapse; margin: 0.8em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.7em; text-align: right; }
th { background: #eef3f8; } td.l, th.l { text-align: left; }
.headline { display: flex; flex-wrap: wrap; gap: 1em; margin: 1em 0; }
.card { border: 1px solid #ccc; border-radius: 6px; padding: 0.6em 1em; min-width: 9em;
        background: #f8fafc; }
.card .v { font-size: 1.6em; font-weight: bold; color: #0072b2; }
.card .k { color: #555; font-size: 0.9em; }
figure { margin: 1.2em 0; } figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { color: #444; font-size: 0.95em; }
.banner { border: 2px solid #b03a2e; background: #fdecea; color: #7b241c; font-weight: bold;
          font-size: 1.2em; padding: 0.6em 1em; border-radius: 6px; margin: 0.8em 0; }
pre { background: #f6f6f6; border: 1px solid #ddd; padding: 0.8em; overflow-x: auto;
      font-size: 0.85em; }
)";

// The page up to its <h1> (title and heading alike).
void page_start(std::ostream& h, const std::string& title) {
  h << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
    << "<title>" << html_escape(title) << "</title>\n<style>" << kStyle
    << "</style>\n</head>\n<body>\n<h1>" << html_escape(title) << "</h1>\n";
}

// Each PNG as a <figure> with its data URI and caption.
void figures(std::ostream& h, const std::vector<std::string>& png_files) {
  for (const std::string& png : png_files) {
    const std::string name = fs::path(png).stem().string();
    h << "<figure id=\"" << html_escape(name) << "\"><img alt=\"" << html_escape(name)
      << "\" src=\"data:image/png;base64," << base64_encode(read_file(png)) << "\">\n<figcaption>"
      << html_escape(caption(name)) << "</figcaption></figure>\n";
  }
}

std::vector<std::string> pngs_of(const std::vector<std::string>& files) {
  std::vector<std::string> pngs;
  for (const std::string& f : files)
    if (fs::path(f).extension() == ".png") pngs.push_back(f);
  return pngs;
}

void write_page(const std::string& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary);
  if (!file) throw ConfigError(path + ": cannot write the report");
  file << text;
  if (!file.flush()) throw ConfigError(path + ": write failed");
}

// The headline: the run's few numbers, as cards.
void headline_cards(std::ostringstream& h, const Summary& s) {
  auto card = [&](const std::string& value, const std::string& key) {
    h << "<div class=\"card\"><div class=\"v\">" << html_escape(value) << "</div><div class=\"k\">"
      << html_escape(key) << "</div></div>\n";
  };
  h << "<div class=\"headline\">\n";
  card(pct(s.compute_utilization), "compute utilization");
  card(pct(s.outer_step_utilization), "outer-step utilization");
  card(pct(s.mfu), "MFU");
  card(seconds(s.allreduce_s.p50), "all-reduce p50");
  card(s.bandwidth_reduction_vs_ddp ? fmt(*s.bandwidth_reduction_vs_ddp, "%.0f") + "x" : "n/a",
       "fewer bytes than fp32 DDP");
  if (s.loss) card(fmt(*s.loss, "%.3f"), "final loss");
  h << "</div>\n";
}

// Every metric with its definition.
void summary_section(std::ostringstream& h, const Summary& s) {
  h << "<h2>Summary</h2>\n<table>\n<tr><th class=\"l\">metric</th><th>value</th>"
    << "<th class=\"l\">definition</th></tr>\n";
  auto row = [&](const std::string& k, const std::string& v, const std::string& def) {
    h << "<tr><td class=\"l\">" << html_escape(k) << "</td><td>" << html_escape(v)
      << "</td><td class=\"l\">" << html_escape(def) << "</td></tr>\n";
  };
  row("run time", seconds(s.simulated_s),
      std::string(s.mode == "real" ? "wall-clock seconds" : "simulated seconds") +
          (s.complete      ? " (run_finished)"
           : s.interrupted ? " (run_interrupted)"
                           : " (last event)"));
  row("outer steps", outer_steps_text(s),
      s.complete      ? ""
      : s.interrupted ? "interrupted: " + s.interrupted_reason
                      : "incomplete");
  if (!s.resumes.empty())
    row("resumed", resumes_text(s), "run_resumed records: a real run restarted with --resume");
  row("tokens", count(s.tokens), "sum over nodes of inner_steps.tokens");
  row("compute utilization", pct(s.compute_utilization), "inner compute / node alive time");
  row("outer-step utilization", pct(s.outer_step_utilization),
      "mean over outer steps of T_inner / (T_inner + T_allreduce)");
  row("MFU", pct(s.mfu), "FLOPs/token x tokens/s / (mean GPUs x peak FLOP/s)");
  row("all-reduce p10 / p50 / p90",
      seconds(s.allreduce_s.p10) + " / " + seconds(s.allreduce_s.p50) + " / " +
          seconds(s.allreduce_s.p90),
      "per outer step, slowest node; linear interpolation between order statistics");
  row("all-reduce p5 / p25 / p75 / p95",
      seconds(s.allreduce_s.p5) + " / " + seconds(s.allreduce_s.p25) + " / " +
          seconds(s.allreduce_s.p75) + " / " + seconds(s.allreduce_s.p95),
      "the same; p75 - p25 is the run's spread (IQR) of the all-reduce in time");
  row("all-reduce mean", seconds(s.allreduce_s.mean), "");
  row("inner step", seconds(s.inner_step_s), "compute time per inner step");
  row("wire bytes per node per outer step", bytes(s.wire_bytes_per_node_per_outer_step),
      "all-reduce bytes sent, all buckets and attempts");
  row("bandwidth reduction vs fp32 DDP",
      s.bandwidth_reduction_vs_ddp ? fmt(*s.bandwidth_reduction_vs_ddp, "%.1f") + "x" : "n/a",
      "2(N-1)/N x 4 x params x H / measured bytes");
  row("nodes min / mean / max",
      std::to_string(s.nodes.min) + " / " + fmt(s.nodes.mean, "%.2f") + " / " +
          std::to_string(s.nodes.max),
      "alive nodes; the mean is time-weighted");
  row("recoveries",
      std::to_string(s.recovery.count) + " (" + seconds(s.recovery.total_s) + " total, " +
          seconds(s.recovery.max_s) + " max)",
      "recovery_finished.elapsed_s");
  row("idle time", seconds(s.idle_s),
      "alive but not computing, reducing, optimizing or recovering");
  row("retries / fallbacks / failures",
      std::to_string(s.retries) + " / " + std::to_string(s.fallbacks) + " / " +
          std::to_string(s.failures),
      "");
  for (const std::string& line : s.non_finite)
    row("non-finite pseudo-gradient", line, "event nonfinite: sat the step out, or evicted");
  for (const std::string& line : s.lost)
    row("node lost", line, "event node_lost: the node gave up, or was evicted");
  if (s.loss) {
    row("final loss", fmt(*s.loss, "%.4f"), "mean over nodes, last outer step with a loss");
    row("final perplexity", fmt(*s.perplexity, "%.4g"), "exp(loss)");
  }
  if (s.val_loss)
    row("final validation loss", fmt(*s.val_loss, "%.4f"),
        "mean over the last outer step's evaluation records (held-out split)");
  if (s.target_loss)
    row("time to validation loss " + fmt(*s.target_loss, "%.3g"),
        s.target_reached ? fmt(s.target_reached->t_s, "%.1f") + " s, " +
                               fmt(s.target_reached->tokens, "%.3g") + " tokens"
                         : std::string("not reached"),
        "first evaluation at or below train.target_loss: time on the run's clock from its "
        "start, all nodes' tokens");
  h << "</table>\n";
}

// One row per node.
void nodes_section(std::ostringstream& h, const Summary& s) {
  // The host column only where the run names hosts (simulated runs); real runs have ids.
  const bool hosts = std::any_of(s.per_node.begin(), s.per_node.end(),
                                 [](const NodeStats& n) { return !n.host.empty(); });
  h << "<h2>Nodes</h2>\n<table>\n<tr><th>node</th>" << (hosts ? "<th class=\"l\">host</th>" : "")
    << "<th class=\"l\">joined</th><th>alive</th>"
    << "<th class=\"l\">end</th><th>compute util.</th><th>compute</th><th>all-reduce</th>"
    << "<th>recovery</th><th>idle</th><th>tokens</th><th>bytes sent</th></tr>\n";
  for (const NodeStats& n : s.per_node)
    h << "<tr><td>" << n.node << "</td>"
      << (hosts ? "<td class=\"l\">" + html_escape(n.host) + "</td>" : "") << "<td class=\"l\">"
      << (n.initial ? "initial" : "at " + seconds(n.start_s)) << "</td><td>" << seconds(n.alive_s)
      << "</td><td class=\"l\">" << html_escape(n.end_reason) << "</td><td>"
      << pct(n.compute_utilization) << "</td><td>" << seconds(n.compute_s) << "</td><td>"
      << seconds(n.allreduce_s) << "</td><td>" << seconds(n.recovery_s) << "</td><td>"
      << seconds(n.idle_s) << "</td><td>" << count(n.tokens) << "</td><td>" << bytes(n.bytes_sent)
      << "</td></tr>\n";
  h << "</table>\n";
}

// The resolved configuration and the metrics' inputs.
void configuration_section(std::ostringstream& h, const Summary& s) {
  nlohmann::ordered_json metrics = {{"param_count", s.metrics.param_count},
                                    {"flops_per_token", s.metrics.flops_per_token},
                                    {"tokens_per_inner_step", s.metrics.tokens_per_inner_step},
                                    {"gpus_per_node", s.metrics.gpus_per_node},
                                    {"peak_flops_per_gpu", s.metrics.peak_flops_per_gpu},
                                    {"H", s.metrics.H},
                                    {"codec", s.metrics.codec},
                                    {"local_ranks", s.metrics.local_ranks}};
  h << "<h2>Configuration</h2>\n<p>The resolved configuration from the run's config record"
    << (s.versions.empty() ? "" : " (versions: " + html_escape(s.versions.dump()) + ")")
    << ".</p>\n<pre>" << html_escape(s.config.is_null() ? "(not recorded)" : s.config.dump(2))
    << "</pre>\n<p>Metric inputs:</p>\n<pre>" << html_escape(metrics.dump(2)) << "</pre>\n";
}

}  // namespace

std::string report_html(const RunData& run, const std::vector<std::string>& png_files) {
  const Summary& s = run.summary;
  std::ostringstream h;
  page_start(h, "Meridian run report: " + run.label);
  h << "<p class=\"meta\">mode <b>" << html_escape(s.mode) << "</b> &middot; seed " << s.seed
    << " &middot; H " << s.metrics.H << " &middot; codec "
    << html_escape(s.metrics.codec.empty() ? "n/a" : s.metrics.codec)
    << (s.command.empty() ? "" : " &middot; command <code>" + html_escape(s.command) + "</code>")
    << "</p>\n";
  // A run that did not finish says so before any number: they cover only what it did.
  if (const std::string end = run_end_text(s); !end.empty())
    h << "<div class=\"banner\" id=\"run-end\" role=\"alert\">" << html_escape(end) << "</div>\n";

  headline_cards(h, s);

  summary_section(h, s);
  nodes_section(h, s);

  h << "<h2>Plots</h2>\n";
  figures(h, png_files);
  if (png_files.empty()) h << "<p>No plots: the run has no outer steps.</p>\n";

  configuration_section(h, s);
  h << "</body>\n</html>\n";
  return h.str();
}

std::string write_report(const std::string& run_dir, const ReportOptions& options) {
  RunData run = load_run(run_dir);
  if (!options.label.empty()) run.label = options.label;
  const auto pngs = pngs_of(plot_run(run, (fs::path(run.dir) / "plots").string(), options.plots));
  const std::string out =
      options.output.empty() ? (fs::path(run.dir) / "report.html").string() : options.output;
  write_page(out, report_html(run, pngs));
  // A real run's folder (one events file per node, no events.jsonl of its own) has no
  // summary.json: the report writes the merged run's, the figures a simulation's holds.
  if (fs::is_directory(run_dir) && !fs::exists(fs::path(run_dir) / "events.jsonl"))
    write_page((fs::path(run.dir) / "summary.json").string(), to_json(run.summary).dump(2) + "\n");
  return out;
}

std::string ensemble_report_html(const EnsembleData& e, const std::vector<std::string>& png_files,
                                 const std::string& runs_href) {
  const nlohmann::json& j = e.ensemble;
  std::size_t ok = 0;
  for (const auto& r : j["runs"]) ok += r["status"] == "ok";
  std::ostringstream h;
  page_start(h, "Meridian ensemble report: " + e.label);
  h << "<p class=\"meta\">scenario <code>" << html_escape(j.value("scenario", "")) << "</code>"
    << " &middot; " << j["runs"].size() << " seeds, " << ok << " ran &middot; command <code>"
    << html_escape(j.value("command", "")) << "</code></p>\n";
  if (ok < j["runs"].size())
    h << "<div class=\"banner\" id=\"run-end\" role=\"alert\">" << j["runs"].size() - ok << " of "
      << j["runs"].size() << " seeds failed: the figures cover the " << ok << " that ran</div>\n";

  h << "<h2>Across the seeds</h2>\n<table>\n<tr><th class=\"l\">figure</th><th>median</th>"
    << "<th>90 % interval (p5 &ndash; p95)</th><th>min</th><th>max</th></tr>\n";
  for (const EnsembleRow& r : ensemble_rows(j))
    h << "<tr><td class=\"l\">" << html_escape(r.label) << "</td><td>" << html_escape(r.median)
      << "</td><td>" << html_escape(r.p5) << " &ndash; " << html_escape(r.p95) << "</td><td>"
      << html_escape(r.min) << "</td><td>" << html_escape(r.max) << "</td></tr>\n";
  h << "</table>\n<p>" << html_escape(ensemble_pooled_text(j)) << "</p>\n";

  h << "<h2>Plots</h2>\n";
  figures(h, png_files);
  if (png_files.empty()) h << "<p>No plots: no seed ran an outer step.</p>\n";

  // One row per seed, as ensemble.json has it, with the way to its run.
  h << "<h2>Runs</h2>\n<table>\n<tr><th>seed</th><th class=\"l\">status</th><th>compute util.</th>"
    << "<th>MFU</th><th>all-reduce p50</th><th>simulated time</th><th class=\"l\">run</th></tr>\n";
  auto number = [](const nlohmann::json& v) { return v.is_number() ? v.get<double>() : NAN; };
  for (const auto& r : j["runs"]) {
    const std::string dir = r.value("dir", "");
    const bool has_report = fs::exists(fs::path(e.dir) / dir / "report.html");
    const std::string href =
        (fs::path(runs_href) / dir / (has_report ? "report.html" : "")).string();
    const bool ran = r["status"] == "ok";
    h << "<tr><td>" << r["seed"].get<std::int64_t>() << "</td><td class=\"l\">"
      << html_escape(r["status"].get<std::string>()) << "</td><td>"
      << (ran ? pct(number(r["compute_utilization"])) : "") << "</td><td>"
      << (ran ? pct(number(r["mfu"])) : "") << "</td><td>"
      << (ran ? seconds(number(r["allreduce_s_p50"])) : "") << "</td><td>"
      << (ran ? seconds(number(r["simulated_s"])) : "") << "</td><td class=\"l\"><a href=\""
      << html_escape(href) << "\">" << html_escape(dir + (has_report ? "/report.html" : "/"))
      << "</a></td></tr>\n";
  }
  h << "</table>\n<p>A run's own page: <code>meridian report "
    << html_escape((fs::path(e.dir) / "seed-N").string()) << "</code>.</p>\n</body>\n</html>\n";
  return h.str();
}

std::string write_ensemble_report(const std::string& dir, const ReportOptions& options) {
  EnsembleData e = load_ensemble(dir);
  if (!options.label.empty()) e.label = options.label;
  const auto pngs =
      pngs_of(plot_ensembles({e}, (fs::path(dir) / "plots").string(), options.plots.plot));
  const std::string out =
      options.output.empty() ? (fs::path(dir) / "report.html").string() : options.output;
  // Links lead from the page's folder to the ensemble's.
  const fs::path from = fs::absolute(out).parent_path();
  const fs::path to = fs::absolute(dir).lexically_normal();
  const fs::path rel = to.lexically_relative(from.lexically_normal());
  const std::string href = rel.empty() ? to.string() : rel == "." ? "" : rel.string();
  write_page(out, ensemble_report_html(e, pngs, href));
  return out;
}

}  // namespace meridian::analysis
