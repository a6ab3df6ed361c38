// Suites on real schedulers, through the shipped examples:
// - Slurm: a single-node cluster from Debian's packages (scripts/slurm-local.sh)
//   runs a suite as a 4-task array job via examples/slurm/; the merged result
//   must equal a local run. Skips, saying why, where Slurm cannot start.
// - Kubernetes: the Indexed Job manifest's own command and environment, run
//   once per completion index, then the merge Job's command.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "tests/support/files.h"
#include "tests/support/paths.h"
#include "tests/support/subprocess.h"

namespace dbh {
namespace {

namespace fs = std::filesystem;

const std::string kSource = DBH_SOURCE_DIR;

// Six quick scenarios with different outcomes. Their stable ids hash to
// shards 1, 2 and 3 of 4, so shard 0 runs nothing: an empty shard must still
// write its outputs and merge cleanly.
void make_suite(const fs::path& dir, bool small = false) {
  fs::create_directories(dir);
  const std::string inc = "include: " + kSource + "/scenarios/base/tiny-cpu.yaml\n";
  int seed = 1;
  for (const char* n : {"plain-a", "plain-b", "plain-c"}) {
    if (small && seed > 1) break;
    std::ofstream(dir / (std::string(n) + ".yaml")) << inc << "train: {max_steps: 2, seed: " << seed++ << "}\n";
  }
  std::ofstream(dir / "nan-input.yaml") << inc << "train: {max_steps: 3}\nfaults:\n  - {name: nan_input, at_step: 2}\n"
                                        << "expect: {outcome: diverged, failure_class: nonfinite_input, step: 2}\n";
  std::ofstream(dir / "abort.yaml") << inc << "train: {max_steps: 3}\nfaults:\n"
                                    << "  - {name: crash, at_step: 1, signal: SIGABRT}\n"
                                    << "expect: {outcome: crashed, step: 1}\n";
  if (small) return;
  std::ofstream(dir / "real.yaml") << inc << "data: {source: real, path: " << kSource
                                   << "/fixtures/real, size: 128}\ntrain: {max_steps: 2}\n";
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in, nullptr, false);
}

// scenario -> "outcome failure_class@step met|not met"
std::map<std::string, std::string> results(const nlohmann::json& suite) {
  std::map<std::string, std::string> out;
  for (const auto& r : suite["runs"]) {
    const auto report = read_json(fs::path(r["report"].get<std::string>()).parent_path() / "report.json");
    std::string cls, step;
    if (!report.is_discarded() && report.contains("failure") && report["failure"].is_object()) {
      const auto& f = report["failure"];
      if (f.contains("class") && f["class"].is_string()) cls = f["class"].get<std::string>();
      if (f.contains("step") && f["step"].is_number()) step = std::to_string(f["step"].get<long>());
    }
    out[r["scenario"]] = r["outcome"].get<std::string>() + " " + cls + "@" + step + " " +
                         (r["expectation_met"].get<bool>() ? "met" : "not met");
  }
  return out;
}

class Cluster {
 public:
  explicit Cluster(fs::path dir) : dir_(std::move(dir)) {}
  ~Cluster() {
    if (up_) testing::run_process({"/bin/bash", kSource + "/scripts/slurm-local.sh", "down", dir_.string()}, "", 60);
  }
  testing::ProcessResult start() {
    auto r = testing::run_process({"/bin/bash", kSource + "/scripts/slurm-local.sh", "up", dir_.string()}, "", 90);
    up_ = true;  // `up` stops what it started when it fails; `down` is harmless either way
    return r;
  }
  std::string conf() const { return (dir_ / "etc" / "slurm.conf").string(); }

 private:
  fs::path dir_;
  bool up_ = false;
};

// A single-node cluster for one test, in a folder near the root (Unix
// socket paths are short): started in SetUp (the test skips, saying why,
// where Slurm cannot start), stopped in TearDown, then the folder removed
// (kept when the test failed, for its logs).
class SlurmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path("/tmp") / ("dbh-slurm-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    cluster_.emplace(dir_ / "cluster");
    const auto up = cluster_->start();
    if (up.exit_code == 77) GTEST_SKIP() << "Slurm cannot start on this machine: " << up.err;
    ASSERT_EQ(up.exit_code, 0) << up.out << up.err;
  }
  void TearDown() override {
    cluster_.reset();
    if (!HasFailure()) fs::remove_all(dir_);
  }
  fs::path dir_;
  std::optional<Cluster> cluster_;
};

TEST_F(SlurmTest, ArrayJobShardsMergeToTheLocalResult) {
  const fs::path& dir = dir_;
  const Cluster& cluster = *cluster_;
  make_suite(dir / "suite");

  const auto local = testing::run_process(
      {DBH_BINARY, "suite", (dir / "suite").string(), "--out", (dir / "local").string(), "-q"}, kSource, 300);
  ASSERT_EQ(local.exit_code, 0) << local.out << local.err;

  // The shipped submit script: array job, then the merge job after it.
  const auto slurm = testing::run_process({"/usr/bin/env", "SLURM_CONF=" + cluster.conf(),
                                           std::string("DBH=") + DBH_BINARY, "/bin/bash",
                                           kSource + "/examples/slurm/submit.sh", "--wait", (dir / "suite").string(),
                                           (dir / "slurm").string(), "4"},
                                          dir.string(), 400);
  std::string logs;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".log") {
      std::ifstream in(e.path());
      logs += "--- " + e.path().filename().string() + "\n" +
              std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
  }
  ASSERT_EQ(slurm.exit_code, 0) << slurm.out << slurm.err << logs;
  EXPECT_NE(slurm.out.find("array job"), std::string::npos) << slurm.out;

  // Every array task wrote its own shard, each knowing it came from Slurm.
  std::multiset<std::string> ran;
  for (int k = 0; k < 4; ++k) {
    const fs::path shard = dir / "slurm" / ("shard-" + std::to_string(k) + "-of-4");
    const auto s = read_json(shard / "suite.json");
    ASSERT_FALSE(s.is_discarded()) << shard << "/suite.json missing or torn\n" << logs;
    EXPECT_EQ(s.value("shard", ""), std::to_string(k) + "/4 (SLURM_ARRAY_TASK_ID)");
    EXPECT_TRUE(fs::exists(shard / "junit.xml"));
    EXPECT_TRUE(fs::exists(shard / "journal.jsonl"));
    for (const auto& r : s["runs"]) ran.insert(r["scenario"].get<std::string>());
  }
  EXPECT_EQ(ran.size(), 6u) << "each scenario runs in exactly one shard";
  EXPECT_EQ(std::set<std::string>(ran.begin(), ran.end()).size(), ran.size()) << "a scenario ran twice";

  const auto merged = read_json(dir / "slurm" / "merged" / "suite.json");
  ASSERT_FALSE(merged.is_discarded()) << logs;
  const auto want = results(read_json(dir / "local" / "suite.json"));
  ASSERT_EQ(want.size(), 6u);
  EXPECT_EQ(results(merged), want);
  std::ifstream junit(dir / "slurm" / "merged" / "junit.xml");
  const std::string xml((std::istreambuf_iterator<char>(junit)), std::istreambuf_iterator<char>());
  size_t cases = 0;
  for (size_t p = xml.find("<testcase"); p != std::string::npos; p = xml.find("<testcase", p + 1)) ++cases;
  EXPECT_EQ(cases, 6u) << xml;
}

// Note [Probes on a cluster]: `bisect modules --executor slurm` runs every
// probe as a job step on the local cluster and finds what a local bisection
// finds (the step, then the module from the monitors' finding the node sends
// back); the first probe's job, cancelled while it runs, is submitted again
// rather than answered, while a submission Slurm refuses is not; qualify's
// trials there recommend what they do locally; nothing is left queued.
TEST_F(SlurmTest, BisectOnTheClusterAnswersAsLocallyAndResubmitsACancelledJob) {
  const fs::path& dir = dir_;
  const Cluster& cluster = *cluster_;
  const fs::path scenario = dir / "nan.yaml";
  std::ofstream(scenario) << "include: " << kSource << "/scenarios/base/tiny-cpu.yaml\n"
                          << "train: {max_steps: 4}\nfaults:\n  - {name: nan_input, at_step: 2}\n"
                          << "  - {name: slow_data, seconds: 1}\nexpect: {outcome: diverged}\n";
  const auto local = testing::run_process({DBH_BINARY, "bisect", "modules", scenario.string(), "--out",
                                           (dir / "local").string(), "--cache", (dir / "cache").string()},
                                          kSource, 300);
  ASSERT_EQ(local.exit_code, 0) << local.out << local.err;

  const std::string env = "SLURM_CONF=" + cluster.conf();
  const pid_t pid = testing::spawn_process({"/usr/bin/env", env, DBH_BINARY, "bisect", "modules", scenario.string(),
                                            "--out", (dir / "slurm").string(), "--cache", (dir / "cache").string(),
                                            "--executor", "slurm", "--partition", "debug", "--time-limit", "10"},
                                           kSource, (dir / "slurm.log").string());
  // The first job step seen running is cancelled a second into its trial.
  std::string cancelled;
  for (int i = 0; i < 600 && cancelled.empty(); ++i) {
    const auto q = testing::run_process({"/usr/bin/env", env, "squeue", "-h", "-t", "RUNNING", "-o", "%A %j"}, "", 30);
    if (q.out.find("dbh-probe-") != std::string::npos) {
      ::usleep(1000 * 1000);
      cancelled = q.out.substr(0, q.out.find(' '));
      const auto c = testing::run_process({"/usr/bin/env", env, "scancel", cancelled}, "", 30);
      ASSERT_EQ(c.exit_code, 0) << c.err;
    }
    ::usleep(100 * 1000);
  }
  const auto slurm = testing::wait_process(pid, 400);
  std::ifstream log_file(dir / "slurm.log");
  const std::string log((std::istreambuf_iterator<char>(log_file)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(cancelled.empty()) << "no probe was seen running on the cluster\n" << log;
  ASSERT_EQ(slurm.exit_code, 0) << log;
  EXPECT_NE(log.find("ended without a result"), std::string::npos) << log;
  EXPECT_NE(log.find("submitted again (attempt 2 of 3)"), std::string::npos) << log;

  const auto want = read_json(dir / "local" / "bisect.json");
  const auto got = read_json(dir / "slurm" / "bisect.json");
  ASSERT_FALSE(got.is_discarded()) << log;
  EXPECT_EQ(got["result"], want["result"]);
  EXPECT_EQ(got["verdict"], want["verdict"]);
  EXPECT_EQ(got["probe_count"], want["probe_count"]);
  EXPECT_EQ(want["executor"], "local");
  EXPECT_EQ(got["executor"], "slurm, partition debug, time limit 10");
  std::ifstream md_file(dir / "slurm" / "bisect.md");
  const std::string md((std::istreambuf_iterator<char>(md_file)), std::istreambuf_iterator<char>());
  EXPECT_NE(md.find("Probes ran on slurm, partition debug, time limit 10."), std::string::npos) << md;
  // The cluster's answers are not the local ones: none came from the cache
  // the local bisection filled.
  EXPECT_EQ(got["fresh_probes"], got["probe_count"]);

  // A submission Slurm refuses (no such partition) is not a lost job: one
  // submission, exit 2, Slurm's own words.
  const auto refused_partition = testing::run_process(
      {"/usr/bin/env", env, DBH_BINARY, "bisect", "steps", scenario.string(), "--out", (dir / "nosuch").string(),
       "--cache", (dir / "cache").string(), "--executor", "slurm", "--partition", "nosuch"},
      kSource, 120);
  EXPECT_EQ(refused_partition.exit_code, 2) << refused_partition.out << refused_partition.err;
  EXPECT_NE(refused_partition.err.find("in 1 submission(s)"), std::string::npos) << refused_partition.err;
  EXPECT_NE(refused_partition.err.find("partition"), std::string::npos) << refused_partition.err;
  // The same partition named by the scenario (cluster.partition) reaches srun
  // as the flag does; a flag given with it wins (the scenario's `debug`
  // would run, the flag's `nosuch` is refused).
  const auto refused_from = [&](const std::string& name, const std::string& partition,
                                std::vector<std::string> flags) {
    const fs::path file = dir / (name + ".yaml");
    std::ofstream(file) << "include: " << scenario.string() << "\ncluster: {partition: " << partition << "}\n";
    std::vector<std::string> argv = {"/usr/bin/env", env, DBH_BINARY, "bisect", "steps", file.string(), "--out",
                                     (dir / name).string(), "--cache", (dir / "cache").string(), "--executor", "slurm"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    const auto r = testing::run_process(argv, kSource, 120);
    EXPECT_EQ(r.exit_code, 2) << name << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find("in 1 submission(s)"), std::string::npos) << name << "\n" << r.err;
    EXPECT_NE(r.err.find("partition"), std::string::npos) << name << "\n" << r.err;
  };
  refused_from("scenario-nosuch", "nosuch", {});
  refused_from("flag-wins", "debug", {"--partition", "nosuch"});

  // qualify's memory trials on the cluster: the same recommendation.
  const std::string tiny = kSource + "/scenarios/base/tiny-cpu.yaml";
  const auto qualify = [&](const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> argv = {"/usr/bin/env", env, DBH_BINARY, "qualify", tiny, "--budget", "1GiB", "--out",
                                     (dir / name).string(), "--cache", (dir / "cache").string(), "-q"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return testing::run_process(argv, kSource, 300);
  };
  const auto ql = qualify("qualify-local", {});
  const auto qs = qualify("qualify-slurm", {"--executor", "slurm"});
  ASSERT_EQ(ql.exit_code, 0) << ql.out << ql.err;
  ASSERT_EQ(qs.exit_code, 0) << qs.out << qs.err;
  const auto ljson = read_json(dir / "qualify-local" / "qualification.json");
  const auto sjson = read_json(dir / "qualify-slurm" / "qualification.json");
  EXPECT_EQ(sjson["qualifies"], ljson["qualifies"]);
  EXPECT_EQ(sjson["recommendation"]["batch"], ljson["recommendation"]["batch"]);
  EXPECT_EQ(sjson["recommendation"]["precision"], ljson["recommendation"]["precision"]);
  EXPECT_EQ(sjson["executor"], "slurm");
  // The numerics comparison is not sent back from a node: refused, nothing written.
  const auto refused = qualify("qualify-reference", {"--executor", "slurm", "--reference", tiny});
  EXPECT_EQ(refused.exit_code, 2) << refused.out << refused.err;
  EXPECT_NE(refused.err.find("--reference"), std::string::npos) << refused.err;
  EXPECT_FALSE(fs::exists(dir / "qualify-reference"));

  const auto q = testing::run_process({"/usr/bin/env", env, "squeue", "-h", "-o", "%A %j"}, "", 30);
  EXPECT_EQ(q.out.find("dbh-probe-"), std::string::npos) << "left on the cluster:\n" << q.out;
}

// The containers' commands with the manifest's paths mapped to this test's.
std::vector<std::string> container_argv(const YAML::Node& job, const std::map<std::string, std::string>& paths) {
  std::vector<std::string> argv;
  for (const auto& a : job["spec"]["template"]["spec"]["containers"][0]["command"]) {
    std::string s = a.as<std::string>();
    if (s == "dbh") s = DBH_BINARY;
    for (const auto& [from, to] : paths) {
      if (s.rfind(from, 0) == 0) s = to + s.substr(from.size());
    }
    argv.push_back(s);
  }
  return argv;
}

TEST(KubernetesTest, IndexedJobManifestShardsMergeToTheLocalResult) {
  const testing::ScratchDir dir("dbh-k8s");  // unique, removed when the test ends
  make_suite(dir / "suite", /*small=*/true);
  const YAML::Node job = YAML::LoadFile(kSource + "/examples/kubernetes/dbh-suite-job.yaml");
  const YAML::Node merge = YAML::LoadFile(kSource + "/examples/kubernetes/dbh-merge-job.yaml");
  ASSERT_EQ(job["spec"]["completionMode"].as<std::string>(), "Indexed");
  const int completions = job["spec"]["completions"].as<int>();
  EXPECT_EQ(job["spec"]["parallelism"].as<int>(), completions);
  std::vector<std::string> env{"/usr/bin/env"};
  for (const auto& e : job["spec"]["template"]["spec"]["containers"][0]["env"]) {
    env.push_back(e["name"].as<std::string>() + "=" + e["value"].as<std::string>());
  }
  ASSERT_EQ(env.size(), 2u);
  EXPECT_EQ(env[1], "DBH_SHARD_COUNT=" + std::to_string(completions)) << "shard count must equal completions";

  const std::map<std::string, std::string> paths{{"/suites/smoke", (dir / "suite").string()},
                                                 {"/results", (dir / "results").string()}};
  for (int k = 0; k < completions; ++k) {  // what each pod runs
    auto argv = env;
    argv.push_back("JOB_COMPLETION_INDEX=" + std::to_string(k));
    for (auto& a : container_argv(job, paths)) argv.push_back(a);
    argv.push_back("-q");
    const auto r = testing::run_process(argv, dir.string(), 300);
    ASSERT_EQ(r.exit_code, 0) << "index " << k << ": " << r.out << r.err;
    const auto s = read_json(dir / "results" / "smoke" / ("shard-" + std::to_string(k) + "-of-4") / "suite.json");
    ASSERT_FALSE(s.is_discarded()) << "index " << k;
    EXPECT_EQ(s.value("shard", ""), std::to_string(k) + "/4 (JOB_COMPLETION_INDEX)");
  }
  const auto m = testing::run_process(container_argv(merge, paths), dir.string(), 120);
  ASSERT_EQ(m.exit_code, 0) << m.out << m.err;
  const auto local = testing::run_process(
      {DBH_BINARY, "suite", (dir / "suite").string(), "--out", (dir / "local").string(), "-q"}, kSource, 300);
  ASSERT_EQ(local.exit_code, 0) << local.out << local.err;
  const auto want = results(read_json(dir / "local" / "suite.json"));
  ASSERT_EQ(want.size(), 3u);
  EXPECT_EQ(results(read_json(dir / "results" / "smoke" / "merged" / "suite.json")), want);
  EXPECT_TRUE(fs::exists(dir / "results" / "smoke" / "merged" / "junit.xml"));
}

}  // namespace
}  // namespace dbh
