#include "harness/cli/merge_command.h"

#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/cli/suite_outputs.h"
#include "harness/common/error.h"
#include "harness/common/files.h"
#include "harness/common/json_fields.h"
#include "harness/common/out_file.h"
#include "harness/common/output_dir.h"
#include "harness/common/text.h"
#include "harness/report/ci_conventions.h"
#include "harness/report/report.h"
#include "harness/supervisor/outcome.h"
#include "harness/supervisor/shard.h"

namespace dbh::harness::cli {
namespace fs = std::filesystem;

namespace {

// What the suite folders' journals say.
struct Journals {
  std::map<std::string, nlohmann::json> finished;  // last finished record per scenario wins
  std::set<std::string> started;
  std::vector<std::string> problems;  // each journal's own: undecodable records, never opened, unfinished
  std::map<int64_t, std::set<int64_t>> shards_seen;  // shard count -> indices whose journal was found
  std::vector<std::string> whole_suites;             // journals of unsharded suites
  std::map<std::string, std::set<std::string>> suite_hashes;  // the suite each journal ran -> its journals
  size_t found = 0;
};

// A folder given to merge that cannot be: printed as "dbh merge: …", exit 2.
class MergeInputError : public UsageError {
 public:
  using UsageError::UsageError;
};

// Reads the journal at `jp` into `j`. Throws MergeInputError when it cannot
// be read (not a regular file, too big, unreadable).
void read_journal(const fs::path& jp, Journals& j) {
  std::vector<std::string> bad;
  int64_t expected = -1;
  std::set<std::string> finished_here;
  bool opened = false;  // a `suite` record: every invocation writes one first
  std::string ran;      // the suite it ran (its last `suite` record's suite_hash)
  std::vector<nlohmann::json> records;
  try {
    records = SuiteJournal(jp).read(&bad);
  } catch (const ScenarioError& e) {
    throw MergeInputError(e.what());
  }
  for (const auto& rec : records) {
    const std::string type = field_or(rec, "type", "");
    opened = opened || type == "suite";
    if (type == "suite" && rec.contains("scenarios") && rec["scenarios"].is_number_integer()) {
      expected = rec["scenarios"].get<int64_t>();
    }
    if (type == "suite" && rec.contains("suite_hash") && rec["suite_hash"].is_string()) {
      ran = rec["suite_hash"].get<std::string>();  // a resumed suite: what it ran last
    }
    if (type == "suite") {
      // "K/N (source)" for a shard, "" for a whole suite: which parts
      // the folders hold is read from the journals, whatever the
      // folders are named or however deep they were passed.
      long long k = -1, n = 0;
      const std::string text = field_or(rec, "shard", "");
      const std::string folder = jp.parent_path().filename().string();
      const bool named = std::sscanf(text.c_str(), "%lld/%lld", &k, &n) == 2 ||
                         // a journal without the field: its folder's name
                         (!rec.contains("shard") && std::sscanf(folder.c_str(), "shard-%lld-of-%lld", &k, &n) == 2);
      if (named && n > 0 && k >= 0 && k < n) {
        j.shards_seen[n].insert(k);
      } else {
        j.whole_suites.push_back(jp.string());
      }
    }
    if (type == "started") j.started.insert(field_or(rec, "scenario", ""));
    if (type != "finished") continue;
    const std::string id = field_or(rec, "scenario", "");
    j.finished[id] = rec;
    // The scenario's folder beside its journal: shard folders may have
    // been moved or copied since the journal recorded an absolute path
    // (which may now hold another copy's reports, or nothing).
    if (!id.empty() && id != "." && id != ".." && id.find('/') == std::string::npos) {
      std::error_code beside_ec;
      const fs::path beside = jp.parent_path() / id;
      if (fs::is_directory(beside, beside_ec)) j.finished[id]["dir"] = fs::absolute(beside).string();
    }
    finished_here.insert(id);
  }
  const auto seen_finished = static_cast<int64_t>(finished_here.size());
  if (!ran.empty()) j.suite_hashes[ran].insert(jp.string());
  for (const auto& b : bad) j.problems.push_back(b);
  if (!opened) {
    // Empty or unreadable: what the suite ran is unknown, never "nothing failed".
    j.problems.push_back(jp.string() + ": expected a suite's journal (a `suite` record first), got " +
                         (bad.empty() && finished_here.empty() ? std::string("no record") : std::string("none")));
  }
  if (expected >= 0 && seen_finished < expected) {
    j.problems.push_back(jp.string() + ": " + std::to_string(expected - seen_finished) + " of " +
                         std::to_string(expected) + " scenario(s) never finished");
  }
}

// Every journal.jsonl under the folders given, in path order within each.
// Throws MergeInputError for a folder that is not one, or holds none.
Journals read_journals(const std::vector<std::string>& dirs) {
  Journals j;
  for (const auto& d : dirs) {
    std::error_code ec;
    if (!fs::is_directory(d, ec)) {
      throw MergeInputError(d + ": expected a suite output folder, got " + describe_path(d));
    }
    std::vector<fs::path> journals;
    for (auto it = fs::recursive_directory_iterator(d, fs::directory_options::skip_permission_denied, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (it->path().filename() == "journal.jsonl") journals.push_back(it->path());
    }
    if (ec) {
      throw MergeInputError(d + ": expected a readable suite output folder, got an error (" + ec.message() + ")");
    }
    std::sort(journals.begin(), journals.end());
    j.found += journals.size();
    for (const auto& jp : journals) read_journal(jp, j);
  }
  if (j.found == 0) {
    std::string given;
    for (const auto& d : dirs) given += " " + d;
    throw MergeInputError("expected suite output folders holding journal.jsonl, got none in" + given);
  }
  return j;
}

// What keeps the merge from being complete: each journal's own problems,
// then missing shards, shards of different splits or suites, and scenarios
// started but never finished.
std::vector<std::string> merge_problems(const Journals& j) {
  std::vector<std::string> problems = j.problems;
  // Sharded output: every shard of the count must be among the folders
  // given, and all of one split (a merge of 0/2 alone is half a suite).
  for (const auto& [count, seen] : j.shards_seen) {
    for (int64_t k = 0; k < count; ++k) {
      if (!seen.count(k)) {
        problems.push_back("shard shard-" + std::to_string(k) + "-of-" + std::to_string(count) +
                           " is missing (no journal of shard " + std::to_string(k) + "/" + std::to_string(count) +
                           " in the folders given)");
      }
    }
  }
  if (j.shards_seen.size() > 1 || (!j.shards_seen.empty() && !j.whole_suites.empty())) {
    std::string counts;
    for (const auto& [count, seen] : j.shards_seen) counts += (counts.empty() ? "" : ", ") + std::to_string(count);
    problems.push_back("expected the shards of one split, got shards of " + std::to_string(j.shards_seen.size()) +
                       " shard count(s) (" + counts + ")" +
                       (j.whole_suites.empty() ? "" : " and " + std::to_string(j.whole_suites.size()) + " unsharded suite(s)"));
  }
  if (j.suite_hashes.size() > 1) {
    // Shards of a suite whose scenarios or settings changed between them
    // (or of two suites): their results answer different questions.
    std::string which;
    for (const auto& [hash, journals] : j.suite_hashes) {
      which += (which.empty() ? "" : "; ") + one_line(*journals.begin()) +
               (journals.size() > 1 ? " and " + std::to_string(journals.size() - 1) + " more" : std::string());
    }
    problems.push_back("expected journals of one suite, got " + std::to_string(j.suite_hashes.size()) +
                       " different suites (their scenarios or settings differ): " + which);
  }
  for (const auto& id : j.started) {
    if (!j.finished.count(id)) problems.push_back(id + ": started but never finished (interrupted)");
  }
  return problems;
}

// The merged suite's reports and their ids: each finished scenario's
// report.json (one that cannot be read is a problem), then one unresolved
// report per interrupted scenario, which the JUnit shows as an error.
std::vector<run::RunReport> merged_reports(const Journals& j, std::vector<std::string>& order,
                                      std::vector<std::string>& problems) {
  std::vector<run::RunReport> reports;
  for (const auto& [id, rec] : j.finished) {
    order.push_back(id);
    const fs::path report = fs::path(field_or(rec, "dir", "")) / "report.json";
    const auto text = read_regular_file(report.string(), size_t{64} << 20);
    const auto parsed = nlohmann::json::parse(text.value_or(""), nullptr, false);
    try {
      if (!text) throw ProtocolError("expected a report, got " + describe_path(report.string()));
      if (parsed.is_discarded()) throw ProtocolError("expected a report, got text that is not JSON");
      run::RunReport r = report_from_json(parsed);
      r.out_dir = field_or(rec, "dir", "");
      reports.push_back(r);
    } catch (const std::exception& e) {
      problems.push_back(report.string() + ": " + e.what());
    }
  }
  for (const auto& id : j.started) {
    if (j.finished.count(id)) continue;
    run::RunReport r;
    r.scenario.name = id;
    r.outcome = scenario::Outcome::kUnresolved;
    r.expectation_met = false;
    r.expectation_why.push_back("started but never finished (interrupted)");
    r.failure.message = "the suite was interrupted while this scenario ran; re-run it with dbh suite --resume";
    reports.push_back(r);
    order.push_back(id);
  }
  return reports;
}

}  // namespace

int merge_command(const std::vector<std::string>& dirs, const std::string& out, const std::string& junit) {
  const fs::path root = out.empty() ? fs::path(default_output_folder("merged")) : fs::path(out);
  std::vector<std::string> problems, order;
  std::vector<run::RunReport> reports;
  try {
    check_junit(junit, "dbh merge", root.string(), {}, dirs, true);
    const Journals journals = read_journals(dirs);
    problems = merge_problems(journals);
    reports = merged_reports(journals, order, problems);
    OutputDir claim(root, "merge");
    write_suite_outputs(root, reports, order, {}, junit, "merged", "dbh merge");
    claim.commit();
  } catch (const MergeInputError& e) {
    std::cerr << "dbh merge: " << one_line(e.what()) << "\n";
    return 2;
  } catch (const UsageError& e) {
    std::cerr << "dbh: " << one_line(e.what()) << "\n";
    return 2;
  }
  const run::VerdictCounts c = run::count_verdicts(reports);
  std::cout << "merged " << dirs.size() << " folder(s): " << c.met << " passed, " << c.not_met
            << " failed" << (c.skipped > 0 ? ", " + std::to_string(c.skipped) + " skipped (not run there)" : "")
            << "\nsuite: " << one_line((root / "suite.json").string())
            << std::endl;
  if (!problems.empty()) {
    std::cerr << "dbh merge: the merged result is incomplete:\n";
    for (const auto& p : problems) std::cerr << "  " << one_line(p) << "\n";
    return 1;
  }
  return c.not_met == 0 ? 0 : 1;
}

}  // namespace dbh::harness::cli
