#pragma once

#include <string>

namespace dbh::harness {

/// Directory holding dbh's data files (reports/kb/, scenarios/): $DBH_HOME,
/// else the source tree the binary was built from.
std::string dbh_home();

/// Where dbh_home() came from, for error messages: "$DBH_HOME" or "the
/// source tree dbh was built from".
std::string dbh_home_origin();

}  // namespace dbh::harness
