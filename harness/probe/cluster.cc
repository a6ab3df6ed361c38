// Probes on a cluster (Note [Probes on a cluster] in cluster.h).
#include "harness/probe/cluster.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <regex>

#include <nlohmann/json.hpp>

#include "harness/common/error.h"
#include "harness/common/files.h"
#include "harness/common/json_fields.h"
#include "harness/common/text.h"
#include "harness/probe/probe.h"
#include "harness/proto/worker_link.h"
#include "harness/supervisor/outcome.h"

namespace dbh::harness::probe {

namespace fs = std::filesystem;

namespace {

ClusterOptions* g_active = nullptr;

// A node's result may hold an external worker's reads (at most
// supervisor::kMaxSamplesRead indices): more than a cache entry.
constexpr size_t kMaxNodeResultBytes = size_t{16} << 20;


// The seconds a job may wait in the queue on top of its trial's deadline
// before its submission counts as lost.
constexpr double kQueueSeconds = 3600;

// What a job that gave no result left to say: srun's status and its last line.
std::string lost_because(const supervisor::TrialResult& r) {
  std::string why = r.spawn_error.empty() ? "" : "srun could not start: " + r.spawn_error;
  if (why.empty()) {
    why = r.term_signal != 0 ? "srun ended by " + supervisor::signal_name(r.term_signal)
                             : "srun exited with " + std::to_string(r.exit_code);
  }
  if (r.timed_out) why += " after waiting its deadline";
  // slurmstepd's banner ("*** STEP 15.0 ON vm CANCELLED AT …") says more than srun's last line.
  const size_t banner = r.stderr_tail.rfind("*** ");
  const std::string said = last_line(banner == std::string::npos ? r.stderr_tail
                                                                  : r.stderr_tail.substr(banner, r.stderr_tail.find('\n', banner) - banner));
  if (!said.empty()) why += ": " + said;
  return why;
}

// Whether srun's words say Slurm refused the submission itself (no such
// partition or GPU type, no configuration, a bad option) rather than lost a
// job it ran: submitting it again would only be refused again.
bool refused_by_slurm(const std::string& srun_stderr) {
  for (const char* said : {"srun: fatal:", "Unable to allocate resources", "srun: unrecognized option",
                           "srun: invalid option", "Invalid partition", "Invalid generic resource"}) {
    if (srun_stderr.find(said) != std::string::npos) return true;
  }
  return false;
}

// Why the node says the infrastructure ended the probe ("" when it does not).
std::string node_infrastructure(const std::string& path, const std::string& key) {
  const auto text = read_regular_file(path, kMaxNodeResultBytes);
  if (!text) return "";
  const auto j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || field_or(j, "key", "") != key) return "";
  return field_or(j, "infrastructure", "");
}

std::string node_name() {
  char host[256] = {};
  return ::gethostname(host, sizeof host - 1) == 0 ? std::string(host) : std::string("the node");
}

// Ends whatever the cluster still runs of the job `job` (best effort).
void cancel(const std::string& job, const std::string& dir) {
  supervisor::TrialSpec spec;
  spec.argv = {"scancel", "--name=" + job};
  spec.run_dir = dir;
  spec.deadline_s = spec.silence_s = 30;
  spec.stacks_timeout_s = 0;
  supervisor::run_trial(spec);
}

// What the searches read of a probe they ran, beyond the cache's record: the
// monitors' primary finding (bisect modules), an external worker's reads
// (bisect data), each step's time and the memory budget's record (qualify).
nlohmann::json fresh_findings(const supervisor::TrialAnalysis& a) {
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& s : a.steps) {
    if (steps.size() >= supervisor::kMaxDetailedSteps) break;
    steps.push_back({s.run, s.step, s.seconds});
  }
  return {{"primary_health", a.primary_health},
          {"step_seconds", steps},
          {"budget", a.budget},
          {"dataset_size", a.dataset_size ? nlohmann::json(*a.dataset_size) : nlohmann::json(nullptr)},
          {"samples_read", a.samples_read},
          {"failed_sample", a.failed_sample ? nlohmann::json(*a.failed_sample) : nlohmann::json(nullptr)},
          {"failed_sample_error", a.failed_sample_error}};
}

// The same read back, held to the bounds the supervisor keeps for a trial
// of its own (Note [A claimed size is a claim]); what does not fit is left out.
void read_fresh_findings(const nlohmann::json& record, supervisor::TrialAnalysis* a) {
  const auto j = record.find("findings");
  if (j == record.end() || !j->is_object()) return;
  if (const auto h = j->find("primary_health"); h != j->end() && h->is_object()) a->primary_health = *h;
  if (const auto b = j->find("budget"); b != j->end() && b->is_object()) a->budget = *b;
  if (const auto st = j->find("step_seconds"); st != j->end() && st->is_array()) {
    for (const auto& e : *st) {
      if (a->steps.size() >= supervisor::kMaxDetailedSteps) break;
      if (!e.is_array() || e.size() != 3 || !e[0].is_number_integer() || !e[1].is_number_integer() ||
          !e[2].is_number() || !(e[2].get<double>() >= 0)) {
        continue;
      }
      supervisor::StepRecord r;
      r.run = e[0].get<int64_t>();
      r.step = e[1].get<int64_t>();
      r.seconds = e[2].get<double>();
      a->steps.push_back(std::move(r));
    }
  }
  const auto in_range = [](const nlohmann::json& v) {
    return v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < supervisor::kMaxDatasetSamples;
  };
  if (const auto n = j->find("dataset_size"); n != j->end() && in_range(*n)) a->dataset_size = n->get<int64_t>();
  if (const auto f = j->find("failed_sample"); f != j->end() && in_range(*f)) a->failed_sample = f->get<int64_t>();
  a->failed_sample_error = truncate_utf8(field_or(*j, "failed_sample_error", ""), 4096);
  if (const auto r = j->find("samples_read"); r != j->end() && r->is_array() && r->size() <= supervisor::kMaxSamplesRead) {
    for (const auto& i : *r) {
      if (in_range(i)) a->samples_read.push_back(i.get<int64_t>());
    }
  }
}

void write_node_result(const std::string& path, const nlohmann::json& j) {
  write_file_atomically(path, record_text(j));
}

}  // namespace

void check_cluster_options(const ClusterOptions& o) {
  const bool local = o.executor == Executor::kLocal;
  if (local && (!o.partition.empty() || !o.gpu_type.empty() || !o.time_limit.empty() || !o.srun_args.empty())) {
    throw UsageError("--partition, --gpu-type, --time-limit and --srun-arg: expected --executor slurm, got none");
  }
  if (!o.time_limit.empty() && !scenario::is_slurm_time(o.time_limit)) {
    throw UsageError("--time-limit: expected a Slurm time (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS), got '" +
                     o.time_limit + "'");
  }
  for (const std::string* v : {&o.partition, &o.gpu_type}) {
    if (!scenario::is_slurm_name(*v)) {
      throw UsageError(std::string(v == &o.partition ? "--partition" : "--gpu-type") +
                       ": expected a name without spaces, commas, colons or '=', got '" + *v + "'");
    }
  }
  for (const auto& a : o.srun_args) {
    if (a.rfind("-", 0) != 0 || a == "--") {
      throw UsageError("--srun-arg: expected an srun option such as --account=ml, got '" + a + "'");
    }
  }
  if (o.attempts < 1) throw UsageError("--attempts: expected at least 1, got " + std::to_string(o.attempts));
  const char* path = std::getenv("PATH");
  if (!local && find_program("srun", path == nullptr ? std::nullopt : std::optional<std::string>(path), "").empty()) {
    throw UsageError("--executor slurm: expected srun (Slurm's client) on the PATH, got none");
  }
}

std::string cluster_key_text(const ClusterOptions& o) {
  if (o.executor == Executor::kLocal) return "";
  std::string text = std::string("executor ") + kExecutorNames[static_cast<int>(o.executor)] + " partition " +
                     o.partition + " gpu " + o.gpu_type;
  for (const auto& a : o.srun_args) text += " " + a;
  return text;
}

std::string executor_description() {
  const ClusterOptions* o = Cluster::active();
  if (o == nullptr) return "local";
  std::string text = kExecutorNames[static_cast<int>(o->executor)];
  if (!o->partition.empty()) text += ", partition " + o->partition;
  if (!o->gpu_type.empty()) text += ", gpu " + o->gpu_type;
  if (!o->time_limit.empty()) text += ", time limit " + o->time_limit;
  return text;
}

std::string node_result_path(const std::string& dir) { return dir + ".result.json"; }

std::vector<std::string> node_probe_argv(const std::string& dbh, const NodeProbe& r) {
  std::vector<std::string> argv = {dbh,        "__probe", "--scenario=" + r.scenario, "--dir=" + r.dir,
                                   "--trial=" + std::to_string(r.trial), "--key=" + r.key, "--hash=" + r.hash};
  for (const auto& o : r.overrides) argv.push_back("--override=" + o);
  return argv;
}

std::vector<std::string> srun_argv(const ClusterOptions& o, const std::string& job, const std::string& cwd,
                                   const std::vector<std::string>& command) {
  std::vector<std::string> argv = {"srun", "--job-name=" + job, "--nodes=1", "--ntasks=1", "--chdir=" + cwd,
                                   "--kill-on-bad-exit=1"};
  if (!o.partition.empty()) argv.push_back("--partition=" + o.partition);
  if (!o.gpu_type.empty()) argv.push_back("--gres=gpu:" + o.gpu_type + ":1");
  if (!o.time_limit.empty()) argv.push_back("--time=" + o.time_limit);
  argv.insert(argv.end(), o.srun_args.begin(), o.srun_args.end());
  argv.emplace_back("--");
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

int run_node_probe(const NodeProbe& r, const scenario::InputChecks& checks) {
  supervisor::install_stop_handlers();
  const std::string result = node_result_path(r.dir);
  ProbeResult p;
  p.key = r.key;
  scenario::Scenario s;
  try {
    s = scenario::load_scenario(r.scenario, r.overrides, checks);
    p.hash = scenario::scenario_hash(s);
    if (p.hash != r.hash) {
      throw ReportError("expected the scenario the submitting machine resolved (hash " + r.hash + "), got hash " +
                        p.hash + " on " + node_name() + ": the node reads other files at the same paths");
    }
  } catch (const std::exception& e) {
    make_directories_no_follow(r.dir);
    write_node_result(result, {{"key", r.key}, {"infrastructure", e.what()}});
    return 2;
  }
  // The trial's progress and liveness, carried back by srun.
  auto relay = [](const proto::Event& e) {
    if (e.type != proto::event::kStepEnd && e.type != proto::event::kHeartbeat) return;
    const std::string line = proto::encode_event(e.type, e.body, e.t);
    write_all(STDOUT_FILENO, line.data(), line.size());  // srun gone: the stop comes as a signal
  };
  const auto t0 = std::chrono::steady_clock::now();
  ProbeTrial t = run_probe_trial(s, r.dir, r.trial, relay);
  if (const int sig = supervisor::stop_requested(); sig != 0) return 128 + sig;  // no result: submitted again
  if (!t.infrastructure.empty()) {
    write_node_result(result, {{"key", r.key}, {"infrastructure", t.infrastructure}});
    return 2;
  }
  p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  p.analysis = std::move(t.analysis);
  nlohmann::json record = probe_record(p);
  record["findings"] = fresh_findings(p.analysis);
  write_node_result(result, record);
  return 0;
}

Cluster::Cluster(ClusterOptions o) : options_(std::move(o)), previous_(g_active) {
  if (options_.executor != Executor::kLocal) g_active = &options_;
}

Cluster::~Cluster() { g_active = previous_; }

const ClusterOptions* Cluster::active() { return g_active; }

void Cluster::take_scenario_defaults(const scenario::ClusterConfig& c) {
  if (g_active != nullptr) *g_active = with_scenario_defaults(*g_active, c);
}

ClusterOptions with_scenario_defaults(ClusterOptions o, const scenario::ClusterConfig& c) {
  if (o.executor == Executor::kLocal) return o;
  for (const auto& [flag, key] : {std::pair{&o.partition, &c.partition}, {&o.gpu_type, &c.gpu_type},
                                  {&o.time_limit, &c.time_limit}}) {
    if (flag->empty()) *flag = *key;
  }
  return o;
}

ClusterAttempts run_on_cluster(const ClusterOptions& o, const NodeProbe& r, double deadline_s,
                               const std::function<void(const std::string&)>& say,
                               const std::function<void(const proto::Event&)>& on_event) {
  ClusterAttempts out;
  const std::string job = "dbh-probe-" + std::to_string(::getpid()) + "-" + std::to_string(r.trial);
  std::error_code ec;
  const std::string dbh = fs::read_symlink("/proc/self/exe", ec).string();
  const std::string cwd = fs::current_path(ec).string();
  for (int64_t k = 1; k <= o.attempts; ++k) {
    out.attempts = k;
    fs::remove_all(r.dir, ec);  // what a lost attempt left
    fs::remove(node_result_path(r.dir), ec);
    supervisor::TrialSpec spec;
    // srun's stdout, the node's relayed events, is the trial's event pipe.
    spec.argv = {"/bin/sh", "-c", "exec \"$@\" >&" + std::to_string(proto::kEventsFd), "sh"};
    for (auto& a : srun_argv(o, job, cwd, node_probe_argv(dbh, r))) spec.argv.push_back(std::move(a));
    spec.run_dir = r.dir + ".slurm-" + std::to_string(k);
    spec.deadline_s = deadline_s + kQueueSeconds;
    spec.silence_s = spec.deadline_s;  // the node watches its trial's silence; the queue is silent
    spec.grace_s = 15;
    spec.stacks_timeout_s = 0;
    spec.on_event = on_event;
    out.last = supervisor::run_trial(spec);
    ProbeResult stored;
    nlohmann::json record;
    if (read_probe_record(node_result_path(r.dir), r.key, &stored, kMaxNodeResultBytes, &record)) {
      out.stored = true;
      out.analysis = std::move(stored.analysis);
      read_fresh_findings(record, &out.analysis);
      return out;
    }
    out.infrastructure = node_infrastructure(node_result_path(r.dir), r.key);
    cancel(job, spec.run_dir + "/scancel");
    if (!out.infrastructure.empty() || out.last.interrupted || supervisor::stop_requested() != 0) return out;
    out.lost = lost_because(out.last);
    if (out.last.timed_out) return out;  // it waited its deadline: another would wait as long
    if (refused_by_slurm(out.last.stderr_tail)) return out;  // the same submission is refused again
    if (k < o.attempts) {
      say("the Slurm job " + job + " ended without a result (" + out.lost + "): submitted again (attempt " +
          std::to_string(k + 1) + " of " + std::to_string(o.attempts) + ")");
    }
  }
  return out;
}

ProbeTrial Prober::run_remotely(const ClusterOptions& cluster, const scenario::Scenario& s, const ProbeResult& p,
                                int64_t trial, ProgressLine* line,
                                const std::function<void(const proto::Event&)>& on_event) {
  NodeProbe r;
  r.scenario = fs::absolute(scenario_path_).string();
  r.overrides = base_overrides_;
  r.overrides.insert(r.overrides.end(), p.overrides.begin(), p.overrides.end());
  r.dir = fs::absolute(p.dir).string();
  r.trial = trial;
  r.key = p.key;
  r.hash = p.hash;
  auto say = [&](const std::string& text) {
    if (quiet_) return;
    if (line != nullptr) line->finish();
    std::cout << "  probe " << std::setw(2) << p.index << "  " << text << std::endl;
  };
  ClusterAttempts a = run_on_cluster(cluster, r, s.limits.deadline_s, say, on_event);
  ProbeTrial t;
  if (a.stored) {
    t.analysis = std::move(a.analysis);
  } else if (!a.infrastructure.empty()) {
    t.infrastructure = "on the cluster: " + a.infrastructure;
  } else {
    t.infrastructure = "expected the Slurm job to store the probe's result, got none in " + std::to_string(a.attempts) +
                       " submission(s); the last: " + (a.lost.empty() ? "stopped" : a.lost) + " (its logs: " + r.dir +
                       ".slurm-" + std::to_string(a.attempts) + "/)";
  }
  return t;
}

}  // namespace dbh::harness::probe
