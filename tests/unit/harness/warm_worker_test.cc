// Note [A warm worker]: which commands a warm worker serves, what crosses its
// socket, and real trials forked from a real one (the adapter's
// dbh_adapter._zygote under the .venv's Python ./dev setup makes), supervised
// as a spawned trial is: exit status, logs, deadline, and nothing left behind.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/supervisor/descendants.h"
#include "harness/supervisor/trial.h"
#include "harness/supervisor/warm_worker.h"
#include "tests/support/files.h"
#include "tests/support/paths.h"

namespace dbh::harness {
namespace {

namespace fs = std::filesystem;
using supervisor::warm_target;

TEST(WarmTargetTest, ServesPythonScriptsAndModulesOnly) {
  auto t = warm_target({"python", "train.py", "--lr", "0.1"});
  ASSERT_TRUE(t);
  EXPECT_EQ(t->script, "train.py");
  EXPECT_EQ(t->trial_argv, (std::vector<std::string>{"train.py", "--lr", "0.1"}));
  t = warm_target({"/opt/venv/bin/python3.11", "-m", "pkg.train", "fit", "-c", "a.yaml"});
  ASSERT_TRUE(t);
  EXPECT_EQ(t->module, "pkg.train");
  EXPECT_EQ(t->python, "/opt/venv/bin/python3.11");
  EXPECT_EQ(t->trial_argv, (std::vector<std::string>{"pkg.train", "fit", "-c", "a.yaml"}));
  // Interpreter options, other programs and a bare interpreter start cold.
  EXPECT_FALSE(warm_target({"python", "-u", "train.py"}));
  EXPECT_FALSE(warm_target({"python", "-m"}));
  EXPECT_FALSE(warm_target({"python"}));
  EXPECT_FALSE(warm_target({"torchrun", "train.py"}));
  EXPECT_FALSE(warm_target({"pythonw", "train.py"}));
  EXPECT_FALSE(warm_target({"/bin/sh", "-c", "python train.py"}));
}

TEST(WarmTargetTest, TheEnvironmentServedLeavesOutDbhsOwnVariablesInAFixedOrder) {
  EXPECT_EQ(supervisor::warm_environment({"PATH=/b", "DBH_TRIAL=3", "A=1", "DBH_TRIAL_TOKEN=x"}),
            (std::vector<std::string>{"A=1", "PATH=/b"}));
}

TEST(WarmTargetTest, ARequestCarriesTheTrialsArgumentsEnvironmentAndFolder) {
  const auto t = warm_target({"python", "t.py", "a b"});
  ASSERT_TRUE(t);
  const auto j = nlohmann::json::parse(supervisor::warm_request(*t, {"X=1=2", "Y="}, "/w"));
  EXPECT_EQ(j["argv"], nlohmann::json::array({"t.py", "a b"}));
  EXPECT_EQ(j["env"]["X"], "1=2");
  EXPECT_EQ(j["env"]["Y"], "");
  EXPECT_EQ(j["cwd"], "/w");
}

// A reply is the user's environment's to write: anything but a process id
// in range is an error, never a pid to wait for or signal.
TEST(WarmTargetTest, AReplyIsAProcessIdInRangeOrAnError) {
  EXPECT_EQ(supervisor::parse_warm_reply(R"({"pid": 4242})").pid, 4242);
  for (const char* bad : {R"({"pid": 0})", R"({"pid": 1})", R"({"pid": -5})", R"({"pid": 99999999999})",
                          R"({"pid": "12"})", R"({"pid": 1.5})", "[]", "not json", ""}) {
    const auto r = supervisor::parse_warm_reply(bad);
    EXPECT_EQ(r.pid, 0) << bad;
    EXPECT_FALSE(r.error.empty()) << bad;
  }
  const auto r = supervisor::parse_warm_reply(R"({"error": "request.cwd: expected a folder"})");
  EXPECT_NE(r.error.find("refused the trial: \"request.cwd: expected a folder\""), std::string::npos) << r.error;
}

class WarmWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    python_ = fs::path(DBH_SOURCE_DIR) / ".venv" / "bin" / "python";
    if (!fs::exists(python_)) GTEST_SKIP() << "no .venv (./dev setup makes it): no Python to fork trials from";
    std::string templ = (fs::path(::testing::TempDir()) / "dbh-warm-XXXXXX").string();
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
    // The trial: its parent, its group and its arguments, then an exit status.
    std::ofstream(dir_ / "t.py") << "import os, sys, time\n"
                                    "print(os.getppid(), os.getpgid(0) == os.getpid(), sys.argv[1:], flush=True)\n"
                                    "if sys.argv[1] == 'sleep': time.sleep(60)\n"
                                    "sys.exit(int(sys.argv[1]))\n";
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  supervisor::TrialResult Run(const std::string& arg, const std::string& python, double deadline_s = 120) {
    supervisor::TrialSpec spec;
    spec.argv = {python, "t.py", arg};
    spec.cwd = dir_.string();
    spec.run_dir = (dir_ / ("run" + std::to_string(++runs_))).string();
    spec.deadline_s = deadline_s;
    spec.silence_s = 120;
    spec.grace_s = 1;
    spec.may_fork = true;
    spec.env = {{"PYTHONPATH", std::string(DBH_SOURCE_DIR) + "/python"}, {"PYTHONDONTWRITEBYTECODE", "1"}};
    return supervisor::run_trial(spec);
  }
  std::string Stdout() const { return testing::read_text(dir_ / ("run" + std::to_string(runs_)) / "stdout.log"); }

  fs::path python_;
  fs::path dir_;
  int runs_ = 0;
};

TEST_F(WarmWorkerTest, TrialsAreForkedAsThisProcesssChildrenAndSupervisedAsSpawnedOnes) {
  {
    supervisor::WarmWorkers warm(true);
    ASSERT_EQ(supervisor::WarmWorkers::active(), &warm);
    for (const char* code : {"7", "0"}) {
      const auto r = Run(code, python_.string());
      EXPECT_TRUE(r.forked) << r.cold_reason << r.stderr_tail;
      EXPECT_EQ(r.exit_code, std::stoi(code)) << r.stderr_tail;
      EXPECT_EQ(Stdout(), std::to_string(getpid()) + " True ['" + code + "']\n");
    }
    // The deadline ends a forked trial as it ends a spawned one.
    const auto slow = Run("sleep", python_.string(), 3);
    EXPECT_TRUE(slow.forked) << slow.cold_reason;
    EXPECT_TRUE(slow.timed_out);
    EXPECT_EQ(warm.forked(), 3);
  }
  EXPECT_EQ(supervisor::WarmWorkers::active(), nullptr);
  // The warm worker ended with its scope: this process has no child left.
  EXPECT_TRUE(supervisor::internal::children_of_this_process().empty());
}

TEST_F(WarmWorkerTest, ColdOrAPythonWithoutTheAdapterStartsTheTrialAsAProcessOfItsOwn) {
  {
    supervisor::WarmWorkers cold(false);
    const auto r = Run("5", python_.string());
    EXPECT_FALSE(r.forked);
    EXPECT_EQ(r.cold_reason, "--cold");
    EXPECT_EQ(r.exit_code, 5);
  }
  if (!fs::exists("/usr/bin/python3")) GTEST_SKIP() << "no /usr/bin/python3 without the adapter";
  supervisor::WarmWorkers warm(true);
  // The system's Python has no torch, so no dbh_adapter: its warm worker
  // exits, and the trial runs cold and says why.
  auto r = Run("4", "/usr/bin/python3");
  EXPECT_FALSE(r.forked);
  EXPECT_NE(r.cold_reason.find("is dbh_adapter installed for /usr/bin/python3?"), std::string::npos) << r.cold_reason;
  EXPECT_EQ(r.exit_code, 4);
  r = Run("3", "/usr/bin/python3");  // once refused, cold at once
  EXPECT_FALSE(r.forked);
  EXPECT_EQ(r.exit_code, 3);
}

}  // namespace
}  // namespace dbh::harness
