#include "harness/scenario/aliases.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <functional>

#include <nlohmann/json.hpp>

#include "harness/common/error.h"
#include "harness/common/text.h"
#include "harness/scenario/profile.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/schema.h"

namespace dbh::harness::scenario {
namespace {

using Kind = AliasTranslation::Kind;

AliasTranslation mapped(std::string value, std::string note = "") {
  AliasTranslation t;
  t.kind = Kind::kMapped;
  t.value = std::move(value);
  t.reason = std::move(note);
  return t;
}
AliasTranslation satisfied(std::string reason) {
  AliasTranslation t;
  t.kind = Kind::kSatisfied;
  t.reason = std::move(reason);
  return t;
}
AliasTranslation unmapped(std::string reason) {
  AliasTranslation t;
  t.kind = Kind::kUnmapped;
  t.reason = std::move(reason);
  return t;
}
AliasTranslation invalid() {
  AliasTranslation t;
  t.kind = Kind::kInvalid;
  return t;
}

bool parse_int(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

// The whole of `s` is a finite number as YAML writes one: no leading space
// (strtod would skip it, and a newline would reach the generated YAML).
bool parse_number(const std::string& s, double* out) {
  if (s.empty() || std::isspace(static_cast<unsigned char>(s.front()))) return false;
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && std::isfinite(*out);
}

std::string lower(std::string s) {
  for (char& c : s)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool is_one_of(const std::string& v, std::initializer_list<const char*> set) {
  return std::any_of(set.begin(), set.end(), [&](const char* x) { return v == x; });
}

// Integer-valued aliases: `lo` is the smallest value dbh accepts.
std::function<AliasTranslation(const std::string&)> integer_at_least(int64_t lo, std::string note = "") {
  return [lo, note](const std::string& v) {
    int64_t i = 0;
    if (!parse_int(v, &i) || i < lo) return invalid();
    return mapped(std::to_string(i), note);
  };
}

std::function<AliasTranslation(const std::string&)> boolean(std::string note = "") {
  return [note](const std::string& v) {
    const std::string l = lower(v);
    if (l == "true") return mapped("true", note);
    if (l == "false") return mapped("false", note);
    return invalid();
  };
}

// The shipped hardware profile a Hydra hardware config names: its name with
// '_' for '-' (rtx3060_12gb_i5_16core → rtx3060-12gb-i5-16core) is the
// profile's name or begins with it; or it is the start of exactly one.
AliasTranslation hardware_profile(const std::string& v) {
  std::string name = lower(v);
  std::replace(name.begin(), name.end(), '_', '-');
  std::string best, known;
  std::vector<std::string> starting;
  for (const auto& p : list_profiles()) {
    known += (known.empty() ? "" : ", ") + p.name;
    if ((name == p.name || name.rfind(p.name + "-", 0) == 0) && p.name.size() > best.size()) best = p.name;
    if (p.name.rfind(name + "-", 0) == 0) starting.push_back(p.name);
  }
  if (best.empty() && starting.size() == 1) best = starting.front();
  if (best.empty()) return unmapped("no dbh hardware profile matches; profiles: " + known);
  return mapped(best, "memory budget " + format_bytes(load_profile(best).memory_bytes));
}

struct Entry {
  std::vector<std::string> aliases;
  std::string key;       // dbh's key; "" = none
  std::string expected;  // the values the alias accepts, in words
  std::function<AliasTranslation(const std::string&)> map;
};

const std::vector<Entry>& table() {
  static const std::vector<Entry> kTable = {
      {{"model.encoder.model_name"},
       DBH_SCENARIO_KEY(model.encoder),
       "resnet18, resnet34 or resnet50",
       [](const std::string& v) {
         if (is_one_of(v, {"resnet18", "resnet34", "resnet50"})) return mapped(v);
         return v.empty() ? invalid() : unmapped("dbh builds ResNet-18, -34 and -50 encoders only");
       }},
      {{"model.component_overrides.decoder.name", "model.decoder.name"},
       DBH_SCENARIO_KEY(model.decoder),
       "fpn_decoder (fpn) or pan_decoder (pan)",
       [](const std::string& v) {
         if (v == "fpn_decoder" || v == "fpn") return mapped("fpn");
         if (v == "pan_decoder" || v == "pan") return mapped("pan");
         return v.empty() ? invalid() : unmapped("dbh builds the FPN and PAN decoders only");
       }},
      {{"model/architectures"},
       "",
       "dbnet",
       [](const std::string& v) {
         if (v == "dbnet") return satisfied("dbh trains DBNet");
         return v.empty() ? invalid() : unmapped("dbh trains DBNet only");
       }},
      {{"dataloaders.train_dataloader.batch_size"},
       DBH_SCENARIO_KEY(data.batch_size),
       "a positive integer",
       integer_at_least(1)},
      {{"dataloaders.val_dataloader.batch_size"},
       DBH_SCENARIO_KEY(data.val.batch_size),
       "a positive integer",
       integer_at_least(1, "used when validation is on: " + std::string(DBH_SCENARIO_KEY(data.val.path)) + " or " +
                               DBH_SCENARIO_KEY(data.val.holdout))},
      {{"dataloaders.train_dataloader.num_workers"},
       DBH_SCENARIO_KEY(data.num_workers),
       "a non-negative integer",
       integer_at_least(0)},
      {{"trainer.accumulate_grad_batches"},
       DBH_SCENARIO_KEY(train.accumulation),
       "a positive integer",
       integer_at_least(1)},
      {{"trainer.precision"},
       DBH_SCENARIO_KEY(train.precision),
       "32, 32-true, 16, 16-mixed, bf16 or bf16-mixed",
       [](const std::string& v) {
         if (const LightningValue* p = lightning_value_of(lightning_precisions(), v)) {
           const std::string dbh = p->dbh;
           if (dbh == "fp16") return mapped(dbh, "autocast with loss scaling, as 16-mixed");
           if (dbh == "bf16") return mapped(dbh, "autocast, as bf16-mixed");
           return mapped(dbh);
         }
         if (is_one_of(v,
                       {"64", "64-true", "16-true", "bf16-true", "transformer-engine", "transformer-engine-float16"})) {
           return unmapped("dbh keeps fp32 weights and trains in fp32 or with fp16/bf16 autocast");
         }
         return invalid();
       }},
      {{"trainer.max_steps"},
       DBH_SCENARIO_KEY(train.max_steps),
       "a positive number of optimizer steps",
       [](const std::string& v) {
         if (v == "-1") {
           return unmapped("Lightning's -1 trains without a step limit; dbh needs " +
                           std::string(DBH_SCENARIO_KEY(train.max_steps)));
         }
         return integer_at_least(1)(v);
       }},
      {{"trainer.max_epochs"},
       "",
       "",
       [](const std::string&) {
         return unmapped(
             "dbh counts optimizer steps, not epochs; an epoch is ceil(ceil(samples / batch_size) / accumulation) "
             "steps and the command does not say how many samples the dataset holds: set " +
             std::string(DBH_SCENARIO_KEY(train.max_steps)));
       }},
      {{"trainer.devices"},
       "",
       "1 or auto",
       [](const std::string& v) {
         if (v == "1" || v == "auto") return satisfied("dbh trains each trial on one device");
         return unmapped("dbh trains each trial on one device (" +
                         override_text(DBH_SCENARIO_KEY(hardware.device), "cuda:N") + " picks it)");
       }},
      {{"trainer.num_nodes"},
       "",
       "1",
       [](const std::string& v) {
         if (v == "1") return satisfied("dbh trains on one machine");
         return unmapped("dbh runs one process per trial; multi-node training does not apply");
       }},
      {{"trainer.accelerator"},
       DBH_SCENARIO_KEY(hardware.device),
       "gpu, cuda or cpu",
       [](const std::string& v) {
         const std::string l = lower(v);
         if (const LightningValue* a = lightning_value_of(lightning_accelerators(), l)) return mapped(a->dbh);
         if (l == "auto") return unmapped("auto picks the GPU when there is one; dbh needs the device named");
         if (is_one_of(l, {"tpu", "mps", "hpu", "ipu", "xla"})) return unmapped("dbh trains on CUDA or the CPU");
         return invalid();
       }},
      {{"trainer.strategy"},
       "",
       "",
       [](const std::string&) {
         return unmapped("dbh runs one training process per trial; a launch of several ranks is not supported yet");
       }},
      {{"trainer.gradient_clip_val"},
       DBH_SCENARIO_KEY(train.grad_clip),
       "a non-negative number (0 or null: off)",
       [](const std::string& v) {
         if (v == "null" || v == "None") return mapped("0");
         double d = 0;
         if (!parse_number(v, &d) || d < 0) return invalid();
         return mapped(v, "by norm, Lightning's default algorithm");
       }},
      {{"trainer.gradient_clip_algorithm"},
       "",
       "norm",
       [](const std::string& v) {
         if (v == "norm") return satisfied("dbh clips gradients by norm");
         return unmapped("dbh clips gradients by norm only");
       }},
      {{"trainer.benchmark"}, DBH_SCENARIO_KEY(hardware.cudnn_benchmark), "true or false", boolean()},
      {{"trainer.deterministic"},
       DBH_SCENARIO_KEY(hardware.cudnn_deterministic),
       "true or false",
       [](const std::string& v) {
         if (lower(v) == "warn") return unmapped("dbh has no warn-only determinism");
         return boolean("cuDNN's deterministic algorithms")(v);
       }},
      {{"seed", "seed_everything"},
       DBH_SCENARIO_KEY(train.seed),
       "a non-negative integer",
       [](const std::string& v) {
         if (lower(v) == "true" || lower(v) == "false") {
           return unmapped("Lightning then draws a seed; dbh trains with a fixed " +
                           std::string(DBH_SCENARIO_KEY(train.seed)));
         }
         return integer_at_least(0)(v);
       }},
      {{"exp_name"},
       DBH_SCENARIO_KEY(name),
       "a one-line name of printable UTF-8 (at most 200 bytes)",
       [](const std::string& v) {
         // The name reaches YAML, file names and reports: one line of UTF-8.
         if (v.empty() || one_line(v) != v || v.size() > 200) return invalid();
         return mapped(nlohmann::json(v).dump());
       }},
      {{"model.optimizer.lr", "optimizer.lr"},
       DBH_SCENARIO_KEY(train.lr),
       "a positive number",
       [](const std::string& v) {
         double d = 0;
         if (!parse_number(v, &d) || d <= 0) return invalid();
         return mapped(v);
       }},
      {{"preprocessing.target_size"},
       DBH_SCENARIO_KEY(data.size),
       "N or [N, N] pixels, N a multiple of 32",
       [](const std::string& v) {
         // Strictly: "[640" or "6 40" is not 640.
         int64_t w = 0, h = 0;
         try {
           const ImageSize size = parse_image_size("preprocessing.target_size", v);
           w = size.width;
           h = size.height;
         } catch (const UsageError&) {
           return invalid();
         }
         if (w != h) return unmapped("dbh trains on square images");
         if (w % 32 != 0 || w < 32 || w > 8192) return unmapped("dbh trains at multiples of 32 pixels, 32 to 8192");
         return mapped(std::to_string(w));
       }},
      {{"hardware"},
       DBH_SCENARIO_KEY(hardware.profile),
       "a dbh hardware profile (dbh list profiles)",
       hardware_profile},
  };
  return kTable;
}

// Roots that only Lightning/Hydra configs have: a key under them that the
// table does not know has no dbh equivalent.
bool lightning_only_root(const std::string& key) {
  const std::string root = key.substr(0, key.find('.'));
  return is_one_of(root, {"trainer", "dataloaders", "callbacks", "logger", "paths", "wandb"});
}

std::string unquote(const std::string& v) {
  if (v.size() >= 2 && (v.front() == '\'' || v.front() == '"') && v.back() == v.front()) {
    return v.substr(1, v.size() - 2);
  }
  return v;
}

}  // namespace

const std::vector<LightningValue>& lightning_precisions() {
  static const std::vector<LightningValue> kTable = {
      {"fp32", "32-true", {"32"}},
      {"fp16", "16-mixed", {"16"}},
      {"bf16", "bf16-mixed", {"bf16"}},
  };
  return kTable;
}

const std::vector<LightningValue>& lightning_accelerators() {
  static const std::vector<LightningValue> kTable = {
      {"cpu", "cpu", {}},
      {"cuda", "gpu", {"cuda"}},
  };
  return kTable;
}

const LightningValue* lightning_value_of(const std::vector<LightningValue>& table, const std::string& word) {
  for (const LightningValue& v : table) {
    if (word == v.passed) return &v;
    for (const char* a : v.also) {
      if (word == a) return &v;
    }
  }
  return nullptr;
}

const LightningValue* lightning_value_for(const std::vector<LightningValue>& table, const std::string& dbh) {
  for (const LightningValue& v : table) {
    if (dbh == v.dbh) return &v;
  }
  return nullptr;
}

const std::vector<AliasDoc>& alias_docs() {
  static const std::vector<AliasDoc> kDocs = [] {
    std::vector<AliasDoc> out;
    for (const auto& e : table()) {
      for (const auto& a : e.aliases)
        out.push_back({a, e.key, e.expected});
    }
    return out;
  }();
  return kDocs;
}

const std::vector<std::string>& worker_passed_keys() {
  static const std::vector<std::string> kKeys = {
      DBH_SCENARIO_KEY(data.batch_size), DBH_SCENARIO_KEY(train.accumulation), DBH_SCENARIO_KEY(train.precision),
      DBH_SCENARIO_KEY(train.lr),        DBH_SCENARIO_KEY(train.seed),         DBH_SCENARIO_KEY(train.max_steps),
      DBH_SCENARIO_KEY(data.path),       DBH_SCENARIO_KEY(hardware.device),    DBH_SCENARIO_KEY(data.num_workers)};
  return kKeys;
}

std::string first_alias_of(const std::string& dbh_key) {
  for (const auto& e : table()) {
    if (e.key == dbh_key && !e.aliases.empty()) return e.aliases.front();
  }
  return "";
}

std::string hydra_key(const std::string& key) {
  if (key.rfind("++", 0) == 0) return key.substr(2);
  if (key.rfind('+', 0) == 0) return key.substr(1);
  return key;
}

std::optional<AliasTranslation> translate_alias(const std::string& raw_key, const std::string& raw_value) {
  const std::string key = hydra_key(raw_key);
  const std::string value = unquote(raw_value);
  // `hardware` is also dbh's own section: only a plain name is a Hydra
  // config choice (hardware={device: cpu} stays dbh's).
  if (key == "hardware" && (value.empty() || value == "null" || value.front() == '{' || value.front() == '[')) {
    return std::nullopt;
  }
  for (const auto& e : table()) {
    if (std::find(e.aliases.begin(), e.aliases.end(), key) == e.aliases.end()) continue;
    AliasTranslation t = e.map(value);
    t.alias = key;
    t.key = e.key;
    t.expected = e.expected;
    return t;
  }
  if (lightning_only_root(key) || key.find('/') != std::string::npos) {
    AliasTranslation t =
        unmapped(key.find('/') != std::string::npos ? "a Hydra config group; dbh has none"
                                                    : "a Lightning/Hydra setting with no dbh equivalent");
    t.alias = key;
    return t;
  }
  return std::nullopt;
}

std::string describe_unmappable(const AliasTranslation& t, const std::string& value) {
  std::string out = t.alias + (t.key.empty() ? "" : " (dbh's " + t.key + ")") + ": expected " +
                    (t.expected.empty() ? "a setting dbh can honour" : t.expected) + ", got \"" + unquote(value) + "\"";
  if (!t.reason.empty()) out += " (" + t.reason + ")";
  return out;
}

std::optional<std::string> translate_override(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0) return text;  // apply_override names the syntax error
  const std::string key = text.substr(0, eq), value = text.substr(eq + 1);
  const auto t = translate_alias(key, value);
  if (!t) return hydra_key(key) + "=" + value;
  switch (t->kind) {
    case Kind::kMapped:
      return t->key + "=" + t->value;
    case Kind::kSatisfied:
      return std::nullopt;
    case Kind::kUnmapped:
    case Kind::kInvalid:
      break;
  }
  throw ScenarioError("<override> " + text + ": " + describe_unmappable(*t, value));
}

ImageSize parse_image_size(const std::string& where, const std::string& text) {
  const std::string expected = "expected N or [N, N] with N a whole number of pixels from 1 to " +
                               std::to_string(kMaxImageSize) + " (dbh trains at multiples of 32)";
  auto fail = [&](const std::string& what) {
    std::string shown = one_line(truncate_utf8(text, 80));
    if (text.size() > 80) shown += " (" + std::to_string(text.size()) + " bytes)";
    throw UsageError(where + ": " + expected + ", got \"" + shown + "\" (" + what + ")");
  };
  const auto space = [](char c) { return c == ' ' || c == '\t'; };
  size_t b = 0, e = text.size();
  while (b < e && space(text[b])) ++b;
  while (e > b && space(text[e - 1])) --e;
  if (b == e) fail("an empty value");
  std::string body = text.substr(b, e - b);
  const char open = body.front();
  if (open == '[' || open == '(') {
    const char close = open == '[' ? ']' : ')';
    if (body.back() != close) {
      if (body.back() == ']' || body.back() == ')') {
        fail(std::string("a '") + open + "' closed by '" + body.back() + "'");
      }
      fail(std::string("a '") + open + "' that is never closed");
    }
    body = body.substr(1, body.size() - 2);
  }
  if (const size_t bracket = body.find_first_of("[]()"); bracket != std::string::npos) {
    fail(body[bracket] == '[' || body[bracket] == '(' ? "a nested or second list"
                                                      : std::string("a '") + body[bracket] + "' without its opening");
  }
  std::vector<std::string> items;
  for (size_t start = 0;;) {
    const size_t comma = body.find(',', start);
    items.push_back(body.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  std::vector<int64_t> values;
  for (size_t k = 0; k < items.size(); ++k) {
    std::string item = items[k];
    while (!item.empty() && space(item.front())) item.erase(item.begin());
    while (!item.empty() && space(item.back())) item.pop_back();
    if (item.empty()) {
      fail(k + 1 == items.size() && k > 0 ? "a list that ends with a comma"
           : k == 0 && items.size() > 1   ? "a list that starts with a comma"
           : items.size() > 1             ? "an empty element between two commas"
                                          : "an empty list");
    }
    const std::string shown = "\"" + one_line(truncate_utf8(item, 24)) + "\"";
    const bool digits =
        std::all_of(item.begin(), item.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    if (!digits) {
      const bool signed_number =
          item.size() > 1 && (item[0] == '-' || item[0] == '+') &&
          std::all_of(item.begin() + 1, item.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
      if (signed_number && item[0] == '-' && item.find_first_not_of("-0") != std::string::npos) {
        fail("a negative number, " + shown);
      }
      if (signed_number) fail("a signed number, " + shown + "; write the number alone");
      if (item.find_first_of(" \t") != std::string::npos) fail("two values without a comma between them, " + shown);
      fail(shown + ", which is not a whole number");
    }
    // Digits only: compare the value without overflowing.
    const size_t first = std::min(item.find_first_not_of('0'), item.size());
    const std::string significant = item.substr(first);
    const std::string max = std::to_string(kMaxImageSize);
    if (significant.empty()) fail("0, a size of no pixels");
    if (significant.size() > max.size() || (significant.size() == max.size() && significant > max)) {
      fail("a number above " + max + ", " + shown);
    }
    values.push_back(std::stoll(significant));
  }
  if (values.size() > 2) fail(std::to_string(values.size()) + " numbers; a size has a width and a height");
  return ImageSize{values.front(), values.back()};
}


}  // namespace dbh::harness::scenario
