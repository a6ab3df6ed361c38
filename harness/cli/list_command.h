#pragma once

#include <string>

namespace dbh::harness {

/// `dbh list faults|scenarios|profiles [DIR]`. Returns the process exit code.
int list_command(const std::string& what, const std::string& dir);

}  // namespace dbh::harness
