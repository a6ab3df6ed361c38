// libFuzzer target: YAML parsing and scenario validation on arbitrary bytes.
// Only ScenarioError is an expected failure; anything else escapes and is a
// crash (libFuzzer reports an uncaught exception as a deadly signal).
#include <cstddef>
#include <cstdint>
#include <string>

#include "harness/common/error.h"
#include "harness/scenario/scenario.h"
#include "harness/common/value.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const dbh::harness::Value tree = dbh::harness::parse_yaml(text, "<fuzz>");
    (void)dbh::harness::scenario::decode_scenario(tree, "<fuzz>");
  } catch (const dbh::harness::ScenarioError&) {
  }
  return 0;
}
