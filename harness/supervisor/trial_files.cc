#include "harness/supervisor/trial_files.h"

#include <stdio.h>
#include <sys/stat.h>

namespace dbh::harness::supervisor::internal {
namespace fs = std::filesystem;

TrialFiles::TrialFiles(const fs::path& dir) : dir_(dir.lexically_normal()) {
  if (dir_.filename().empty()) dir_ = dir_.parent_path();
  stage_ = dir_.parent_path() / ("." + dir_.filename().string() + ".dbh");
}

TrialFiles::~TrialFiles() {
  std::error_code ec;
  if (!published_) fs::remove_all(stage_, ec);
}

void TrialFiles::publish(std::vector<std::string>* displaced) {
  if (published_) return;
  published_ = true;
  for (const char* name : kNames) {
    const fs::path target = dir_ / name;
    struct stat st {};
    if (::lstat(target.c_str(), &st) == 0) {
      const fs::path kept = dir_ / (std::string("worker-") + name);
      std::error_code ec;
      fs::remove_all(kept, ec);
      if (::rename(target.c_str(), kept.c_str()) != 0) fs::remove_all(target, ec);
      displaced->push_back(name);
    }
    ::rename((stage_ / name).c_str(), target.c_str());
  }
  std::error_code ec;
  fs::remove_all(stage_, ec);
}

}  // namespace dbh::harness::supervisor::internal
