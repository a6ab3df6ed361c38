// Worker deaths through the real binary: crashes by signal, a hang caught by
// the silence watchdog and a run past its deadline must each end in the right
// outcome, with the harness itself exiting normally, in bounded time, and with
// no worker process left behind.
#include <gtest/gtest.h>

#include <signal.h>
#include <stdlib.h>
#include <sys/types.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/proto/events.h"
#include "tests/support/paths.h"
#include "tests/support/subprocess.h"

namespace dbh {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::run_process;

struct Timed {
  testing::ProcessResult result;
  double seconds = 0;
};

Timed dbh(std::vector<std::string> args, double timeout_s = 300) {
  args.insert(args.begin(), DBH_BINARY);
  const auto start = std::chrono::steady_clock::now();
  Timed t;
  t.result = run_process(args, DBH_SOURCE_DIR, timeout_s);
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return t;
}

class DeathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (fs::path(::testing::TempDir()) / "dbh-death-XXXXXX").string();
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override {
    std::error_code ec;
    if (!HasFailure()) fs::remove_all(dir_, ec);
  }

  // Writes a scenario on top of the shipped tiny CPU base (one thread, so a
  // busy machine slows it least) and returns its path.
  std::string Scenario(const std::string& name, const std::string& body) {
    const fs::path p = dir_ / (name + ".yaml");
    std::ofstream(p) << "name: " << name << "\n"
                     << "include: " << DBH_SOURCE_DIR << "/scenarios/base/tiny-cpu.yaml\n"
                     << "train:\n  threads: 1\n"
                     << body;
    return p.string();
  }

  // Runs the scenario with `overrides`, checks that dbh exited 0 within
  // `max_seconds`, and returns report.json.
  json RunExpectingMet(const std::string& scenario, const std::vector<std::string>& overrides,
                       double max_seconds) {
    out_ = dir_ / (fs::path(scenario).stem().string() + "-out");
    std::vector<std::string> args = {"run", scenario, "--out", out_.string(), "-q"};
    args.insert(args.end(), overrides.begin(), overrides.end());
    const Timed t = dbh(args);
    EXPECT_FALSE(t.result.timed_out) << "dbh itself did not finish";
    EXPECT_EQ(t.result.term_signal, 0) << "dbh itself died";
    EXPECT_EQ(t.result.exit_code, 0) << t.result.out << t.result.err;
    EXPECT_LT(t.seconds, max_seconds);
    std::ifstream in(out_ / "report.json");
    if (!in) {
      ADD_FAILURE() << "no report.json in " << out_;
      return json::object();
    }
    return json::parse(in);
  }

  // The worker's pid, from the hello event of its stream.
  int64_t WorkerPid() const {
    std::ifstream in(out_ / "main" / "events.jsonl");
    std::string first;
    std::getline(in, first);
    const json hello = json::parse(first);
    EXPECT_EQ(hello.at("type"), harness::proto::event::kHello);
    return hello.at("pid").get<int64_t>();
  }

  void ExpectWorkerGone() const {
    const auto pid = static_cast<pid_t>(WorkerPid());
    ASSERT_GT(pid, 1);
    errno = 0;
    EXPECT_EQ(kill(pid, 0), -1) << "worker " << pid << " still exists";
    EXPECT_EQ(errno, ESRCH);
  }

  fs::path dir_;
  fs::path out_;
};

struct CrashCase {
  const char* signal;
  int step;
};

class CrashTest : public DeathTest, public ::testing::WithParamInterface<CrashCase> {};

TEST_P(CrashTest, SignalIsACrashAtItsStep) {
  const auto& c = GetParam();
  const std::string step = std::to_string(c.step);
  const auto path = Scenario(std::string("crash-") + c.signal,
                             "faults:\n  - name: crash\n    signal: " + std::string(c.signal) +
                                 "\n    at_step: " + step +
                                 "\nexpect: {outcome: crashed, failure_class: crash_signal, step: " + step +
                                 "}\n");
  const json j = RunExpectingMet(path, {}, 120);
  EXPECT_EQ(j.value("outcome", ""), "crashed");
  const json& f = j.at("failure");
  EXPECT_EQ(f.at("class"), "crash_signal");
  EXPECT_EQ(f.at("step"), c.step);
  EXPECT_NE(f.at("message").get<std::string>().find(c.signal), std::string::npos) << f.dump();
  EXPECT_EQ(j.at("steps_completed"), c.step);
  EXPECT_EQ(j.at("trials")[0].at("signal"), c.signal);
  EXPECT_TRUE(j.at("faults")[0].at("fired").get<bool>());
  EXPECT_TRUE(j.at("expectation").at("met").get<bool>());
  EXPECT_TRUE(fs::exists(out_ / ".FAILURE"));
  ExpectWorkerGone();
}

INSTANTIATE_TEST_SUITE_P(Signals, CrashTest,
                         ::testing::Values(CrashCase{"SIGSEGV", 1}, CrashCase{"SIGABRT", 2},
                                           CrashCase{"SIGKILL", 0}),
                         [](const ::testing::TestParamInfo<CrashCase>& info) {
                           return std::string(info.param.signal);
                         });

// Whether gdb or eu-stack is on PATH (the stacks of a hung worker need one).
bool HaveStackTool() {
  return std::system("command -v gdb >/dev/null 2>&1 || command -v eu-stack >/dev/null 2>&1") == 0;
}

TEST_F(DeathTest, HangIsCaughtByTheSilenceWatchdog) {
  // The hang starts at step 0 so that no slow (but live) step of a busy
  // machine can be mistaken for it within the 2 s of silence.
  const auto path = Scenario("hang", "faults:\n  - name: hang\n    at_step: 0\n"
                                     "expect: {outcome: hung, failure_class: hang, step: 0}\n");
  const json j = RunExpectingMet(path, {"limits.silence_s=2", "limits.grace_s=1"}, 60);
  EXPECT_EQ(j.value("outcome", ""), "hung");
  EXPECT_EQ(j.at("failure").at("step"), 0);
  EXPECT_NE(j.at("failure").at("message").get<std::string>().find("silence watchdog"), std::string::npos);
  EXPECT_EQ(j.at("steps_completed"), 0);
  EXPECT_GE(j.at("trials")[0].at("seconds").get<double>(), 2.0);
  EXPECT_TRUE(fs::exists(out_ / ".FAILURE"));
  ExpectWorkerGone();
  // Note [Stacks of a hung worker]: where it hung, from gdb or eu-stack.
  if (!HaveStackTool()) GTEST_SKIP() << "neither gdb nor eu-stack is installed: no stacks to check";
  ASSERT_TRUE(j.contains("stacks")) << j.dump();
  EXPECT_NE(j.at("stacks").at("excerpt").get<std::string>().find("FaultInjector::on_step_begin"), std::string::npos)
      << j.at("stacks").dump();
  EXPECT_TRUE(fs::exists(out_ / "main" / "stacks.txt"));
  std::ifstream md(out_ / "report.md");
  const std::string text((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("Where it was when the watchdog stopped it"), std::string::npos);
}

TEST_F(DeathTest, SlowRunIsKilledAtTheDeadline) {
  const auto path = Scenario("deadline", "faults:\n  - name: slow_data\n    seconds: 120\n"
                                         "expect: {outcome: timed_out, failure_class: hang, step: 0}\n");
  const json j = RunExpectingMet(path, {"limits.deadline_s=3", "limits.grace_s=1"}, 60);
  EXPECT_EQ(j.value("outcome", ""), "timed_out");
  EXPECT_NE(j.at("failure").at("message").get<std::string>().find("deadline"), std::string::npos);
  const double seconds = j.at("trials")[0].at("seconds").get<double>();
  EXPECT_GE(seconds, 3.0);
  // The deadline, the stacks (at most 30 s) and the grace: far less than the 120 s sleep.
  EXPECT_LT(seconds, 60.0) << "the worker was not stopped at the deadline";
  EXPECT_TRUE(fs::exists(out_ / ".FAILURE"));
  ExpectWorkerGone();
}

TEST_F(DeathTest, UnexpectedCrashMakesDbhExitOne) {
  // The same crash against the default expectation (passed): dbh reports it
  // and exits 1, still without dying itself.
  const auto path = Scenario("crash-unexpected", "faults:\n  - name: crash\n    at_step: 0\n");
  out_ = dir_ / "out";
  const Timed t = dbh({"run", path, "--out", out_.string()});
  EXPECT_EQ(t.result.term_signal, 0);
  EXPECT_EQ(t.result.exit_code, 1) << t.result.out << t.result.err;
  EXPECT_NE(t.result.out.find("outcome: expected passed, got crashed"), std::string::npos) << t.result.out;
  EXPECT_NE(t.result.out.find("repro:  dbh run"), std::string::npos) << t.result.out;
  ExpectWorkerGone();
}

}  // namespace
}  // namespace dbh
