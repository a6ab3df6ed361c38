#pragma once
// What `dbh run`, `dbh suite` and `dbh merge` share: the scenario list of a
// suite, its journal, its summary files (suite.json, junit.xml, index.html)
// and the checks of a --junit file.

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/probe/probe.h"
#include "harness/report/report.h"

namespace dbh::harness::cli {

/// What a suite's journal says for `dbh suite --resume`: the scenarios
/// started and finished (each one's last `finished` record), or, in
/// `foreign`, why the journal is not this suite's: one of another shard (or
/// of a whole suite where a shard resumes, and back), or one naming a
/// scenario this suite does not hold; empty when it is.
struct ResumeState {
  std::map<std::string, nlohmann::json> finished;
  std::set<std::string> started;
  std::string foreign;
};
/// `records` are the journal's, `ids` the suite ids this invocation runs,
/// `shard` its "K/N" ("" for a whole suite).
ResumeState resume_state(const std::vector<nlohmann::json>& records, const std::set<std::string>& ids,
                         const std::string& shard);

/// Why `dbh suite --resume` runs a scenario again although the journal
/// records it finished (`finished`, its `finished` record), or "" when that
/// result still answers: another configuration (the file edited, other
/// overrides: `hash`, its resolved scenario's hash now), or the same one on
/// other inputs (Note [Input manifest]: a dataset or weights file, the
/// training's code, the dbh build, an outcome variable; `now`), or inputs
/// that cannot be compared.
std::string rerun_reason(const nlohmann::json& finished, const std::string& hash, const probe::InputManifest& now);

/// The scenario files `inputs` name: files as given, folders' *.yaml and
/// *.yml sorted. Throws ScenarioError for a path that does not exist or a
/// folder member whose name is not UTF-8.
std::vector<std::string> expand_scenarios(const std::vector<std::string>& inputs);

/// Whether `path` is a JUnit file dbh wrote (its head and tail), which a
/// later run may replace.
bool is_dbh_junit(const std::string& path);

/// Whether `a` and `b` are the same path, links resolved.
bool same_path(const std::string& a, const std::string& b);

/// Checks --junit before anything runs: a new file, or a JUnit file dbh
/// wrote, in an existing folder; never a link, a folder, a FIFO or a device,
/// never one of the scenario `files`, never inside `out` (the command's own
/// output folder, which it writes and may remove), never an existing file
/// inside `inputs` (folders whose files it reads: a shard's junit.xml is a
/// JUnit file dbh wrote, but not one to replace). The one exception is the
/// junit.xml a suite or merge writes into its own folder anyway (`out`/
/// junit.xml, as examples/slurm and examples/kubernetes name it). Throws
/// UsageError naming --junit.
void check_junit(const std::string& junit, const std::string& where, const std::string& out,
                 const std::vector<std::string>& files, const std::vector<std::string>& inputs = {},
                 bool writes_own_junit = false);

/// Writes --junit (checked before the run: checked again, since the run took
/// time), atomically. Throws UsageError naming --junit and `where`.
void write_junit(const std::string& junit, const std::string& where, const std::string& xml);

/// The suite's append-only journal: a `started` record before each scenario
/// and a `finished` record after it, each flushed to disk (fsync), so a suite
/// killed at any moment can be resumed and its shards merged.
class SuiteJournal {
 public:
  explicit SuiteJournal(std::filesystem::path path) : path_(std::move(path)) {}
  /// Appends one record as a line and syncs it. Throws ReportError.
  void append(const nlohmann::ordered_json& record) const;
  /// Cuts a torn last line (the harness died mid-write): a record appended
  /// after it would be glued onto the fragment and lost, and the journal
  /// would never merge. Returns whether there was one.
  bool drop_torn_tail() const;
  /// Records that decode; a torn last line is ignored. With `bad`, also
  /// collects "journal.jsonl:LINE: …" for every record that does not decode,
  /// except a torn last line.
  std::vector<nlohmann::json> read(std::vector<std::string>* bad = nullptr) const;

 private:
  std::filesystem::path path_;
};

/// The parts of a report.json a suite's summaries need. Throws
/// ProtocolError when `j` is not a report.
run::RunReport report_from_json(const nlohmann::json& j);

/// Suite ids name each scenario's folder and journal records: the file's
/// stem as a portable name, made unique with a hash of the path when two
/// files of the suite share a stem (a/x.yaml and b/x.yaml), so no run
/// overwrites another's report. Every shard computes the same ids.
std::map<std::string, std::string> scenario_ids(const std::vector<std::string>& files);

/// This machine's host name; "" when unknown.
std::string host_name();

/// suite.json, junit.xml and index.html in `root` (and --junit when given).
void write_suite_outputs(const std::filesystem::path& root, const std::vector<run::RunReport>& reports,
                         const std::vector<std::string>& ids, const std::vector<std::string>& interrupted,
                         const std::string& junit, const std::string& shard_text, const std::string& where);

}  // namespace dbh::harness::cli
