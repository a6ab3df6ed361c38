#include "harness/supervisor/numerics_variant.h"

#include <algorithm>
#include <fstream>
#include <sstream>

namespace dbh::harness::supervisor {

using scenario::NumericsVariant;

std::vector<std::string> cpu_capabilities() {
  std::vector<std::string> out = {"default"};
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::vector<std::string> flags;
    for (std::string w; words >> w;) flags.push_back(w);
    const auto has = [&](const char* f) { return std::find(flags.begin(), flags.end(), f) != flags.end(); };
    if (has("avx2") && has("fma")) out.push_back("avx2");
    if (out.size() == 2 && has("avx512f") && has("avx512bw") && has("avx512dq") && has("avx512vl")) {
      out.push_back("avx512");
    }
    break;
  }
  return out;
}

namespace {

VariantSetting one_thread(const std::string& why = "") {
  VariantSetting v;
  v.variant = NumericsVariant::kOneThread;
  v.threads = 1;
  v.env = {{"OMP_NUM_THREADS", "1"}, {"MKL_NUM_THREADS", "1"}};
  v.description = "one intra-op thread" + why;
  return v;
}

}  // namespace

NumericsVariant variant_of_process(int64_t process, bool cudnn) {
  const NumericsVariant order[] = {NumericsVariant::kAsIs, NumericsVariant::kOneThread,
                                   cudnn ? NumericsVariant::kCudnnAlgorithms : NumericsVariant::kInstructionSet};
  return order[static_cast<size_t>(std::max<int64_t>(0, process) % 3)];
}

VariantSetting variant_setting(NumericsVariant v, int64_t process, bool cudnn,
                               const std::vector<std::string>& capabilities, const std::string& capability_now) {
  if (v == NumericsVariant::kByProcess) v = variant_of_process(process, cudnn);
  VariantSetting out;
  switch (v) {
    case NumericsVariant::kAsIs:
    case NumericsVariant::kByProcess:
      out.description = "as configured";
      return out;
    case NumericsVariant::kOneThread:
      return one_thread();
    case NumericsVariant::kCudnnAlgorithms:
      if (cudnn) {
        out.variant = v;
        out.toggle_cudnn_benchmark = true;
        out.description = "cuDNN's other choice of algorithms (hardware.cudnn_benchmark toggled)";
        return out;
      }
      [[fallthrough]];
    case NumericsVariant::kInstructionSet: {
      const std::string best = capabilities.empty() ? "default" : capabilities.back();
      std::string now = capability_now;
      std::transform(now.begin(), now.end(), now.begin(), [](unsigned char c) { return std::tolower(c); });
      if (std::find(capabilities.begin(), capabilities.end(), now) == capabilities.end()) now = best;
      const std::string other = now != "default" ? "default" : best;
      if (other == now) return one_thread(" (this CPU runs one instruction set)");
      out.variant = NumericsVariant::kInstructionSet;
      out.env = {{"ATEN_CPU_CAPABILITY", other}};
      out.description = "ATEN_CPU_CAPABILITY=" + other + " (not " + now + ")";
      return out;
    }
  }
  return out;
}

void apply_variant(const VariantSetting& v, scenario::Scenario& s) {
  if (v.threads > 0) s.train.threads = v.threads;
  if (v.toggle_cudnn_benchmark) s.hardware.cudnn_benchmark = !s.hardware.cudnn_benchmark;
  if (s.worker.external()) {
    for (const auto& [name, value] : v.env) s.worker.env[name] = value;
  }
}

}  // namespace dbh::harness::supervisor
