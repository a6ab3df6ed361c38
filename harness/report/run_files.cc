#include "harness/report/run_files.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>
#include <vector>

#include "harness/common/error.h"
#include "harness/common/files.h"
#include "harness/common/home.h"
#include "harness/common/text.h"
#include "harness/report/metrics_csv.h"
#include "harness/report/report_html.h"
#include "harness/supervisor/outcome.h"

namespace dbh::harness::report {
namespace fs = std::filesystem;
namespace {

// metrics.csv (Note [One metrics.csv]): a row per step, with the validation
// taken after it.
void write_metrics(const fs::path& path, const supervisor::TrialAnalysis& a) {
  std::string csv = metrics_csv_header();
  for (const auto& s : a.steps) {
    // A validation after this step (taken with step + 1 steps done).
    const auto e = std::find_if(a.evals.begin(), a.evals.end(), [&](const supervisor::EvalRecord& r) {
      return r.run == s.run && r.step == s.step + 1;
    });
    csv += metrics_csv_row(s, e != a.evals.end() ? &*e : nullptr);
  }
  write_file_atomically(path.string(), csv);
}

// The main trial's journal (up to kMaxJournalBytes) as `to`: a second name
// of the same file where the file system allows it, else a copy made a
// block at a time; neither holds the journal in memory, and `to` appears
// whole or not at all.
void publish_journal(const fs::path& from, const fs::path& to) {
  const fs::path tmp = to.parent_path() / ("." + to.filename().string() + ".tmp");
  std::error_code ec;
  fs::remove(tmp, ec);
  fs::create_hard_link(from, tmp, ec);
  if (ec) {
    std::ifstream in(from, std::ios::binary);
    std::ofstream copy(tmp, std::ios::binary | std::ios::trunc);
    std::vector<char> block(size_t{1} << 20);
    while (in && copy) {
      in.read(block.data(), static_cast<std::streamsize>(block.size()));
      copy.write(block.data(), in.gcount());
    }
    if (!copy || in.bad()) {
      fs::remove(tmp, ec);
      throw ReportError(to.string() + ": expected a writable file, got a write error");
    }
  }
  fs::rename(tmp, to);
}

}  // namespace

void write_run_files(const run::RunReport& r, const fs::path& out) {
  const std::vector<std::string>& repro = r.repro_words;
  const scenario::Scenario& s = r.scenario;
  const supervisor::TrialAnalysis& main = r.trials.front().analysis;
  write_metrics(out / "metrics.csv", main);
  publish_journal(fs::path(r.trials.front().dir) / "events.jsonl", out / "events.jsonl");
  std::vector<double> loss, bce, l1, dice, rss;
  for (const auto& st : main.steps) {
    // A part the worker did not measure is a gap in its line, never a 0.
    const double gap = std::numeric_limits<double>::quiet_NaN();
    loss.push_back(st.loss), bce.push_back(st.bce.value_or(gap)), l1.push_back(st.l1.value_or(gap)),
        dice.push_back(st.dice.value_or(gap));
    rss.push_back(static_cast<double>(st.rss_bytes) / (1024.0 * 1024.0));
  }
  write_plot_png((out / "loss.png").string(), "loss parts per step: " + s.name, {"total", "bce", "l1", "dice"},
                 {loss, bce, l1, dice}, "loss");
  if (!main.evals.empty()) {
    std::vector<double> hmean, precision, recall;
    for (const auto& e : main.evals) {
      hmean.push_back(e.hmean), precision.push_back(e.precision), recall.push_back(e.recall);
    }
    write_plot_png((out / "hmean.png").string(), "validation per evaluation: " + s.name,
                   {"h-mean", "precision", "recall"}, {hmean, precision, recall}, "metric");
  }
  write_plot_png((out / "memory.png").string(), "host RSS per step (MiB): " + s.name, {"rss MiB"}, {rss}, "MiB");
  // repro.sh is run by /bin/sh (dash reads no `$'…'`): POSIX single quotes,
  // which keep every byte, a line break in a file name too. It runs the dbh
  // that wrote it, or $DBH, and passes on its own arguments (`sh repro.sh
  // --out /tmp/again train.lr=0.001`), as the printed repro line takes more.
  std::string script_command = "\"$DBH\"";
  for (size_t i = 1; i < repro.size(); ++i) script_command += " " + shell_quote_posix(repro[i]);
  script_command += " \"$@\"";
  write_file_atomically((out / "repro.sh").string(),
                        "#!/bin/sh\n# Reproduces this run (" + one_line(s.name) +
                            "). DBH=/path/to/dbh sh repro.sh runs another dbh; arguments (--out DIR, key=value) "
                            "are passed on.\nset -e\nDBH=${DBH:-" +
                            shell_quote_posix(self_exe()) + "}\ncd " + shell_quote_posix(fs::current_path().string()) +
                            "\nexec " + script_command + "\n");
  fs::permissions(out / "repro.sh", fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec,
                  fs::perm_options::add);
  write_file_atomically((out / "report.json").string(), report_json(r).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  write_file_atomically((out / "report.md").string(), report_markdown(r));
  write_file_atomically((out / "report.html").string(), report_html(r));  // reads the files above
  const fs::path sentinel = out / ".FAILURE";
  if (supervisor::is_failure(r.outcome) && r.stopped == 0) {
    write_file_atomically(sentinel.string(), to_string(r.outcome) + " " + r.failure.klass + "\n" +
                                                 r.failure.message + "\n");
  } else {
    fs::remove(sentinel);
  }
}

}  // namespace dbh::harness::report
