// Fuzz target: the run file as real runs read it (no LibTorch): from a file (load_run_config, the
// real run's checks and conversions), a model config (load_trainer_config), and from text with
// the trainer's conversions (parse_run_file, resolve_run_config).
// Input: byte 0 picks the reader, the rest is the YAML text. Each reads or throws ConfigError.
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/core/error.h"
#include "tests/fuzz/fuzz_input.h"
#include "trainer/model_config.h"
#include "trainer/run_config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace meridian;
  static fuzz::MemoryFile file("run.yaml");
  fuzz::Input in(data, size);
  const std::uint8_t reader = in.u8() % 3;
  const std::string text = in.rest();
  try {
    if (reader == 2) {
      (void)trainer::run_config_json(
          trainer::resolve_run_config(config::parse_run_file(text, "fuzz.yaml")));
      return 0;
    }
    file.write(text);
    if (reader == 0)
      (void)trainer::run_config_json(trainer::load_run_config(file.path()));
    else
      (void)trainer::load_trainer_config(file.path());
  } catch (const ConfigError&) {
  }
  return 0;
}
