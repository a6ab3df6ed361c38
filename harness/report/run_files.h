// The files of a run's output folder, written from its decided RunReport.

#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "harness/report/report.h"

namespace dbh::harness::report {

/// Writes a run's files into `out` (which exists): metrics.csv (the main
/// trial's steps and validations), events.jsonl (the main trial's), the
/// plots (loss.png, memory.png, hmean.png when it validated), repro.sh (the
/// words of `r.repro_words`, run by /bin/sh with the dbh that wrote it),
/// report.json, report.md, report.html (which reads the files before it),
/// and the .FAILURE sentinel when the run failed and was not stopped
/// (removed otherwise). Each file is written atomically.
void write_run_files(const run::RunReport& r, const std::filesystem::path& out);

}  // namespace dbh::harness::report
