#pragma once
// A sweep built from a TOML table already in memory (sweep_spec.h's sweep_from_toml_text parses a
// file's text and comes here): for a space that never was TOML text, a Python dict
// (user_sweep.h's user_sweep_from_json), so that nothing is formatted only to be parsed again.
// Kept apart from sweep_spec.h so that its includers do not compile toml++.
#include <string>

#include <toml++/toml.h>

#include "brain/sweep/sweep_spec.h"

namespace scaleinv {

// The sweep of `root`, exactly as sweep_from_toml_text would read a file holding it; `stored_text`
// is what the store keeps as the space (meta sweep_toml). UserError as sweep_from_toml_text.
SweepSpec sweep_from_toml_table(const toml::table& root, const std::string& stored_text, const std::string& where,
                                const std::string& base_dir);

// A table as TOML text, in toml++'s formatting (what a user sweep's store keeps as its space).
std::string to_toml_text(const toml::table& t);

}  // namespace scaleinv
