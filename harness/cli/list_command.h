#pragma once

#include <string>

#include "harness/scenario/scenario.h"

namespace dbh::harness::cli {

/// `dbh list faults|scenarios|profiles [DIR]`; `checks`: what loading a
/// listed scenario checks beyond its keys. Returns the process exit code.
int list_command(const std::string& what, const std::string& dir, const scenario::InputChecks& checks);

}  // namespace dbh::harness::cli
