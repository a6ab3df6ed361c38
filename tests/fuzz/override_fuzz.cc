// libFuzzer target: Hydra-style overrides ("a.b.c=value") applied to a small
// scenario tree, the input being the override text.
#include <cstddef>
#include <cstdint>
#include <string>

#include "harness/common/error.h"
#include "harness/common/value.h"

namespace {
const char* const kBase =
    "name: fuzz\n"
    "seed: 1\n"
    "train:\n"
    "  steps: 4\n"
    "  lr: 0.001\n"
    "  batch_size: 2\n"
    "faults:\n"
    "  - kind: nan_activation\n"
    "    at_step: 2\n"
    "tags: [a, b]\n";
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const dbh::harness::Value base = dbh::harness::parse_yaml(kBase, "<base>");
  const std::string text(reinterpret_cast<const char*>(data), size);
  dbh::harness::Value root = base;
  try {
    dbh::harness::apply_override(root, text);
    (void)dbh::harness::to_json(root);
  } catch (const dbh::harness::ScenarioError&) {
  }
  return 0;
}
