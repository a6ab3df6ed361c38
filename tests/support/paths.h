#pragma once
// Where the tests find this checkout (fixtures, scenarios), the dbh binary
// the build made and the integration tests' cache. The values are compiled
// into support/paths.cc alone: as definitions on every test file they made
// each file differ from one clone to another, and every fresh clone (CI's
// among them) compiled every test file again instead of taking it from
// ccache. The names stay the ones the tests use, as expressions.

namespace dbh::testing {

/// This checkout's root.
const char* source_dir();
/// The dbh binary the build made (dbh_binary() in subprocess.h prefers one
/// beside the test program).
const char* built_dbh_binary();
/// The integration tests' cache of measured choices (child_environment.cc).
const char* test_cache_dir();

}  // namespace dbh::testing

#define DBH_SOURCE_DIR (::dbh::testing::source_dir())
#define DBH_BINARY (::dbh::testing::built_dbh_binary())
#define DBH_TEST_CACHE_DIR (::dbh::testing::test_cache_dir())
