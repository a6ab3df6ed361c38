#include "harness/supervisor/worker_contract.h"

#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>

#include "harness/common/error.h"
#include "harness/common/files.h"
#include "harness/common/home.h"
#include "harness/common/json_fields.h"
#include "harness/common/text.h"
#include "harness/proto/event_types.h"
#include "harness/proto/worker_link.h"
#include "harness/scenario/aliases.h"
#include "harness/scenario/command_syntax.h"
#include "harness/scenario/config_file.h"
#include "harness/scenario/schema.h"
#include "harness/supervisor/machine.h"

namespace dbh::harness::supervisor {
namespace fs = std::filesystem;

const std::vector<CapabilityDoc>& worker_capabilities() {
  static const std::vector<CapabilityDoc> kCapabilities = {
      {capability::kLossBits, "`step_end` carries `loss_bits`: `dbh repeat` and `expect.deterministic` compare runs bit for bit"},
      {capability::kStopAfter, "`train.stop_after`: stop after that many steps, the schedule unchanged (`bisect steps`, `bisect modules`)"},
      {capability::kCheckpoint, "`train.checkpoint_every`: a checkpoint every K steps, each announced by a `checkpoint` event (`bisect steps`)"},
      {capability::kResume, "`train.resume_from`: continue from one of its own checkpoints at its step (`bisect steps`)"},
      {capability::kSubset, "`data.subset`: train on those indices of the worker's own dataset only; the samples its loader reads are reported in `sample_read` events (`bisect data`)"},
      {capability::kMonitorsFinite,
       "`monitors.mode: cheap`: a `health` event (check `finite`, `primary`) for the first non-finite value in the "
       "order the step made it: the batch's input (`kind` `input`), its other floating-point tensors, the target and "
       "masks (`label`, `site` naming the entry, `batch['mask']`), an activation, the loss, a gradient; with an fp16 loss scaler, non-finite gradients are its skipped step (`health` of check "
       "`loss_scaler`, not primary; `step_end` with `skipped` and `loss_scale`) until 8 in a row, then the finding "
       "from the first, with `loss_scaler_skips`"},
      {capability::kMonitorsLocalise, "`monitors.mode: localise`: the first non-finite tensor in forward and backward order, with its module (`bisect modules`)"},
      {capability::kMonitorsSilent, "`monitors.silent`: the silent-failure checks (optional: a worker without them runs, and dbh says they were not checked)"},
      {capability::kMonitorsNumerics, "`monitors.numerics`: `step_end` carries `numerics`, every observed module's mean absolute output and gradient norm (optional: without it a numerics reference compares the loss and the gradient norm only)"},
      {capability::kMemoryBudget, "`hardware.memory_budget` (or a profile): the budget applied as docs/gpu.md says, reported in a `memory_budget` event (`qualify`)"},
      {capability::kInProcessRuns, "`repeat.in_process` above 1: several runs in one process, each between `run_begin` and `run_end`"},
      {capability::kSyntheticData, "`data.source` other than `real`: train on generated data (`diagnose`'s synthetic-data rung)"},
      {capability::kFixedBatch, "`data.fixed_batch`: train on the first batch at every step, its tensors as the loader gave them (`diagnose`'s fixed-batch rung)"},
      {capability::kNumericsStates, "`monitors.numerics_save_states`: the parameters and buffers saved at the start of every step as `state-s<k>.pt` in `DBH_TRIAL_DIR` (run 0); `monitors.numerics_replay`: every step with such a file in that folder starts from it (`qualify --reference`'s step-by-step comparison)"},
      {capability::kOps, "`train.mode: ops`: basic tensor operations on the device only (`diagnose`'s first rung)"},
      {capability::kValidation, "`train.eval_every`: validation during training, in `eval` events"},
      {"fault:<name>", "a fault of `faults` (`dbh list faults`), by its name"},
  };
  return kCapabilities;
}

WorkerNeeds worker_needs(const scenario::Scenario& s) {
  WorkerNeeds n;
  auto need = [&](const char* cap, const char* key) { n.required.emplace_back(cap, key); };
  for (size_t i = 0; i < s.faults.size(); ++i) {
    n.required.emplace_back(capability::kFaultPrefix + s.faults[i].name, "faults." + std::to_string(i));
  }
  if (!s.data.subset.empty()) need(capability::kSubset, DBH_SCENARIO_KEY(data.subset));
  if (s.data.source != scenario::DataSource::kReal) need(capability::kSyntheticData, DBH_SCENARIO_KEY(data.source));
  if (s.data.fixed_batch) need(capability::kFixedBatch, DBH_SCENARIO_KEY(data.fixed_batch));
  // A worker that cannot save its states records a reference without them
  // (compared by trajectories); one that cannot replay them cannot compare
  // from the same state at all.
  if (s.monitors.numerics_save_states) {
    n.optional.emplace_back(capability::kNumericsStates, DBH_SCENARIO_KEY(monitors.numerics_save_states));
  }
  if (!s.monitors.numerics_replay.empty()) need(capability::kNumericsStates, DBH_SCENARIO_KEY(monitors.numerics_replay));
  if (s.train.stop_after > 0) need(capability::kStopAfter, DBH_SCENARIO_KEY(train.stop_after));
  if (s.train.checkpoint_every > 0) need(capability::kCheckpoint, DBH_SCENARIO_KEY(train.checkpoint_every));
  if (!s.train.resume_from.empty()) need(capability::kResume, DBH_SCENARIO_KEY(train.resume_from));
  if (s.train.mode == scenario::TrainMode::kOps) need(capability::kOps, DBH_SCENARIO_KEY(train.mode));
  if (s.train.eval_every > 0) need(capability::kValidation, DBH_SCENARIO_KEY(train.eval_every));
  if (s.monitors.mode == scenario::MonitorMode::kCheap) need(capability::kMonitorsFinite, DBH_SCENARIO_KEY(monitors.mode));
  if (s.monitors.mode == scenario::MonitorMode::kLocalise) need(capability::kMonitorsLocalise, DBH_SCENARIO_KEY(monitors.mode));
  if (s.monitors.mode != scenario::MonitorMode::kOff && !s.monitors.silent.empty()) {
    n.optional.emplace_back(capability::kMonitorsSilent, DBH_SCENARIO_KEY(monitors.silent));
  }
  if (s.monitors.numerics) n.optional.emplace_back(capability::kMonitorsNumerics, DBH_SCENARIO_KEY(monitors.numerics));
  if (s.hardware.memory_budget > 0) need(capability::kMemoryBudget, DBH_SCENARIO_KEY(hardware.memory_budget));
  if (s.repeat.in_process > 1) need(capability::kInProcessRuns, DBH_SCENARIO_KEY(repeat.in_process));
  if (s.expect.deterministic.value_or(false)) need(capability::kLossBits, "expect.deterministic");
  if (s.repeat.processes > 1) need(capability::kLossBits, DBH_SCENARIO_KEY(repeat.processes));
  return n;
}

namespace {

// Bounds on what a worker's `hello` makes dbh keep.
constexpr size_t kMaxWorkerWordBytes = 200;
constexpr size_t kMaxWorkerWords = 256;
constexpr size_t kMaxWorkerModules = 100000;

// The first `n` of `words` joined (each in `quote` marks), and how many more.
std::string some_of(const std::vector<std::string>& words, size_t n, const std::string& quote = "") {
  std::string out;
  for (size_t i = 0; i < words.size() && i < n; ++i) out += (i ? ", " : "") + quote + words[i] + quote;
  if (words.size() > n) out += " and " + std::to_string(words.size() - n) + " more";
  return out;
}

// dbh's value text `value` of `key` as a Lightning/Hydra command line writes
// it (fp16 -> 16-mixed, cuda:1 -> gpu); other keys' values as they are.
std::string user_value_text(const std::string& key, const std::string& value) {
  if (key == DBH_SCENARIO_KEY(train.precision)) {
    const auto* v = scenario::lightning_value_for(scenario::lightning_precisions(), value);
    return v != nullptr ? v->passed : value;
  }
  if (key == DBH_SCENARIO_KEY(hardware.device)) {
    const bool cuda = value.rfind("cuda", 0) == 0;
    return scenario::lightning_value_for(scenario::lightning_accelerators(), cuda ? "cuda" : "cpu")->passed;
  }
  return value;
}

// dbh's value of `key` as a Lightning/Hydra command line writes it.
std::string user_value(const std::string& key, const scenario::Scenario& s) {
  if (key == DBH_SCENARIO_KEY(train.precision)) return user_value_text(key, model::to_string(s.train.precision));
  if (key == DBH_SCENARIO_KEY(hardware.device)) return user_value_text(key, s.hardware.device);
  const scenario::KeySpec* k = scenario::find_scenario_key(key);
  if (k == nullptr) return "";
  const auto j = scenario::key_json(*k, s);
  return j.is_string() ? j.get<std::string>() : j.dump();
}

}  // namespace

std::vector<PassedKey> passed_keys(const scenario::Scenario& s);

namespace {

// The refusal without the usage text argparse and click print before their
// error (it names every option): what comes before the usage, and the
// error's own lines from "error: " (argparse's "prog: error: …", click's
// "Error: …") on. Without both, all of it.
std::string refusal_text(const std::string& stderr_tail) {
  size_t usage = stderr_tail.rfind("usage: ");
  if (usage == std::string::npos) usage = stderr_tail.rfind("Usage: ");
  if (usage == std::string::npos) return stderr_tail;
  const size_t error = stderr_tail.find("rror: ", usage);
  if (error == std::string::npos) return stderr_tail;
  const size_t line = stderr_tail.rfind('\n', error);
  return stderr_tail.substr(0, usage) + stderr_tail.substr(line == std::string::npos || line < usage ? error : line + 1);
}

// Whether `key` stands in `text` as a word of its own (not inside a longer
// name: `bs` in `absolute`).
bool names_word(const std::string& text, const std::string& key) {
  if (key.empty()) return false;
  const auto word_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; };
  for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + 1)) {
    const bool before = at > 0 && word_char(text[at - 1]);
    const bool after = at + key.size() < text.size() && word_char(text[at + key.size()]);
    if (!before && !after) return true;
  }
  return false;
}

}  // namespace

// Note [The user's own names]: a command that refused a word dbh passed is
// told what dbh passed, in which syntax, and the scenario line that changes
// it: the syntax when the command refused the form of the words (argparse's
// "unrecognized arguments" for `key=value` words), worker.keys only when it
// refused the key's name (Hydra's "Could not override 'K'", "Key 'K' is not
// in struct").
std::string refused_key_hint(const scenario::Scenario& s, const std::string& stderr_tail) {
  std::vector<scenario::KeyArgument> arguments;
  for (const auto& k : passed_keys(s)) arguments.push_back({k.user_key, k.value});
  for (const auto& [key, value] : s.worker.overrides) arguments.push_back({key, value});
  const bool form_refused = stderr_tail.find("unrecognized arguments") != std::string::npos ||
                            stderr_tail.find("unrecognized argument") != std::string::npos ||
                            stderr_tail.find("No such option") != std::string::npos ||
                            stderr_tail.find("Got unexpected extra argument") != std::string::npos;
  const std::string refusal = refusal_text(stderr_tail);
  std::string named;  // the passed words the command's error names
  for (const auto& a : arguments) {
    const std::string written = scenario::describe_argument(s.worker, a.key, a.value);
    if (!names_word(refusal, a.key)) continue;
    named += std::string(named.empty() ? "" : ", ") + "`" + one_line(truncate_utf8(written, 200)) + "`";
    if (!form_refused) {
      std::string dbh_key;
      for (const auto& k : passed_keys(s)) {
        if (k.user_key == a.key) dbh_key = k.dbh_key;
      }
      if (dbh_key.empty()) continue;
      const bool mapped = s.worker.keys.count(dbh_key) > 0;
      return " — the command names `" + one_line(truncate_utf8(a.key, 200)) + "`, which dbh passed for " + dbh_key +
             (mapped ? " (worker.keys)" : " (the Lightning/Hydra alias table)") +
             ": if your configuration holds it under another key, add `worker.keys: {" + dbh_key +
             ": <your key>}` to the scenario, or `" + dbh_key + ": \"\"` to pass nothing";
    }
  }
  if (!form_refused || arguments.empty()) return "";
  return " — dbh passed " + (named.empty() ? std::string("its keys") : named) + " in worker.syntax " +
         to_string(s.worker.syntax) + ", and your command refused the words: set `worker.syntax` (flags: `--key "
         "value`; option with `worker.syntax_option`: `-o key=value`) or `worker.written_as` (`<your key>: --option`) "
         "in the scenario, or let `dbh scenario from-command --external '<your command>'` write them";
}

std::vector<PassedKey> passed_keys(const scenario::Scenario& s) {
  std::vector<std::string> keys = scenario::worker_passed_keys();
  for (const auto& [dbh_key, user_key] : s.worker.keys) {
    if (std::find(keys.begin(), keys.end(), dbh_key) == keys.end()) keys.push_back(dbh_key);
  }
  std::vector<PassedKey> out;
  for (const auto& key : keys) {
    const auto it = s.worker.keys.find(key);
    const std::string user_key = it != s.worker.keys.end() ? it->second : scenario::first_alias_of(key);
    if (user_key.empty()) continue;
    // A folder is passed whatever data.source says: generated samples are
    // served through the training's own dataset, which still reads its folder.
    if (key == DBH_SCENARIO_KEY(data.path) && s.data.path.empty()) continue;
    out.push_back({key, user_key, user_value(key, s)});
  }
  return out;
}

std::optional<std::string> as_the_command_writes(const scenario::Scenario& s, const std::string& dbh_override) {
  if (!s.worker.external()) return std::nullopt;
  const size_t eq = dbh_override.find('=');
  if (eq == std::string::npos) return std::nullopt;
  const std::string key = dbh_override.substr(0, eq);
  for (const auto& k : passed_keys(s)) {
    if (k.dbh_key == key) {
      return scenario::describe_argument(s.worker, k.user_key, user_value_text(key, dbh_override.substr(eq + 1)));
    }
  }
  return std::nullopt;
}

namespace {

// Whether the value text dbh passed and the value the worker's configuration
// holds say the same (Note [Keys a worker confirms]); nullopt when the value
// is of a kind that cannot be compared (a list, an object).
std::optional<bool> same_value(const std::string& passed, const nlohmann::json& held, const std::string& cwd) {
  if (held.is_number()) {
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(passed.c_str(), &end);
    if (passed.empty() || end != passed.c_str() + passed.size() || errno == ERANGE) return false;
    const double h = held.get<double>();
    return v == h || std::abs(v - h) <= 1e-9 * std::max(std::abs(v), std::abs(h));
  }
  if (held.is_boolean()) {
    std::string t = passed;
    std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
    const bool yes = t == "true" || t == "1" || t == "yes", no = t == "false" || t == "0" || t == "no";
    return held.get<bool>() ? yes : no;
  }
  if (held.is_null()) return passed.empty() || passed == "null" || passed == "None" || passed == "~";
  if (!held.is_string()) return std::nullopt;
  const std::string h = held.get<std::string>();
  if (h == passed) return true;
  // A path the training made absolute is the path passed.
  const auto as_path = [&](const std::string& p) {
    const fs::path path(p);
    return (path.is_absolute() ? path : fs::path(cwd.empty() ? "." : cwd) / path).lexically_normal();
  };
  return passed.find('/') != std::string::npos && fs::absolute(as_path(h)) == fs::absolute(as_path(passed));
}

}  // namespace

std::string keys_not_applied(const scenario::Scenario& s, const proto::FlatConfig& config) {
  if (!s.worker.external()) return "";
  for (const auto& k : passed_keys(s)) {
    const auto held = config.find(k.user_key);
    if (held.empty() && config.cut) {
      return "dbh passed " + quoted_excerpt(k.user_key + "=" + k.value) + " (" + k.dbh_key +
             "), but the worker's configuration holds more than " + std::to_string(proto::kMaxConfigKeys) +
             " keys and not this one among them: what the training read cannot be confirmed";
    }
    for (const nlohmann::json* value : held) {
      if (same_value(k.value, *value, s.worker.cwd).value_or(true)) continue;
      return "dbh passed " + quoted_excerpt(k.user_key + "=" + k.value) + " (" + k.dbh_key +
             "), but the worker's configuration holds " + quoted_excerpt(k.user_key + "=" + value->dump()) +
             ": the training read another value than the one asked for (a key its command line does not override, "
             "or one it sets again after parsing)";
    }
  }
  return "";
}

std::string key_not_passed(const scenario::Scenario& s, const std::string& key) {
  if (!s.worker.external()) return "";
  // dbh's own: read by the supervisor, or served through a capability
  // (worker_needs), never a value of the worker's training.
  static const std::vector<std::string> kSections = {"name", "description", "include", "limits", "expect",
                                                     "monitors", "repeat", "worker", "faults", "controls"};
  static const std::vector<std::string> kServed = {
      DBH_SCENARIO_KEY(data.source),           DBH_SCENARIO_KEY(data.subset),
      DBH_SCENARIO_KEY(train.checkpoint_every), DBH_SCENARIO_KEY(train.resume_from),
      DBH_SCENARIO_KEY(train.stop_after),       DBH_SCENARIO_KEY(train.mode),
      DBH_SCENARIO_KEY(train.eval_every),       DBH_SCENARIO_KEY(hardware.memory_budget),
      DBH_SCENARIO_KEY(hardware.profile),       DBH_SCENARIO_KEY(hardware.launch_blocking),
      DBH_SCENARIO_KEY(data.fixed_batch)};
  const std::string section = key.substr(0, key.find_first_of(".["));
  if (std::find(kSections.begin(), kSections.end(), section) != kSections.end() ||
      std::find(kServed.begin(), kServed.end(), key) != kServed.end()) {
    return "";
  }
  for (const auto& k : passed_keys(s)) {
    if (k.dbh_key == key) return "";
  }
  const auto it = s.worker.keys.find(key);
  return key + " is not passed to the worker " + scenario::join(s.worker.command, " ") +
         (it != s.worker.keys.end() ? " (worker.keys maps it to \"\", nothing)"
                                    : " (add `worker.keys: {" + key + ": <your key>}` for it to reach your "
                                      "configuration)");
}

std::string overrides_not_passed(const scenario::Scenario& s, const std::vector<std::string>& overrides) {
  for (const auto& ov : overrides) {
    std::string why = key_not_passed(s, override_key(ov));
    if (!why.empty()) return why;
  }
  return "";
}

TrialSpec external_trial_spec(const scenario::Scenario& s, const std::string& resolved, const std::string& dir,
                              int64_t index) {
  TrialSpec spec;
  // Note [A command's own syntax]: each key in the syntax the command
  // takes, where it stands; keys of a config file in a copy in the trial
  // folder (Note [A copy of your config file]).
  std::vector<scenario::KeyArgument> arguments;
  for (const auto& k : passed_keys(s)) arguments.push_back({k.user_key, k.value});
  for (const auto& [key, value] : s.worker.overrides) arguments.push_back({key, value});
  scenario::WorkerArgv composed = scenario::compose_worker_argv(s.worker, arguments);
  for (const auto& [word, at] : composed.file_word_at) {
    std::vector<scenario::FileEdit> edits;
    for (const auto& e : composed.file_edits) {
      if (e.word == word) edits.push_back(e);
    }
    make_directories_no_follow(dir);
    composed.argv[at] = scenario::write_config_copy(s.worker.command[word], s.worker.cwd, edits, dir);
  }
  spec.argv = std::move(composed.argv);
  spec.run_dir = dir;
  spec.cwd = s.worker.cwd;
  for (const auto& [name, value] : s.worker.env) spec.env.emplace_back(name, value);
  const std::string abs_dir = fs::absolute(dir).lexically_normal().string();
  spec.env.emplace_back(worker_env::kProtocol, std::to_string(kWorkerProtocolVersion));
  spec.env.emplace_back(worker_env::kEventFd, std::to_string(proto::kEventsFd));
  spec.env.emplace_back(worker_env::kScenario, fs::absolute(resolved).lexically_normal().string());
  spec.env.emplace_back(worker_env::kScenarioHash, scenario::scenario_hash(s));
  spec.env.emplace_back(worker_env::kTrialDir, abs_dir);
  spec.env.emplace_back(worker_env::kTrial, std::to_string(index));
  if (s.hardware.launch_blocking) spec.env.emplace_back("CUDA_LAUNCH_BLOCKING", "1");
  spec.deadline_s = s.limits.deadline_s;
  spec.silence_s = s.limits.silence_s;
  spec.grace_s = s.limits.grace_s;
  // Note [A warm worker]: a fresh interpreter for what may depend on one
  // (several runs, memory measured against a budget).
  spec.may_fork = s.repeat.in_process == 1 && s.repeat.processes == 1 && s.hardware.memory_budget == 0;
  return spec;
}

std::vector<scenario::ParserOption> parser_options(const nlohmann::json& list) {
  std::vector<scenario::ParserOption> out;
  if (!list.is_array()) return out;
  static const std::vector<std::string> kKinds = {"value", "on", "off", "positional"};
  const auto word = [](const std::string& w) {
    return !w.empty() && w.size() <= scenario::kMaxParserOptionBytes && one_line(w) == w &&
           std::none_of(w.begin(), w.end(), [](char c) { return c == '=' || c == '|' || c == ' ' || c == '`'; });
  };
  for (const auto& item : list) {
    if (out.size() >= scenario::kMaxParserOptions) break;
    if (!item.is_object()) continue;
    scenario::ParserOption o;
    o.dest = field_or(item, "dest", std::string());
    const std::string kind = field_or(item, "kind", std::string());
    const auto k = std::find(kKinds.begin(), kKinds.end(), kind);
    if (!word(o.dest) || k == kKinds.end()) continue;
    o.kind = static_cast<scenario::ParserOption::Kind>(k - kKinds.begin());
    o.nargs = static_cast<int>(std::clamp<int64_t>(field_or(item, "nargs", int64_t{1}), -1, 64));
    bool ok = true;
    if (const auto it = item.find("strings"); it != item.end() && it->is_array()) {
      for (const auto& sv : *it) {
        const std::string str = sv.is_string() ? sv.get<std::string>() : "";
        ok = ok && o.strings.size() < scenario::kMaxParserOptionStrings && word(str) && str[0] == '-';
        if (ok) o.strings.push_back(str);
      }
    }
    if (!ok || (o.kind != scenario::ParserOption::Kind::kPositional && o.strings.empty())) continue;
    out.push_back(std::move(o));
  }
  return out;
}

WorkerDescription describe_worker(const scenario::Scenario& s) {
  // The command as it is written, where and with what environment: what the
  // worker is (its capabilities, modules and parser) does not change with
  // the keys dbh passes it, so one description serves every probe.
  std::string key = s.worker.cwd;
  for (const auto& a : s.worker.command) key += '\0' + a;
  for (const auto& [n, v] : s.worker.env) key += '\0' + n + '=' + v;
  static std::mutex mutex;
  static std::map<std::string, WorkerDescription> cache;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  const std::string command = scenario::join(s.worker.command, " ");
  // A scratch folder of its own in dbh's cache folder (the system's
  // temporary folder when there is none), removed when the description is read.
  const std::string root = cache_root();
  std::error_code ec;
  const fs::path parent = root.empty() ? fs::temp_directory_path() : fs::path(root);
  fs::create_directories(parent, ec);
  std::string pattern = (parent / "describe-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) {
    throw ReportError(parent.string() + ": expected a folder where dbh can describe the worker, got an error (" +
                      std::strerror(errno) + ")");
  }
  struct Remove {
    std::string dir;
    ~Remove() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } remove{pattern};
  const std::string resolved = (fs::path(pattern) / "scenario.resolved.json").string();
  write_file_atomically(resolved, scenario::resolved_json(s) + "\n");
  TrialSpec spec = external_trial_spec(s, resolved, (fs::path(pattern) / "describe").string(), -1);
  spec.env.emplace_back(worker_env::kDescribe, "1");
  // Starting Python and Lightning takes seconds; a command that says nothing
  // for a minute is not a worker.
  spec.deadline_s = std::min(s.limits.deadline_s, 120.0);
  spec.silence_s = std::min(s.limits.silence_s, 60.0);
  std::cerr << "dbh: asking the worker `" << one_line(command) << "` what it serves (describe mode)…" << std::endl;
  std::optional<proto::Event> hello;  // the first `hello`
  std::string refused;                // the first harness `error`: what the worker says it cannot do
  spec.on_event = [&hello, &refused](const proto::Event& e) {
    if (e.type == proto::event::kHello && !hello) hello = e;
    if (e.type == proto::event::kError && refused.empty()) {
      const proto::WorkerError error = proto::error_from(e);
      if (error.kind == proto::error_kind::kHarness) refused = truncate_utf8(one_line(error.message), 600);
    }
  };
  const TrialResult r = run_trial(spec);
  // Ctrl-C while the worker describes itself ends the command as a stop
  // does anywhere (128 + signal), never as the worker's fault.
  if (r.interrupted || stop_requested() != 0) throw Interrupted(stop_requested() != 0 ? stop_requested() : SIGINT);
  const std::string where = DBH_SCENARIO_KEY(worker.command) + std::string(" (") + command + ")";
  if (!hello && !refused.empty()) throw UsageError(where + ": the worker refused the trial: " + refused);
  if (!hello) {
    std::string got = !r.spawn_error.empty() ? r.spawn_error
                      : r.timed_out || r.hung ? "no answer within " + std::to_string(static_cast<int>(spec.deadline_s)) + " s"
                      : r.term_signal != 0    ? "an end by signal " + std::to_string(r.term_signal)
                                              : "an exit with status " + std::to_string(r.exit_code);
    const std::string tail = one_line(r.stderr_tail.substr(r.stderr_tail.size() > 600 ? r.stderr_tail.size() - 600 : 0));
    throw UsageError(where + ": expected a worker that writes `hello` on fd 3 when " + worker_env::kDescribe +
                     "=1 (docs/worker-protocol.md; the Python adapter does), got " + got +
                     " without one" + proto::bad_lines_note(r.bad_lines) +
                     (tail.empty() ? "" : "; its stderr ends: " + tail) +
                     refused_key_hint(s, r.stderr_tail));
  }
  const auto h = proto::hello_from(*hello);
  if (h.schema_version != proto::kEventSchemaVersion || !h.capabilities) {
    throw UsageError(where + ": expected a `hello` of event schema " + std::to_string(proto::kEventSchemaVersion) +
                     " with `capabilities` (worker protocol " + std::to_string(kWorkerProtocolVersion) +
                     "), got schema " + std::to_string(h.schema_version) +
                     (h.capabilities ? "" : " without capabilities"));
  }
  // Note [A worker's stream is bounded]: what the worker says of itself is
  // kept cut: its name, each capability and module name, and their numbers.
  WorkerDescription d;
  // One line each: a name is printed on the terminal, where a line of its
  // own starting with "::" would be a GitHub workflow command.
  d.worker = one_line(truncate_utf8(h.worker.value_or(""), kMaxWorkerWordBytes));
  for (const auto& cap : *h.capabilities) {
    if (d.capabilities.size() < kMaxWorkerWords) d.capabilities.push_back(one_line(truncate_utf8(cap, kMaxWorkerWordBytes)));
  }
  for (const auto& m : h.modules.value_or(std::vector<std::string>{})) {
    if (d.modules.size() < kMaxWorkerModules) d.modules.push_back(truncate_utf8(m, kMaxWorkerWordBytes));
  }
  d.config = proto::flatten_config(h.config).entries;
  d.options = parser_options(h.options);
  std::lock_guard<std::mutex> lock(mutex);
  cache[key] = d;
  return d;
}

std::optional<std::string> external_device_unavailable(const scenario::Scenario& s) {
  if (!s.worker.external() || s.hardware.device.rfind("cuda", 0) != 0 || nvidia_gpu_present()) return std::nullopt;
  return "device \"" + s.hardware.device + "\" requested, but this machine shows no NVIDIA GPU (no " +
         "/proc/driver/nvidia/gpus, /dev/nvidiaN or WSL2 GPU), so the worker `" + scenario::join(s.worker.command, " ") +
         "` was not started";
}

std::optional<std::string> missing_capability(const scenario::Scenario& s) {
  if (!s.worker.external() || external_device_unavailable(s)) return std::nullopt;
  const WorkerDescription d = describe_worker(s);
  for (const auto& [cap, what] : worker_needs(s).required) {
    if (std::find(d.capabilities.begin(), d.capabilities.end(), cap) == d.capabilities.end()) return cap;
  }
  return std::nullopt;
}

std::vector<std::string> check_worker(const scenario::Scenario& s,
                                      const std::vector<std::pair<std::string, std::string>>& command_needs) {
  // Not run here: nothing to check (its trials are skipped).
  if (!s.worker.external() || external_device_unavailable(s)) return {};
  const WorkerDescription d = describe_worker(s);
  const auto serves = [&](const std::string& cap) {
    return std::find(d.capabilities.begin(), d.capabilities.end(), cap) != d.capabilities.end();
  };
  const std::string who = "the worker " + (d.worker.empty() ? scenario::join(s.worker.command, " ") : d.worker);
  WorkerNeeds needs = worker_needs(s);
  std::vector<std::pair<std::string, std::string>> all = command_needs;
  all.insert(all.end(), needs.required.begin(), needs.required.end());
  for (const auto& [cap, what] : all) {
    if (serves(cap)) continue;
    throw UsageError(what + ": expected a worker that serves the capability `" + cap + "`, got " + who +
                     ", which serves " + (d.capabilities.empty() ? "none" : some_of(d.capabilities, 24)) +
                     " (docs/worker-protocol.md)");
  }
  // Module names are the worker's: a fault or expectation naming another
  // would silently never fire or match.
  auto check_module = [&](const std::string& name, const std::string& what, bool prefix_ok) {
    if (name.empty() || d.modules.empty()) return;
    const bool known = std::any_of(d.modules.begin(), d.modules.end(), [&](const std::string& m) {
      return m == name || (prefix_ok && m.rfind(name + ".", 0) == 0);
    });
    if (!known) {
      // A name as the model's class names it, without the attribute the
      // training holds it under (`decoder.fusion` for `model.decoder.fusion`).
      std::vector<std::string> under;
      for (const auto& m : d.modules) {
        if (m.size() > name.size() && m.compare(m.size() - name.size(), name.size(), name) == 0 &&
            m[m.size() - name.size() - 1] == '.') {
          under.push_back(m);
        }
      }
      const std::string hint = !under.empty() ? " (did you mean " + some_of(under, 3, "\"") + "?)"
                                              : scenario::did_you_mean(name, d.modules);
      throw UsageError(what + ": expected a module name of the worker's model (" + std::to_string(d.modules.size()) +
                       " modules, e.g. " + some_of(d.modules, 6) + "), got \"" + quoted_excerpt(name) + "\"" + hint);
    }
  };
  for (size_t i = 0; i < s.faults.size(); ++i) {
    const auto it = s.faults[i].params.find("module");
    if (it != s.faults[i].params.end()) {
      check_module(it->second.text, "faults." + std::to_string(i) + ".module", s.faults[i].name == "nan_gradient");
    }
  }
  if (s.expect.module) check_module(*s.expect.module, "expect.module", true);
  std::vector<std::string> notes;
  for (const auto& [cap, what] : needs.optional) {
    if (!serves(cap)) notes.push_back(who + " does not serve `" + cap + "`: " + what + " is not checked in this run");
  }
  // Note [Keys that never reach the worker]: a training key set away from
  // its default that the worker is never passed changes nothing; said, not
  // silently believed.
  const scenario::Scenario defaults;
  for (const auto& k : scenario::scenario_keys()) {
    if (scenario::key_json(k, s) == scenario::key_json(k, defaults)) continue;
    const std::string why = key_not_passed(s, k.key);
    if (!why.empty()) notes.push_back(why + ": its value here (" + one_line(scenario::key_json(k, s).dump()) +
                                      ") changes nothing in this run");
  }
  return notes;
}

}  // namespace dbh::harness::supervisor
