#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dbh::harness::scenario {

/// A device a user trains on or migrates to (scenarios/hardware/*.yaml).
struct HardwareProfile {
  std::string name;          // file stem, e.g. "rtx3060-12gb"
  std::string display_name;  // "NVIDIA GeForce RTX 3060"
  int64_t memory_bytes = 0;
  std::string architecture;
  std::string compute_capability;
  double memory_bandwidth_gb_s = 0;
  double fp32_tflops = 0;
  std::string notes;
  std::string file;
};

/// Loads `name` from <dbh home>/scenarios/hardware/. Throws ScenarioError
/// naming the file and key when the profile is missing or malformed.
HardwareProfile load_profile(const std::string& name);
std::vector<HardwareProfile> list_profiles();

}  // namespace dbh::harness::scenario
