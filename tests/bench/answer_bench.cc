// Time to answer (issue of warm workers and parallel probes): the wall time
// of a whole `dbh bisect config` over 4 keys, `dbh bisect modules` and a
// whole `dbh diagnose`, each from an empty probe cache, with one job and with
// two (Note [Probes ahead, in parallel] in harness/probe/probe.h), with the
// Python trials forked from a warm worker and `--cold` (Note [A warm worker]
// in harness/supervisor/warm_worker.h). On the Lightning example
// (examples/lightning-dbnet: its scenario from `dbh scenario from-command
// --external`, as docs/own-training.md makes it; its NaN in the fusion module;
// a learning rate 10^6 times its own), on the plain loop
// (examples/pytorch-regions, a learning rate 1,000 times its own) and on
// dbh's own worker (tiny-cpu.yaml). Counters: probes, parallel (probes run
// ahead), forked (probes forked from a warm worker), same (1 when the answer
// is the one the case's first run gave, one job and warm: the search must
// decide the same).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/paths.h"
#include "tests/support/python_env.h"
#include "tests/support/subprocess.h"

namespace dbh {
namespace {

namespace fs = std::filesystem;

const std::string kSource = DBH_SOURCE_DIR;

enum Case { kConfigLightning, kModulesLightning, kDiagnoseLightning, kDiagnosePlainLoop, kConfigDbh };

fs::path write(const fs::path& p, const std::string& text) {
  std::ofstream(p) << text;
  return p;
}

// The command's arguments after `dbh`, made in `dir`; its answer's file.
std::vector<std::string> command_of(Case c, const fs::path& dir, std::string* answer_file) {
  const std::string base = kSource + "/scenarios/base/tiny-cpu.yaml";
  switch (c) {
    case kConfigLightning: {
      *answer_file = "bisect.json";
      const auto r = testing::run_process_with_env(
          {testing::dbh_binary(), "scenario", "from-command", "--external", "--data", kSource + "/fixtures/real",
           "python examples/lightning-dbnet/train.py model.encoder.model_name=tiny "
           "dataloaders.train_dataloader.batch_size=2 trainer.max_steps=6",
           "--out", (dir / "mine.yaml").string()},
          testing::venv_python_env(), kSource, 300);
      if (r.exit_code != 0) return {};
      return {"bisect", "config", "--good", (dir / "mine.yaml").string(), "--bad",
              "model.optimizer.lr=1e6 seed=7 dataloaders.train_dataloader.batch_size=1 "
              "trainer.accumulate_grad_batches=2"};
    }
    case kModulesLightning:
      *answer_file = "bisect.json";
      return {"bisect", "modules", kSource + "/examples/lightning-dbnet/scenarios/nan-in-fusion.yaml",
              "--reproductions", "1"};
    case kDiagnoseLightning:
      *answer_file = "diagnosis.json";
      return {"diagnose", kSource + "/examples/lightning-dbnet/scenarios/clean.yaml", "model.optimizer.lr=1e6"};
    case kDiagnosePlainLoop:
      *answer_file = "diagnosis.json";
      return {"diagnose", kSource + "/examples/pytorch-regions/scenarios/clean.yaml", "optim.step_size=50"};
    case kConfigDbh:
      *answer_file = "bisect.json";
      return {"bisect", "config", "--good",
              write(dir / "good.yaml", "include: " + base + "\ntrain: {max_steps: 3}\n").string(), "--bad",
              write(dir / "bad.yaml", "include: " + base +
                                          "\ntrain: {max_steps: 3, seed: 7}\ndata: {batch_size: 1, size: 96}\n"
                                          "faults:\n  - {name: nan_input, at_step: 1}\n")
                  .string()};
  }
  return {};
}

// What must not change with the jobs: the answer.
nlohmann::json answer_of(const nlohmann::json& j) {
  return j.contains("conclusion") ? nlohmann::json{j["conclusion"], j["hypotheses"], j["cause"]} : j["result"];
}

void BM_TimeToAnswer(benchmark::State& state, Case c) {
  static std::map<Case, nlohmann::json> first_answer;
  const int64_t jobs = state.range(0);
  const bool warm = state.range(1) != 0;
  const fs::path dir = fs::temp_directory_path() / ("dbh_bench_answer_" + std::to_string(getpid()));
  double probes = 0, parallel = 0, forked = 0, same = 0;
  for (auto _ : state) {
    state.PauseTiming();
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::string file;
    std::vector<std::string> argv = {testing::dbh_binary()};
    const auto args = command_of(c, dir, &file);
    if (args.empty()) {
      state.SkipWithError("the scenario could not be made (is ./dev setup's .venv there?)");
      break;
    }
    argv.insert(argv.end(), args.begin(), args.end());
    const std::vector<std::string> options = {"--jobs", std::to_string(jobs), "--out", (dir / "out").string(),
                                              "--cache", (dir / "cache").string(), "-q"};
    argv.insert(argv.end(), options.begin(), options.end());
    if (!warm) argv.push_back("--cold");
    state.ResumeTiming();
    const auto r = testing::run_process_with_env(argv, testing::venv_python_env(), kSource, 1800);
    state.PauseTiming();
    std::ifstream in(dir / "out" / file);
    const auto j = nlohmann::json::parse(in, nullptr, false);
    if (r.exit_code > 1 || j.is_discarded()) {
      state.SkipWithError(("dbh failed: " + r.err).c_str());
      break;
    }
    const auto answer = answer_of(j);
    if (first_answer.count(c) == 0 && jobs == 1 && warm) first_answer[c] = answer;
    same += first_answer.count(c) > 0 && first_answer[c] == answer ? 1 : 0;
    probes += j.value("probe_count", 0.0);  // both bisect.json and diagnosis.json count them
    parallel += j.value("parallel_probes", 0.0);
    forked += j.value("forked_probes", 0.0);
    state.ResumeTiming();
  }
  fs::remove_all(dir);
  const auto n = static_cast<double>(std::max<int64_t>(1, state.iterations()));
  state.counters["probes"] = probes / n;
  state.counters["parallel"] = parallel / n;
  state.counters["forked"] = forked / n;
  state.counters["same"] = same / n;
}
#define DBH_ANSWER_BENCH(name, c)                                                                               \
  BENCHMARK_CAPTURE(BM_TimeToAnswer, name, c)                                                                  \
      ->ArgNames({"jobs", "warm"})                                                                              \
      ->Args({1, 1})                                                                                            \
      ->Args({1, 0})                                                                                            \
      ->Args({2, 1})                                                                                            \
      ->Args({2, 0})                                                                                            \
      ->Unit(benchmark::kSecond)                                                                                \
      ->UseRealTime()                                                                                           \
      ->Iterations(1)
DBH_ANSWER_BENCH(config_lightning, kConfigLightning);
DBH_ANSWER_BENCH(modules_lightning, kModulesLightning);
DBH_ANSWER_BENCH(diagnose_lightning, kDiagnoseLightning);
DBH_ANSWER_BENCH(diagnose_plain_loop, kDiagnosePlainLoop);
DBH_ANSWER_BENCH(config_dbh, kConfigDbh);

}  // namespace
}  // namespace dbh
