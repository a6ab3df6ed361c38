#include "harness/cli/suite_outputs.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "harness/common/error.h"
#include "harness/common/files.h"
#include "harness/common/hash.h"
#include "harness/common/json_fields.h"
#include "harness/common/out_file.h"
#include "harness/common/text.h"
#include "harness/report/ci_conventions.h"
#include "harness/report/report_html.h"
#include "harness/scenario/scenario.h"
#include "harness/supervisor/outcome.h"
#include "harness/supervisor/shard.h"

namespace dbh::harness::cli {
namespace fs = std::filesystem;

namespace {

// How every JUnit file dbh writes begins and ends (report.cc's junit_xml):
// a file with both is one dbh wrote, which a later run may replace.
constexpr const char* kJunitHead = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"dbh\" ";
constexpr const char* kJunitTail = "</testsuites>\n";

}  // namespace

bool is_dbh_junit(const std::string& path) { return file_has_head_and_tail(path, kJunitHead, kJunitTail); }

bool same_path(const std::string& a, const std::string& b) { return path_within(a, b) && path_within(b, a); }

void check_junit(const std::string& junit, const std::string& where, const std::string& out,
                 const std::vector<std::string>& files, const std::vector<std::string>& inputs,
                 bool writes_own_junit) {
  if (junit.empty()) return;
  if (writes_own_junit && same_path(junit, (fs::path(out) / "junit.xml").string())) return;
  const std::string prefix = where + ": --junit: expected ";
  for (const auto& f : files) {
    if (same_file(junit, f) || fs::absolute(junit).lexically_normal() == fs::absolute(f).lexically_normal()) {
      throw UsageError(prefix + "a file other than the scenarios being run, got the scenario file " + junit);
    }
  }
  if (!out.empty() && path_within(junit, out)) {
    throw UsageError(prefix + "a file outside the output folder " + out + ", got " + junit);
  }
  for (const auto& in : inputs) {
    std::error_code ec;
    if (fs::exists(fs::symlink_status(junit, ec)) && path_within(junit, in)) {
      throw UsageError(prefix + "a file other than those of the folder " + in + " it reads, got " + junit);
    }
  }
  check_output_file(junit, OutputFileRule{where, "--junit", is_dbh_junit, "a JUnit file dbh wrote", ""});
}

ResumeState resume_state(const std::vector<nlohmann::json>& records, const std::set<std::string>& ids,
                         const std::string& shard) {
  ResumeState state;
  const auto suite_of = [](const std::string& k) { return k.empty() ? std::string("a whole suite") : "shard " + k; };
  for (const auto& rec : records) {
    const std::string type = field_or(rec, "type", "");
    const std::string id = field_or(rec, "scenario", "");
    if (type == "suite" && rec.contains("shard") && rec["shard"].is_string()) {
      const std::string text = rec["shard"].get<std::string>();
      const std::string theirs = text.substr(0, text.find(' '));
      if (theirs != shard && state.foreign.empty()) {
        state.foreign = "a journal of " + suite_of(theirs) + ", not of " + suite_of(shard);
      }
    }
    if ((type == "started" || type == "finished") && !ids.count(id) && state.foreign.empty()) {
      state.foreign = "a journal naming scenario " + quoted_excerpt(id) + ", which this suite" +
                      (shard.empty() ? std::string() : std::string(" shard")) + " does not hold";
    }
    if (type == "started") state.started.insert(id);
    if (type == "finished") state.finished[id] = rec;
  }
  return state;
}

std::string rerun_reason(const nlohmann::json& finished, const std::string& hash, const probe::InputManifest& now) {
  // Another configuration: its result answers a question nobody asks now.
  if (finished.contains("hash") && field_or(finished, "hash", "") != hash) {
    return "its scenario or overrides changed since it finished";
  }
  // The same configuration on other inputs is another question too.
  if (!now.not_cacheable.empty()) return now.not_cacheable;
  if (!finished.contains("inputs")) return "an earlier dbh recorded no digest of its inputs";
  if (field_or(finished, "inputs", "") != now.hash()) {
    return "its inputs changed since it finished (a dataset or weights file, the training's code, the dbh build or "
           "an outcome variable)";
  }
  return "";
}

std::vector<std::string> expand_scenarios(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const auto& in : inputs) {
    if (fs::is_directory(in)) {
      std::vector<std::string> found;
      for (const auto& e : fs::directory_iterator(in)) {
        const auto ext = e.path().extension();
        // Whatever is named like a scenario is one: a FIFO, a device or a
        // folder named *.yaml is refused when it loads (naming what it is),
        // never skipped in silence.
        if (ext == ".yaml" || ext == ".yml") found.push_back(e.path().string());
      }
      std::sort(found.begin(), found.end());
      for (const auto& f : found) {
        // Every output names its scenarios (JSON, JUnit, pages): a name that
        // is not UTF-8 has no faithful spelling there.
        if (valid_utf8(f) != f) {
          throw ScenarioError(one_line(valid_utf8(f)) +
                              ": expected a scenario file name in UTF-8 (every report names it), got bytes that are "
                              "not (shown as \uFFFD); rename the file or leave it out of the folder");
        }
      }
      files.insert(files.end(), found.begin(), found.end());
    } else if (fs::exists(in)) {
      files.push_back(in);
    } else {
      throw ScenarioError(in + ": expected a scenario file or folder, got none");
    }
  }
  return files;
}

void write_junit(const std::string& junit, const std::string& where, const std::string& xml) {
  check_output_file(junit, OutputFileRule{where, "--junit", is_dbh_junit, "a JUnit file dbh wrote", ""});
  try {
    write_file_atomically(junit, xml);
  } catch (const ReportError& e) {
    throw UsageError(where + ": --junit: " + e.what());
  }
}

void SuiteJournal::append(const nlohmann::ordered_json& record) const {
  const std::string line = record.dump() + "\n";
  const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw ReportError(path_.string() + ": cannot open the journal: " + std::strerror(errno));
  const ssize_t n = ::write(fd, line.data(), line.size());
  const bool ok = n == static_cast<ssize_t>(line.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) throw ReportError(path_.string() + ": cannot append to the journal: " + std::strerror(errno));
}

bool SuiteJournal::drop_torn_tail() const {
  std::error_code ec;
  const auto size = fs::file_size(path_, ec);
  if (ec || size == 0) return false;
  std::ifstream in(path_, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.empty() || text.back() == '\n') return false;
  const size_t keep = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
  if (::truncate(path_.c_str(), static_cast<off_t>(keep)) != 0) {
    throw ReportError(path_.string() + ": cannot cut the journal's torn last line: " + std::strerror(errno));
  }
  return true;
}

std::vector<nlohmann::json> SuiteJournal::read(std::vector<std::string>* bad) const {
  // The one open-for-reading (common/files.h): a regular file of bounded
  // size, opened without blocking, so a FIFO or device put in its place is
  // refused with a message instead of hanging dbh.
  if (!fs::exists(fs::symlink_status(path_))) return {};
  const std::string text = read_input_file(path_.string(), "a suite journal (JSON lines, a regular file)",
                                           size_t{256} << 20);
  std::vector<nlohmann::json> out;
  std::istringstream in(text);
  std::string line;
  int64_t n = 0;
  std::string pending_bad;
  while (std::getline(in, line)) {
    ++n;
    if (!pending_bad.empty() && bad != nullptr) bad->push_back(pending_bad);
    pending_bad.clear();
    const auto j = nlohmann::json::parse(line, nullptr, false);
    const bool ok = !j.is_discarded() && j.is_object() && j.contains("type") && j["type"].is_string() &&
                    (!j.contains("scenario") || j["scenario"].is_string()) &&
                    (!j.contains("dir") || j["dir"].is_string());
    if (ok) {
      out.push_back(j);
    } else {
      pending_bad = path_.string() + ":" + std::to_string(n) + ": expected a journal record, got \"" +
                    one_line(line.substr(0, 80)) + "\"";
    }
  }
  // A last line ended by its newline was written whole: not torn.
  if (!pending_bad.empty() && bad != nullptr && !text.empty() && text.back() == '\n') bad->push_back(pending_bad);
  return out;
}

run::RunReport report_from_json(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("expectation") || !j["expectation"].is_object()) {
    throw ProtocolError("expected a report.json object with an expectation");
  }
  run::RunReport r;
  r.scenario.name = field_or(j, "scenario_name", "");
  r.outcome = scenario::outcome_from_string(field_or(j, "outcome", "unresolved")).value_or(scenario::Outcome::kUnresolved);
  r.expectation_met = field_or(j["expectation"], "met", false);
  for (const auto& w : field_or(j["expectation"], "mismatches", std::vector<std::string>{})) r.expectation_why.push_back(w);
  r.failure.klass = j["failure"]["class"].is_string() ? j["failure"]["class"].get<std::string>() : "";
  r.failure.message = field_or(j["failure"], "message", "");
  r.seconds = field_or(j, "seconds", 0.0);
  r.repro_command = field_or(j["repro"], "command", "");
  return r;
}

// Suite ids name each scenario's folder and journal records: the file's stem
// as a portable name, made unique with a hash of the path when two files of
// the suite share a stem (a/x.yaml and b/x.yaml), so no run overwrites
// another's report. Every shard computes the same ids from the same list.
std::map<std::string, std::string> scenario_ids(const std::vector<std::string>& files) {
  std::map<std::string, int> stems;
  for (const auto& f : files) ++stems[safe_file_name(fs::path(f).stem().string())];
  std::map<std::string, std::string> ids;
  for (const auto& f : files) {
    std::string id = safe_file_name(fs::path(f).stem().string());
    if (stems[id] > 1) {
      // The low 32 bits of the path's FNV-1a 64, as 8 hex digits.
      id += "-" + Fnv1a64().update(fs::path(f).lexically_normal().string()).hex().substr(8);
    }
    ids[f] = id;
  }
  return ids;
}

std::string host_name() {
  char buf[256] = {};
  return ::gethostname(buf, sizeof buf - 1) == 0 ? std::string(buf) : std::string();
}

void write_suite_outputs(const fs::path& root, const std::vector<run::RunReport>& reports,
                         const std::vector<std::string>& ids, const std::vector<std::string>& interrupted,
                         const std::string& junit, const std::string& shard_text, const std::string& where) {
  const run::VerdictCounts counts = run::count_verdicts(reports);
  nlohmann::ordered_json summary;
  summary["schema_version"] = 1;
  summary["shard"] = shard_text;
  summary["scenarios"] = ids.size();
  summary["completed"] = reports.size();
  summary["expectations_met"] = counts.met;
  summary["skipped"] = counts.skipped;
  summary["interrupted"] = interrupted;
  summary["runs"] = nlohmann::ordered_json::array();
  for (const auto& r : reports) {
    summary["runs"].push_back({{"scenario", r.scenario.name}, {"outcome", to_string(r.outcome)},
                               {"expectation_met", r.expectation_met}, {"verdict", to_string(run::verdict_of(r))},
                               {"report", r.out_dir + "/report.md"}});
  }
  write_file_atomically((root / "suite.json").string(), summary.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  const std::string xml = report::junit_xml(reports, "dbh.suite", report::ci_environment(supervisor::process_environment()));
  write_file_atomically((root / "junit.xml").string(), xml);
  write_file_atomically((root / "index.html").string(), report::suite_index_html(root.string(), reports, interrupted, shard_text));
  // --junit naming the junit.xml just written is that file.
  if (!junit.empty() && !same_path(junit, (root / "junit.xml").string())) write_junit(junit, where, xml);
}

}  // namespace dbh::harness::cli
