// libFuzzer target: the ICDAR 2015 ground-truth reader (documented never to
// throw).
#include <cstddef>
#include <cstdint>

#include "model/data/annotation.h"
#include "tests/fuzz/fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = dbh::fuzz::temp_path("icdar", ".txt");
  dbh::fuzz::write_file(path, data, size);
  (void)dbh::model::read_icdar_txt(path, "img_1.jpg");
  return 0;
}
