// Every command stopped while its worker hangs: by SIGINT or SIGTERM (a clean
// stop, exit 128 + signal, what the command has is written, the interrupted
// probe is not cached) or by SIGKILL (no clean-up at all). Either way no
// process of the command, supervisor or worker, may remain.
#include <gtest/gtest.h>

#include <signal.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/paths.h"
#include "tests/support/subprocess.h"

namespace dbh {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string join(const std::vector<pid_t>& pids) {
  std::ostringstream s;
  for (const auto pid : pids) s << " " << pid << " (" << read_all("/proc/" + std::to_string(pid) + "/cmdline") << ")";
  return s.str();
}

const char* signal_text(int sig) { return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "SIGKILL"; }

class KillTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {
 protected:
  void SetUp() override {
    std::string templ = (fs::path(::testing::TempDir()) / "dbh-kill-XXXXXX").string();
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
    out_ = dir_ / "out";
    cache_ = dir_ / "cache";
    // The worker hangs for good at step 0, and neither watchdog would stop it
    // during the test: only the stop (or the supervisor's death) can.
    scenario_ = dir_ / "hang.yaml";
    std::ofstream(scenario_) << "name: hang\n"
                             << "include: " << DBH_SOURCE_DIR << "/scenarios/base/tiny-cpu.yaml\n"
                             << "train:\n  threads: 1\n"
                             << "faults:\n  - name: hang\n    at_step: 0\n"
                             << "limits: {deadline_s: 600, silence_s: 600, grace_s: 2}\n";
  }

  void TearDown() override {
    // Never leave a process behind, whatever failed.
    for (const auto pid : testing::find_processes({dir_.string()})) kill(pid, SIGKILL);
    if (supervisor_ > 0) testing::wait_process(supervisor_, 5);
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::vector<std::string> Command(const std::string& command) const {
    const std::string s = scenario_.string(), out = out_.string(), cache = cache_.string();
    if (command == "run") return {DBH_BINARY, "run", s, "--out", out, "-q"};
    if (command == "repeat") return {DBH_BINARY, "repeat", s, "--processes", "2", "--out", out, "-q"};
    if (command == "bisect") return {DBH_BINARY, "bisect", "steps", s, "--out", out, "--cache", cache, "-q"};
    if (command == "diagnose") return {DBH_BINARY, "diagnose", s, "--out", out, "--cache", cache, "-q"};
    if (command == "qualify") {
      return {DBH_BINARY, "qualify", s, "--budget", "8GiB", "--steps", "1", "--out", out, "--cache", cache, "-q"};
    }
    return {DBH_BINARY, "suite", s, "--out", out, "-q"};
  }

  // Whether some trial's journal under the output folder records the hang
  // firing: the worker is then stuck for good.
  // (A running trial's journal is read through dbh's own descriptor, Note
  // [dbh's files in a trial].)
  bool HangFired() const {
    for (const auto& journal : testing::live_journals(out_)) {
      if (read_all(journal).find("\"fault_fired\"") != std::string::npos) return true;
    }
    return false;
  }

  fs::path dir_, out_, cache_, scenario_;
  pid_t supervisor_ = 0;
};

TEST_P(KillTest, NoProcessOutlivesTheCommand) {
  const auto& [command, sig] = GetParam();
  const auto start = Clock::now();
  supervisor_ = testing::spawn_process(Command(command), DBH_SOURCE_DIR, (dir_ / "dbh.log").string());

  // Wait until the worker is hung (event-driven: short polls, no fixed sleep).
  std::vector<pid_t> workers;
  while (since(start) < 120) {
    if (HangFired()) workers = testing::find_processes({"__worker", dir_.string()});
    if (!workers.empty()) break;
    int status = 0;
    if (waitpid(supervisor_, &status, WNOHANG) == supervisor_) {
      supervisor_ = 0;
      FAIL() << "dbh " << command << " ended before its worker hung (status " << status << "):\n"
             << read_all(dir_ / "dbh.log");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_FALSE(workers.empty()) << "no hung worker of dbh " << command << " after 120 s:\n"
                                << read_all(dir_ / "dbh.log");

  const auto stop = Clock::now();
  ASSERT_EQ(kill(supervisor_, sig), 0);
  const auto r = testing::wait_process(supervisor_, 20);
  supervisor_ = 0;
  const double stopped_in = since(stop);
  EXPECT_FALSE(r.timed_out) << "dbh " << command << " did not end within 20 s of " << signal_text(sig);
  if (sig == SIGKILL) {
    EXPECT_EQ(r.term_signal, SIGKILL);
  } else {
    EXPECT_EQ(r.term_signal, 0) << "dbh " << command << " died of the signal instead of stopping";
    EXPECT_EQ(r.exit_code, 128 + sig) << read_all(dir_ / "dbh.log");
    EXPECT_LT(stopped_in, 10.0) << "the stop took longer than the grace allows";
  }

  // Nothing of the command remains: the workers die with their supervisor.
  std::vector<pid_t> left = testing::find_processes({dir_.string()});
  for (const auto t = Clock::now(); !left.empty() && since(t) < 5;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    left = testing::find_processes({dir_.string()});
  }
  EXPECT_TRUE(left.empty()) << "still running 5 s after dbh " << command << " ended by " << signal_text(sig) << ":"
                            << join(left);

  if (sig == SIGKILL) return;
  // What the command had is written.
  if (command == "run" || command == "repeat") {
    std::ifstream in(out_ / "report.json");
    const auto j = nlohmann::json::parse(in, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << "no report.json in " << out_;
    EXPECT_EQ(j.value("outcome", ""), "unresolved");
    EXPECT_FALSE(fs::exists(out_ / ".FAILURE")) << "an interrupted run is not a failed training";
  } else if (command == "suite") {
    std::ifstream in(out_ / "suite.json");
    const auto j = nlohmann::json::parse(in, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << "no suite.json in " << out_;
    EXPECT_EQ(j["interrupted"], nlohmann::json::array({"hang"}));
  } else {
    std::ifstream in(out_ / "interrupted.json");
    const auto j = nlohmann::json::parse(in, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << "no interrupted.json in " << out_;
    EXPECT_EQ(j.value("interrupted", ""), signal_text(sig));
    EXPECT_FALSE(j["in_flight"].is_null()) << j.dump();
    // The interrupted probe is no result: nothing but a pass (the ops rung
    // of diagnose) may be cached.
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(cache_, ec)) {
      if (e.path().filename() == "CACHEDIR.TAG") continue;  // the cache directory tag, no result
      std::ifstream c(e.path());
      const auto cj = nlohmann::json::parse(c, nullptr, false);
      EXPECT_EQ(cj.is_discarded() ? "" : cj.value("outcome", ""), "passed")
          << e.path() << " caches an interrupted probe: " << read_all(e.path());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Commands, KillTest,
    ::testing::Combine(::testing::Values("run", "repeat", "bisect", "diagnose", "qualify", "suite"),
                       ::testing::Values(SIGINT, SIGTERM, SIGKILL)),
    [](const ::testing::TestParamInfo<std::tuple<std::string, int>>& info) {
      return std::get<0>(info.param) + "_" + signal_text(std::get<1>(info.param));
    });

}  // namespace
}  // namespace dbh
