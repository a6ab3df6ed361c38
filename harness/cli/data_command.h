#pragma once

#include <cstdint>
#include <string>

namespace dbh::harness::cli {

struct DataCheckOptions {
  std::string dir;
  std::string on_invalid = "error";
  std::string json_out;  // default <dir>/../<name>.check.json is NOT used: stdout summary only
  bool quiet = false;
};

/// `dbh data check DIR`: 0 clean, 1 defects found, 2 unreadable.
int run_data_check(const DataCheckOptions& options);

struct DataShowOptions {
  std::string dir;
  int64_t index = 0;
  bool no_augment = false;
  int64_t size = 640;
  int64_t epoch = 0;
  uint64_t seed = 0;
  std::string out;
};

/// `dbh data show DIR --index I --out D`: writes the network input, the four
/// label maps (.npy float32 and .png) and an overlay for one sample.
int run_data_show(const DataShowOptions& options);

}  // namespace dbh::harness::cli
