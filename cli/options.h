// A command's options, parsed by CLI11 and described once: each option is declared with its value
// name, its help line and what to do with its value, and `meridian COMMAND --help` is generated
// from those declarations. The conventions every command shares hold here: `--key value` and
// `--key=value`, options in any order (each occurrence applied in turn: a later one wins unless
// the option collects), `--` ends the options, and every error is a ConfigError naming the
// option (an unknown one, a missing value, a value its conversion refuses). Values are converted
// by the typed helpers of cli/args.h, whose messages the tests pin. CLI11 stays inside
// options.cc: its header is large, and a command needs none of it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace meridian::cli {

class Options {
 public:
  // `program`: how it is called (e.g. "meridian sim-flow"); `forms`: each way to call it, after
  // the program (e.g. "SCENARIO.yaml [options]"), one usage line each; `about`: what it does,
  // in a paragraph or two (flowed to the help's width; a line that starts with a space is kept).
  Options(std::string program, std::vector<std::string> forms, std::string about);
  ~Options();
  Options(const Options&) = delete;
  Options& operator=(const Options&) = delete;

  // Converts an option's text; `name` is the option as declared (for messages). Throws
  // ConfigError naming it when the text will not do.
  using Set = std::function<void(const std::string& name, const std::string& text)>;

  // An option with one value (`--name VALUE`), applied by `set` at each occurrence.
  Options& value(const std::string& name, const std::string& value_name, const std::string& help,
                 Set set);
  // Shorthands for the common kinds. Integers are digits only, in [lo, hi].
  Options& text(const std::string& name, const std::string& value_name, const std::string& help,
                std::string& into);
  Options& texts(const std::string& name, const std::string& value_name, const std::string& help,
                 std::vector<std::string>& into);  // repeatable: each occurrence appended
  Options& number(const std::string& name, const std::string& value_name, const std::string& help,
                  double& into);
  Options& integer(const std::string& name, const std::string& value_name,
                   const std::string& help, std::int64_t& into, std::uint64_t lo,
                   std::uint64_t hi);
  Options& integer(const std::string& name, const std::string& value_name,
                   const std::string& help, int& into, std::uint64_t lo, std::uint64_t hi);
  Options& integer(const std::string& name, const std::string& value_name,
                   const std::string& help, std::uint64_t& into, std::uint64_t lo,
                   std::uint64_t hi);
  // A flag (no value): sets `into` to true, or runs `on`.
  Options& flag(const std::string& name, const std::string& help, bool& into);
  Options& flag(const std::string& name, const std::string& help, std::function<void()> on);

  // Positional arguments, in the order declared: one (required, or optional when `required` is
  // false), or all that are left (`at_least` of them).
  Options& argument(const std::string& name, const std::string& help, std::string& into,
                    bool required = true);
  Options& arguments(const std::string& name, const std::string& help,
                     std::vector<std::string>& into, std::size_t at_least = 1);

  // Text after the options in the help (examples, files written, environment), wrapped as
  // written.
  Options& notes(std::string text);

  // Parses the arguments after the subcommand's name; applies each option as it comes.
  // ConfigError on any error, naming the option or argument, with the usage lines after it.
  void parse(const std::vector<std::string>& args);
  // For a program of its own (the benchmarks): parses argv[1..]; on --help prints the help and
  // exits 0, on a bad argument prints "PROGRAM: the error" to stderr and exits 2.
  void parse_or_exit(int argc, char** argv);
  // The command's help, generated from the declarations.
  std::string help() const;
  // Whether the last parse met option `name` (as declared).
  bool given(const std::string& name) const;
  // The usage lines alone ("usage: PROGRAM FORM", one per form), as errors print them.
  std::string usage() const;

 private:
  struct Entry {
    std::string name, value_name, help;
    bool positional = false;
  };
  struct Impl;
  std::string program_;
  std::vector<std::string> forms_;
  std::string about_, notes_;
  std::vector<Entry> entries_;
  std::vector<std::string> given_;  // the options the last parse met, in order
  std::unique_ptr<Impl> impl_;
};

// A command's help for its registration: the options `define` declares into a `Values`.
template <typename Values, typename Define>
std::function<std::string()> help_of(Define define) {
  return [define] {
    Values values;
    return define(values)->help();
  };
}

}  // namespace meridian::cli
