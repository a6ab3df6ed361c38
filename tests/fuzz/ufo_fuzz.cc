// libFuzzer target: the UFO JSON annotation reader (documented never to throw).
#include <cstddef>
#include <cstdint>

#include "model/data/annotation.h"
#include "tests/fuzz/fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = dbh::fuzz::temp_path("ufo", ".json");
  dbh::fuzz::write_file(path, data, size);
  (void)dbh::model::read_ufo_json(path, {"ignore"});
  return 0;
}
