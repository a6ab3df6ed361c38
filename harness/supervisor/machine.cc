// What identifies the machine and the libraries a trial runs with: parts of
// the probe cache's key and of the measured choices' key.
#include "harness/supervisor/machine.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>
#include <vector>

#include "harness/common/hash.h"
#include "harness/supervisor/trial.h"


namespace dbh::harness::supervisor {
namespace fs = std::filesystem;

namespace {

std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

std::vector<std::string> mapped_libraries() {
  std::set<std::string> libs;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    if (path.find(".so") != std::string::npos) libs.insert(path);
  }
  return {libs.begin(), libs.end()};
}

std::string libraries_identity() {
  static const std::string identity = [] {
    Digest d;
    for (const auto& lib : mapped_libraries()) {
      struct stat sb {};
      d.add("lib").add(lib);
      if (::stat(lib.c_str(), &sb) == 0) {
        d.add(std::to_string(sb.st_size)).add(std::to_string(sb.st_mtim.tv_sec));
      }
    }
    return d.hex();
  }();
  return identity;
}

std::string machine_identity() {
  static const std::string identity = [] {
    Digest d;
    {
      std::ifstream cpu("/proc/cpuinfo");
      std::string line;
      while (std::getline(cpu, line)) {
        if (line.rfind("model name", 0) == 0) {
          d.add("cpu").add(line);
          break;
        }
      }
      d.add("cores").add(std::to_string(std::thread::hardware_concurrency()));
    }
    d.add("nvidia").add(first_line("/proc/driver/nvidia/version"));
    std::error_code ec;
    std::vector<std::string> gpus;
    for (const auto& e : fs::directory_iterator("/proc/driver/nvidia/gpus", ec)) {
      std::ifstream in(e.path() / "information");
      std::string line, text;
      while (std::getline(in, line)) {
        if (line.rfind("Model:", 0) == 0 || line.rfind("GPU UUID:", 0) == 0 ||
            line.rfind("Bus Location:", 0) == 0 || line.rfind("Video BIOS:", 0) == 0) {
          text += line + "\n";
        }
      }
      gpus.push_back(text);
    }
    std::sort(gpus.begin(), gpus.end());
    for (const auto& g : gpus) d.add("gpu").add(g);
    // The variables that can change an outcome are the input manifest's
    // (common/environment_vars.h, probe/probe.h), not the machine's.
    return d.hex();
  }();
  return identity;
}


bool nvidia_gpu_present() {
  std::error_code ec;
  fs::directory_iterator gpus("/proc/driver/nvidia/gpus", ec);
  if (!ec && gpus != fs::directory_iterator()) return true;
  // WSL2 (the seed reports' RTX 3060): the GPU is paravirtualised through
  // /dev/dxg, and the Windows driver puts its libcuda under /usr/lib/wsl/lib.
  if (fs::exists("/dev/dxg", ec)) {
    for (const auto& e : fs::directory_iterator("/usr/lib/wsl/lib", ec)) {
      if (e.path().filename().string().rfind("libcuda.so", 0) == 0) return true;
    }
  }
  for (const auto& e : fs::directory_iterator("/dev", ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() > 6 && name.rfind("nvidia", 0) == 0 &&
        std::all_of(name.begin() + 6, name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return true;
    }
  }
  return false;
}

}  // namespace dbh::harness::supervisor
