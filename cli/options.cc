// Options over CLI11 (options.h): every option a callback that CLI11 runs at each occurrence, in
// order; the help generated from the declarations; CLI11's errors reworded to name the option.
#include "cli/options.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "cli/args.h"
#include "engine/core/error.h"

namespace meridian::cli {

struct Options::Impl {
  CLI::App app;
  explicit Impl(const std::string& name) : app("", name) {}
};

namespace {

constexpr std::size_t kWidth = 100;  // the help's line length
constexpr std::size_t kColumn = 26;  // where an option's help starts

// `text` flowed into lines of at most kWidth columns, each after `indent` columns (the first
// line's indent is the caller's); a blank line keeps a paragraph break, and a line that starts
// with a space (an example, a table) is kept as written.
std::string wrap(const std::string& text, std::size_t indent) {
  std::vector<std::string> lines;
  std::string current;
  const auto flush = [&] {
    if (!current.empty()) lines.push_back(std::move(current));
    current.clear();
  };
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == ' ') {
      flush();
      lines.push_back(line);
      continue;
    }
    std::istringstream words(line);
    std::string word;
    while (words >> word) {
      if (!current.empty() && indent + current.size() + 1 + word.size() > kWidth) flush();
      current += (current.empty() ? "" : " ") + word;
    }
  }
  flush();
  std::string out;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += "\n" + (lines[i].empty() ? "" : std::string(indent, ' '));
    out += lines[i];
  }
  return out;
}

}  // namespace

Options::Options(std::string program, std::vector<std::string> forms, std::string about)
    : program_(std::move(program)),
      forms_(std::move(forms)),
      about_(std::move(about)),
      impl_(std::make_unique<Impl>(program_)) {
  if (forms_.empty()) forms_.push_back("[options]");
  impl_->app.set_help_flag();  // main() answers --help before the command runs
  impl_->app.allow_extras();   // then named in the error below, not CLI11's words
  impl_->app.positionals_at_end(false);
}

Options::~Options() = default;

Options& Options::value(const std::string& name, const std::string& value_name,
                        const std::string& help, Set set) {
  impl_->app
      .add_option_function<std::string>(name,
                                        [this, name, set](const std::string& v) {
                                          given_.push_back(name);
                                          set(name, v);
                                        })
      ->type_name(value_name)
      ->trigger_on_parse()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  entries_.push_back({name, value_name, help, false});
  return *this;
}

Options& Options::text(const std::string& name, const std::string& value_name,
                       const std::string& help, std::string& into) {
  return value(name, value_name, help,
               [&into](const std::string&, const std::string& v) { into = v; });
}

Options& Options::texts(const std::string& name, const std::string& value_name,
                        const std::string& help, std::vector<std::string>& into) {
  return value(name, value_name, help,
               [&into](const std::string&, const std::string& v) { into.push_back(v); });
}

Options& Options::number(const std::string& name, const std::string& value_name,
                         const std::string& help, double& into) {
  return value(name, value_name, help,
               [&into](const std::string& n, const std::string& v) { into = opt::number(n, v); });
}

namespace {

// Sets `into` from digits in [lo, hi] (cli/args.h's integer_in names the option otherwise).
template <typename T>
Options::Set integer_into(T& into, std::uint64_t lo, std::uint64_t hi) {
  return [&into, lo, hi](const std::string& n, const std::string& v) {
    into = static_cast<T>(opt::integer_in(n, v, lo, hi));
  };
}

}  // namespace

Options& Options::integer(const std::string& name, const std::string& value_name,
                          const std::string& help, std::int64_t& into, std::uint64_t lo,
                          std::uint64_t hi) {
  return value(name, value_name, help, integer_into(into, lo, hi));
}

Options& Options::integer(const std::string& name, const std::string& value_name,
                          const std::string& help, int& into, std::uint64_t lo, std::uint64_t hi) {
  return value(name, value_name, help, integer_into(into, lo, hi));
}

Options& Options::integer(const std::string& name, const std::string& value_name,
                          const std::string& help, std::uint64_t& into, std::uint64_t lo,
                          std::uint64_t hi) {
  return value(name, value_name, help, integer_into(into, lo, hi));
}

Options& Options::flag(const std::string& name, const std::string& help, bool& into) {
  return flag(name, help, [&into] { into = true; });
}

Options& Options::flag(const std::string& name, const std::string& help, std::function<void()> on) {
  impl_->app
      .add_flag_callback(name,
                         [this, name, on = std::move(on)] {
                           given_.push_back(name);
                           on();
                         })
      ->trigger_on_parse();
  entries_.push_back({name, "", help, false});
  return *this;
}

Options& Options::argument(const std::string& name, const std::string& help, std::string& into,
                           bool required) {
  CLI::Option* o = impl_->app.add_option("argument" + std::to_string(entries_.size()), into);
  o->type_name(name);
  if (required) o->required();
  entries_.push_back({name, "", help, true});
  return *this;
}

Options& Options::arguments(const std::string& name, const std::string& help,
                            std::vector<std::string>& into, std::size_t at_least) {
  CLI::Option* o = impl_->app.add_option("argument" + std::to_string(entries_.size()), into);
  o->type_name(name);
  if (at_least > 0)
    o->required()->expected(static_cast<int>(at_least), CLI::detail::expected_max_vector_size);
  entries_.push_back({name + " ...", "", help, true});
  return *this;
}

Options& Options::notes(std::string text) {
  notes_ = std::move(text);
  return *this;
}

void Options::parse(const std::vector<std::string>& args) {
  const auto named = [&](const std::string& what) {
    std::string lines = usage();
    lines.pop_back();  // the message ends where the usage's last line does
    return ConfigError(what + "\n" + lines);
  };
  // CLI11 names a positional argument by its internal name, "argument<index of its entry>".
  const auto positional = [&](const std::string& what) -> const Entry* {
    const std::size_t at = what.find("argument");
    if (at == std::string::npos) return nullptr;
    const std::size_t index = std::strtoul(what.c_str() + at + 8, nullptr, 10);
    return index < entries_.size() && entries_[index].positional ? &entries_[index] : nullptr;
  };
  given_.clear();
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    impl_->app.parse(reversed);
  } catch (const CLI::ArgumentMismatch& e) {
    // "--out: 1 required DIR missing": the value after an option is missing; or too few of a
    // positional list.
    const std::string what = e.what();
    if (const Entry* p = positional(what)) throw named("missing " + p->name);
    const std::size_t colon = what.find(':');
    throw named(colon == std::string::npos ? what : what.substr(0, colon) + " needs a value");
  } catch (const CLI::RequiredError& e) {
    if (const Entry* p = positional(e.what())) throw named("missing " + p->name);
    throw named(e.what());
  } catch (const CLI::ParseError& e) {
    throw named(e.what());
  }
  std::vector<std::string> extra = impl_->app.remaining();
  std::erase(extra, "--");  // the end of the options, which CLI11 keeps among the extras
  if (!extra.empty()) {
    const std::string& first = extra.front();
    throw named(first.size() > 1 && first[0] == '-' ? "unknown option '" + first + "'"
                                                    : "unexpected argument '" + first + "'");
  }
}

void Options::parse_or_exit(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (opt::asks_for_help(args)) {
    std::fputs(help().c_str(), stdout);
    std::exit(0);
  }
  try {
    parse(args);
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "%s: %s\n", program_.c_str(), e.what());
    std::exit(2);
  }
}

bool Options::given(const std::string& name) const {
  return std::find(given_.begin(), given_.end(), name) != given_.end();
}

std::string Options::usage() const {
  std::string out;
  for (std::size_t i = 0; i < forms_.size(); ++i) {
    const std::string head = std::string(i == 0 ? "usage: " : "       ") + program_ + " ";
    // A long form goes on under itself, never breaking inside [...] or (...) or a run of
    // spaces (which stays as written: it sets a note apart).
    const std::string& written = forms_[i];
    std::string form = written;
    int depth = 0;
    for (std::size_t k = 0; k < form.size(); ++k) {
      depth += (written[k] == '[' || written[k] == '(') - (written[k] == ']' || written[k] == ')');
      const bool run =
          (k > 0 && written[k - 1] == ' ') || (k + 1 < written.size() && written[k + 1] == ' ');
      if (written[k] == ' ' && (depth > 0 || run)) form[k] = '\x01';
    }
    std::string wrapped = wrap(form, head.size());
    std::replace(wrapped.begin(), wrapped.end(), '\x01', ' ');
    out += head + wrapped + "\n";
  }
  return out;
}

std::string Options::help() const {
  std::string out = usage();
  if (!about_.empty()) out += "\n" + wrap(about_, 0) + "\n";
  for (const bool positional : {true, false}) {
    bool any = false;
    for (const Entry& e : entries_) {
      if (e.positional != positional) continue;
      if (!any) out += std::string("\n") + (positional ? "arguments:" : "options:") + "\n";
      any = true;
      std::string head = "  " + e.name + (e.value_name.empty() ? "" : " " + e.value_name);
      if (head.size() + 2 > kColumn) {
        out += head + "\n" + std::string(kColumn, ' ');
      } else {
        out += head + std::string(kColumn - head.size(), ' ');
      }
      out += wrap(e.help, kColumn) + "\n";
    }
  }
  if (!notes_.empty()) out += "\n" + wrap(notes_, 0) + "\n";
  return out;
}

}  // namespace meridian::cli
