// Bisection cost: probes and wall time per bisect kind, through the real
// `dbh bisect` on the same planted failures as tests/integration/bisect_test.cc
// (tiny-cpu.yaml: ResNet-18 + FPN, 64², batch 2, CPU). Each iteration starts
// with an empty probe cache, so every probe is a fresh trial. Counters:
// probes (all), fresh (run, not cached), found (1 when the planted cause was
// named), s_per_probe. BM_BisectStepsReplay: what replaying from checkpoints
// saves over replaying from step 0.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/paths.h"
#include "tests/support/subprocess.h"

namespace dbh {
namespace {

namespace fs = std::filesystem;

std::string base() { return std::string(DBH_SOURCE_DIR) + "/scenarios/base/tiny-cpu.yaml"; }

fs::path write(const fs::path& p, const std::string& text) {
  std::ofstream(p) << text;
  return p;
}

// A dataset of 8 copies of a small real image with one truncated file.
void make_broken_dataset(const fs::path& data) {
  fs::create_directories(data / "images");
  const fs::path png = fs::path(DBH_SOURCE_DIR) / "fixtures/bad/icdar_bom_crlf_ok/images/img_1.png";
  std::string json = "{\"images\": {";
  for (int i = 0; i < 8; ++i) {
    const std::string name = "s" + std::to_string(i) + ".png";
    fs::copy_file(png, data / "images" / name, fs::copy_options::overwrite_existing);
    json += (i ? "," : "") + std::string("\"") + name + "\": {\"img_w\": 64, \"img_h\": 48, \"words\": {\"w" +
            std::to_string(i) + "\": {\"points\": [[10,15],[40,15],[40,30],[10,30]], \"transcription\": \"x\"}}}";
  }
  write(data / "annotations.json", json + "}}");
  fs::resize_file(data / "images" / "s5.png", 20);
}

enum Kind { kSteps, kModules, kData, kConfig, kRange };

// Arguments of `dbh bisect …` for a kind, and whether bisect.json names the
// planted cause.
struct Planted {
  std::vector<std::string> args;
  bool (*found)(const nlohmann::json&);
};

Planted planted(Kind kind, const fs::path& dir) {
  switch (kind) {
    case kSteps:
      return {{"steps", write(dir / "s.yaml", "include: " + base() +
                                                  "\ntrain: {max_steps: 12}\nfaults:\n  - {name: nan_activation, "
                                                  "module: decoder.smooth3, at_step: 7}\n")
                            .string()},
              [](const nlohmann::json& j) { return j["result"]["step"] == 7; }};
    case kModules:
      return {{"modules", write(dir / "s.yaml", "include: " + base() +
                                                    "\ntrain: {max_steps: 6}\nfaults:\n  - {name: nan_activation, "
                                                    "module: encoder.layer3, at_step: 4}\n")
                              .string()},
              [](const nlohmann::json& j) { return j["result"]["module"] == "encoder.layer3"; }};
    case kData:
      make_broken_dataset(dir / "data");
      return {{"data", write(dir / "s.yaml", "include: " + base() +
                                                 "\ndata: {source: real, path: data, size: 64, preflight: false}\n"
                                                 "train: {max_steps: 4}\n")
                           .string()},
              [](const nlohmann::json& j) {
                return j["result"]["samples"].size() == 1 && j["result"]["samples"][0]["file"] == "s5.png";
              }};
    case kConfig:
      return {{"config", "--good", write(dir / "good.yaml", "include: " + base() + "\ntrain: {max_steps: 3}\n").string(),
               "--bad",
               write(dir / "bad.yaml", "include: " + base() +
                                           "\ntrain: {max_steps: 3, lr: 0.005}\nmodel: {decoder: pan}\n"
                                           "faults:\n  - {name: nan_input, at_step: 1}\n")
                   .string()},
              [](const nlohmann::json& j) { return j["result"]["difference"].size() == 1; }};
    case kRange:
      return {{"range",
               write(dir / "s.yaml", "include: " + base() +
                                         "\ntrain: {max_steps: 16}\nfaults:\n  - {name: nan_label, at_step: 5}\n")
                   .string(),
               "train.stop_after", "--lo", "1", "--hi", "16"},
              [](const nlohmann::json& j) { return j["result"]["first_failing"] == "6"; }};
  }
  return {};
}

void BM_Bisect(benchmark::State& state, Kind kind) {
  const fs::path dir = fs::temp_directory_path() / ("dbh_bench_bisect_" + std::to_string(getpid()));
  double probes = 0, fresh = 0, found = 0, wall = 0;
  for (auto _ : state) {
    state.PauseTiming();
    fs::remove_all(dir);
    fs::create_directories(dir);
    const Planted p = planted(kind, dir);
    std::vector<std::string> argv = {testing::dbh_binary(), "bisect"};
    argv.insert(argv.end(), p.args.begin(), p.args.end());
    for (const char* a : {"--out", "OUT", "--cache", "CACHE", "-q"}) argv.emplace_back(a);
    argv[argv.size() - 4] = (dir / "out").string();
    argv[argv.size() - 2] = (dir / "cache").string();
    state.ResumeTiming();
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = testing::run_process(argv, dir.string(), 900);
    wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.PauseTiming();
    std::ifstream in(dir / "out" / "bisect.json");
    const auto j = nlohmann::json::parse(in, nullptr, false);
    if (r.exit_code != 0 || j.is_discarded()) {
      state.SkipWithError(("dbh bisect failed: " + r.err).c_str());
      break;
    }
    probes += static_cast<double>(j["probes"].size());
    fresh += j.value("fresh_probes", 0.0);
    found += p.found(j) ? 1 : 0;
    state.ResumeTiming();
  }
  fs::remove_all(dir);
  const auto n = static_cast<double>(std::max<int64_t>(1, state.iterations()));
  state.counters["probes"] = probes / n;
  state.counters["fresh"] = fresh / n;
  state.counters["found"] = found / n;
  state.counters["s_per_probe"] = probes > 0 ? wall / probes : 0.0;
}
#define DBH_BISECT_BENCH(name, kind) \
  BENCHMARK_CAPTURE(BM_Bisect, name, kind)->Unit(benchmark::kSecond)->UseRealTime()->Iterations(1)
DBH_BISECT_BENCH(steps, kSteps);
DBH_BISECT_BENCH(modules, kModules);
DBH_BISECT_BENCH(data, kData);
DBH_BISECT_BENCH(config, kConfig);
DBH_BISECT_BENCH(range, kRange);

// Note [Cheap probes]: `bisect steps` on a run of range(0) steps with a NaN
// planted at 85 % of it (step 17 of 20, 170 of 200), replaying from the first
// reproduction's checkpoints (from_start:0, the default) or from step 0
// (from_start:1, --replay-from-start). Counters: probes, fresh (run, not
// cached), s_per_probe, steps_per_probe (steps_run_total over fresh),
// steps_from_start (what those probes would have run from step 0), found.
void BM_BisectStepsReplay(benchmark::State& state) {
  const int64_t n = state.range(0);
  const bool from_start = state.range(1) != 0;
  const int64_t at = n * 17 / 20;
  const fs::path dir = fs::temp_directory_path() / ("dbh_bench_bisect_replay_" + std::to_string(getpid()));
  double probes = 0, run = 0, steps = 0, steps_from_start = 0, found = 0, wall = 0;
  for (auto _ : state) {
    state.PauseTiming();
    fs::remove_all(dir);
    fs::create_directories(dir);
    const fs::path s = write(dir / "s.yaml", "include: " + base() + "\ntrain: {max_steps: " + std::to_string(n) +
                                                 "}\nfaults:\n  - {name: nan_activation, module: decoder.smooth3, "
                                                 "at_step: " + std::to_string(at) + "}\n");
    std::vector<std::string> argv = {testing::dbh_binary(), "bisect", "steps", s.string(), "--out", (dir / "out").string(),
                                     "--cache", (dir / "cache").string(), "-q"};
    if (from_start) argv.emplace_back("--replay-from-start");
    state.ResumeTiming();
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = testing::run_process(argv, dir.string(), 1800);
    wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.PauseTiming();
    std::ifstream in(dir / "out" / "bisect.json");
    const auto j = nlohmann::json::parse(in, nullptr, false);
    if (r.exit_code != 0 || j.is_discarded()) {
      state.SkipWithError(("dbh bisect steps failed: " + r.err).c_str());
      break;
    }
    probes += static_cast<double>(j["probes"].size());
    run += j.value("fresh_probes", 0.0);
    steps += j.value("steps_run_total", 0.0);
    steps_from_start += j.value("steps_from_start", 0.0);
    found += j["result"]["step"] == at ? 1 : 0;
    state.ResumeTiming();
  }
  fs::remove_all(dir);
  const auto iters = static_cast<double>(std::max<int64_t>(1, state.iterations()));
  state.counters["probes"] = probes / iters;
  state.counters["fresh"] = run / iters;
  state.counters["s_per_probe"] = probes > 0 ? wall / probes : 0.0;
  state.counters["steps_per_probe"] = run > 0 ? steps / run : 0.0;
  state.counters["steps_from_start"] = steps_from_start / iters;
  state.counters["found"] = found / iters;
}
BENCHMARK(BM_BisectStepsReplay)
    ->ArgsProduct({{20, 200}, {0, 1}})
    ->ArgNames({"steps", "from_start"})
    ->Unit(benchmark::kSecond)
    ->UseRealTime()
    ->Iterations(1);

// Qualification cost: `dbh qualify` on ResNet-18 + FPN, 384², batch 8, two
// steps, under the CI host budget (2.31 GiB needed, 5% over; the integration
// test runs batch 15, which needs far more), with an empty probe cache. Counters: trials, found (1 when
// it recommends 4 × 2), wall_per_answer_trial (the whole command's wall time
// divided by the time of the one trial that ran the recommended setup).
// Label: how the largest batch was found.
void BM_Qualify(benchmark::State& state) {
  const fs::path dir = fs::temp_directory_path() / ("dbh_bench_qualify_" + std::to_string(getpid()));
  double trials = 0, found = 0, ratio = 0;
  std::string method;
  for (auto _ : state) {
    state.PauseTiming();
    fs::remove_all(dir);
    fs::create_directories(dir);
    const fs::path source = write(dir / "source.yaml", "include: " + base() +
                                                           "\ndata: {batch_size: 8, size: 384}\ntrain: {max_steps: 2, channels_last: true}\n");
    const std::vector<std::string> argv = {testing::dbh_binary(), "qualify", source.string(), "--profile", "ci-host-2200m",
                                           "--steps", "2", "--out", (dir / "out").string(), "--cache",
                                           (dir / "cache").string()};
    state.ResumeTiming();
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = testing::run_process(argv, dir.string(), 900);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.PauseTiming();
    std::ifstream in(dir / "out" / "qualification.json");
    const auto j = nlohmann::json::parse(in, nullptr, false);
    if (r.exit_code != 0 || j.is_discarded()) {
      state.SkipWithError(("dbh qualify failed: " + r.err).c_str());
      break;
    }
    trials += j.value("trial_count", 0.0);
    const auto& rec = j["recommendation"];
    found += rec.is_object() && rec.value("batch", 0) == 4 && rec.value("accumulation", 0) == 2 ? 1 : 0;
    // The trial that ran the recommended setup under the budget.
    const std::string answer = rec.is_object() ? std::to_string(rec.value("batch", 0)) + "x" +
                                                     std::to_string(rec.value("accumulation", 0))
                                               : "";
    double answer_s = 0;
    for (const auto& t : j["trials"]) {
      const std::string what = t.value("what", "");
      if (!answer.empty() && what.find(answer) != std::string::npos && what.find("no budget") == std::string::npos) {
        answer_s = t.value("seconds", 0.0);
      }
    }
    ratio += answer_s > 0 ? wall / answer_s : 0;
    for (const auto& p : j["precisions"]) method = p.value("method", "");
    state.ResumeTiming();
  }
  fs::remove_all(dir);
  const auto iters = static_cast<double>(std::max<int64_t>(1, state.iterations()));
  state.counters["trials"] = trials / iters;
  state.counters["found"] = found / iters;
  state.counters["wall_per_answer_trial"] = ratio / iters;
  state.SetLabel(method);
}
BENCHMARK(BM_Qualify)->Unit(benchmark::kSecond)->UseRealTime()->Iterations(1);

}  // namespace
}  // namespace dbh
