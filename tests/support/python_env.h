#pragma once
// The environment of a test that runs a Python training under dbh.

#include <cstdlib>
#include <string>

#include "tests/support/paths.h"
#include "tests/support/subprocess.h"

namespace dbh::testing {

/// The environment ./dev setup makes: the .venv's python (torch, lightning,
/// hydra-core, jsonargparse, pillow) first on PATH, and this checkout's
/// adapter.
inline EnvChanges venv_python_env() {
  const std::string source = DBH_SOURCE_DIR;
  const char* path = std::getenv("PATH");
  return {{"PATH", source + "/.venv/bin:" + (path != nullptr ? path : "/usr/bin:/bin")},
          {"PYTHONPATH", source + "/python"},
          {"PYTHONDONTWRITEBYTECODE", "1"}};
}

}  // namespace dbh::testing
