#include "harness/common/home.h"

#include <cstdlib>

#ifndef DBH_SOURCE_DIR_DEFAULT
#define DBH_SOURCE_DIR_DEFAULT "."
#endif

namespace dbh::harness {

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

}  // namespace dbh::harness
