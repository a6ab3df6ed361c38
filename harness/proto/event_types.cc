#include "harness/proto/event_types.h"

#include <cmath>

#include <charconv>
#include <cstdint>
#include <string_view>
#include <utility>

namespace dbh::harness::proto {

namespace {

using nlohmann::json;

// Lenient reads: a missing, null or mistyped field leaves `out` as it is.
template <typename T>
void read(const Event& e, const char* key, T& out) {
  out = e.get<T>(key, out);
}

template <typename T>
void read(const Event& e, const char* key, std::optional<T>& out) {
  if (auto v = optional_field<T>(e.body, key)) out = std::move(v);
}

// The field as it is (any JSON), null when absent.
json raw(const Event& e, const char* key) {
  const auto it = e.body.find(key);
  return it == e.body.end() ? json() : *it;
}

template <typename T>
void put(json& j, const char* key, const std::optional<T>& v) {
  if (v) j[key] = *v;
}

void put(json& j, const char* key, const json& v) {
  if (!v.is_null()) j[key] = v;
}

}  // namespace

json to_json(const Hello& e) {
  json j = {{"schema_version", e.schema_version},
          {"pid", e.pid},
          {"seed", e.seed},
          {"scenario_hash", e.scenario_hash},
          {"scenario", e.scenario},
          {"trial", e.trial},
          {"git", e.git},
          {"dbh_version", e.dbh_version},
          {"torch_version", e.torch_version},
          {"device", e.device},
          {"threads", e.threads}};
  put(j, "worker", e.worker);
  put(j, "capabilities", e.capabilities);
  put(j, "modules", e.modules);
  put(j, "environment", e.environment);
  put(j, "config", e.config);
  put(j, "options", e.options);
  return j;
}

Hello hello_from(const Event& e) {
  Hello h;
  h.schema_version = 0;  // a stream without one predates versioning
  read(e, "schema_version", h.schema_version);
  read(e, "pid", h.pid);
  read(e, "seed", h.seed);
  read(e, "scenario_hash", h.scenario_hash);
  read(e, "scenario", h.scenario);
  read(e, "trial", h.trial);
  read(e, "git", h.git);
  read(e, "dbh_version", h.dbh_version);
  read(e, "torch_version", h.torch_version);
  read(e, "device", h.device);
  read(e, "threads", h.threads);
  read(e, "worker", h.worker);
  read(e, "capabilities", h.capabilities);
  read(e, "modules", h.modules);
  if (const json env = raw(e, "environment"); env.is_object()) h.environment = env;
  if (const json config = raw(e, "config"); config.is_object()) h.config = config;
  if (const json options = raw(e, "options"); options.is_array()) h.options = options;
  return h;
}

json to_json(const RunBegin& e) { return {{"run", e.run}, {"memory", e.memory}}; }

RunBegin run_begin_from(const Event& e) {
  RunBegin r;
  read(e, "run", r.run);
  r.memory = raw(e, "memory");
  return r;
}

json to_json(const StepBegin& e) { return {{"run", e.run}, {"step", e.step}}; }

StepBegin step_begin_from(const Event& e) {
  StepBegin s;
  read(e, "run", s.run);
  read(e, "step", s.step);
  return s;
}

json to_json(const StepEnd& e) {
  if (e.ops) return {{"run", e.run}, {"step", e.step}, {"loss", e.loss}, {"seconds", e.seconds}};
  json j = {{"run", e.run}, {"step", e.step}, {"loss", e.loss}};
  put(j, "bce", e.bce);
  put(j, "l1", e.l1);
  put(j, "dice", e.dice);
  j["loss_bits"] = e.loss_bits;
  j["micro_loss_bits"] = e.micro_loss_bits;
  put(j, "grad_norm_bits", e.grad_norm_bits);
  j["lr"] = e.lr;
  put(j, "grad_norm", e.grad_norm);
  json rest = {{"skipped", e.skipped},
          {"loss_scale", e.loss_scale},
          {"seconds", e.seconds},
          {"samples", e.samples},
          {"memory", e.memory},
          {"phases", e.phases},
          {"silent", e.silent}};
  j.update(rest);
  if (!e.numerics.empty()) {
    json modules = json::array();
    for (const auto& m : e.numerics) {
      json one = {{"module", m.module}};
      put(one, "act", m.act);
      put(one, "grad", m.grad);
      modules.push_back(std::move(one));
    }
    j["numerics"] = std::move(modules);
  }
  return j;
}

StepEnd step_end_from(const Event& e) {
  StepEnd s;
  s.ops = !e.has("loss_bits");
  read(e, "run", s.run);
  read(e, "step", s.step);
  read(e, "loss", s.loss);
  read(e, "seconds", s.seconds);
  read(e, "bce", s.bce);
  read(e, "l1", s.l1);
  read(e, "dice", s.dice);
  read(e, "lr", s.lr);
  read(e, "grad_norm", s.grad_norm);
  read(e, "loss_bits", s.loss_bits);
  read(e, "grad_norm_bits", s.grad_norm_bits);
  if (const auto it = e.body.find("micro_loss_bits"); it != e.body.end() && it->is_array()) {
    for (const auto& b : *it) {
      if (b.is_number_unsigned() && b.get<uint64_t>() <= UINT32_MAX) s.micro_loss_bits.push_back(b.get<uint32_t>());
    }
  }
  read(e, "skipped", s.skipped);
  read(e, "loss_scale", s.loss_scale);
  read(e, "samples", s.samples);
  s.memory = raw(e, "memory");
  s.phases = raw(e, "phases");
  s.silent = raw(e, "silent");
  if (const auto it = e.body.find("numerics"); it != e.body.end() && it->is_array()) {
    for (const auto& m : *it) {
      if (s.numerics.size() >= kMaxNumericsModules) break;
      if (!m.is_object() || !m.contains("module") || !m["module"].is_string()) continue;
      ModuleNumbers n;
      n.module = m["module"].get<std::string>().substr(0, kMaxModuleNameBytes);
      for (auto [key, field] : {std::pair<const char*, std::optional<double>*>{"act", &n.act}, {"grad", &n.grad}}) {
        if (const auto v = m.find(key); v != m.end() && v->is_number() && std::isfinite(v->get<double>())) {
          *field = v->get<double>();
        }
      }
      s.numerics.push_back(std::move(n));
    }
  }
  return s;
}

json to_json(const BatchSamples& e) { return {{"run", e.run}, {"step", e.step}, {"samples", e.samples}}; }

json to_json(const DatasetInfo& e) { return {{"size", e.size}}; }

DatasetInfo dataset_info_from(const Event& e) {
  DatasetInfo d;
  read(e, "size", d.size);
  return d;
}

json to_json(const SampleRead& e) {
  json j = {{"index", e.index}};
  put(j, "name", e.name);
  put(j, "error", e.error);
  return j;
}

SampleRead sample_read_from(const Event& e) {
  SampleRead r;
  read(e, "index", r.index);
  read(e, "name", r.name);
  read(e, "error", r.error);
  return r;
}

BatchSamples batch_from(const Event& e) {
  BatchSamples b;
  read(e, "run", b.run);
  read(e, "step", b.step);
  read(e, "samples", b.samples);
  return b;
}

json to_json(const FaultFired& e) {
  json j = {{"fault", e.fault}, {"index", e.index}, {"run", e.run}, {"step", e.step}};
  if (!e.module.empty()) j["module"] = e.module;
  put(j, "detail", e.detail);
  return j;
}

FaultFired fault_fired_from(const Event& e) {
  FaultFired f;
  read(e, "fault", f.fault);
  read(e, "index", f.index);
  read(e, "run", f.run);
  read(e, "step", f.step);
  read(e, "module", f.module);
  f.detail = raw(e, "detail");
  return f;
}

namespace {

constexpr const char* kHealthKeys[] = {"type",    "t",       "run",      "step",  "check",
                                       "kind",    "site",    "module",   "mode",  "message",
                                       "primary", "evidence", "stats",   "nonfinite_sites"};

}  // namespace

json to_json(const Health& e) {
  json j = e.extra.is_object() ? e.extra : json::object();
  j["run"] = e.run;
  j["step"] = e.step;
  j["check"] = e.check;
  j["kind"] = e.kind;
  j["site"] = e.site;
  put(j, "module", e.module);
  put(j, "mode", e.mode);
  put(j, "message", e.message);
  put(j, "primary", e.primary);
  put(j, "evidence", e.evidence);
  put(j, "stats", e.stats);
  put(j, "nonfinite_sites", e.nonfinite_sites);
  return j;
}

Health health_from(const Event& e) {
  Health h;
  read(e, "run", h.run);
  read(e, "step", h.step);
  read(e, "check", h.check);
  read(e, "kind", h.kind);
  read(e, "site", h.site);
  read(e, "module", h.module);
  read(e, "mode", h.mode);
  read(e, "message", h.message);
  read(e, "primary", h.primary);
  read(e, "evidence", h.evidence);
  h.stats = raw(e, "stats");
  h.nonfinite_sites = raw(e, "nonfinite_sites");
  for (auto it = e.body.begin(); it != e.body.end(); ++it) {
    bool known = false;
    for (const char* k : kHealthKeys) known = known || it.key() == k;
    if (!known) h.extra[it.key()] = it.value();
  }
  return h;
}

json to_json(const Heartbeat& e) { return {{"run", e.run}, {"step", e.step}, {"module", e.module}}; }

Heartbeat heartbeat_from(const Event& e) {
  Heartbeat h;
  read(e, "run", h.run);
  read(e, "step", h.step);
  read(e, "module", h.module);
  return h;
}

json to_json(const Checkpoint& e) {
  json j = {{"run", e.run}, {"step", e.step}, {"path", e.path}};
  if (e.resumed) j["resumed"] = true;
  return j;
}

Checkpoint checkpoint_from(const Event& e) {
  Checkpoint c;
  read(e, "run", c.run);
  read(e, "step", c.step);
  read(e, "path", c.path);
  read(e, "resumed", c.resumed);
  return c;
}

json to_json(const Eval& e) {
  json j = {{"run", e.run},
            {"step", e.step},
            {"gt", e.gt},
            {"det", e.det},
            {"matched", e.matched},
            {"images", e.images},
            {"prob_mean", e.prob_mean},
            {"text_fraction", e.text_fraction},
            {"seconds", e.seconds}};
  put(j, "precision", e.precision);
  put(j, "recall", e.recall);
  put(j, "hmean", e.hmean);
  put(j, "det_reference", e.det_reference);
  put(j, "metrics", e.metrics);
  return j;
}

Eval eval_from(const Event& e) {
  Eval v;
  read(e, "run", v.run);
  read(e, "step", v.step);
  read(e, "precision", v.precision);
  read(e, "recall", v.recall);
  read(e, "hmean", v.hmean);
  read(e, "gt", v.gt);
  read(e, "det", v.det);
  read(e, "matched", v.matched);
  read(e, "images", v.images);
  read(e, "prob_mean", v.prob_mean);
  read(e, "text_fraction", v.text_fraction);
  read(e, "seconds", v.seconds);
  read(e, "det_reference", v.det_reference);
  if (const json metrics = raw(e, "metrics"); metrics.is_object()) v.metrics = metrics;
  return v;
}

json to_json(const EvalCheck& e) {
  json j = {{"hmean", e.hmean}, {"images", e.images}};
  put(j, "words", e.words);
  return j;
}

EvalCheck eval_check_from(const Event& e) {
  EvalCheck c;
  read(e, "hmean", c.hmean);
  read(e, "images", c.images);
  read(e, "words", c.words);
  return c;
}

json to_json(const Overlays& e) { return {{"run", e.run}, {"step", e.step}, {"files", e.files}}; }

Overlays overlays_from(const Event& e) {
  Overlays o;
  read(e, "run", o.run);
  read(e, "step", o.step);
  // A list with a non-string in it is read string by string.
  if (const auto it = e.body.find("files"); it != e.body.end() && it->is_array()) {
    for (const auto& f : *it) {
      if (f.is_string()) o.files.push_back(f.get<std::string>());
    }
  }
  return o;
}

json to_json(const RunEnd& e) {
  json j = {{"run", e.run}, {"steps", e.steps}, {"checksum", e.checksum}, {"memory", e.memory}};
  put(j, "resources", e.resources);
  return j;
}

RunEnd run_end_from(const Event& e) {
  RunEnd r;
  read(e, "run", r.run);
  read(e, "steps", r.steps);
  read(e, "checksum", r.checksum);
  r.memory = raw(e, "memory");
  if (const json res = raw(e, "resources"); res.is_object()) r.resources = res;
  return r;
}

json to_json(const Warning& e) { return {{"message", e.message}}; }

Warning warning_from(const Event& e) {
  Warning w;
  read(e, "message", w.message);
  return w;
}

json to_json(const WorkerError& e) {
  json j = {{"kind", e.kind}, {"message", e.message}};
  put(j, "run", e.run);
  put(j, "step", e.step);
  put(j, "phase", e.phase);
  put(j, "backtrace", e.backtrace);
  put(j, "module", e.module);
  put(j, "memory", e.memory);
  put(j, "phases", e.phases);
  return j;
}

WorkerError error_from(const Event& e) {
  WorkerError r;
  read(e, "kind", r.kind);
  read(e, "message", r.message);
  read(e, "run", r.run);
  read(e, "step", r.step);
  read(e, "phase", r.phase);
  read(e, "backtrace", r.backtrace);
  read(e, "module", r.module);
  r.memory = raw(e, "memory");
  r.phases = raw(e, "phases");
  return r;
}

json to_json(const MemorySnapshot& e) { return {{"run", e.run}, {"step", e.step}, {"file", e.file}}; }

MemorySnapshot memory_snapshot_from(const Event& e) {
  MemorySnapshot m;
  read(e, "run", m.run);
  read(e, "step", m.step);
  read(e, "file", m.file);
  return m;
}

json to_json(const TuningProgress& e) { return {{"done", e.done}, {"total", e.total}}; }

TuningProgress tuning_progress_from(const Event& e) {
  TuningProgress p;
  read(e, "done", p.done);
  read(e, "total", p.total);
  return p;
}

json to_json(const Tuning& e) {
  json candidates = json::array();
  for (const auto& c : e.candidates) {
    candidates.push_back({{"channels_last", c.channels_last}, {"threads", c.threads}, {"seconds", c.seconds}});
  }
  json j = {{"device", e.device}, {"size", e.size}, {"batch", e.batch}, {"precision", e.precision},
            {"candidates", candidates}};
  put(j, "others_cores", e.others_cores);
  put(j, "over_budget_step_seconds", e.over_budget_step_seconds);
  put(j, "over_budget_probe_size", e.over_budget_probe_size);
  put(j, "error", e.error);
  return j;
}

Tuning tuning_from(const Event& e) {
  Tuning t;
  read(e, "device", t.device);
  read(e, "size", t.size);
  read(e, "batch", t.batch);
  read(e, "precision", t.precision);
  read(e, "others_cores", t.others_cores);
  read(e, "over_budget_step_seconds", t.over_budget_step_seconds);
  read(e, "over_budget_probe_size", t.over_budget_probe_size);
  read(e, "error", t.error);
  const json c = raw(e, "candidates");
  if (c.is_array()) {
    for (const auto& x : c) {
      if (!x.is_object()) continue;
      Tuning::Candidate k;
      if (x.contains("channels_last") && x["channels_last"].is_boolean()) k.channels_last = x["channels_last"];
      if (x.contains("threads") && x["threads"].is_number_integer()) k.threads = x["threads"];
      if (x.contains("seconds") && x["seconds"].is_array()) {
        for (const auto& v : x["seconds"]) {
          if (v.is_number()) k.seconds.push_back(v.get<double>());
        }
      }
      t.candidates.push_back(k);
    }
  }
  return t;
}

json to_json(const Done& e) {
  json j = {{"status", e.status}};
  put(j, "memory", e.memory);
  return j;
}

Done done_from(const Event& e) {
  Done d;
  read(e, "status", d.status);
  d.memory = raw(e, "memory");
  return d;
}

std::string state_file_name(int64_t step) { return "state-s" + std::to_string(step) + ".pt"; }

std::string checkpoint_file_name(int64_t run, int64_t step) {
  return "checkpoint-r" + std::to_string(run) + "-s" + std::to_string(step) + ".pt";
}

std::optional<CheckpointName> parse_checkpoint_file_name(const std::string& name) {
  // checkpoint-r<digits>-s<digits>.pt, nothing else.
  constexpr std::string_view kPrefix = "checkpoint-r", kMiddle = "-s", kSuffix = ".pt";
  const std::string_view n(name);
  if (n.size() <= kPrefix.size() + kMiddle.size() + kSuffix.size() || n.substr(0, kPrefix.size()) != kPrefix ||
      n.substr(n.size() - kSuffix.size()) != kSuffix) {
    return std::nullopt;
  }
  const std::string_view body = n.substr(kPrefix.size(), n.size() - kPrefix.size() - kSuffix.size());
  const size_t middle = body.find(kMiddle);
  if (middle == std::string_view::npos) return std::nullopt;
  CheckpointName out;
  auto number = [](std::string_view digits, int64_t* v) {
    const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), *v);
    return !digits.empty() && digits.front() != '-' && r.ec == std::errc() && r.ptr == digits.data() + digits.size();
  };
  if (!number(body.substr(0, middle), &out.run) || !number(body.substr(middle + kMiddle.size()), &out.step)) {
    return std::nullopt;
  }
  return out;
}


std::vector<const nlohmann::json*> FlatConfig::find(const std::string& key) const {
  std::vector<const nlohmann::json*> found;
  for (const auto& [k, v] : entries) {
    if (k == key) found.push_back(&v);
  }
  return found;
}

FlatConfig flatten_config(const nlohmann::json& config) {
  FlatConfig flat;
  if (!config.is_object()) return flat;
  // Iterative (Note [Depth is input]): a stack of (key so far, value).
  std::vector<std::pair<std::string, const nlohmann::json*>> stack;
  std::vector<std::pair<std::string, const nlohmann::json*>> top;
  for (auto it = config.begin(); it != config.end(); ++it) top.emplace_back(it.key(), &it.value());
  for (auto it = top.rbegin(); it != top.rend(); ++it) stack.push_back(std::move(*it));
  while (!stack.empty()) {
    auto [key, value] = std::move(stack.back());
    stack.pop_back();
    if (value->is_object()) {
      std::vector<std::pair<std::string, const nlohmann::json*>> children;
      for (auto it = value->begin(); it != value->end(); ++it) children.emplace_back(key + "." + it.key(), &it.value());
      for (auto it = children.rbegin(); it != children.rend(); ++it) stack.push_back(std::move(*it));
      continue;
    }
    if (key.size() > kMaxConfigKeyBytes || value->is_null()) continue;
    if (value->is_string() ? value->get_ref<const std::string&>().size() > kMaxConfigValueBytes
                           : value->is_array() && value->dump().size() > kMaxConfigValueBytes) {
      continue;
    }
    if (flat.entries.size() >= kMaxConfigKeys) {
      flat.cut = true;
      break;
    }
    flat.entries.emplace_back(key, *value);
  }
  return flat;
}

}  // namespace dbh::harness::proto
