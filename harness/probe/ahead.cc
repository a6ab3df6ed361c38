// Probes run ahead, each in a process of its own (Note [Probes ahead, in
// parallel] in probe.h).
#include <errno.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>
#include <thread>

#include "harness/common/cpu.h"
#include "harness/common/progress.h"
#include "harness/common/text.h"
#include "harness/probe/cluster.h"
#include "harness/probe/probe.h"
#include "harness/supervisor/trial.h"
#include "harness/supervisor/warm_worker.h"

namespace dbh::harness::probe {

namespace fs = std::filesystem;

namespace {

std::string ahead_progress(int64_t index, const std::string& what, double seconds) {
  std::ostringstream line;
  line << "  probe " << std::setw(2) << index << "  " << one_line(what) << "  running ahead: "
       << static_cast<int64_t>(seconds) << " s";
  return line.str();
}

}  // namespace

bool ahead_pays(const AheadCosts& c, std::string* why) {
  if (!c.warm) return true;
  if (!c.warm_probe_seconds || !c.start_seconds) {
    *why = "the search's probes are forked from a warm worker and a probe ahead would start cold: probes run ahead "
           "once a warm probe is measured against the worker's start";
    return false;
  }
  if (*c.warm_probe_seconds > *c.start_seconds) return true;
  std::ostringstream text;
  text << std::fixed << std::setprecision(1) << "a warm probe takes " << *c.warm_probe_seconds
       << " s and a probe ahead would start cold, paying the worker's start (" << *c.start_seconds
       << " s) again: the search runs its probes warm, one at a time (--cold runs them all cold, in parallel)";
  *why = text.str();
  return false;
}

AheadCosts ahead_costs(const std::vector<ProbeResult>& history, bool forks, std::optional<double> start_seconds,
                       int64_t forked_by_scope) {
  AheadCosts c;
  c.warm = forks;
  if (!c.warm) return c;
  const auto own_run = [](const ProbeResult& p) { return !p.cached && !p.parallel; };
  const int64_t forked = std::count_if(history.begin(), history.end(),
                                       [&](const ProbeResult& p) { return own_run(p) && p.analysis.forked; });
  if (forked == 0 && std::any_of(history.begin(), history.end(), own_run)) {
    c.warm = false;  // the warm worker could not serve (the probes say why): they start cold, as one ahead does
    return c;
  }
  c.start_seconds = start_seconds;
  bool first = forked_by_scope <= forked;  // the search's first forked probe started the warm worker
  for (const auto& p : history) {
    if (!own_run(p) || !p.analysis.forked) continue;
    const double t = p.seconds - (first && start_seconds ? *start_seconds : 0.0);
    first = false;
    c.warm_probe_seconds = c.warm_probe_seconds ? std::min(*c.warm_probe_seconds, t) : t;
  }
  return c;
}

AheadCosts Prober::ahead_costs(const scenario::Scenario& s) const {
  const supervisor::WarmWorkers* warm = supervisor::WarmWorkers::active();
  const bool forks =
      warm != nullptr && Cluster::active() == nullptr && s.worker.external() && warm->serves(s.worker.command);
  if (!forks) return {};
  return probe::ahead_costs(history_, forks, warm->start_seconds(), warm->forked());
}

int64_t default_jobs(const scenario::Scenario& s) {
  if (s.hardware.device.rfind("cuda", 0) == 0) return 1;
  return std::clamp<int64_t>(available_cores() / 2, 1, 4);
}

void Prober::set_jobs(int64_t jobs) {
  if (jobs <= 0 && Cluster::active() != nullptr) {
    jobs = 4;  // Note [Probes on a cluster]: each probe ahead is a job step of its own, not this machine's load
  } else if (jobs <= 0) {
    try {
      jobs = default_jobs(load({}));
    } catch (const std::exception&) {
      jobs = 1;  // the search's first probe says what is wrong with the scenario
    }
  }
  jobs_ = std::max<int64_t>(1, jobs);
}

// A fresh probe ahead answers only a fresh request, a cached one a cached.
std::string Prober::ahead_key(const std::string& key, bool fresh) { return fresh ? "fresh/" + key : key; }

void Prober::run_ahead(const std::vector<std::pair<std::vector<std::string>, std::string>>& upcoming, Own own,
                       Fresh fresh) {
  if (jobs_ <= 1 || cache_dir_.empty() || ahead_slot_ > 0) return;
  reap_ahead();
  // The keys of `upcoming`, in order ("" for one that is no scenario).
  std::vector<std::string> keys;
  for (const auto& [extra, what] : upcoming) {
    stop_if_requested(nullptr);
    try {
      const scenario::Scenario s = load(extra);
      const InputManifest inputs = input_manifest(s);
      if (!inputs.not_cacheable.empty()) return;  // nothing a process ahead could hand back
      std::string why;
      const AheadCosts costs = ahead_costs(s);
      if (!ahead_pays(costs, &why)) {  // Note [Probes ahead of warm ones]
        const bool measured = costs.warm_probe_seconds && costs.start_seconds;
        if (!quiet_ && !(measured ? said_ahead_measured_ : said_ahead_unmeasured_)) {
          std::cout << "  ahead     none started (--jobs " << jobs_ << "): " << why << "\n";
        }
        (measured ? said_ahead_measured_ : said_ahead_unmeasured_) = true;
        return;
      }
      keys.push_back(ahead_key(key_of(inputs), fresh == Fresh::kYes));
    } catch (const std::exception&) {
      keys.emplace_back();  // no configuration: the search says so when it asks for it
    }
  }
  // What runs ahead and is not upcoming any more, the search has passed by:
  // it stops (not waited for here), and its place goes to what is upcoming.
  for (auto it = ahead_.begin(); it != ahead_.end();) {
    if (std::find(keys.begin(), keys.end(), it->first) != keys.end()) {
      ++it;
      continue;
    }
    kill(it->second.pid, SIGTERM);
    stopping_.push_back(it->second.pid);
    it = ahead_.erase(it);
  }
  bool own_left = own == Own::kFirstInList;
  for (size_t i = 0; i < upcoming.size(); ++i) {
    if (static_cast<int64_t>(ahead_.size()) >= jobs_ - 1) return;
    const auto& [extra, what] = upcoming[i];
    const std::string& key = keys[i];
    if (key.empty()) continue;
    if (fresh == Fresh::kNo && (cache_.count(key) > 0 || fs::exists(fs::path(cache_dir_) / (key + ".json")))) continue;
    if (own_left) {  // the first the caches do not answer: the search asks for it next (it may run ahead already)
      own_left = false;
      continue;
    }
    if (ahead_.count(key) > 0) continue;
    const int64_t slot = ++ahead_started_;
    const std::string dir = (fs::path(session_dir()) / ("ahead-" + std::to_string(slot))).string();
    std::cout.flush();
    std::cerr.flush();
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) return;  // no process to spare: the search runs it itself
    if (pid == 0) {
      // The process ahead: quiet, its own folder and trial number, gone
      // with the Prober's process.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      int code = 1;
      try {
        quiet_ = true;
        ahead_slot_ = slot;
        ahead_.clear();
        run(extra, what, /*use_cache=*/fresh == Fresh::kNo, /*keep_checkpoints=*/false);
        code = 0;
      } catch (...) {
        code = 1;  // nothing stored: the search runs it itself
      }
      std::cout.flush();
      std::cerr.flush();
      _exit(code);
    }
    ahead_[key] = {pid, dir};
    if (!quiet_) std::cout << "  ahead     " << one_line(what) << "  started in parallel (--jobs " << jobs_ << ")\n";
  }
}

// Reaps the processes ahead that ended (their results are in the disk
// cache, or nothing is), so that their places go to the next round's.
void Prober::reap_ahead() {
  for (auto it = ahead_.begin(); it != ahead_.end();) {
    int status = 0;
    const pid_t r = waitpid(it->second.pid, &status, WNOHANG);
    if (r == it->second.pid && WIFEXITED(status) && WEXITSTATUS(status) == 0) ran_ahead_[it->first] = it->second.dir;
    it = r == it->second.pid || (r < 0 && errno == ECHILD) ? ahead_.erase(it) : std::next(it);
  }
  stopping_.erase(std::remove_if(stopping_.begin(), stopping_.end(),
                                 [](int pid) {
                                   const pid_t r = waitpid(pid, nullptr, WNOHANG);
                                   return r == pid || (r < 0 && errno == ECHILD);
                                 }),
                  stopping_.end());
}

// Waits for the process ahead that runs `key`; true when it stored its
// result. A stop request ends the wait (the Prober's end stops the process).
bool Prober::wait_ahead(const std::string& key, const std::string& what, std::string* dir) {
  if (const auto done = ran_ahead_.find(key); done != ran_ahead_.end()) {  // ended before the search asked
    *dir = done->second;
    ran_ahead_.erase(done);
    return true;
  }
  const auto it = ahead_.find(key);
  if (it == ahead_.end()) return false;
  const Ahead a = it->second;
  *dir = a.dir;
  std::optional<ProgressLine> line;
  if (!quiet_) line.emplace(std::cout, isatty(STDOUT_FILENO) != 0, 0.0);
  int status = 0;
  while (true) {
    const pid_t r = waitpid(a.pid, &status, WNOHANG);
    if (r == a.pid) break;
    if (r < 0 && errno != EINTR) {
      status = -1;
      break;
    }
    stop_if_requested(nullptr);
    if (line) line->show(ahead_progress(static_cast<int64_t>(history_.size()) + 1, what, line->seconds()));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (line) line->finish();
  ahead_.erase(key);
  return status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// Stops every process still running ahead: TERM (a stop request: it ends
// its trial's process group), then KILL after the grace, and reaps each.
void Prober::end_ahead() {
  if (ahead_slot_ > 0) return;
  for (const auto& [key, a] : ahead_) {
    kill(a.pid, SIGTERM);
    stopping_.push_back(a.pid);
  }
  ahead_.clear();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  for (const int pid : stopping_) {
    while (waitpid(pid, nullptr, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > until) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  stopping_.clear();
}

}  // namespace dbh::harness::probe
