#pragma once

namespace dbh::harness::cli {
/// Prints the environment (`dbh env`); as JSON when `json` is true.
int run_env_command(bool json);
}  // namespace dbh::harness::cli
