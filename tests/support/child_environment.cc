// The environment every process an integration test starts inherits, set once
// before the first test (a value already in the environment wins):
//
//   OMP_WAIT_POLICY=PASSIVE  dbh's workers train with LibTorch's OpenMP pool.
//       Spin-waiting at its barriers, two tests side by side on two cores ran
//       about 7 times slower than one after the other; waiting passively, two
//       side by side finish sooner than one after the other, so the tests that
//       train share ctest's slots (tests/CMakeLists.txt).
//   DBH_CACHE_DIR=<build>/test-cache  measured choices (`auto` layout and
//       threads) are cached inside the build folder, never in the user's cache.
//   DBH_TUNE_MAX_OTHERS_CORES=64  the test programs run beside each other on
//       two cores, so a layout/threads measurement would rarely be trusted
//       (Note [A measurement to trust]) and every test of an `auto` scenario
//       would measure again; the tests check what is measured, cached and
//       reported, never how fast, so the suite trusts any load. The test of an
//       untrusted measurement removes it.
//   DBH_TUNE_BUDGET_S=0  for the same reason a measurement has no budget
//       (Note [A measurement's budget]): beside other test programs a first
//       step at 64² took 1.4 s, and a setup would keep PyTorch's defaults by
//       chance; the test of the budget sets one.
//   PATH=<build>/bin:$PATH  dbh is on PATH, as for a user who installed it:
//       the commands it prints say `dbh` (common/home.h, self_command); a test
//       that takes it off PATH sees them name the binary's absolute path.
//
// ctest's ENVIRONMENT property holds one variable reliably through
// gtest_discover_tests (a list is split into properties), so the variables the
// tests share live here and ENVIRONMENT keeps one per label (DBH_SLOW_TESTS).
#include <cstdlib>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "tests/support/paths.h"

namespace dbh::testing {
namespace {

class ChildEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    ::setenv("OMP_WAIT_POLICY", "PASSIVE", /*overwrite=*/0);
    ::setenv("DBH_CACHE_DIR", DBH_TEST_CACHE_DIR, /*overwrite=*/0);
    ::setenv("DBH_TUNE_MAX_OTHERS_CORES", "64", /*overwrite=*/0);
    ::setenv("DBH_TUNE_BUDGET_S", "0", /*overwrite=*/0);
    const char* path = std::getenv("PATH");
    const std::string bin = std::filesystem::path(DBH_BINARY).parent_path().string();
    ::setenv("PATH", (bin + ":" + (path != nullptr ? path : "/usr/bin:/bin")).c_str(), /*overwrite=*/1);
  }
};

[[maybe_unused]] ::testing::Environment* const kChildEnvironment =
    ::testing::AddGlobalTestEnvironment(new ChildEnvironment);

}  // namespace
}  // namespace dbh::testing
