#include "harness/common/home.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#ifndef DBH_SOURCE_DIR_DEFAULT
#define DBH_SOURCE_DIR_DEFAULT "."
#endif

namespace dbh::harness {
namespace fs = std::filesystem;

namespace {
const char* home_from_env() {
  const char* home = std::getenv("DBH_HOME");
  return home != nullptr && *home ? home : nullptr;
}
}  // namespace

std::string dbh_home() {
  if (const char* home = home_from_env()) return home;
  return DBH_SOURCE_DIR_DEFAULT;
}

std::string dbh_home_origin() {
  return home_from_env() != nullptr ? "$DBH_HOME" : "the source tree dbh was built from; set DBH_HOME to move it";
}

std::string cache_root() {
  if (const char* d = std::getenv(kCacheDirEnv); d != nullptr && *d != '\0') {
    std::error_code ec;
    const fs::path p = fs::absolute(d, ec);
    return ec ? std::string(d) : p.lexically_normal().string();
  }
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x == '/') return (fs::path(x) / "dbh").string();
  if (const char* h = std::getenv("HOME"); h != nullptr && *h == '/') return (fs::path(h) / ".cache" / "dbh").string();
  return "";
}

std::string cache_root_origin() {
  if (const char* d = std::getenv(kCacheDirEnv); d != nullptr && *d != '\0') return std::string("$") + kCacheDirEnv;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x == '/') return "$XDG_CACHE_HOME";
  return "$HOME";
}

std::string self_exe() {
  std::error_code ec;
  const auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("dbh") : p.string();
}

std::string self_command() {
  const std::string self = self_exe();
  if (self == "dbh") return self;
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "";
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string dir = dirs.substr(start, end - start);
    start = end + 1;
    if (dir.empty() || dir.front() != '/') continue;  // a relative PATH entry depends on the folder
    std::error_code ec;
    const fs::path candidate = fs::path(dir) / "dbh";
    if (!fs::exists(candidate, ec)) continue;
    // The first dbh on PATH decides: the shell would run it.
    return fs::equivalent(candidate, self, ec) && !ec ? std::string("dbh") : self;
  }
  return self;
}

}  // namespace dbh::harness
