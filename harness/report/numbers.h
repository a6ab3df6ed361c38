#pragma once

#include <iomanip>
#include <sstream>
#include <string>

namespace dbh::harness::report {

/// `v` with at most `digits` significant digits ("0.1235", "2.5e+06"), as
/// report.md's tables and JUnit's times write a measurement.
inline std::string significant(double v, int digits = 4) {
  std::ostringstream o;
  o << std::setprecision(digits) << v;
  return o.str();
}

}  // namespace dbh::harness::report
