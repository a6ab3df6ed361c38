// Note [Probes on a cluster]: the flags a search takes for Slurm, the srun
// and node commands built from them, the cache key that keeps a cluster's
// answers apart, and the scope that sends a process's probes there. The
// probes themselves run on a real local Slurm in the integration tests
// (SlurmTest in tests/integration/scheduler_test.cc).
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "harness/common/error.h"
#include "harness/probe/cluster.h"
#include "tests/support/files.h"

namespace dbh::harness {
namespace {

using probe::ClusterOptions;
using probe::Executor;

bool has(const std::vector<std::string>& v, const std::string& word) {
  return std::find(v.begin(), v.end(), word) != v.end();
}

// PATH set to one folder for the scope of a test, then restored.
class PathIs {
 public:
  explicit PathIs(const std::string& folder) {
    if (const char* p = std::getenv("PATH")) saved_ = p;
    ::setenv("PATH", folder.c_str(), 1);
  }
  ~PathIs() {
    if (saved_) {
      ::setenv("PATH", saved_->c_str(), 1);
    } else {
      ::unsetenv("PATH");
    }
  }

 private:
  std::optional<std::string> saved_;
};

// A folder holding an executable `srun` (never run here).
struct SrunFolder {
  testing::ScratchDir dir{"dbh-srun"};
  SrunFolder() {
    testing::write_text(dir / "srun", "#!/bin/sh\nexit 1\n");
    ::chmod((dir / "srun").c_str(), 0755);
  }
};

ClusterOptions slurm() {
  ClusterOptions o;
  o.executor = Executor::kSlurm;
  return o;
}

TEST(ClusterOptionsTest, TimeLimitsInEverySlurmForm) {
  for (const char* t : {"30", "10:00", "1:00:00", "2-12", "2-12:30", "1-00:00:00", "UNLIMITED"}) {
    EXPECT_TRUE(scenario::is_slurm_time(t)) << t;
  }
  for (const char* t : {"", "1h", "10:", "-1", "1:2:3:4", "1-", "ten", "1:000"}) {
    EXPECT_FALSE(scenario::is_slurm_time(t)) << t;
  }
}

TEST(ClusterOptionsTest, EachBadFlagIsRefusedByName) {
  const SrunFolder srun;
  const PathIs path(srun.dir.path().string());
  EXPECT_NO_THROW(probe::check_cluster_options(ClusterOptions{}));
  ClusterOptions local;
  local.partition = "gpu12";
  try {
    probe::check_cluster_options(local);
    ADD_FAILURE() << "a partition without --executor slurm was taken";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--executor slurm"), std::string::npos) << e.what();
  }
  auto o = slurm();
  o.time_limit = "1h";
  try {
    probe::check_cluster_options(o);
    ADD_FAILURE() << "1h was taken as a Slurm time";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--time-limit"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'1h'"), std::string::npos) << e.what();
  }
  o = slurm();
  o.partition = "gpu 12";
  EXPECT_THROW(probe::check_cluster_options(o), UsageError);
  o = slurm();
  o.gpu_type = "a2000:2";
  EXPECT_THROW(probe::check_cluster_options(o), UsageError);
  o = slurm();
  o.srun_args = {"account=ml"};
  EXPECT_THROW(probe::check_cluster_options(o), UsageError);
  o.srun_args = {"--account=ml", "--qos=low"};
  EXPECT_NO_THROW(probe::check_cluster_options(o));
}

TEST(ClusterOptionsTest, ASlurmExecutorWithoutSrunIsRefused) {
  const testing::ScratchDir empty("dbh-no-srun");
  const PathIs path(empty.path().string());
  EXPECT_NO_THROW(probe::check_cluster_options(ClusterOptions{})) << "local needs no srun";
  try {
    probe::check_cluster_options(slurm());
    ADD_FAILURE() << "a Slurm executor was taken with no srun on the PATH";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("srun"), std::string::npos) << e.what();
  }
}

TEST(ClusterCommandsTest, SrunCarriesEveryOptionBeforeTheNodesCommand) {
  auto o = slurm();
  o.partition = "gpu12";
  o.gpu_type = "a2000";
  o.time_limit = "20:00";
  o.srun_args = {"--account=ml"};
  const auto argv = probe::srun_argv(o, "dbh-probe-1-1001", "/work", {"/opt/dbh", "__probe", "--dir=/out/p"});
  ASSERT_FALSE(argv.empty());
  EXPECT_EQ(argv.front(), "srun");
  for (const char* w : {"--job-name=dbh-probe-1-1001", "--chdir=/work", "--partition=gpu12", "--gres=gpu:a2000:1",
                        "--time=20:00", "--account=ml", "--ntasks=1"}) {
    EXPECT_TRUE(has(argv, w)) << w;
  }
  const auto sep = std::find(argv.begin(), argv.end(), "--");
  ASSERT_NE(sep, argv.end());
  EXPECT_EQ(std::vector<std::string>(sep + 1, argv.end()),
            (std::vector<std::string>{"/opt/dbh", "__probe", "--dir=/out/p"}));
  EXPECT_LT(std::find(argv.begin(), argv.end(), "--account=ml"), sep);
  // Nothing asked for: the cluster's defaults.
  const auto plain = probe::srun_argv(slurm(), "j", "/w", {"x"});
  for (const auto& w : plain) {
    EXPECT_EQ(w.rfind("--partition", 0), std::string::npos);
    EXPECT_EQ(w.rfind("--gres", 0), std::string::npos);
    EXPECT_EQ(w.rfind("--time", 0), std::string::npos);
  }
}

TEST(ClusterCommandsTest, TheNodesCommandKeepsEachOverrideAsOneWord) {
  probe::NodeProbe r;
  r.scenario = "/s/a b.yaml";
  r.overrides = {"train.lr=0.1", "--lr 5", "data.path=/x y"};
  r.dir = "/out/probe-3";
  r.trial = 1003;
  r.key = "k";
  r.hash = "h";
  const auto argv = probe::node_probe_argv("/opt/dbh", r);
  EXPECT_EQ(argv[0], "/opt/dbh");
  EXPECT_EQ(argv[1], "__probe");
  for (const char* w : {"--scenario=/s/a b.yaml", "--dir=/out/probe-3", "--trial=1003", "--key=k", "--hash=h",
                        "--override=train.lr=0.1", "--override=--lr 5", "--override=data.path=/x y"}) {
    EXPECT_TRUE(has(argv, w)) << w;
  }
  EXPECT_EQ(probe::node_result_path("/out/probe-3"), "/out/probe-3.result.json");
}

TEST(ClusterKeyTest, AnAnswerFromTheClusterIsNeverALocalOne) {
  EXPECT_EQ(probe::cluster_key_text(ClusterOptions{}), "");
  auto a = slurm();
  auto b = slurm();
  b.partition = "gpu12";
  auto c = b;
  c.gpu_type = "a2000";
  EXPECT_NE(probe::cluster_key_text(a), "");
  EXPECT_NE(probe::cluster_key_text(a), probe::cluster_key_text(b));
  EXPECT_NE(probe::cluster_key_text(b), probe::cluster_key_text(c));
  auto d = c;
  d.time_limit = "30";  // how long it may run does not change what it measures
  EXPECT_EQ(probe::cluster_key_text(c), probe::cluster_key_text(d));
}

// The scenario's `cluster` keys fill what the command line left empty; the
// command line wins; a local run takes none.
TEST(ClusterOptionsTest, TheScenarioFillsWhatTheCommandLineLeftEmpty) {
  scenario::ClusterConfig c;
  c.partition = "gpu12";
  c.gpu_type = "a100";
  c.time_limit = "30";
  const ClusterOptions local = probe::with_scenario_defaults(ClusterOptions{}, c);
  EXPECT_EQ(local.partition, "");
  EXPECT_EQ(local.gpu_type, "");
  auto o = slurm();
  o.partition = "debug";
  const ClusterOptions merged = probe::with_scenario_defaults(o, c);
  EXPECT_EQ(merged.partition, "debug") << "the command line wins";
  EXPECT_EQ(merged.gpu_type, "a100");
  EXPECT_EQ(merged.time_limit, "30");
  {
    const probe::Cluster cluster(o);
    probe::Cluster::take_scenario_defaults(c);
    EXPECT_EQ(probe::executor_description(), "slurm, partition debug, gpu a100, time limit 30");
    EXPECT_NE(probe::cluster_key_text(*probe::Cluster::active()).find("a100"), std::string::npos)
        << "an answer from another GPU type is another answer";
  }
  probe::Cluster::take_scenario_defaults(c);  // none live: nothing
  EXPECT_EQ(probe::Cluster::active(), nullptr);
}

TEST(ClusterScopeTest, TheScopeSendsProbesToTheClusterWhileItLives) {
  EXPECT_EQ(probe::Cluster::active(), nullptr);
  EXPECT_EQ(probe::executor_description(), "local");
  {
    const probe::Cluster local{ClusterOptions{}};
    EXPECT_EQ(probe::Cluster::active(), nullptr) << "a local executor is no cluster";
  }
  auto o = slurm();
  o.partition = "gpu12";
  {
    const probe::Cluster cluster(o);
    ASSERT_NE(probe::Cluster::active(), nullptr);
    EXPECT_EQ(probe::Cluster::active()->partition, "gpu12");
    EXPECT_EQ(probe::executor_description(), "slurm, partition gpu12");
  }
  EXPECT_EQ(probe::Cluster::active(), nullptr);
}

}  // namespace
}  // namespace dbh
