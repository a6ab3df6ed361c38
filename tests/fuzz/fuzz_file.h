#pragma once
// Writes a fuzz input to a per-process file in /tmp for the file-based
// annotation readers; the file is reused across iterations and removed at exit.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace dbh::fuzz {

inline const std::string& temp_path(const char* stem, const char* ext) {
  static const std::string path = [&] {
    std::string p = std::string("/tmp/dbh-fuzz-") + stem + "-" +
                    std::to_string(static_cast<long>(::getpid())) + ext;
    static std::string for_atexit;
    for_atexit = p;
    std::atexit([] { std::remove(for_atexit.c_str()); });
    return p;
  }();
  return path;
}

inline void write_file(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) std::abort();  // /tmp full or unwritable: not a finding, but stop
}

}  // namespace dbh::fuzz
