#include "harness/worker/tune.h"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <memory>
#include <optional>
#include <vector>

#include <torch/torch.h>

#include "harness/common/cpu.h"
#include "harness/common/text.h"
#include "harness/proto/event_types.h"
#include "harness/scenario/scenario.h"
#include "harness/common/value.h"
#include "harness/proto/event_writer.h"
#include "harness/worker/training.h"
#include "model/data/batch.h"
#include "model/dbnet.h"
#include "model/train/trainer.h"

namespace dbh::harness::worker {

namespace {

// Rounds of timed steps after the warm-up when a step is short.
constexpr int kMaxRounds = 3;

// The thread counts worth timing when `train.threads` is auto: every
// available core (PyTorch's own default), and half of them, which wins where
// hyper-threads or a noisy neighbour share the cores. A GPU step hardly
// depends on the host's intra-op threads: every core, not timed.
std::vector<int64_t> thread_candidates(const scenario::Scenario& s, bool cuda) {
  const int64_t n = available_cores();
  if (s.train.threads != scenario::TrainConfig::kAutoThreads) return {s.train.threads > 0 ? s.train.threads : n};
  if (cuda || n < 2) return {n};
  return {n, n / 2};
}

// The probe of Note [A measurement's budget]: a batch-1 step at a quarter
// of the side (a multiple of 32, at least 64: batch norm needs more than one
// value per channel at the encoder's 1/32 scale), when the full step holds at
// least kMinProbeRatio times its pixels; else 0, and the full step itself is
// the first measured.
constexpr int64_t kMinProbeRatio = 8;
// A small step carries a fixed cost per operation that scaling by pixels
// multiplies too: at 128², batch 2, ResNet-18 + FPN, a 64² probe overstated
// the step about fivefold. The probe alone decides only when the least
// measurement it implies exceeds the budget this many times over; below
// that, the first full step decides.
constexpr double kProbeMargin = 4.0;
int64_t probe_size(int64_t size, int64_t batch) {
  const int64_t probe = std::max<int64_t>(64, size / 4 / 32 * 32);
  return size * size * batch >= kMinProbeRatio * probe * probe ? probe : 0;
}

// CPU seconds every process spent busy since boot on the CPUs this process
// may run on (its affinity mask; the cpuN lines of /proc/stat: user, nice,
// system, irq, softirq, steal), and how many such CPUs there are; -1 when
// unknown. A container sees the host's /proc/stat: only its own CPUs count.
std::pair<double, int64_t> busy_seconds_on_my_cpus() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  const bool have_mask = ::sched_getaffinity(0, sizeof mask, &mask) == 0;
  std::ifstream in("/proc/stat");
  const long ticks = ::sysconf(_SC_CLK_TCK);
  if (!in || ticks <= 0) return {-1, 0};
  double busy = 0;
  int64_t cpus = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("cpu", 0) != 0 || line.size() < 4 || !std::isdigit(static_cast<unsigned char>(line[3]))) continue;
    std::istringstream f(line.substr(3));
    int cpu = -1;
    double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
    if (!(f >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq)) continue;
    if (!(f >> steal)) steal = 0;
    if (have_mask && (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &mask))) continue;
    busy += (user + nice + system + irq + softirq + steal) / static_cast<double>(ticks);
    ++cpus;
  }
  return cpus > 0 ? std::make_pair(busy, cpus) : std::make_pair(-1.0, int64_t{0});
}

// CPU seconds this process (all its threads) has used.
double own_cpu_seconds() {
  struct rusage u {};
  if (::getrusage(RUSAGE_SELF, &u) != 0) return -1;
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// Note [A measurement to trust]: what other processes did to the cores
// since a reading, from the machine's busy time less this process's own.
// Others' load competes only beyond the CPUs the candidates left free (a
// 2-thread candidate on 16 CPUs leaves 14): what is left over is what the
// timings felt.
struct LoadReading {
  double busy, own;
  int64_t cpus;
  std::chrono::steady_clock::time_point wall;
};

LoadReading read_load() {
  const auto [busy, cpus] = busy_seconds_on_my_cpus();
  return LoadReading{busy, own_cpu_seconds(), cpus, std::chrono::steady_clock::now()};
}

std::optional<double> others_since(const LoadReading& start, const proto::Tuning& t) {
  const LoadReading now = read_load();
  const double wall = std::chrono::duration<double>(now.wall - start.wall).count();
  if (start.busy < 0 || now.busy < 0 || start.own < 0 || now.own < 0 || wall <= 0) return std::nullopt;
  int64_t most_threads = 1;
  for (const auto& c : t.candidates) most_threads = std::max(most_threads, c.threads);
  const double spare = static_cast<double>(std::max<int64_t>(0, start.cpus - most_threads));
  const double others = std::max(0.0, ((now.busy - start.busy) - (now.own - start.own)) / wall);
  return std::max(0.0, others - spare);
}

// The candidates of a measurement: one trainer per layout, both built from
// the same initial weights (Note [One training builder]), and a slot per
// layout and thread count, in the order of `result.candidates`. A timed step
// is one micro-batch of a fixed synthetic batch.
class Candidates {
 public:
  Candidates(const scenario::Scenario& s, bool cuda, proto::Tuning& result)
      : s_(s), cuda_(cuda) {
    std::vector<bool> layouts = {false, true};
    if (s.train.channels_last) layouts = {*s.train.channels_last};
    const auto threads = thread_candidates(s, cuda);
    for (const bool cl : layouts) {
      model::DbNet net = make_net(s);
      trainers_.push_back(std::make_unique<model::Trainer>(
          net, train_options(s).max_steps(1 << 20).accumulation(1).channels_last(cl)));
    }
    batch_ = model::synthetic_boxes_batch(s.data.batch_size, s.data.size, s.data.size, s.train.seed);
    for (size_t i = 0; i < layouts.size(); ++i) {
      for (const int64_t t : threads) {
        slots_.push_back({i, t});
        proto::Tuning::Candidate c;
        c.channels_last = layouts[i];
        c.threads = t;
        result.candidates.push_back(c);
      }
    }
  }

  int64_t size() const { return static_cast<int64_t>(slots_.size()); }

  // Seconds of one step of candidate `i`.
  double time_step(size_t i) {
    const model::BatchSource source = [&](int64_t) { return batch_; };
    return timed(slots_[i], source);
  }

  // Note [A measurement's budget]: the full step's seconds estimated from
  // two batch-1 steps of the first candidate at side `probe` (the first
  // warms up), the second scaled by pixels; 0 for a setup the probe does not
  // suit (the full step decides).
  double estimate_from_probe(int64_t probe) {
    const model::Batch small = model::synthetic_boxes_batch(1, probe, probe, s_.train.seed);
    const model::BatchSource source = [&](int64_t) { return small; };
    double seconds = 0;
    try {
      for (int i = 0; i < 2; ++i) seconds = timed(slots_.front(), source);
    } catch (const std::exception&) {
      return 0;
    }
    return seconds * static_cast<double>(s_.data.size * s_.data.size * s_.data.batch_size) /
           static_cast<double>(probe * probe);
  }

 private:
  struct Slot {
    size_t trainer;
    int64_t threads;
  };

  double timed(const Slot& slot, const model::BatchSource& source) {
    torch::set_num_threads(static_cast<int>(slot.threads));
    const auto t0 = std::chrono::steady_clock::now();
    (void)trainers_[slot.trainer]->step(source);
    if (cuda_) torch::cuda::synchronize();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  const scenario::Scenario& s_;
  const bool cuda_;
  model::Batch batch_;
  std::vector<std::unique_ptr<model::Trainer>> trainers_;
  std::vector<Slot> slots_;
};

}  // namespace

int tune_main(const std::string& scenario_json, int events_fd, double budget_seconds) {
  proto::EventWriter events(events_fd);
  proto::Tuning result;
  const auto finish = [&](const char* status) {
    events.emit(result);
    events.emit(proto::Done{status, {}});
  };
  try {
    const scenario::Scenario s = scenario::decode_scenario(parse_yaml(scenario_json, "scenario.resolved.json"), "");
    const bool cuda = s.hardware.device.rfind("cuda", 0) == 0;
    result.device = s.hardware.device;
    result.size = s.data.size;
    result.batch = s.data.batch_size;
    result.precision = model::to_string(s.train.precision);
    Candidates candidates(s, cuda, result);
    // Each timed step is reported with the total so far expected (Note [No
    // silent minute]): the most rounds until the warm-up tells how many.
    const int64_t n = candidates.size();
    const LoadReading before_warm_up = read_load();
    // Note [A measurement's budget]: a step too long for the budget is seen
    // at a fraction of its cost; a step cheaper at full size than that
    // estimate is still caught after the first one.
    if (const int64_t probe = probe_size(s.data.size, s.data.batch_size); probe > 0 && budget_seconds > 0) {
      const double estimate = candidates.estimate_from_probe(probe);
      if (2.0 * static_cast<double>(n) * estimate > kProbeMargin * budget_seconds) {
        result.over_budget_step_seconds = estimate;
        result.over_budget_probe_size = probe;
        result.others_cores = others_since(before_warm_up, result);
        finish("passed");
        return 0;
      }
    }
    // Warm-up: allocator, oneDNN primitives, cuDNN plans, optimizer state.
    int64_t done = 0;
    double warm = 0;
    for (int64_t i = 0; i < n; ++i) {
      warm = std::max(warm, candidates.time_step(static_cast<size_t>(i)));
      ++done;
      // Note [A measurement's budget]: the least measurement warms up and
      // times every candidate once; when the first step says that costs more
      // than the budget, stop here, with the load that step felt (and no
      // progress line announcing the rest of a measurement that stops).
      if (done == 1 && budget_seconds > 0 && 2.0 * static_cast<double>(n) * warm > budget_seconds) {
        result.over_budget_step_seconds = warm;
        result.others_cores = others_since(before_warm_up, result);
        finish("passed");
        return 0;
      }
      events.emit(proto::TuningProgress{done, n * (1 + kMaxRounds)});
    }
    // Interleaved rounds, so that a slower moment of the machine hits every
    // candidate alike; fewer rounds when a step is long.
    const int rounds = warm > 20 ? 1 : warm > 2 ? 2 : kMaxRounds;
    const LoadReading before_rounds = read_load();
    for (int round = 0; round < rounds; ++round) {
      for (int64_t i = 0; i < n; ++i) {
        result.candidates[static_cast<size_t>(i)].seconds.push_back(candidates.time_step(static_cast<size_t>(i)));
        events.emit(proto::TuningProgress{++done, n * (1 + rounds)});
      }
    }
    result.others_cores = others_since(before_rounds, result);
    finish("passed");
    return 0;
  } catch (const std::exception& e) {
    result.error = one_line(message_of(e));
    finish("error");
    return 1;
  }
}

}  // namespace dbh::harness::worker
