#pragma once

#include <string>
#include <vector>

namespace dbh::harness::cli {

/// `dbh merge DIR… [--out DIR] [--junit FILE]`: the suite outputs of
/// shards (or resumed parts) combined into one suite.json, junit.xml and
/// index.html, from their journals. Returns the process exit code.
int merge_command(const std::vector<std::string>& dirs, const std::string& out, const std::string& junit);

}  // namespace dbh::harness::cli
