// Precompiled header shared by the library, the CLI and the tests.
// libtorch's umbrella header costs ~18 s per translation unit; here it is parsed once.
#pragma once
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
