#include "harness/scenario/scenario.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <sstream>

#include "harness/common/error.h"
#include "harness/common/text.h"
#include "harness/scenario/command_syntax.h"
#include "harness/scenario/fault_catalog.h"
#include "harness/scenario/profile.h"
#include "harness/scenario/schema.h"
#include "harness/scenario/reader.h"
#include "model/observed_modules.h"

namespace dbh::harness::scenario {
namespace fs = std::filesystem;

namespace {

// A fault parameter's value of type `type`, as a message's "expected …" says it.
std::string param_form(ParamType type) {
  switch (type) {
    case ParamType::kInt:
      return "an integer";
    case ParamType::kDouble:
      return "a number";
    case ParamType::kBool:
      return "true or false";
    case ParamType::kBytes:
      return "a size such as 512MiB";
    case ParamType::kModule:
    case ParamType::kModulePrefix:
      return "a module name";
    case ParamType::kString:
      break;
  }
  return "a string";
}

FaultConfig read_fault(const Value& v, size_t index, model::DecoderKind decoder, bool check_modules) {
  const std::string path = "faults[" + std::to_string(index) + "]";
  if (!v.is_map()) fail(v.loc, path, "a map with a fault name", v.describe());
  MapReader r(&v, path, v.loc);
  FaultConfig f;
  f.loc = v.loc;
  std::vector<std::string> names;
  for (const auto& spec : fault_catalog()) names.push_back(spec.name);
  const Value* name = r.get("name");
  if (name == nullptr) fail(v.loc, path + ".name", "a fault name (dbh list faults)", "none");
  f.name = r.string("name", "", names);
  const FaultSpec* spec = find_fault(f.name);
  f.at_step = r.integer("at_step", 0, 0, INT64_MAX);
  f.until_step = r.integer("until_step", spec->from_at_step_on ? INT64_MAX : f.at_step, 0, INT64_MAX);
  if (f.until_step < f.at_step) {
    fail(r.get("until_step")->loc, path + ".until_step",
         "a step >= at_step (" + std::to_string(f.at_step) + ")", std::to_string(f.until_step));
  }
  f.run = r.integer("run", -1, -1, INT64_MAX);
  for (const auto& p : spec->params) {
    const Value* x = r.get(p.name);
    if (x == nullptr) {
      if (p.required) {
        fail(v.loc, path + "." + p.name, "a " + to_string(p.type) + " (required by " + f.name + ")",
             "none");
      }
      if (!p.default_value.empty()) {
        std::optional<FaultParam> d = decode_fault_param(p, p.default_value);
        if (!d) throw std::logic_error("fault " + f.name + ": the default of " + p.name + " is not of its type");
        f.params[p.name] = std::move(*d);
      }
      continue;
    }
    // Written empty is a mistake, not "none" (the fault would do nothing),
    // unless empty is the parameter's own default.
    const bool empty_is_none = !p.required && p.default_value.empty();
    std::optional<FaultParam> param;
    if (x->is_scalar() && (!x->scalar.empty() || empty_is_none)) param = decode_fault_param(p, x->scalar);
    if (!param) fail(x->loc, path + "." + p.name, param_form(p.type), x->describe());
    if (p.type == ParamType::kString && !p.allowed.empty() &&
        std::find(p.allowed.begin(), p.allowed.end(), x->scalar) == p.allowed.end()) {
      fail(x->loc, path + "." + p.name, "one of " + join(p.allowed),
           x->describe() + did_you_mean(x->scalar, p.allowed));
    }
    f.params[p.name] = std::move(*param);
  }
  // Module names, written or defaults, must be ones the model reports.
  for (const auto& p : spec->params) {
    if (p.type != ParamType::kModule && p.type != ParamType::kModulePrefix) continue;
    const std::string& name = f.get(p.name);
    if (name.empty() || !check_modules) continue;
    const auto& known = model::observed_modules(decoder);
    const bool exact = std::find(known.begin(), known.end(), name) != known.end();
    const bool prefix =
        std::any_of(known.begin(), known.end(), [&](const std::string& n) { return n.rfind(name + ".", 0) == 0; });
    if (!exact && !(p.type == ParamType::kModulePrefix && prefix)) {
      const Value* x = v.find(p.name);
      fail(x ? x->loc : v.loc, path + "." + p.name, "a module name of the " + model::to_string(decoder) + " model",
           quoted_excerpt(name) + did_you_mean(name, known));
    }
  }
  r.finish();
  return f;
}

// name (default: the file's stem) and description.
void read_identity(MapReader& root, const std::string& file, Scenario& s) {
  // The default name is the file's stem, made one line of valid UTF-8.
  s.name = root.string("name", file.empty() ? "scenario" : one_line(fs::path(file).stem().string()));
  if (const Value* nv = root.get("name"); nv != nullptr && (s.name.empty() || s.name.size() > 200 || one_line(s.name) != s.name)) {
    // The name goes into file names, report titles, JUnit and scripts.
    fail(nv->loc, "name", "a one-line name of printable UTF-8 (at most 200 bytes)", nv->describe());
  }
  s.description = root.string("description", "");
  while (!s.description.empty() && std::isspace(static_cast<unsigned char>(s.description.back()))) {
    s.description.pop_back();
  }
  root.get("include");  // consumed by the loader
}

// Note [dbh owns its names]: the worker's environment and the keys dbh
// passes are dbh's to check. A variable name is a shell name
// ([A-Za-z_][A-Za-z0-9_]*), and the `DBH_` names are dbh's own (the protocol's
// DBH_EVENT_FD, DBH_SUPERVISOR_PID, …: a worker.env that set one would hand
// the worker a pipe that is not dbh's). A worker.keys entry maps a key of
// dbh's table to one word of the user's command (no space, no `=`): a
// misspelt dbh key would pass an empty value under the user's name.
// Where worker.<map>.<name> is written: its key (or, `value`, its value),
// else the map, else the worker section.
Location worker_entry_loc(const Value* worker, const Location& section_loc, const char* map, const std::string& name,
                          bool value = false) {
  const Value* m = worker != nullptr ? worker->find(map) : nullptr;
  const Value* v = m != nullptr ? m->find(name) : nullptr;
  return v != nullptr ? (value ? v->loc : v->key_loc) : (m != nullptr ? m->loc : section_loc);
}

void check_worker_names(const Value* worker, const Location& section_loc, const WorkerConfig& w) {
  const auto entry_loc = [&](const char* map, const std::string& name) {
    return worker_entry_loc(worker, section_loc, map, name);
  };
  for (const auto& [name, value] : w.env) {
    const bool shell_name = !name.empty() && (std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_') &&
                            std::all_of(name.begin(), name.end(), [](char c) {
                              return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                            });
    if (!shell_name) {
      fail(entry_loc("env", name), std::string(DBH_SCENARIO_KEY(worker.env)) + "." + quoted_excerpt(name),
           "a variable name ([A-Za-z_][A-Za-z0-9_]*)", quoted_excerpt(name));
    }
    if (name.rfind("DBH_", 0) == 0) {
      fail(entry_loc("env", name), std::string(DBH_SCENARIO_KEY(worker.env)) + "." + name,
           "a variable of the training's own (the DBH_ names are dbh's: it sets them for the worker)", name);
    }
  }
  std::vector<std::string> known;
  for (const auto& k : scenario_keys()) known.push_back(k.key);
  for (const auto& [dbh_key, user_key] : w.keys) {
    if (find_scenario_key(dbh_key) == nullptr) {
      fail(entry_loc("keys", dbh_key), std::string(DBH_SCENARIO_KEY(worker.keys)) + "." + quoted_excerpt(dbh_key),
           "a key of dbh's scenario (`dbh scenario keys`)" + did_you_mean(dbh_key, known), quoted_excerpt(dbh_key));
    }
    const bool one_word = std::none_of(user_key.begin(), user_key.end(), [](char c) {
      return c == '=' || std::isspace(static_cast<unsigned char>(c)) || std::iscntrl(static_cast<unsigned char>(c));
    });
    if (!one_word) {
      fail(entry_loc("keys", dbh_key), std::string(DBH_SCENARIO_KEY(worker.keys)) + "." + dbh_key,
           "the key it reaches the command as, one word without `=` or spaces (\"\" = not passed)",
           quoted_excerpt(user_key));
    }
  }
}

// Note [A command's own syntax]: each worker.written_as entry is a place in
// the command, and worker.syntax option names its option.
void check_worker_syntax(const Value* worker, const Location& section_loc, const WorkerConfig& w) {
  const auto entry_loc = [&](const char* map, const std::string& name) {
    return worker_entry_loc(worker, section_loc, map, name, /*value=*/true);
  };
  for (const auto& [key, place] : w.written_as) {
    const std::string problem = written_as_problem(w, place);
    if (!problem.empty()) {
      const bool plain = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
      });
      fail(entry_loc("written_as", key),
           std::string(DBH_SCENARIO_KEY(worker.written_as)) + "." + (plain ? key : quoted_excerpt(key)),
           problem, quoted_excerpt(place));
    }
  }
  const bool option_word = w.syntax_option.size() >= 2 && w.syntax_option[0] == '-' &&
                           std::none_of(w.syntax_option.begin(), w.syntax_option.end(), [](char c) {
                             return c == '=' || std::isspace(static_cast<unsigned char>(c)) ||
                                    std::iscntrl(static_cast<unsigned char>(c));
                           });
  if (w.syntax == CommandSyntax::kFile) {
    const std::string problem = written_as_problem(w, w.syntax_option);
    const auto place = parse_argument_place(w.syntax_option, nullptr);
    if (!problem.empty() || !place || place->kind != ArgumentPlace::Kind::kWord) {
      const Value* v = worker != nullptr ? worker->find("syntax_option") : nullptr;
      fail(v != nullptr ? v->loc : section_loc, DBH_SCENARIO_KEY(worker.syntax_option),
           "@N, the word of worker.command that names the config file, as worker.syntax is file" +
               (problem.empty() ? std::string() : " (" + problem + ")"),
           quoted_excerpt(w.syntax_option));
    }
  }
  if (w.syntax == CommandSyntax::kOption && !option_word) {
    const Value* v = worker != nullptr ? worker->find("syntax_option") : nullptr;
    fail(v != nullptr ? v->loc : section_loc, DBH_SCENARIO_KEY(worker.syntax_option),
         "the option your command takes key=value words after (`-o`, `--cfg-options`), as worker.syntax is option",
         quoted_excerpt(w.syntax_option));
  }
}

void read_worker(MapReader& root, const std::string& file, Scenario& s) {
  // Who trains comes first: the model's own module names and files are
  // checked only for dbh's built-in worker (an external one reports its
  // modules in `hello`, and its files are its own).
  const Value* worker = root.get("worker", false, kSectionForm);
  read_section(worker, "worker", s);
  check_worker_names(worker, worker != nullptr ? worker->loc : Location{file, 0, 0}, s.worker);
  check_worker_syntax(worker, worker != nullptr ? worker->loc : Location{file, 0, 0}, s.worker);
  if (s.worker.external() && s.worker.cwd.empty()) {
    s.worker.cwd = file.empty() || file == "scenario.resolved.json" ? fs::current_path().string()
                                                                     : fs::absolute(file).parent_path().string();
  }
}


void read_data(MapReader& root, const Value& tree, Scenario& s) {
  read_section(root.get("data", false, kSectionForm), "data", s);
  // An external worker without data.path trains on the dataset its own
  // configuration names.
  if (s.data.source == DataSource::kReal && s.data.path.empty() && !s.worker.external()) {
    fail(where(tree, "data"), DBH_SCENARIO_KEY(data.path),
         "a dataset folder when " + std::string(DBH_SCENARIO_KEY(data.source)) + " is real", "none");
  }
  if (s.data.size % 32 != 0) {
    fail(where(tree, DBH_SCENARIO_KEY(data.size)), DBH_SCENARIO_KEY(data.size), "a multiple of 32",
         std::to_string(s.data.size));
  }
  {
    const auto& val = s.data.val;
    if (val.holdout > 0 && !val.path.empty()) {
      fail(where(tree, DBH_SCENARIO_KEY(data.val.holdout)), DBH_SCENARIO_KEY(data.val.holdout),
           "0 when " + std::string(DBH_SCENARIO_KEY(data.val.path)) + " names a validation dataset",
           std::to_string(val.holdout));
    }
    if (val.holdout > 0 && s.data.source != DataSource::kReal) {
      fail(where(tree, DBH_SCENARIO_KEY(data.val.holdout)), DBH_SCENARIO_KEY(data.val.holdout),
           std::string(DBH_SCENARIO_KEY(data.source)) + " real (samples of a real dataset are held out)",
           std::string(DBH_SCENARIO_KEY(data.source)) + " " + to_string(s.data.source));
    }
    if (val.size % 32 != 0) {
      fail(where(tree, DBH_SCENARIO_KEY(data.val.size)), DBH_SCENARIO_KEY(data.val.size), "a multiple of 32",
           std::to_string(val.size));
    }
  }
}

void read_train(MapReader& root, const Value& tree, Scenario& s) {
  read_section(root.get("train", false, kSectionForm), "train", s);
  // dbh's own worker validates on data.val; an external worker on its own
  // validation data (Note [A worker's own validation metrics]).
  if (s.train.eval_every > 0 && !s.data.val.enabled() && !s.worker.external()) {
    fail(where(tree, DBH_SCENARIO_KEY(train.eval_every)), DBH_SCENARIO_KEY(train.eval_every),
         "a validation source (" + std::string(DBH_SCENARIO_KEY(data.val.path)) + " or " +
             DBH_SCENARIO_KEY(data.val.holdout) + ") to evaluate on",
         "none");
  }
}

void read_cluster(MapReader& root, const Value& tree, Scenario& s) {
  read_section(root.get("cluster", false, kSectionForm), "cluster", s);
  if (!s.cluster.time_limit.empty() && !is_slurm_time(s.cluster.time_limit)) {
    fail(where(tree, DBH_SCENARIO_KEY(cluster.time_limit)), DBH_SCENARIO_KEY(cluster.time_limit),
         "a Slurm time (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS)", quoted_excerpt(s.cluster.time_limit));
  }
  for (const auto& [key, value] : {std::pair<const char*, const std::string*>{DBH_SCENARIO_KEY(cluster.partition),
                                                                              &s.cluster.partition},
                                   {DBH_SCENARIO_KEY(cluster.gpu_type), &s.cluster.gpu_type}}) {
    if (!is_slurm_name(*value)) {
      fail(where(tree, key), key, "a name without spaces, commas, colons or '='", quoted_excerpt(*value));
    }
  }
}

void read_hardware(MapReader& root, const Value& tree, const std::string& file, Scenario& s) {
  read_section(root.get("hardware", false, kSectionForm), "hardware", s);
  {
    const std::string& device = s.hardware.device;
    int64_t ordinal = 0;
    if (!(device == "cpu" || device == "cuda" ||
          (device.rfind("cuda:", 0) == 0 && parse_int(device.substr(5), &ordinal) && ordinal >= 0 &&
           ordinal < 64))) {
      fail(where(tree, DBH_SCENARIO_KEY(hardware.device)), DBH_SCENARIO_KEY(hardware.device),
           "cpu, cuda or cuda:N (N a device index 0-63)", quoted_excerpt(device));
    }
  }
  if (!s.hardware.profile.empty()) {
    // The profile's memory is the budget unless one is given explicitly.
    try {
      const HardwareProfile p = load_profile(s.hardware.profile);
      if (s.hardware.memory_budget == 0) s.hardware.memory_budget = p.memory_bytes;
    } catch (const ScenarioError& e) {
      const Value* pv = written(tree, DBH_SCENARIO_KEY(hardware.profile));
      throw ScenarioError((pv ? pv->loc.str() : file) + ": " + e.what());
    }
  }
  // dbh's own worker runs AMP on CUDA only; a user's training decides for
  // itself (PyTorch autocasts fp16 and bf16 on the CPU too, Lightning refuses
  // "16-mixed" there with its own message).
  if (s.train.precision != model::Precision::kFp32 && s.hardware.device == "cpu" && !s.worker.external()) {
    const Value* prec = written(tree, DBH_SCENARIO_KEY(train.precision));
    fail(prec != nullptr ? prec->loc : Location{file, 0, 0}, DBH_SCENARIO_KEY(train.precision),
         "fp32 on " + std::string(DBH_SCENARIO_KEY(hardware.device)) + " cpu (AMP runs on CUDA)",
         quoted_excerpt(model::to_string(s.train.precision)));
  }
}

void read_faults(MapReader& root, const Value& tree, Scenario& s) {
  if (const Value* faults = root.get("faults", false, "a list of faults ([] for none)")) {
    if (!faults->is_seq()) fail(faults->loc, "faults", "a list of faults", faults->describe());
    for (size_t i = 0; i < faults->seq.size(); ++i) {
      s.faults.push_back(read_fault(faults->seq[i], i, s.model.decoder, !s.worker.external()));
    }
  }
  // A fault that can never fire is a mistake in the scenario.
  for (size_t i = 0; i < s.faults.size(); ++i) {
    const auto& f = s.faults[i];
    const FaultSpec* spec = find_fault(f.name);
    if (spec != nullptr && !spec->before_training && f.at_step >= s.train.max_steps) {
      const Value* faults = tree.find("faults");
      const Value& fv = faults->seq[i];
      const Value* at = fv.find("at_step");
      fail(at != nullptr ? at->loc : fv.loc, "faults[" + std::to_string(i) + "].at_step",
           "a step below " + std::string(DBH_SCENARIO_KEY(train.max_steps)) + " (" + std::to_string(s.train.max_steps) +
               ")",
           std::to_string(f.at_step));
    }
  }
}

}  // namespace

void check_subset_indices(const Value& tree, const Scenario& s, int64_t samples) {
  const Value* sub = written(tree, DBH_SCENARIO_KEY(data.subset));
  for (size_t i = 0; i < s.data.subset.size(); ++i) {
    if (s.data.subset[i] >= samples) {
      fail(sub != nullptr && sub->is_seq() && i < sub->seq.size() ? sub->seq[i].loc : where(tree, "data"),
           DBH_SCENARIO_KEY(data.subset),
           "sample indices below the dataset's " + std::to_string(samples) + " samples",
           std::to_string(s.data.subset[i]));
    }
  }
}

namespace {

void read_repeat(MapReader& root, const Value& tree, Scenario& s) {
  read_section(root.get("repeat", false, kSectionForm), "repeat", s);
  for (size_t i = 0; i < s.faults.size(); ++i) {
    if (s.faults[i].run >= s.repeat.in_process) {
      const Value& fv = tree.find("faults")->seq[i];
      const Value* run = fv.find("run");
      fail(run != nullptr ? run->loc : fv.loc, "faults[" + std::to_string(i) + "].run",
           "a run below " + std::string(DBH_SCENARIO_KEY(repeat.in_process)) + " (" +
               std::to_string(s.repeat.in_process) + ")",
           std::to_string(s.faults[i].run));
    }
  }
}

}  // namespace

void check_fault_placements(const Value& tree, const Scenario& s,
                            const std::function<std::optional<int64_t>()>& samples, bool reads_inputs) {
  // A fault that cannot act where it is placed is a mistake in the scenario:
  // each fault's placement rules are in its catalog entry (Note [Fault
  // registry]).
  const Value* data = tree.find("data");
  const Value* source = data != nullptr && data->is_map() ? data->find("source") : nullptr;
  // (A resolved scenario, as a worker reads it, was checked when it was
  // loaded from its files.)
  const bool source_overridden = source != nullptr && (source->loc.file.rfind("<override", 0) == 0 ||
                                                       source->loc.file == "scenario.resolved.json");
  for (size_t i = 0; i < s.faults.size(); ++i) {
    const FaultSpec* spec = find_fault(s.faults[i].name);
    if (spec == nullptr || spec->check == nullptr) continue;
    const Value& fv = tree.find("faults")->seq[i];
    const std::string path = "faults[" + std::to_string(i) + "]";
    auto at = [&](const std::string& key) -> Location {
      const Value* x = key.empty() ? nullptr : fv.find(key);
      return x != nullptr ? x->loc : fv.loc;
    };
    FaultPlacement placement{s.faults[i], s, samples, reads_inputs, source_overridden, {}, {}};
    placement.fail_param = [&](const std::string& param, const std::string& expected, const std::string& got) {
      fail(at(param), path + "." + param, expected, got);
    };
    placement.fail = [&](const std::string& expected, const std::string& got, const std::string& at_param) {
      fail(at(at_param), path, expected, got);
    };
    spec->check(placement);
  }
}

namespace {

// expect: the outcome and evidence the scenario expects.
void read_expect(MapReader& root, Scenario& s) {
  {
    MapReader r(root.get("expect", false, "a map of expectations"), "expect", root.loc(), /*nulls_unset=*/true);
    s.expect.outcome = *outcome_from_string(r.string("outcome", "passed", outcome_names()));
    s.expect.failure_class = r.opt_string("failure_class");
    if (s.expect.failure_class) {
      const auto classes = known_failure_classes();
      if (!classes.empty() && std::find(classes.begin(), classes.end(), *s.expect.failure_class) == classes.end()) {
        fail(r.get("failure_class")->loc, "expect.failure_class", "a failure class of the knowledge base (" +
             join(classes) + ")", quoted_excerpt(*s.expect.failure_class) + did_you_mean(*s.expect.failure_class, classes));
      }
    }
    if (const Value* st = r.get("step")) {
      r.get("step");
      int64_t v = 0;
      if (!st->is_scalar() || !parse_int(st->scalar, &v) || v < 0) {
        fail(st->loc, "expect.step", "a non-negative integer", st->describe());
      }
      if (v >= s.train.max_steps) {
        fail(st->loc, "expect.step",
             "a step below " + std::string(DBH_SCENARIO_KEY(train.max_steps)) + " (" +
                 std::to_string(s.train.max_steps) + ")",
             std::to_string(v));
      }
      s.expect.step = v;
    }
    s.expect.module = r.opt_string("module");
    if (s.expect.module && !s.worker.external()) {
      const auto& known = model::observed_modules(s.model.decoder);
      const std::string& m = *s.expect.module;
      const bool ok = std::any_of(known.begin(), known.end(), [&](const std::string& n) {
        return n == m || n.rfind(m + ".", 0) == 0 || m.rfind(n + ".", 0) == 0;
      });
      if (!ok) {
        fail(r.get("module")->loc, "expect.module",
             "a module name of the " + model::to_string(s.model.decoder) + " model",
             quoted_excerpt(m) + did_you_mean(m, known));
      }
    }
    s.expect.deterministic = r.opt_boolean("deterministic");
    if (const Value* m = r.get("max_peak_memory")) {
      const auto b = m->is_scalar() ? parse_bytes(m->scalar) : std::nullopt;
      if (!b) fail(m->loc, "expect.max_peak_memory", "a size such as 2GiB", m->describe());
      s.expect.max_peak_memory = *b;
    }
    s.expect.data_dependent = r.opt_boolean("data_dependent");
    if (r.get("min_hmean") != nullptr) {
      s.expect.min_hmean = r.number("min_hmean", 0.0, 0.0, 1.0);
      if (s.train.eval_every == 0) {
        fail(r.get("min_hmean")->loc, "expect.min_hmean",
             "validation during training (" + std::string(DBH_SCENARIO_KEY(train.eval_every)) + " > 0)",
             std::string(DBH_SCENARIO_KEY(train.eval_every)) + " 0");
      }
    }
    if (r.get("loss_drop") != nullptr) {
      s.expect.loss_drop = r.number("loss_drop", 0.0, 0.0, 1.0);
      // One step has no trend: the expectation could never be judged.
      if (s.train.max_steps < 2) {
        fail(r.get("loss_drop")->loc, "expect.loss_drop",
             "a run of at least 2 steps (" + std::string(DBH_SCENARIO_KEY(train.max_steps)) + ")",
             std::string(DBH_SCENARIO_KEY(train.max_steps)) + " " + std::to_string(s.train.max_steps));
      }
    }
    // Determinism is judged by comparing fresh processes: with one there is
    // nothing to compare, and the run would fail without a check.
    if (s.expect.deterministic && s.repeat.processes < 2) {
      fail(r.get("deterministic")->loc, "expect.deterministic",
           "at least 2 fresh processes to compare (" + std::string(DBH_SCENARIO_KEY(repeat.processes)) + ")",
           std::string(DBH_SCENARIO_KEY(repeat.processes)) + " " + std::to_string(s.repeat.processes));
    }
    r.finish();
  }
}

// controls: override lists run beside the main trial.
void read_controls(MapReader& root, Scenario& s) {
  if (const Value* controls = root.get("controls", false, "a list of override lists")) {
    if (!controls->is_seq()) {
      fail(controls->loc, "controls", "a list of override lists", controls->describe());
    }
    for (size_t i = 0; i < controls->seq.size(); ++i) {
      const Value& c = controls->seq[i];
      std::vector<std::string> overrides;
      if (c.is_scalar()) {
        overrides.push_back(c.scalar);
      } else if (c.is_seq()) {
        for (const auto& o : c.seq) {
          if (!o.is_scalar()) {
            fail(o.loc, "controls[" + std::to_string(i) + "]", "key=value strings", o.describe());
          }
          overrides.push_back(o.scalar);
        }
      } else {
        fail(c.loc, "controls[" + std::to_string(i) + "]", "a list of key=value strings",
             c.describe());
      }
      for (const auto& o : overrides) {
        if (!is_override(o)) {
          fail(c.loc, "controls[" + std::to_string(i) + "]", "key=value", quoted_excerpt(o));
        }
      }
      s.controls.push_back(overrides);
    }
  }
}

}  // namespace

Scenario decode_scenario(const Value& tree, const std::string& file) {
  Scenario s;
  s.file = file;
  const Location top{file, 1, 1};
  MapReader root(&tree, "", top);
  read_identity(root, file, s);
  read_worker(root, file, s);
  // The table's keys (schema.h), section by section, each followed by the
  // checks that involve more than one key or the file system.
  read_section(root.get("model", false, kSectionForm), "model", s);
  read_data(root, tree, s);
  read_train(root, tree, s);
  read_hardware(root, tree, file, s);
  read_section(root.get("monitors", false, kSectionForm), "monitors", s);
  read_faults(root, tree, s);
  // Without reading the dataset, only synthetic data says how many samples
  // there are (a real dataset's are checked with its inputs).
  const std::optional<int64_t> samples =
      s.data.source == DataSource::kReal ? std::nullopt : std::optional<int64_t>(s.data.samples);
  if (samples) check_subset_indices(tree, s, *samples);
  read_repeat(root, tree, s);
  check_fault_placements(tree, s, [samples] { return samples; }, /*reads_inputs=*/false);
  read_section(root.get("limits", false, kSectionForm), "limits", s);
  read_expect(root, s);
  read_controls(root, s);
  read_cluster(root, tree, s);
  root.finish();
  s.resolved = parse_yaml(resolved_json(s), file);
  return s;
}

}  // namespace dbh::harness::scenario
