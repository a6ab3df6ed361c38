// Dependencies run one way (docs/architecture.md): every #include of the
// model and the harness is checked against the layers below, so a lower part
// that starts including a higher one fails here, naming the file and line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>

namespace dbh {
namespace {

namespace fs = std::filesystem;

// Each part's layer: a file may include its own part and parts of a lower
// layer only. The worker is a process the supervisor starts, never a header
// it includes; reports are written from the supervisor's values, so report
// sits above supervisor; diagnose and qualify call the bisection.
const std::map<std::string, int>& layers() {
  static const std::map<std::string, int> l = {
      {"model", 0},          {"harness/version", 0}, {"harness/step_code", 0}, {"harness/common", 1}, {"harness/gpu", 1},
      {"harness/kb", 2},     {"harness/proto", 2},   {"harness/env", 2},    {"harness/scenario", 3},
      {"harness/supervisor", 4}, {"harness/faults", 4}, {"harness/monitors", 4}, {"harness/worker", 5},
      {"harness/report", 5}, {"harness/bisect", 6},  {"harness/numerics", 6},  {"harness/diagnose", 7}, {"harness/qualify", 7},
      {"harness/cli", 8},
  };
  return l;
}

// The part a path ("harness/bisect/probe.h", "model/data/scan.h") belongs to.
std::string part_of(const std::string& path) {
  if (path.rfind("model/", 0) == 0) return "model";
  const auto slash = path.find('/', std::string("harness/").size());
  if (path.rfind("harness/", 0) == 0) {
    return slash == std::string::npos ? path.substr(0, path.rfind('.')) : path.substr(0, slash);
  }
  return "";
}

TEST(LayersTest, PartLayersAreKnown) {
  EXPECT_EQ(part_of("harness/bisect/probe.h"), "harness/bisect");
  EXPECT_EQ(part_of("model/data/scan.h"), "model");
  EXPECT_EQ(part_of("harness/version.h"), "harness/version");
  EXPECT_EQ(part_of("third_party/x.h"), "");
}

TEST(LayersTest, NoPartIncludesAHigherOne) {
  const fs::path root = DBH_SOURCE_DIR;
  const std::regex include(R"re(^\s*#\s*include\s*"((harness|model)/[^"]+)")re");
  int64_t files = 0, includes = 0;
  for (const char* top : {"harness", "model"}) {
    for (const auto& e : fs::recursive_directory_iterator(root / top)) {
      const auto ext = e.path().extension();
      if (!e.is_regular_file() || (ext != ".h" && ext != ".cc" && ext != ".cu")) continue;
      const std::string rel = fs::relative(e.path(), root).string();
      const std::string from = part_of(rel);
      ASSERT_TRUE(layers().count(from)) << rel << ": a part with no layer: add it to layers() and docs/architecture.md";
      ++files;
      std::ifstream in(e.path());
      std::string line;
      int n = 0;
      while (std::getline(in, line)) {
        ++n;
        std::smatch m;
        if (!std::regex_search(line, m, include)) continue;
        ++includes;
        const std::string to = part_of(m[1].str());
        ASSERT_TRUE(layers().count(to)) << rel << ":" << n << ": includes " << m[1] << ", a part with no layer";
        if (to == from) continue;
        EXPECT_LT(layers().at(to), layers().at(from))
            << rel << ":" << n << ": " << from << " (layer " << layers().at(from) << ") includes " << m[1] << " ("
            << to << ", layer " << layers().at(to) << "): expected only lower layers (docs/architecture.md)";
      }
    }
  }
  EXPECT_GT(files, 100);
  EXPECT_GT(includes, 300);
}

}  // namespace
}  // namespace dbh
