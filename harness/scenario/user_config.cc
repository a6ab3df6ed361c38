#include "harness/scenario/user_config.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <functional>

#include "harness/scenario/aliases.h"
#include "harness/scenario/schema.h"

namespace dbh::harness::scenario {
namespace {

namespace fs = std::filesystem;

// A configuration value as the scenario holds it, or null when it is not
// one `dbh_key` can hold.
using ReadValue = std::function<nlohmann::json(const nlohmann::json& v, const std::vector<std::string>& folders)>;

// What names a training gives a dbh key (the last part of its dotted key,
// lower case, '-' as '_'), and what such a key holds.
struct Shape {
  std::string dbh_key;
  std::vector<std::string> names;
  bool training_section_only;  // never a key of a validation or test section
  ReadValue read;
};

nlohmann::json integer_at_least(const nlohmann::json& v, int64_t low) {
  if (!v.is_number_integer() || v.get<int64_t>() < low) return nullptr;
  return v;
}

nlohmann::json real_number(const nlohmann::json& v, bool zero_ok) {
  if (!v.is_number_float()) return nullptr;
  const double x = v.get<double>();
  if (!(x > 0 || (zero_ok && x == 0)) || x > 1e12) return nullptr;
  return v;
}

std::string lower(std::string s) {
  for (char& c : s) c = c == '-' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> kShapes = {
      {DBH_SCENARIO_KEY(data.path),
       {"path", "root", "data_dir", "dataset_dir", "data_root", "dataset_root", "data_path", "dataset_path",
        "train_dir", "root_dir", "dir", "data", "dataset", "images", "image_dir", "img_dir", "images_dir",
        "image_root", "img_root", "train_data", "train_path", "train_root", "data_folder", "folder"},
       true,
       [](const nlohmann::json& v, const std::vector<std::string>& folders) -> nlohmann::json {
         if (!v.is_string() || v.get<std::string>().empty()) return nullptr;
         const fs::path given(v.get<std::string>());
         std::vector<fs::path> tried = {given};
         if (given.is_relative()) {
           tried.clear();
           for (const auto& f : folders) tried.push_back(fs::path(f) / given);
         }
         for (const auto& p : tried) {
           std::error_code ec;
           if (fs::is_directory(p, ec)) return fs::absolute(p).lexically_normal().string();
         }
         return nullptr;
       }},
      {DBH_SCENARIO_KEY(data.batch_size),
       {"batch_size", "batchsize", "bs", "batch", "per_step", "train_batch_size", "per_device_train_batch_size",
        "images_per_batch", "ims_per_batch", "batch_size_per_card"},
       true, [](const nlohmann::json& v, const std::vector<std::string>&) { return integer_at_least(v, 1); }},
      {DBH_SCENARIO_KEY(data.num_workers),
       {"num_workers", "workers", "loader_workers", "n_workers", "dataloader_workers"}, true,
       [](const nlohmann::json& v, const std::vector<std::string>&) { return integer_at_least(v, 0); }},
      {DBH_SCENARIO_KEY(data.size),
       {"size", "side", "image_size", "img_size", "imgsz", "target_size", "input_size", "resolution", "crop_size"},
       true, [](const nlohmann::json& v, const std::vector<std::string>&) { return integer_at_least(v, 8); }},
      {DBH_SCENARIO_KEY(train.lr),
       {"lr", "learning_rate", "learningrate", "step_size", "base_lr", "max_lr", "init_lr", "eta"}, false,
       [](const nlohmann::json& v, const std::vector<std::string>&) { return real_number(v, false); }},
      {DBH_SCENARIO_KEY(train.momentum), {"momentum"}, false,
       [](const nlohmann::json& v, const std::vector<std::string>&) -> nlohmann::json {
         return v.is_number_float() && v.get<double>() >= 0 && v.get<double>() < 1 ? v : nlohmann::json();
       }},
      {DBH_SCENARIO_KEY(train.weight_decay), {"weight_decay", "wd"}, false,
       [](const nlohmann::json& v, const std::vector<std::string>&) { return real_number(v, true); }},
      {DBH_SCENARIO_KEY(train.seed), {"seed", "random_seed", "manual_seed", "rng_seed", "seed_everything"}, false,
       [](const nlohmann::json& v, const std::vector<std::string>&) { return integer_at_least(v, 0); }},
      {DBH_SCENARIO_KEY(train.max_steps),
       {"max_steps", "steps", "updates", "iterations", "iters", "max_iters", "num_steps", "total_steps",
        "train_steps"},
       false, [](const nlohmann::json& v, const std::vector<std::string>&) { return integer_at_least(v, 1); }},
      {DBH_SCENARIO_KEY(train.accumulation),
       {"accumulate_grad_batches", "accumulation", "accumulation_steps", "grad_accum", "gradient_accumulation_steps",
        "accum_steps"},
       false, [](const nlohmann::json& v, const std::vector<std::string>&) { return integer_at_least(v, 1); }},
      {DBH_SCENARIO_KEY(train.grad_clip),
       {"clip", "grad_clip", "gradient_clip_val", "max_grad_norm", "clip_grad_norm", "clip_norm", "grad_norm_clip"},
       false, [](const nlohmann::json& v, const std::vector<std::string>&) { return real_number(v, true); }},
      // dbh passes these two as Lightning writes them (trainer.precision,
      // trainer.accelerator): mapped only where the configuration holds
      // Lightning's values.
      {DBH_SCENARIO_KEY(train.precision), {"precision"}, false,
       [](const nlohmann::json& v, const std::vector<std::string>&) -> nlohmann::json {
         const std::string t = v.is_string() ? v.get<std::string>() : v.is_number_integer() ? v.dump() : "";
         const LightningValue* p = lightning_value_of(lightning_precisions(), t);
         return p != nullptr ? nlohmann::json(p->dbh) : nlohmann::json(nullptr);
       }},
      {DBH_SCENARIO_KEY(hardware.device), {"accelerator"}, false,
       [](const nlohmann::json& v, const std::vector<std::string>&) -> nlohmann::json {
         const LightningValue* a =
             lightning_value_of(lightning_accelerators(), v.is_string() ? v.get<std::string>() : "");
         return a != nullptr ? nlohmann::json(a->dbh) : nlohmann::json(nullptr);
       }},
  };
  return kShapes;
}

std::string last_part(const std::string& key) {
  const size_t dot = key.rfind('.');
  return lower(dot == std::string::npos ? key : key.substr(dot + 1));
}

// A key under a validation or test section (`datasets.val.path`,
// `test_loader.batch_size`, `eval_bs`): never the training's.
bool evaluation_key(const std::string& key) {
  std::string k = lower(key);
  std::replace(k.begin(), k.end(), '.', '_');
  const std::string parts = "_" + k + "_";
  for (const char* word : {"val", "valid", "validation", "test", "eval", "evaluation"}) {
    if (parts.find("_" + std::string(word) + "_") != std::string::npos) return true;
  }
  return false;
}

std::string joined(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size() && i < 6; ++i) out += (i ? ", " : "") + keys[i];
  if (keys.size() > 6) out += " and " + std::to_string(keys.size() - 6) + " more";
  return out;
}

}  // namespace

const std::vector<std::string>& mappable_keys() {
  static const std::vector<std::string> kKeys = [] {
    std::vector<std::string> keys;
    for (const auto& s : shapes()) keys.push_back(s.dbh_key);
    return keys;
  }();
  return kKeys;
}

std::vector<KeyMapping> map_user_config(const std::vector<ConfigEntry>& config,
                                        const std::vector<std::string>& command_keys,
                                        const std::vector<std::string>& folders) {
  std::vector<KeyMapping> out;
  for (const auto& shape : shapes()) {
    KeyMapping m;
    m.dbh_key = shape.dbh_key;
    std::vector<std::pair<std::string, nlohmann::json>> fits;
    std::vector<std::string> named;  // named so, but holding something else
    for (const auto& [key, value] : config) {
      if (std::find(shape.names.begin(), shape.names.end(), last_part(key)) == shape.names.end()) continue;
      if (shape.training_section_only && evaluation_key(key)) continue;
      nlohmann::json v = shape.read(value, folders);
      if (v.is_null()) {
        named.push_back(key);
      } else {
        fits.emplace_back(key, std::move(v));
      }
    }
    if (fits.size() > 1) {
      std::vector<std::pair<std::string, nlohmann::json>> on_command;
      for (const auto& f : fits) {
        if (std::find(command_keys.begin(), command_keys.end(), f.first) != command_keys.end()) on_command.push_back(f);
      }
      if (on_command.size() == 1) fits = on_command;
    }
    if (fits.size() == 1) {
      m.user_key = fits.front().first;
      m.value = fits.front().second;
      m.why = "its name and what it holds";
    } else if (fits.size() > 1) {
      std::vector<std::string> keys;
      for (const auto& f : fits) keys.push_back(f.first);
      m.why = "several keys of your configuration could hold it (" + joined(keys) + "): add `worker.keys: {" +
              m.dbh_key + ": <your key>}`";
    } else if (!named.empty()) {
      m.why = "no key of your configuration holds it (" + joined(named) + " " +
              (named.size() == 1 ? "holds" : "hold") + " something else)";
    } else {
      m.why = "no key of your configuration holds it";
    }
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace dbh::harness::scenario
