// The harness itself killed at random moments: the journal stays parseable,
// no report is torn, and --resume completes the suite with the same results
// as an uninterrupted run.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <csignal>
#include <fstream>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "tests/support/files.h"
#include "tests/support/paths.h"
#include "tests/support/subprocess.h"

namespace dbh {
namespace {

namespace fs = std::filesystem;

fs::path make_suite(const fs::path& dir) {
  fs::create_directories(dir);
  const std::string base = std::string(DBH_SOURCE_DIR) + "/scenarios/base/tiny-cpu.yaml";
  // Every scenario loads each batch slowly, so the suite takes several
  // seconds on any machine (3.6 s of loading alone, about 8 s in all on two
  // cores) and the kills below (0.3 to 5 s in) land in the middle of it.
  const std::string slow = "  - {name: slow_data, seconds: 0.4, until_step: 3}\n";
  std::ofstream(dir / "a.yaml") << "include: " << base << "\ntrain: {max_steps: 3}\nfaults:\n" << slow;
  std::ofstream(dir / "b.yaml") << "include: " << base
                                << "\ntrain: {max_steps: 3}\nfaults:\n" << slow << "  - {name: nan_input, at_step: 2}\n"
                                << "expect: {outcome: diverged, failure_class: nonfinite_input, step: 2}\n";
  std::ofstream(dir / "c.yaml") << "include: " << base
                                << "\ntrain: {max_steps: 3}\nfaults:\n" << slow
                                << "  - {name: crash, at_step: 2, signal: SIGSEGV}\n"
                                << "expect: {outcome: crashed, step: 2}\n";
  return dir;
}

std::map<std::string, std::string> outcomes(const fs::path& suite_json) {
  std::ifstream in(suite_json);
  const auto j = nlohmann::json::parse(in);
  std::map<std::string, std::string> out;
  for (const auto& r : j["runs"]) out[r["scenario"]] = r["outcome"].get<std::string>() + "/" +
                                                        (r["expectation_met"].get<bool>() ? "met" : "not met");
  return out;
}

void check_no_torn_files(const fs::path& root) {
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    const auto name = e.path().filename().string();
    if (name == "report.json" || name == "suite.json") {
      std::ifstream in(e.path());
      EXPECT_FALSE(nlohmann::json::parse(in, nullptr, false).is_discarded()) << e.path() << " is torn";
    }
    if (name == "journal.jsonl") {
      std::ifstream in(e.path());
      std::string line, last;
      std::vector<std::string> lines;
      while (std::getline(in, line)) lines.push_back(line);
      // Every complete line parses; only a final line cut by the kill may not.
      for (size_t i = 0; i + 1 < lines.size(); ++i) {
        EXPECT_FALSE(nlohmann::json::parse(lines[i], nullptr, false).is_discarded())
            << e.path() << ":" << i + 1 << ": " << lines[i];
      }
    }
  }
}

TEST(ResilienceTest, KilledAtRandomMomentsAndResumed) {
  const testing::ScratchDir dir("dbh-resilience");
  const auto suite = make_suite(dir / "suite");
  // What an uninterrupted run gives: each scenario's own expectation, met (a
  // passes, b diverges at step 2, c crashes at step 2; make_suite). Written
  // out rather than run as a reference: the same check, one suite run less.
  const std::map<std::string, std::string> expected = {
      {"a", "passed/met"}, {"b", "diverged/met"}, {"c", "crashed/met"}};
  std::mt19937 rng(20261121);
  std::uniform_real_distribution<double> when(0.3, 5.0);
  int kills = 0, terms = 0;
  // Four rounds by default; eight with DBH_SLOW_TESTS=1 (the slow label's
  // setting), for a wider spread of moments.
  const int rounds = std::getenv("DBH_SLOW_TESTS") != nullptr ? 8 : 4;
  for (int i = 0; i < rounds; ++i) {
    const fs::path out = dir / ("run-" + std::to_string(i));
    // Stop the harness at a random moment, then once more during the resumed
    // run: SIGKILL (as the OOM killer would) or SIGTERM (as a scheduler
    // would), alternating.
    for (int k = 0; k < 2; ++k) {
      const int sig = (i + k) % 2 == 0 ? SIGKILL : SIGTERM;
      const auto r = testing::run_process(
          {DBH_BINARY, "suite", suite.string(), "--out", out.string(), "--resume", "-q"}, DBH_SOURCE_DIR, when(rng),
          sig);
      if (r.timed_out) {
        ++kills;
        // SIGTERM: a clean stop (128 + SIGTERM, what it had written), unless
        // it landed while the process was still loading, before main().
        if (sig == SIGTERM && r.term_signal == 0) {
          ++terms;
          EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.out << r.err;
          EXPECT_TRUE(fs::exists(out / "suite.json")) << "iteration " << i;
          EXPECT_TRUE(fs::exists(out / "junit.xml")) << "iteration " << i;
        } else if (sig == SIGTERM) {
          EXPECT_EQ(r.term_signal, SIGTERM);
        }
      }
      if (fs::exists(out)) check_no_torn_files(out);
    }
    const auto done = testing::run_process({DBH_BINARY, "suite", suite.string(), "--out", out.string(), "--resume", "-q"},
                                           DBH_SOURCE_DIR, 300);
    ASSERT_EQ(done.exit_code, 0) << "iteration " << i << ": " << done.out << done.err;
    EXPECT_EQ(outcomes(out / "suite.json"), expected) << "iteration " << i;
    check_no_torn_files(out);
  }
  EXPECT_GE(kills, rounds) << "most runs should have been stopped mid-way";
  EXPECT_GE(terms, rounds / 4) << "some stops should have been SIGTERM";
  RecordProperty("kills", kills);
  RecordProperty("sigterms", terms);
}

TEST(ResilienceTest, SigtermStopsChildrenAndWritesWhatItHas) {
  const testing::ScratchDir dir("dbh-sigterm");
  const auto suite = make_suite(dir / "suite");
  // run_process kills with SIGKILL at the timeout; use a shell to send TERM.
  const std::string cmd = std::string(DBH_BINARY) + " suite " + suite.string() + " --out " + (dir / "out").string() +
                          " -q & pid=$!; sleep 2.5; kill -TERM $pid; wait $pid; echo exit=$?";
  const auto r = testing::run_process({"/bin/sh", "-c", cmd}, DBH_SOURCE_DIR, 120);
  EXPECT_NE(r.out.find("exit=143"), std::string::npos) << r.out << r.err;
  EXPECT_TRUE(fs::exists(dir / "out" / "suite.json"));
  EXPECT_TRUE(fs::exists(dir / "out" / "junit.xml"));
  check_no_torn_files(dir / "out");
}

}  // namespace
}  // namespace dbh
