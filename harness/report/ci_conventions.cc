#include "harness/report/ci_conventions.h"
#include "harness/common/out_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string_view>

#include "harness/common/text.h"
#include "harness/report/report.h"

namespace dbh::harness::report {
namespace fs = std::filesystem;

namespace {

// How much of a user-provided string reaches a summary or an annotation.
constexpr size_t kCellBytes = 200;         // a table cell, a title
constexpr size_t kLineBytes = 300;         // one line of a failure message
constexpr size_t kMessageLines = 5;        // lines of a failure message shown
constexpr size_t kWhyLines = 5;            // unmet parts of an expectation shown
constexpr size_t kReproBytes = 2000;       // a reproduce command
constexpr size_t kAnnotationBytes = 4000;  // an annotation's message, before escaping
// Room kept for the note that says what a cut summary left out.
constexpr size_t kNoteBytes = 256;

// One line of user text for a Markdown table cell or heading: no line breaks,
// valid UTF-8, markup escaped ('&' and '~' too, so neither an entity nor a
// strikethrough appears), bounded.
std::string cell(const std::string& s, size_t max = kCellBytes) {
  std::string out;
  for (char c : markdown_inline(truncate_utf8(one_line(s), max))) {
    if (c == '&' || c == '~') out += '\\';
    out += c;
  }
  return out;
}

// The first `max_lines` lines of `s`, each one line of valid UTF-8 of at most
// kLineBytes, with "…" standing for the lines left out.
std::vector<std::string> first_lines(const std::string& s, size_t max_lines) {
  std::vector<std::string> lines;
  std::istringstream in(valid_utf8(s));
  std::string line;
  bool more = false;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (lines.size() == max_lines) {
      more = true;
      break;
    }
    lines.push_back(truncate_utf8(one_line(line), kLineBytes));
  }
  while (!lines.empty() && lines.back().find_first_not_of(' ') == std::string::npos) lines.pop_back();
  if (more) lines.push_back("\xE2\x80\xA6");
  return lines;
}

// A fenced code block holding `text` verbatim: the fence is longer than any
// run of backticks in it, so no content can close it early.
std::string fenced(const std::string& text, const std::string& info) {
  size_t longest = 0, run = 0;
  for (char c : text) {
    run = c == '`' ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  const std::string fence(std::max<size_t>(3, longest + 1), '`');
  return fence + info + "\n" + text + (text.empty() || text.back() == '\n' ? "" : "\n") + fence + "\n";
}

// `path` relative to `base` when it lies under it, otherwise as given.
std::string relative_to(const std::string& path, const std::string& base) {
  if (path.empty() || base.empty()) return path;
  const auto under = [](const fs::path& p, const fs::path& b) -> std::optional<std::string> {
    const fs::path rel = p.lexically_relative(b);
    if (rel.empty() || *rel.begin() == "..") return std::nullopt;
    return rel.string();
  };
  std::error_code ec;
  const fs::path p = fs::absolute(path, ec).lexically_normal();
  const fs::path b = fs::absolute(base, ec).lexically_normal();
  if (auto r = under(p, b)) return *r;
  // The same folders reached through links (a CI builds dir mounted twice).
  const fs::path pc = fs::weakly_canonical(p, ec);
  if (ec) return path;
  const fs::path bc = fs::weakly_canonical(b, ec);
  if (ec) return path;
  if (auto r = under(pc, bc)) return *r;
  return path;
}

// "diverged (nonfinite_activation at step 1 in decoder.fusion)".
std::string outcome_text(const CiResult& r) {
  std::string s = r.outcome;
  if (!r.klass.empty() || r.step || !r.module.empty()) {
    std::string detail = r.klass;
    if (r.step) detail += (detail.empty() ? "" : " ") + std::string("at step ") + std::to_string(*r.step);
    if (!r.module.empty()) detail += (detail.empty() ? "" : " ") + std::string("in ") + r.module;
    s += " (" + detail + ")";
  }
  return s;
}

std::string table_row(const CiResult& r, const std::string& workspace) {
  const char* expectation = r.skipped            ? "\xE2\x8F\xAD\xEF\xB8\x8F skipped"      // ⏭️
                            : !r.expectation_met ? "\xE2\x9D\x8C not met"                   // ❌
                            : r.unsure         ? "\xE2\x9A\xA0\xEF\xB8\x8F met, unsure"  // ⚠️
                                               : "\xE2\x9C\x85 met";                      // ✅
  return "| " + cell(r.scenario) + " | " + cell(r.outcome) + " | " + cell(r.klass) + " | " +
         (r.step ? std::to_string(*r.step) : std::string()) + " | " + cell(r.module) + " | " + expectation + " | " +
         cell(relative_to(r.report, workspace), 2 * kCellBytes) + " |\n";
}

std::string failure_block(const CiResult& r) {
  std::string b = "**" + cell(r.scenario) + "**: " + cell(outcome_text(r)) + ", expectation not met\n\n";
  size_t shown = 0;
  for (const auto& w : r.why) {
    if (shown++ == kWhyLines) {
      b += "- " + std::to_string(r.why.size() - kWhyLines) + " more\n";
      break;
    }
    b += "- " + cell(w, kLineBytes) + "\n";
  }
  if (!r.why.empty()) b += "\n";
  const auto lines = first_lines(r.message, kMessageLines);
  if (!lines.empty()) {
    std::string text;
    for (const auto& l : lines) text += l + "\n";
    b += fenced(text, "text") + "\n";
  }
  if (!r.repro.empty()) b += "Reproduce:\n\n" + fenced(truncate_utf8(one_line(r.repro), kReproBytes), "sh") + "\n";
  return b;
}

}  // namespace

CiEnvironment ci_environment(const std::map<std::string, std::string>& env) {
  const auto get = [&](const char* name) {
    const auto it = env.find(name);
    return it == env.end() ? std::string() : it->second;
  };
  CiEnvironment ci;
  ci.github_actions = get("GITHUB_ACTIONS") == "true";
  ci.github_step_summary = get("GITHUB_STEP_SUMMARY");
  ci.github_workspace = get("GITHUB_WORKSPACE");
  ci.gitlab_ci = get("GITLAB_CI") == "true";
  ci.gitlab_project_dir = get("CI_PROJECT_DIR");
  return ci;
}

CiResult ci_result(const run::RunReport& r) {
  CiResult c;
  c.scenario = r.scenario.name;
  c.outcome = to_string(r.outcome);
  c.klass = r.failure.klass;
  c.step = r.failure.step;
  c.module = r.failure.module;
  c.expectation_met = r.expectation_met;
  c.skipped = run::verdict_of(r) == run::RunVerdict::kSkipped;
  c.unsure = r.outcome == scenario::Outcome::kNondeterministic ||
             (r.determinism.checked && r.determinism.pass_rate > 0.0 && r.determinism.pass_rate < 1.0);
  c.report = r.out_dir.empty() ? std::string() : r.out_dir + "/report.md";
  c.why = r.expectation_why;
  c.message = r.failure.message;
  c.repro = r.repro_command;
  return c;
}

std::string github_escape_data(const std::string& s) {
  std::string out;
  for (char c : valid_utf8(s)) {
    switch (c) {
      case '%': out += "%25"; break;
      case '\r': out += "%0D"; break;
      case '\n': out += "%0A"; break;
      default: out += c;
    }
  }
  return out;
}

std::string github_escape_property(const std::string& s) {
  std::string out;
  for (char c : github_escape_data(s)) {
    switch (c) {
      case ':': out += "%3A"; break;
      case ',': out += "%2C"; break;
      default: out += c;
    }
  }
  return out;
}

std::string github_annotation(const std::string& level, const std::string& title, const std::string& message) {
  return "::" + level + " title=" + github_escape_property(truncate_utf8(one_line(title), kCellBytes)) +
         "::" + github_escape_data(truncate_utf8(valid_utf8(message), kAnnotationBytes)) + "\n";
}

std::string github_annotations(const std::vector<CiResult>& results) {
  std::vector<std::string> errors, warnings, notices;
  for (const auto& r : results) {
    const std::string title = "dbh " + r.scenario;
    if (r.skipped) {
      std::string m = "skipped: not run on this machine";
      for (const auto& l : first_lines(r.message, 1)) m += "\n" + l;
      notices.push_back(github_annotation("notice", title, m));
    } else if (!r.expectation_met) {
      std::string m = outcome_text(r) + ": expectation not met";
      for (const auto& w : r.why) m += "\n" + w;
      for (const auto& l : first_lines(r.message, kMessageLines)) m += "\n" + l;
      if (!r.repro.empty()) m += "\nrepro: " + r.repro;
      errors.push_back(github_annotation("error", title, m));
    } else if (r.unsure) {
      std::string m = outcome_text(r) + ": expectation met, but the result is not reliable (nondeterministic or flaky)";
      for (const auto& l : first_lines(r.message, 1)) m += "\n" + l;
      warnings.push_back(github_annotation("warning", title, m));
    }
  }
  std::string out;
  const auto emit = [&](const std::vector<std::string>& list, const std::string& level, const std::string& what) {
    if (list.size() <= kGithubAnnotationLimit) {
      for (const auto& a : list) out += a;
      return;
    }
    for (size_t i = 0; i + 1 < kGithubAnnotationLimit; ++i) out += list[i];
    out += github_annotation(level, "dbh",
                             std::to_string(list.size() - kGithubAnnotationLimit + 1) + " more scenario(s) " + what +
                                 "; see the job summary");
  };
  emit(errors, "error", "did not meet their expectation");
  emit(warnings, "warning", "met their expectation unreliably");
  emit(notices, "notice", "were not run on this machine");
  return out;
}

std::string github_summary_markdown(const std::string& title, const std::vector<CiResult>& results,
                                    const std::string& workspace, size_t max_bytes) {
  size_t met = 0, failed = 0, skipped = 0;
  for (const auto& r : results) r.skipped ? ++skipped : r.expectation_met ? ++met : ++failed;
  // The header's mark agrees with the rows: a failure is a cross, a run in
  // which nothing ran here (every scenario skipped) is a skip, never a tick.
  const std::string mark = failed > 0                 ? "\xE2\x9D\x8C "               // cross
                           : met == 0 && skipped > 0 ? "\xE2\x8F\xAD\xEF\xB8\x8F "  // skip
                                                     : "\xE2\x9C\x85 ";              // tick
  std::string out = "### " + mark + cell(title) + ": " +
                    (met == 0 && failed == 0 && skipped > 0
                         ? std::string("nothing run on this machine")
                         : std::to_string(met) + " of " + std::to_string(results.size() - skipped) +
                               " expectation(s) met") +
                    (skipped > 0 ? ", " + std::to_string(skipped) + " skipped (not run on this machine)" : "") + "\n\n";
  out += "| scenario | outcome | class | step | module | expectation | report |\n";
  out += "|---|---|---|---|---|---|---|\n";
  if (out.size() + kNoteBytes > max_bytes) return "";
  const auto note = [](size_t n, const std::string& what) {
    return "\n_" + std::to_string(n) + " more " + what +
           " not shown: GitHub limits a job summary to 1 MiB; the reports have them all._\n";
  };
  size_t shown = 0;
  for (const auto& r : results) {
    const std::string row = table_row(r, workspace);
    if (out.size() + row.size() + kNoteBytes > max_bytes) break;
    out += row;
    ++shown;
  }
  if (shown < results.size()) {
    out += note(results.size() - shown, "scenario(s), and the failures,");
    return out;
  }
  if (failed == 0) return out;
  const std::string heading = "\n#### Failures\n\n";
  if (out.size() + heading.size() + kNoteBytes > max_bytes) return out + note(failed, "failure(s)");
  out += heading;
  size_t blocks = 0;
  for (const auto& r : results) {
    if (r.expectation_met || r.skipped) continue;
    const std::string block = failure_block(r);
    if (out.size() + block.size() + kNoteBytes > max_bytes) return out + note(failed - blocks, "failure(s)");
    out += block;
    ++blocks;
  }
  return out;
}

void publish_to_github(const CiEnvironment& ci, const std::string& title, const std::vector<CiResult>& results,
                       std::ostream& annotations, std::ostream& err, const std::vector<std::string>& keep) {
  if (!ci.github_actions) return;
  static std::atomic<bool> warned{false};
  const auto warn = [&](const std::string& why) {
    if (!warned.exchange(true)) err << "dbh: warning: no GitHub job summary written: " << why << "\n";
  };
  try {
    annotations << github_annotations(results) << std::flush;
    if (ci.github_step_summary.empty()) {
      warn("GITHUB_STEP_SUMMARY is not set");
      return;
    }
    const std::string& path = ci.github_step_summary;
    const std::string shown = one_line(path);  // never a second line in a CI log
    for (const auto& k : keep) {
      if (!k.empty() && (path_within(path, k) || same_file(path, k))) {
        warn(shown + ": expected the runner's summary file, got " + one_line(k) +
             (same_file(path, k) ? "" : " or a file in it") + ", which dbh does not append to");
        return;
      }
    }
    // Appended only to a regular file: O_NOFOLLOW refuses a link (it would
    // append wherever it points), O_NONBLOCK keeps a FIFO without a reader
    // from blocking open() forever, and fstat refuses a FIFO with one, a
    // device or anything else that is not a file.
    const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0) {
      const int e = errno;
      if (e == ELOOP) {
        warn(shown + ": expected a regular file, got a symbolic link");
      } else if (e == ENXIO) {
        warn(shown + ": expected a regular file, got a FIFO");
      } else {
        warn(shown + ": " + std::strerror(e));
      }
      return;
    }
    struct FdCloser {
      int fd;
      ~FdCloser() {
        if (fd >= 0) ::close(fd);
      }
    } closer{fd};
    struct stat st{};
    if (::fstat(fd, &st) != 0) {
      warn(shown + ": " + std::strerror(errno));
      return;
    }
    if (!S_ISREG(st.st_mode)) {
      warn(shown + ": expected a regular file, got " +
           (S_ISFIFO(st.st_mode)  ? "a FIFO"
            : S_ISCHR(st.st_mode) ? "a character device"
            : S_ISBLK(st.st_mode) ? "a block device"
            : S_ISSOCK(st.st_mode) ? "a socket"
            : S_ISDIR(st.st_mode)  ? "a directory"
                                   : "a special file"));
      return;
    }
    if (st.st_nlink > 1) {
      // Another name of some file (the dataset's annotations, say): what it
      // is cannot be told from here, and the runner's file has one name.
      warn(shown + ": expected the runner's summary file, got a file with " + std::to_string(st.st_nlink) +
           " names (a hard link), which dbh does not append to");
      return;
    }
    const size_t existing = static_cast<size_t>(st.st_size);
    // A blank line keeps this summary apart from what an earlier command of
    // the step appended.
    const std::string sep = existing > 0 ? "\n" : "";
    const size_t room = kGithubSummaryLimit > existing + sep.size() ? kGithubSummaryLimit - existing - sep.size() : 0;
    const std::string text = github_summary_markdown(title, results, ci.github_workspace, room);
    if (text.empty()) {
      warn(shown + " is full (GitHub's 1 MiB limit)");
      return;
    }
    const std::string all = sep + text;
    size_t done = 0;
    int error = 0;
    while (done < all.size()) {
      const ssize_t n = ::write(fd, all.data() + done, all.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        error = n < 0 ? errno : EIO;
        break;
      }
      done += static_cast<size_t>(n);
    }
    closer.fd = -1;
    if (::close(fd) != 0 && error == 0) error = errno;
    if (error != 0) warn(shown + ": " + std::strerror(error));
  } catch (const std::exception& e) {
    warn(one_line(e.what()));
  }
}

std::string gitlab_attachments(const std::string& run_dir, const std::string& project_dir) {
  if (run_dir.empty()) return "";
  std::string out;
  for (const char* name : {"report.md", "loss.png", "hmean.png", "memory.png"}) {
    const fs::path file = fs::path(run_dir) / name;
    std::error_code ec;
    if (!fs::is_regular_file(file, ec)) continue;
    const std::string path = relative_to(file.string(), project_dir);
    if (path.find("]]") != std::string::npos || path.find_first_of("|\r\n") != std::string::npos) continue;
    out += "[[ATTACHMENT|" + path + "]]\n";
  }
  return out;
}

}  // namespace dbh::harness::report
