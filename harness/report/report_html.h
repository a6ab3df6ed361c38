#pragma once

#include <string>
#include <vector>

#include "harness/report/html_page.h"
#include "harness/report/report.h"

namespace dbh::harness::report {

/// Limits of what report.html shows (images: kHtmlMaxImageBytes and
/// kHtmlMaxEmbeddedBytes in html_page.h).
inline constexpr size_t kHtmlMaxOverlays = 12;
inline constexpr size_t kHtmlMaxStepRows = 200;
inline constexpr size_t kHtmlMaxEventRows = 200;
inline constexpr size_t kHtmlMaxMemoryRows = 100;

/// The run's report as one self-contained HTML page (`report.html`): summary,
/// failure analysis (evidence, causes, resolutions), reproduction command,
/// environment, trials, steps, plots and overlays embedded as base64 `data:`
/// URIs, validation, faults, memory and events, from the same `RunReport` as
/// report.md and report.json. Reads the plots, overlays and events.jsonl from
/// `r.out_dir` (and its trial folders), so call it after they are written.
/// Every string from a scenario, a message or a path is HTML-escaped; the page
/// loads nothing from elsewhere (inline CSS, no script, a Content-Security-
/// Policy forbidding both) and links only to files of its own folder.
std::string report_html(const run::RunReport& r);

/// A suite's `index.html` in `root`: every run with its outcome, class and
/// expectation, linked by a relative path to its report.html (report.md for a
/// run written before report.html existed), runs whose expectation was not
/// met first, then the other failures, then the rest; totals on top;
/// `interrupted` scenario ids at the end. Reads each run's report.json for
/// its expectation.
std::string suite_index_html(const std::string& root, const std::vector<run::RunReport>& runs,
                             const std::vector<std::string>& interrupted, const std::string& shard_text);

}  // namespace dbh::harness::report
