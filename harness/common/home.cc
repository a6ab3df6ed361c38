#include "harness/common/home.h"

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

}  // namespace dbh::harness
