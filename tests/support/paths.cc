#include "tests/support/paths.h"

// tests/CMakeLists.txt compiles this file, and no other, with the three
// paths (support/paths.h says why).
#if !defined(DBH_TEST_SOURCE_DIR) || !defined(DBH_TEST_BINARY) || !defined(DBH_TEST_CACHE)
#error "tests/CMakeLists.txt compiles support/paths.cc with DBH_TEST_SOURCE_DIR, DBH_TEST_BINARY and DBH_TEST_CACHE"
#endif

namespace dbh::testing {

const char* source_dir() { return DBH_TEST_SOURCE_DIR; }
const char* built_dbh_binary() { return DBH_TEST_BINARY; }
const char* test_cache_dir() { return DBH_TEST_CACHE; }

}  // namespace dbh::testing
