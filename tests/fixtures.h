#pragma once
// Shared test fixtures (tests/fixtures/*.toml), so a configuration used by several test files is
// written once and each test states only what it changes.
#include <string>
#include <vector>

#include "train/config.h"

namespace scaleinv::testing {

// tests/fixtures/small_gpt.toml with `section.key=value` overrides applied (as --set applies them),
// as TOML text (for a test that writes a config file for the CLI) and as a validated TrainConfig.
std::string small_gpt_toml(const std::vector<std::string>& sets = {});
TrainConfig small_gpt(const std::vector<std::string>& sets = {});

}  // namespace scaleinv::testing
