#pragma once

#include <string>

namespace dbh::harness {

/// Local time as ISO 8601 ("2026-11-21T08:30:00+0000").
std::string now_iso();
/// Local time for folder names ("20261121-083000").
std::string timestamp_compact();
/// `s` quoted for a POSIX shell when it needs quoting.
std::string shell_quote(const std::string& s);

}  // namespace dbh::harness
