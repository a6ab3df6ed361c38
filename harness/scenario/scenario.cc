#include "harness/scenario/scenario.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "harness/common/error.h"
#include "harness/common/files.h"
#include "harness/common/hash.h"
#include "harness/common/text.h"
#include "harness/kb/knowledge_base.h"
#include "model/data/dataset_copy.h"
#include "model/data/scan.h"
#include "harness/scenario/fault_catalog.h"
#include "harness/scenario/aliases.h"
#include "harness/scenario/profile.h"
#include "harness/scenario/schema.h"

namespace dbh::harness {
namespace fs = std::filesystem;

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::optional<int64_t> parse_bytes(const std::string& text) {
  std::string s;
  for (char c : text) {
    if (c != ' ' && c != '_') s.push_back(c);
  }
  if (s.empty()) return std::nullopt;
  size_t pos = 0;
  double number = 0;
  try {
    number = std::stod(s, &pos);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  // Decimal only: stod also reads hexadecimal ("0x10" is 16, "0x1p30" a GiB).
  if (s.find_first_of("xX") < pos) return std::nullopt;
  const std::string unit = s.substr(pos);
  static const std::vector<std::pair<std::string, double>> kUnits = {
      {"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
      {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
      {"K", 1024.0}, {"M", 1048576.0}, {"G", 1073741824.0}};
  for (const auto& [u, mult] : kUnits) {
    if (unit == u) {
      const double bytes = number * mult;
      if (!std::isfinite(bytes) || bytes < 0 || bytes > 9.2e18) return std::nullopt;
      return static_cast<int64_t>(std::llround(bytes));
    }
  }
  return std::nullopt;
}

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (std::fabs(v) >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(u == 0 ? 0 : 1);
  s << v << " " << units[u];
  return s.str();
}

const std::vector<std::string>& known_module_names(const std::string& decoder) {
  static const std::vector<std::string> kHead = {
      "head.prob.conv", "head.prob.up1", "head.prob.up2", "head.thresh.conv",
      "head.thresh.up1", "head.thresh.up2", "head.binarize"};
  static const std::vector<std::string> kEncoder = {"encoder.stem", "encoder.layer1",
                                                    "encoder.layer2", "encoder.layer3",
                                                    "encoder.layer4"};
  auto build = [&](std::vector<std::string> dec) {
    std::vector<std::string> all = kEncoder;
    all.insert(all.end(), dec.begin(), dec.end());
    all.insert(all.end(), kHead.begin(), kHead.end());
    return all;
  };
  static const std::vector<std::string> kFpn =
      build({"decoder.lateral5", "decoder.lateral4", "decoder.lateral3", "decoder.lateral2",
             "decoder.smooth5", "decoder.smooth4", "decoder.smooth3", "decoder.smooth2",
             "decoder.fusion"});
  static const std::vector<std::string> kPan =
      build({"decoder.lateral5", "decoder.lateral4", "decoder.lateral3", "decoder.lateral2",
             "decoder.smooth4", "decoder.smooth3", "decoder.smooth2", "decoder.merge3",
             "decoder.merge4", "decoder.merge5", "decoder.fusion"});
  return decoder == "pan" ? kPan : kFpn;
}

const std::vector<std::string>& modules_with_parameters(const std::string& decoder) {
  static const auto filter = [](const std::vector<std::string>& all) {
    std::vector<std::string> out;
    for (const auto& n : all) {
      if (n != "head.binarize") out.push_back(n);  // sigmoid(k(P-T)): no parameters
    }
    return out;
  };
  static const std::vector<std::string> kFpn = filter(known_module_names("fpn"));
  static const std::vector<std::string> kPan = filter(known_module_names("pan"));
  return decoder == "pan" ? kPan : kFpn;
}

std::vector<std::string> known_failure_classes() {
  std::vector<std::string> out;
  for (const auto& c : KnowledgeBase::shipped().classes()) out.push_back(c.id);
  if (!out.empty()) out.push_back("exception");  // an error no signature matches
  return out;
}

namespace {

// Reads the keys of one map that the key table (schema.h) does not hold: the
// top level, a fault, the expectation. Checks types, ranges and unknown keys.
class MapReader {
 public:
  // `nulls_unset`: every key of this map may be written empty to unset it
  // (the expectation's, which an override such as expect.step=null drops).
  MapReader(const Value* v, std::string path, Location fallback, bool nulls_unset = false)
      : v_(v), path_(std::move(path)), fallback_(std::move(fallback)), nulls_unset_(nulls_unset) {
    if (v_ != nullptr && !v_->is_map() && !v_->is_null()) {
      fail(v_->loc, path_, "a map", v_->describe());
    }
  }

  std::string key(const std::string& k) const { return path_.empty() ? k : path_ + "." + k; }

  // The value written for `k`, or null when none is. A key written with an
  // empty value ("at_step:") is refused unless null says something for it
  // (`unset`: an optional expectation left to its default).
  const Value* get(const std::string& k, bool null_means_unset = false, const std::string& expected = "a value") {
    known_.push_back(k);
    if (v_ == nullptr || !v_->is_map()) return nullptr;
    const Value* x = v_->find(k);
    if (x != nullptr && x->is_null() && !null_means_unset && !nulls_unset_) fail_empty(*x, key(k), expected);
    return (x == nullptr || x->is_null()) ? nullptr : x;
  }

  const Value& scalar(const std::string& k, const Value* x, const char* expected) {
    if (!x->is_scalar()) fail(x->loc, key(k), expected, x->describe());
    return *x;
  }

  int64_t integer(const std::string& k, int64_t def, int64_t lo, int64_t hi) {
    const std::string expected = hi == INT64_MAX ? "an integer >= " + std::to_string(lo)
                                                 : "an integer in [" + std::to_string(lo) + ", " +
                                                       std::to_string(hi) + "]";
    const Value* x = get(k, false, expected);
    if (x == nullptr) return def;
    int64_t v = 0;
    if (!parse_int(scalar(k, x, expected.c_str()).scalar, &v) || v < lo || v > hi) {
      fail(x->loc, key(k), expected, x->describe());
    }
    return v;
  }

  double number(const std::string& k, double def, double lo, double hi, bool lo_open = false) {
    std::ostringstream e;
    e << "a number " << (lo_open ? "> " : ">= ") << lo;
    if (hi < 1e300) e << " and <= " << hi;
    const Value* x = get(k, false, e.str());
    if (x == nullptr) return def;
    double v = 0;
    if (!parse_double(scalar(k, x, e.str().c_str()).scalar, &v) || v < lo || (lo_open && v == lo) ||
        v > hi) {
      fail(x->loc, key(k), e.str(), x->describe());
    }
    return v;
  }

  bool boolean(const std::string& k, bool def) {
    const Value* x = get(k, false, "true or false");
    if (x == nullptr) return def;
    bool v = false;
    if (!parse_bool(scalar(k, x, "true or false").scalar, &v)) {
      fail(x->loc, key(k), "true or false", x->describe());
    }
    return v;
  }

  std::optional<bool> opt_boolean(const std::string& k) {
    if (get(k, true) == nullptr) return std::nullopt;
    known_.pop_back();
    return boolean(k, false);
  }

  std::string string(const std::string& k, const std::string& def,
                     const std::vector<std::string>& allowed = {}) {
    const std::string expected =
        allowed.empty() ? std::string("a string") : "one of " + join(allowed);
    const Value* x = get(k, false, expected);
    if (x == nullptr) return def;
    const std::string& s = scalar(k, x, expected.c_str()).scalar;
    if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), s) == allowed.end()) {
      fail(x->loc, key(k), expected, x->describe() + did_you_mean(s, allowed));
    }
    return s;
  }

  std::optional<std::string> opt_string(const std::string& k,
                                        const std::vector<std::string>& allowed = {}) {
    if (get(k, true) == nullptr) return std::nullopt;
    known_.pop_back();
    return string(k, "", allowed);
  }

  // Unknown keys are errors, with a suggestion among the known ones.
  void finish() {
    if (v_ == nullptr || !v_->is_map()) return;
    // Each known key once, in the order first read (a key read twice, as
    // `name` is, would be listed twice).
    std::vector<std::string> known;
    for (const auto& k : known_) {
      if (std::find(known.begin(), known.end(), k) == known.end()) known.push_back(k);
    }
    for (const auto& [k, x] : v_->map) {
      if (std::find(known.begin(), known.end(), k) == known.end()) {
        throw ScenarioError(x.key_loc.str() + ": " + key(k) + ": expected one of " +
                            join(known) + ", got an unknown key" + did_you_mean(k, known));
      }
    }
  }

  const Location& loc() const { return v_ != nullptr ? v_->loc : fallback_; }

 private:
  const Value* v_;
  std::string path_;
  Location fallback_;
  bool nulls_unset_ = false;
  std::vector<std::string> known_;
};

const std::vector<std::string> kOutcomes = {"passed",   "failed",           "crashed",
                                            "timed_out", "hung",            "diverged",
                                            "nondeterministic", "leaked",   "skipped",
                                            "unresolved"};

FaultConfig read_fault(const Value& v, size_t index, const std::string& decoder, bool check_modules) {
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
      if (!p.default_value.empty()) f.params[p.name] = p.default_value;
      continue;
    }
    r.get(p.name);  // keep it known
    switch (p.type) {
      case ParamType::kInt: {
        int64_t i = 0;
        if (!x->is_scalar() || !parse_int(x->scalar, &i)) {
          fail(x->loc, path + "." + p.name, "an integer", x->describe());
        }
        break;
      }
      case ParamType::kDouble: {
        double d = 0;
        if (!x->is_scalar() || !parse_double(x->scalar, &d)) {
          // 1e39 overflows a double check only in float; accept any finite.
          fail(x->loc, path + "." + p.name, "a number", x->describe());
        }
        break;
      }
      case ParamType::kBool: {
        bool b = false;
        if (!x->is_scalar() || !parse_bool(x->scalar, &b)) {
          fail(x->loc, path + "." + p.name, "true or false", x->describe());
        }
        break;
      }
      case ParamType::kBytes:
        if (!x->is_scalar() || !parse_bytes(x->scalar)) {
          fail(x->loc, path + "." + p.name, "a size such as 512MiB", x->describe());
        }
        break;
      case ParamType::kModule:
      case ParamType::kModulePrefix:  // checked against the model below, defaults too
        // Written empty is a mistake, not "no module" (the fault would do
        // nothing), unless empty is the parameter's own default ("none").
        if (!x->is_scalar() || (x->scalar.empty() && (p.required || !p.default_value.empty()))) {
          fail(x->loc, path + "." + p.name, "a module name", x->describe());
        }
        break;
      case ParamType::kString:
        if (!x->is_scalar() || (x->scalar.empty() && (p.required || !p.default_value.empty()))) {
          fail(x->loc, path + "." + p.name, "a string", x->describe());
        }
        if (!p.allowed.empty() &&
            std::find(p.allowed.begin(), p.allowed.end(), x->scalar) == p.allowed.end()) {
          fail(x->loc, path + "." + p.name, "one of " + join(p.allowed),
               x->describe() + did_you_mean(x->scalar, p.allowed));
        }
        break;
    }
    f.params[p.name] = x->scalar;
  }
  // Module names, written or defaults, must be ones the model reports.
  for (const auto& p : spec->params) {
    if (p.type != ParamType::kModule && p.type != ParamType::kModulePrefix) continue;
    const std::string& name = f.params[p.name];
    if (name.empty() || !check_modules) continue;
    const auto& known = known_module_names(decoder);
    const bool exact = std::find(known.begin(), known.end(), name) != known.end();
    const bool prefix =
        std::any_of(known.begin(), known.end(), [&](const std::string& n) { return n.rfind(name + ".", 0) == 0; });
    if (!exact && !(p.type == ParamType::kModulePrefix && prefix)) {
      const Value* x = v.find(p.name);
      fail(x ? x->loc : v.loc, path + "." + p.name, "a module name of the " + decoder + " model",
           quoted_excerpt(name) + did_you_mean(name, known));
    }
  }
  r.finish();
  return f;
}

std::optional<int64_t> dataset_size(const std::string& root) {
  const model::ScanResult scan = model::scan_dataset(root, model::OnInvalid::kError, {}, /*check_images=*/false);
  if (!scan.readable) return std::nullopt;
  return scan.images_listed;
}

// The value written for the dotted `key` in `tree`, or null when it is not
// written (or written as null).
const Value* written(const Value& tree, const std::string& key) {
  const Value* v = &tree;
  std::stringstream parts(key);
  for (std::string part; std::getline(parts, part, '.');) {
    v = v->is_map() ? v->find(part) : nullptr;
    if (v == nullptr) return nullptr;
  }
  return v->is_null() ? nullptr : v;
}

// Where `key` is written, else where its nearest written parent is (the
// scenario's top when none is).
Location where(const Value& tree, std::string key) {
  for (;;) {
    if (const Value* v = written(tree, key)) return v->loc;
    const size_t dot = key.rfind('.');
    if (dot == std::string::npos) return tree.loc;
    key.resize(dot);
  }
}

}  // namespace

int64_t FaultConfig::get_int(const std::string& key) const {
  int64_t v = 0;
  parse_int(get(key), &v);
  return v;
}
double FaultConfig::get_double(const std::string& key) const {
  return std::strtod(get(key).c_str(), nullptr);
}
bool FaultConfig::get_bool(const std::string& key) const {
  bool b = false;
  parse_bool(get(key), &b);
  return b;
}
int64_t FaultConfig::get_bytes(const std::string& key) const {
  return parse_bytes(get(key)).value_or(0);
}
const std::string& FaultConfig::get(const std::string& key) const {
  static const std::string kEmpty;
  const auto it = params.find(key);
  return it == params.end() ? kEmpty : it->second;
}
bool FaultConfig::fires_at(int64_t step, int64_t run_index) const {
  return step >= at_step && step <= until_step && (run < 0 || run == run_index);
}

// A section written with nothing after it ("train:") would replace what the
// included files set with the defaults: refused like an empty key.
const char* const kSectionForm = "a map of its keys";

namespace {

// The first defect no policy accepts in the dataset at `path` ("" when
// none). A bisection loads its scenario once per probe: the annotations are
// scanned again only when they or the folders' listings changed.
std::string dataset_refusal(const std::string& path) {
  std::ostringstream key;
  for (const char* part : {"", "annotations.json", "icdar", "images"}) {
    key << file_state((fs::path(path) / part).string()) << '\0';
  }
  static std::map<std::string, std::string> answers;
  if (const auto it = answers.find(key.str()); it != answers.end()) return it->second;
  std::string refusal;
  const model::ScanResult scan = model::scan_dataset(path, model::OnInvalid::kError, {}, /*check_images=*/false);
  for (const auto& d : scan.defects) {
    if (model::refuses_dataset(d.kind)) {
      refusal = one_line(d.message);
      break;
    }
  }
  if (answers.size() < 64) answers.emplace(key.str(), refusal);
  return refusal;
}

}  // namespace

namespace {

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

void read_worker(MapReader& root, const Value& tree, const std::string& file, Scenario& s) {
  // Who trains comes first: the model's own module names and files are
  // checked only for dbh's built-in worker (an external one reports its
  // modules in `hello`, and its files are its own).
  read_section(root.get("worker", false, kSectionForm), "worker", s);
  if (s.worker.external() && s.worker.cwd.empty()) {
    s.worker.cwd = file.empty() || file == "scenario.resolved.json" ? fs::current_path().string()
                                                                     : fs::absolute(file).parent_path().string();
  }
  if (s.worker.external() && !fs::is_directory(s.worker.cwd)) {
    fail(where(tree, DBH_SCENARIO_KEY(worker.cwd)), DBH_SCENARIO_KEY(worker.cwd), "an existing folder",
         quoted_excerpt(s.worker.cwd));
  }
}

void read_model(MapReader& root, const Value& tree, Scenario& s) {
  read_section(root.get("model", false, kSectionForm), "model", s);
  if (!s.model.weights.empty()) {
    check_checkpoint_file(s.model.weights, where(tree, DBH_SCENARIO_KEY(model.weights)).str(),
                          DBH_SCENARIO_KEY(model.weights));
  }
}

void read_data(MapReader& root, const Value& tree, Scenario& s) {
  read_section(root.get("data", false, kSectionForm), "data", s);
  // An external worker without data.path trains on the dataset its own
  // configuration names.
  if (s.data.source == "real" && s.data.path.empty() && !s.worker.external()) {
    fail(where(tree, "data"), DBH_SCENARIO_KEY(data.path),
         "a dataset folder when " + std::string(DBH_SCENARIO_KEY(data.source)) + " is real", "none");
  }
  if (s.data.source == "real" && !s.data.path.empty() && !fs::is_directory(s.data.path)) {
    fail(where(tree, DBH_SCENARIO_KEY(data.path)), DBH_SCENARIO_KEY(data.path), "an existing dataset folder",
         quoted_excerpt(s.data.path));
  }
  if (s.data.source == "real" && !s.data.path.empty()) {
    // The annotation file is read whole: it must be a regular file, never
    // a FIFO or a device that would block or never end.
    const fs::path ann = fs::path(s.data.path) / "annotations.json";
    std::error_code ec;
    if (fs::exists(fs::symlink_status(ann, ec)) || fs::is_symlink(fs::symlink_status(ann, ec))) {
      check_input_file(ann.string(), "an annotation file (a regular file)",
                       where(tree, DBH_SCENARIO_KEY(data.path)).str(), DBH_SCENARIO_KEY(data.path));
    }
    // A dataset no policy can use (an image annotated twice, a name that
    // leaves the folder) is bad input, as in every command that reads it,
    // not a training failure to report.
    if (const std::string refusal = dataset_refusal(s.data.path); !refusal.empty()) {
      fail(where(tree, DBH_SCENARIO_KEY(data.path)), DBH_SCENARIO_KEY(data.path),
           "a dataset every image of which is annotated once, inside its folder", refusal);
    }
  }
  if (s.data.size % 32 != 0) {
    fail(where(tree, DBH_SCENARIO_KEY(data.size)), DBH_SCENARIO_KEY(data.size), "a multiple of 32",
         std::to_string(s.data.size));
  }
  {
    const auto& val = s.data.val;
    if (!val.path.empty() && !fs::is_directory(val.path)) {
      fail(where(tree, DBH_SCENARIO_KEY(data.val.path)), DBH_SCENARIO_KEY(data.val.path), "an existing dataset folder",
           quoted_excerpt(val.path));
    }
    if (val.holdout > 0 && !val.path.empty()) {
      fail(where(tree, DBH_SCENARIO_KEY(data.val.holdout)), DBH_SCENARIO_KEY(data.val.holdout),
           "0 when " + std::string(DBH_SCENARIO_KEY(data.val.path)) + " names a validation dataset",
           std::to_string(val.holdout));
    }
    if (val.holdout > 0 && s.data.source != "real") {
      fail(where(tree, DBH_SCENARIO_KEY(data.val.holdout)), DBH_SCENARIO_KEY(data.val.holdout),
           std::string(DBH_SCENARIO_KEY(data.source)) + " real (samples of a real dataset are held out)",
           std::string(DBH_SCENARIO_KEY(data.source)) + " " + s.data.source);
    }
    if (val.size % 32 != 0) {
      fail(where(tree, DBH_SCENARIO_KEY(data.val.size)), DBH_SCENARIO_KEY(data.val.size), "a multiple of 32",
           std::to_string(val.size));
    }
  }
}

void read_train(MapReader& root, const Value& tree, Scenario& s) {
  read_section(root.get("train", false, kSectionForm), "train", s);
  if (!s.train.resume_from.empty()) {
    check_checkpoint_file(s.train.resume_from, where(tree, DBH_SCENARIO_KEY(train.resume_from)).str(),
                          DBH_SCENARIO_KEY(train.resume_from));
  }
  if (s.train.eval_every > 0 && !s.data.val.enabled()) {
    fail(where(tree, DBH_SCENARIO_KEY(train.eval_every)), DBH_SCENARIO_KEY(train.eval_every),
         "a validation source (" + std::string(DBH_SCENARIO_KEY(data.val.path)) + " or " +
             DBH_SCENARIO_KEY(data.val.holdout) + ") to evaluate on",
         "none");
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
  if (s.train.precision != "fp32" && s.hardware.device == "cpu" && !s.worker.external()) {
    const Value* prec = written(tree, DBH_SCENARIO_KEY(train.precision));
    fail(prec != nullptr ? prec->loc : Location{file, 0, 0}, DBH_SCENARIO_KEY(train.precision),
         "fp32 on " + std::string(DBH_SCENARIO_KEY(hardware.device)) + " cpu (AMP runs on CUDA)",
         quoted_excerpt(s.train.precision));
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

// The number of samples training reads, when it is known without training
// (data.samples, or the dataset's when data.subset or data.val.holdout
// need it).
std::optional<int64_t> check_sample_indices(MapReader& root, const Value& tree, const Scenario& s) {
  // Sample indices must exist in the data the run will read.
  std::optional<int64_t> samples;
  if (s.data.source == "real") {
    if (!s.data.subset.empty() || s.data.val.holdout > 0) samples = dataset_size(s.data.path);
    if (samples && s.data.val.holdout > 0) {
      const Value* data = tree.find("data");
      const Value* val = data != nullptr && data->is_map() ? data->find("val") : nullptr;
      const Value* h = val != nullptr && val->is_map() ? val->find("holdout") : nullptr;
      if (s.data.val.holdout >= *samples) {
        fail(h != nullptr ? h->loc : root.loc(), DBH_SCENARIO_KEY(data.val.holdout),
             "fewer samples than the dataset's " + std::to_string(*samples) + " (some must be left to train on)",
             std::to_string(s.data.val.holdout));
      }
      // Training sees the samples before the held-out ones.
      samples = *samples - s.data.val.holdout;
    }
  } else {
    samples = s.data.samples;
  }
  if (samples) {
    const Value* data = tree.find("data");
    const Value* sub = data != nullptr && data->is_map() ? data->find("subset") : nullptr;
    for (size_t i = 0; i < s.data.subset.size(); ++i) {
      if (s.data.subset[i] >= *samples) {
        fail(sub != nullptr && sub->is_seq() && i < sub->seq.size() ? sub->seq[i].loc : root.loc(),
             DBH_SCENARIO_KEY(data.subset),
             "sample indices below the dataset's " + std::to_string(*samples) + " samples",
             std::to_string(s.data.subset[i]));
      }
    }
  }
  return samples;
}

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

void check_fault_placements(const Value& tree, const Scenario& s, const std::optional<int64_t>& samples) {
  // A fault that cannot act where it is placed is a mistake in the scenario:
  // each fault's placement rules are in its catalog entry (Note [Fault
  // registry]).
  {
    const Value* data = tree.find("data");
    const Value* source = data != nullptr && data->is_map() ? data->find("source") : nullptr;
    // (A resolved scenario, as a worker reads it, was checked when it was
    // loaded from its files.)
    const bool source_overridden = source != nullptr && (source->loc.file.rfind("<override", 0) == 0 ||
                                                         source->loc.file == "scenario.resolved.json");
    std::optional<std::optional<int64_t>> training_samples;  // read on first use
    if (samples || s.data.source != "real") training_samples = samples;
    for (size_t i = 0; i < s.faults.size(); ++i) {
      const FaultSpec* spec = find_fault(s.faults[i].name);
      if (spec == nullptr || spec->check == nullptr) continue;
      const Value& fv = tree.find("faults")->seq[i];
      const std::string path = "faults[" + std::to_string(i) + "]";
      auto at = [&](const std::string& key) -> Location {
        const Value* x = key.empty() ? nullptr : fv.find(key);
        return x != nullptr ? x->loc : fv.loc;
      };
      FaultPlacement placement{s.faults[i], s, {}, source_overridden, {}, {}};
      placement.samples = [&]() -> std::optional<int64_t> {
        if (!training_samples) {
          std::optional<int64_t> n = dataset_size(s.data.path);
          if (n) n = *n - s.data.val.holdout;
          training_samples = n;
        }
        return *training_samples;
      };
      placement.fail_param = [&](const std::string& param, const std::string& expected, const std::string& got) {
        fail(at(param), path + "." + param, expected, got);
      };
      placement.fail = [&](const std::string& expected, const std::string& got, const std::string& at_param) {
        fail(at(at_param), path, expected, got);
      };
      spec->check(placement);
    }
  }
}

// expect: the outcome and evidence the scenario expects.
void read_expect(MapReader& root, Scenario& s) {
  {
    MapReader r(root.get("expect", false, "a map of expectations"), "expect", root.loc(), /*nulls_unset=*/true);
    s.expect.outcome = r.string("outcome", "passed", kOutcomes);
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
      const auto& known = known_module_names(s.model.decoder);
      const std::string& m = *s.expect.module;
      const bool ok = std::any_of(known.begin(), known.end(), [&](const std::string& n) {
        return n == m || n.rfind(m + ".", 0) == 0 || m.rfind(n + ".", 0) == 0;
      });
      if (!ok) {
        fail(r.get("module")->loc, "expect.module", "a module name of the " + s.model.decoder + " model",
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

Scenario scenario_from_tree(const Value& tree, const std::string& file) {
  Scenario s;
  s.file = file;
  const Location top{file, 1, 1};
  MapReader root(&tree, "", top);
  read_identity(root, file, s);
  read_worker(root, tree, file, s);
  // The table's keys (schema.h), section by section, each followed by the
  // checks that involve more than one key or the file system.
  read_model(root, tree, s);
  read_data(root, tree, s);
  read_train(root, tree, s);
  read_hardware(root, tree, file, s);
  read_section(root.get("monitors", false, kSectionForm), "monitors", s);
  read_faults(root, tree, s);
  const std::optional<int64_t> samples = check_sample_indices(root, tree, s);
  read_repeat(root, tree, s);
  check_fault_placements(tree, s, samples);
  read_section(root.get("limits", false, kSectionForm), "limits", s);
  read_expect(root, s);
  read_controls(root, s);
  root.finish();
  s.resolved = parse_yaml(resolved_json(s), file);
  return s;
}

namespace {

// Includes form a tree of at most kMaxIncludeDepth levels and
// kMaxIncludes files in all, so no scenario can make the loader read without
// bound.
constexpr size_t kMaxIncludeDepth = 8;
constexpr size_t kMaxIncludes = 64;

Value load_with_includes(const std::string& path, std::vector<std::string>& stack, std::vector<std::string>& files,
                         const Location& included_at) {
  std::error_code ec;
  const std::string canonical = fs::weakly_canonical(path, ec).string();
  if (ec) {
    throw ScenarioError(included_at.str() + ": include: expected a readable file, got " + describe_path(path) +
                        " (" + path + ")");
  }
  if (std::find(stack.begin(), stack.end(), canonical) != stack.end()) {
    throw ScenarioError(included_at.str() + ": include: expected no cycle, got " +
                        join(stack, " -> ") + " -> " + canonical);
  }
  if (stack.size() >= kMaxIncludeDepth) {
    throw ScenarioError(included_at.str() + ": include: expected includes nested at most " +
                        std::to_string(kMaxIncludeDepth) + " deep, got " + join(stack, " -> ") + " -> " + canonical);
  }
  files.push_back(canonical);
  if (files.size() > kMaxIncludes) {
    throw ScenarioError(included_at.str() + ": include: expected at most " + std::to_string(kMaxIncludes) +
                        " files in all, got more");
  }
  stack.push_back(canonical);
  Value own = load_yaml_file(path);
  if (!own.is_map() && !own.is_null()) fail(own.loc, "(top level)", "a map", own.describe());
  // The scenario itself must say something: an empty file (or only comments)
  // would run the defaults under a name nobody chose. Included files may be
  // empty (a base kept for later).
  if (stack.size() == 1 && (own.is_null() || own.map.empty())) {
    fail(Location{path, 1, 1}, "(top level)", "a scenario (a map with a name, an include or settings)",
         "an empty document");
  }
  Value merged;
  merged.kind = Value::Kind::kMap;
  merged.loc = own.loc;
  if (const Value* inc = own.find("include")) {
    std::vector<const Value*> items;
    if (inc->is_scalar()) {
      items.push_back(inc);
    } else if (inc->is_seq()) {
      for (const auto& x : inc->seq) items.push_back(&x);
    } else {
      fail(inc->loc, "include", "a file name or a list of file names", inc->describe());
    }
    for (const Value* x : items) {
      if (!x->is_scalar()) fail(x->loc, "include", "a file name", x->describe());
      if (x->scalar.empty()) fail(x->loc, "include", "a file name", "an empty string");
      const fs::path base = fs::path(x->scalar).is_absolute() ? fs::path(x->scalar)
                                                             : fs::path(path).parent_path() / x->scalar;
      std::error_code exists_ec;
      if (!fs::exists(base, exists_ec) && !exists_ec) {
        fail(x->loc, "include", "an existing file", quoted_excerpt(x->scalar) + " (" + base.string() + " not found)");
      }
      try {
        check_input_file(base.string(), "a scenario file to include");
      } catch (const ScenarioError& e) {
        throw ScenarioError(x->loc.str() + ": include: " + e.what());
      }
      merge_into(merged, load_with_includes(base.string(), stack, files, x->loc));
    }
  }
  merge_into(merged, own);
  stack.pop_back();
  return merged;
}

// Overrides may use the Lightning/Hydra keys of the user's training command
// (Note [Lightning aliases] in aliases.h), translated here for the command
// line and for controls alike. The value keeps the user's override as its
// location, so a later error names what the user wrote.
void apply_user_override(Value& tree, const std::string& text) {
  // Includes are merged before any override: one given as an override
  // would be silently ignored.
  const std::string key_text = override_key(text);
  if (key_text == "include" || key_text.rfind("include.", 0) == 0) {
    throw ScenarioError("<override> " + one_line(text) +
                        ": include: expected includes in a scenario file (merged before any override), got an "
                        "override");
  }
  const std::optional<std::string> translated = translate_override(text);
  if (!translated) return;  // dbh already behaves so (trainer.devices=1)
  apply_override(tree, *translated);
  if (*translated == text) return;
  Value* v = &tree;
  std::stringstream key(override_key(*translated));
  for (std::string part; std::getline(key, part, '.');) {
    v = v->is_map() ? v->find(part) : nullptr;
    if (v == nullptr) return;
  }
  v->loc.file = "<override> " + text;
  v->key_loc.file = v->loc.file;
}

}  // namespace

bool override_sets(const std::string& text, const std::string& key) {
  Value tree;
  tree.kind = Value::Kind::kMap;
  try {
    apply_user_override(tree, text);
  } catch (const ScenarioError&) {
    return false;  // refused where the scenario loads, with its own message
  }
  const Value* v = &tree;
  std::stringstream parts(key);
  for (std::string part; std::getline(parts, part, '.');) {
    v = v->is_map() ? v->find(part) : nullptr;
    if (v == nullptr) return false;
  }
  return true;
}

namespace {
InputFileCheck g_input_file_check = nullptr;
}  // namespace

std::vector<std::string> input_paths(const Scenario& s) {
  std::vector<std::string> out = s.files;
  for (const std::string* p : {&s.data.path, &s.data.val.path, &s.model.weights, &s.train.resume_from}) {
    if (!p->empty()) out.push_back(*p);
  }
  return out;
}

std::vector<std::string> dataset_folders(const Scenario& s) {
  std::vector<std::string> out;
  for (const std::string* p : {&s.data.path, &s.data.val.path}) {
    if (!p->empty()) out.push_back(*p);
  }
  return out;
}

void set_input_file_check(InputFileCheck check) { g_input_file_check = check; }

namespace {

// The merged tree of `path` and its includes; `files` gets every file read.
Value load_tree(const std::string& path, std::vector<std::string>& files) {
  check_input_file(path, "a scenario file");
  std::vector<std::string> stack;
  return load_with_includes(path, stack, files, Location{path, 0, 0});
}

}  // namespace

std::vector<std::string> scenario_files(const std::string& path) {
  std::vector<std::string> files;
  (void)load_tree(path, files);
  return files;
}

Scenario load_scenario(const std::string& path, const std::vector<std::string>& overrides) {
  std::vector<std::string> files;
  const Value tree_from_files = load_tree(path, files);
  Value tree = tree_from_files;
  for (const auto& o : overrides) apply_user_override(tree, o);
  Scenario s;
  try {
    s = scenario_from_tree(tree, path);
  } catch (const ScenarioError& e) {
    // A key of the file that only the overrides made wrong (faults.0.name=…
    // leaves the file's fault keys to another fault): say which overrides.
    bool file_alone_loads = false;
    if (!overrides.empty() && std::string(e.what()).rfind("<override>", 0) != 0) {
      try {
        (void)scenario_from_tree(tree_from_files, path);
        file_alone_loads = true;
      } catch (const ScenarioError&) {
      }
    }
    if (!file_alone_loads) throw;
    std::string given;
    for (const auto& o : overrides) given += (given.empty() ? "" : " ") + one_line(o);
    throw ScenarioError(std::string(e.what()) + " (the file loads without the overrides " + given + ")");
  }
  s.overrides = overrides;
  s.files = files;
  // Every control must be a valid scenario too, before anything runs.
  for (size_t i = 0; i < s.controls.size(); ++i) {
    Value control = tree;
    try {
      for (const auto& o : s.controls[i]) apply_user_override(control, o);
      (void)scenario_from_tree(control, path);
    } catch (const ScenarioError& e) {
      const Value* controls = tree.find("controls");
      const Location at = controls != nullptr && i < controls->seq.size() ? controls->seq[i].loc
                                                                          : Location{path, 0, 0};
      throw ScenarioError(at.str() + ": controls[" + std::to_string(i) + "]: " + e.what());
    }
  }
  if (g_input_file_check != nullptr && !s.worker.external()) {
    if (const auto problem = g_input_file_check(s)) {
      fail(where(tree, problem->key), problem->key, problem->expected, problem->got);
    }
  }
  return s;
}

std::string resolved_json(const Scenario& s) {
  nlohmann::ordered_json j;
  j["name"] = s.name;
  j["description"] = s.description;
  j["model"] = section_json("model", s);
  j["data"] = section_json("data", s);
  j["train"] = section_json("train", s);
  j["hardware"] = section_json("hardware", s);
  j["monitors"] = section_json("monitors", s);
  j["faults"] = nlohmann::ordered_json::array();
  for (const auto& f : s.faults) {
    nlohmann::ordered_json fj;
    fj["name"] = f.name;
    fj["at_step"] = f.at_step;
    fj["until_step"] = f.until_step;
    fj["run"] = f.run;
    for (const auto& [k, v] : f.params) fj[k] = v;
    j["faults"].push_back(fj);
  }
  j["repeat"] = section_json("repeat", s);
  j["limits"] = section_json("limits", s);
  // Only an external worker writes its section: the built-in worker's
  // resolved scenarios (and their hashes) stay as they were.
  if (s.worker.external()) j["worker"] = section_json("worker", s);
  nlohmann::ordered_json e;
  e["outcome"] = s.expect.outcome;
  if (s.expect.failure_class) e["failure_class"] = *s.expect.failure_class;
  if (s.expect.step) e["step"] = *s.expect.step;
  if (s.expect.module) e["module"] = *s.expect.module;
  if (s.expect.deterministic) e["deterministic"] = *s.expect.deterministic;
  if (s.expect.max_peak_memory) e["max_peak_memory"] = std::to_string(*s.expect.max_peak_memory);
  if (s.expect.data_dependent) e["data_dependent"] = *s.expect.data_dependent;
  if (s.expect.min_hmean) e["min_hmean"] = *s.expect.min_hmean;
  if (s.expect.loss_drop) e["loss_drop"] = *s.expect.loss_drop;
  j["expect"] = e;
  j["controls"] = s.controls;
  // Scenario text may hold invalid UTF-8; replace it rather than throw.
  return j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string scenario_hash(const Scenario& s) {
  return Fnv1a64().update(resolved_json(s)).hex();
}

}  // namespace dbh::harness
