// Note [Variables that decide an outcome] (common/environment_vars.h): every
// environment variable dbh's code reads is in exactly one of the two lists,
// so a new one cannot silently stay out of the probe cache key.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "harness/common/environment_vars.h"
#include "tests/support/paths.h"

namespace dbh::harness {
namespace {

namespace fs = std::filesystem;

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The variable names the sources read: getenv("X") and the environment
// maps' get/count/value("X") in C++, os.environ and ENV_… = "X" in the
// Python adapter.
std::set<std::string> variables_read() {
  const std::regex cpp(R"re((?:getenv|get|count|value)\("([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|[A-Z]{4,})"[,)])re");
  const std::regex py(R"re((?:environ(?:\.get)?[\[(]|ENV_[A-Z_]+ = )"([A-Z][A-Z0-9_]+)")re");
  std::set<std::string> names;
  for (const char* root : {"harness", "model", "python/dbh_adapter"}) {
    for (const auto& e : fs::recursive_directory_iterator(fs::path(DBH_SOURCE_DIR) / root)) {
      const auto ext = e.path().extension();
      const bool is_cpp = ext == ".cc" || ext == ".h" || ext == ".cu";
      if (!e.is_regular_file() || !(is_cpp || ext == ".py")) continue;
      const std::string text = read(e.path());
      const std::regex& re = is_cpp ? cpp : py;
      for (std::sregex_iterator it(text.begin(), text.end(), re), end; it != end; ++it) names.insert((*it)[1]);
    }
  }
  return names;
}

TEST(EnvironmentVarsTest, EveryVariableDbhReadsIsInExactlyOneList) {
  const auto names = variables_read();
  // The scan finds what it must: one of each kind at least.
  for (const char* known : {"DBH_HOME", "PATH", "GITHUB_ACTIONS", "DBH_EVENT_FD", "DBH_PROBE_CACHE_MIB"}) {
    EXPECT_TRUE(names.count(known)) << known << " was not found by the scan";
  }
  for (const auto& n : names) {
    const bool outcome = covered_by(outcome_variables(), n);
    const bool reporting = covered_by(reporting_variables(), n);
    EXPECT_TRUE(outcome || reporting) << n << " is read by dbh but in neither list of common/environment_vars.cc: "
                                      << "can it change a trial's outcome?";
    EXPECT_FALSE(outcome && reporting) << n << " is in both lists";
  }
}

TEST(EnvironmentVarsTest, OutcomeEnvironmentKeepsOnlyTheVariablesThatDecideAnOutcome) {
  const auto kept = outcome_environment({{"OPENCV_IO_MAX_IMAGE_PIXELS", "1024"},
                                         {"OMP_NUM_THREADS", "1"},
                                         {"CUDA_VISIBLE_DEVICES", "1"},
                                         {"GITHUB_STEP_SUMMARY", "/s.md"},
                                         {"HOME", "/root"},
                                         {"OMP_", "a bare prefix is no variable of the family"},
                                         {"LD_PRELOAD", "/x.so"}});
  EXPECT_EQ(kept, (std::map<std::string, std::string>{{"CUDA_VISIBLE_DEVICES", "1"},
                                                      {"LD_PRELOAD", "/x.so"},
                                                      {"OMP_NUM_THREADS", "1"},
                                                      {"OPENCV_IO_MAX_IMAGE_PIXELS", "1024"}}));
}

}  // namespace
}  // namespace dbh::harness
