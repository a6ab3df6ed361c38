#include "tests/support/files.h"

#include <stdlib.h>

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

namespace dbh::testing {

std::filesystem::path fresh_dir(const std::string& prefix) {
  std::string templ = (std::filesystem::path(::testing::TempDir()) / (prefix + "-XXXXXX")).string();
  if (::mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + templ);
  return templ;
}

std::filesystem::path removed_at_exit(std::filesystem::path path) {
  // Removed by a static destructor, after the last test; gtest_discover_tests
  // runs each test in a process of its own, and each removes its own.
  struct Registry {
    std::vector<std::filesystem::path> paths;
    ~Registry() {
      for (const auto& p : paths) {
        std::error_code ec;
        std::filesystem::remove_all(p, ec);
      }
    }
  };
  static Registry registry;
  registry.paths.push_back(path);
  return path;
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

RemoveOnExit::~RemoveOnExit() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace dbh::testing
