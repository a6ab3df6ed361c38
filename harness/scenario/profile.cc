#include "harness/scenario/profile.h"

#include <algorithm>
#include <filesystem>

#include "harness/common/error.h"
#include "harness/common/home.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/schema.h"
#include "harness/common/value.h"

namespace dbh::harness::scenario {
namespace fs = std::filesystem;

namespace {

fs::path profile_dir() { return fs::path(dbh_home()) / "scenarios" / "hardware"; }

HardwareProfile parse(const fs::path& file) {
  const Value v = load_yaml_file(file.string());
  if (!v.is_map()) throw ScenarioError(v.loc.str() + ": expected a hardware profile map, got " + v.describe());
  auto text = [&](const char* key, bool required) -> std::string {
    const Value* x = v.find(key);
    if (x == nullptr || x->is_null()) {
      if (required) throw ScenarioError(file.string() + ": " + key + ": expected a value, got none");
      return {};
    }
    if (!x->is_scalar()) throw ScenarioError(x->loc.str() + ": " + key + ": expected a scalar, got " + x->describe());
    return x->scalar;
  };
  HardwareProfile p;
  p.file = file.string();
  p.name = file.stem().string();
  p.display_name = text("display_name", true);
  const auto mem = parse_bytes(text("memory", true));
  if (!mem || *mem <= 0) {
    throw ScenarioError(v.find("memory")->loc.str() + ": memory: expected a size such as 12GiB, got \"" +
                        text("memory", true) + "\"");
  }
  p.memory_bytes = *mem;
  p.architecture = text("architecture", false);
  p.compute_capability = text("compute_capability", false);
  const std::string bw = text("memory_bandwidth_gb_s", false), tf = text("fp32_tflops", false);
  p.memory_bandwidth_gb_s = bw.empty() ? 0 : std::strtod(bw.c_str(), nullptr);
  p.fp32_tflops = tf.empty() ? 0 : std::strtod(tf.c_str(), nullptr);
  p.notes = text("notes", false);
  return p;
}

}  // namespace

HardwareProfile load_profile(const std::string& name) {
  const fs::path file = profile_dir() / (name + ".yaml");
  if (!fs::exists(file)) {
    std::string known;
    for (const auto& p : list_profiles()) known += (known.empty() ? "" : ", ") + p.name;
    throw ScenarioError(std::string(DBH_SCENARIO_KEY(hardware.profile)) + ": expected one of " + known + ", got \"" +
                        name + "\"");
  }
  return parse(file);
}

std::vector<HardwareProfile> list_profiles() {
  std::vector<HardwareProfile> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(profile_dir(), ec)) {
    if (e.path().extension() == ".yaml") out.push_back(parse(e.path()));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.memory_bytes < b.memory_bytes; });
  return out;
}

}  // namespace dbh::harness::scenario
