#include "harness/numerics/states.h"

#include <unistd.h>

#include <filesystem>
#include <system_error>

#include "harness/common/error.h"
#include "harness/proto/event_types.h"

namespace dbh::harness::numerics {
namespace fs = std::filesystem;

namespace {

bool is_state_file_name(const std::string& name) {
  if (name.rfind("state-s", 0) != 0 || name.size() <= 10 || name.substr(name.size() - 3) != ".pt") return false;
  const std::string digits = name.substr(7, name.size() - 10);
  return digits.find_first_not_of("0123456789") == std::string::npos;
}

// Whether `dir` is absent, or a real folder of state files only.
bool replaceable(const fs::path& dir) {
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(dir, ec);
  if (ec || st.type() == fs::file_type::not_found) return true;
  if (st.type() != fs::file_type::directory) return false;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (!is_state_file_name(e.path().filename().string()) || !e.is_regular_file() || e.is_symlink()) return false;
  }
  return !ec;
}

void remove_folder(const fs::path& dir) {
  std::error_code ec;
  if (fs::symlink_status(dir, ec).type() == fs::file_type::directory) fs::remove_all(dir, ec);
}

}  // namespace

std::string states_folder(const std::string& reference) { return reference + ".states"; }

void check_states_folder(const std::string& reference) {
  const std::string dir = states_folder(reference);
  if (!replaceable(dir)) {
    throw UsageError("dbh repeat: --record: expected " + dir + " to be absent or a folder of states dbh kept "
                     "(state-s<k>.pt files only), got something else: move it away or record elsewhere");
  }
}

std::vector<int64_t> keep_states(const std::string& trial_dir, const std::string& reference,
                                 const std::vector<int64_t>& steps) {
  const fs::path final_dir = states_folder(reference);
  const fs::path tmp = final_dir.string() + ".tmp-" + std::to_string(::getpid());
  std::error_code ec;
  remove_folder(tmp);
  std::vector<int64_t> kept;
  int64_t bytes = 0;
  for (const int64_t step : steps) {
    const fs::path from = fs::path(trial_dir) / proto::state_file_name(step);
    const fs::file_status st = fs::symlink_status(from, ec);
    if (ec || st.type() != fs::file_type::regular) break;  // the steps from here on were not saved
    bytes += static_cast<int64_t>(fs::file_size(from, ec));
    if (ec || bytes > kMaxStatesBytes) {
      kept.clear();
      break;
    }
    if (kept.empty()) fs::create_directories(tmp);
    const fs::path to = tmp / from.filename();
    fs::rename(from, to, ec);
    if (ec) {  // another file system: copied, then the trial's removed
      ec.clear();
      fs::copy_file(from, to, ec);
      if (ec) throw ReportError(to.string() + ": expected a writable file, got " + ec.message());
      fs::remove(from, ec);
    }
    kept.push_back(step);
  }
  remove_folder(final_dir);
  if (kept.empty()) {
    remove_folder(tmp);
    return kept;
  }
  fs::rename(tmp, final_dir, ec);
  if (ec) {
    remove_folder(tmp);
    throw ReportError(final_dir.string() + ": expected a folder dbh can write, got " + ec.message());
  }
  return kept;
}

}  // namespace dbh::harness::numerics
