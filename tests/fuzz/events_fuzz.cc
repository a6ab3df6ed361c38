// libFuzzer target: the worker event stream decoder on arbitrary bytes.
// decode_stream collects undecodable lines instead of throwing.
#include <cstddef>
#include <cstdint>
#include <string>

#include "harness/proto/events.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  (void)dbh::harness::proto::decode_stream(text, "events.jsonl");
  return 0;
}
