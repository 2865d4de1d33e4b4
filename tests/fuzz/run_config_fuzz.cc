// Fuzz target: the run file readers of trainer/ (no LibTorch): RUN.yaml (load_run_config), a
// model config (load_trainer_config) and a scenario's trainer section (parse_trainer_section).
// Input: byte 0 picks the reader, the rest is the YAML text. Each reads or throws ConfigError.
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/error.h"
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
      (void)trainer::parse_trainer_section(text, "fuzz.yaml");
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
