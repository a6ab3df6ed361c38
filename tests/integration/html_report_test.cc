// report.html and a suite's index.html through the dbh binary: a tiny failing
// run and a tiny suite, then the pages checked as text (well-formed, escaped,
// nothing loaded from elsewhere, every data: URI a decodable image, every
// relative link a file that exists) and rendered by headless Chromium (the
// DOM it builds, and a screenshot that is not blank). Without Chromium the
// browser tests are skipped, saying so.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "harness/report/report_html.h"
#include "harness/scenario/scenario.h"
#include "tests/support/files.h"
#include "tests/support/paths.h"
#include "tests/support/subprocess.h"

extern char** environ;

namespace dbh {
namespace {

namespace fs = std::filesystem;
using testing::read_text;
using testing::write_text;

// A name that tries to inject markup: it must reach every page as text.
const char* kFailName = "html-fail <img src=x onerror=alert(1)> & \"co\"";
const char* kFailNameEscaped = "html-fail &lt;img src=x onerror=alert(1)&gt; &amp; &quot;co&quot;";
// The same text as a browser serialises a text node (quotes stay as they are).
const char* kFailNameInDom = "html-fail &lt;img src=x onerror=alert(1)&gt; &amp; \"co\"";

std::string tiny(const std::string& name, const std::string& extra = "") {
  return "name: '" + name + "'\ninclude: " + std::string(DBH_SOURCE_DIR) +
         "/scenarios/base/tiny-cpu.yaml\ntrain:\n  max_steps: 2\n" + extra;
}
const char* kNanInput = "faults:\n  - name: nan_input\n    at_step: 1\n";

testing::ProcessResult dbh(std::vector<std::string> args, const fs::path& cwd) {
  args.insert(args.begin(), DBH_BINARY);
  return testing::run_process(args, cwd.string(), 300);
}

// --- A small HTML tokenizer: enough to check what dbh writes. ---------------

struct Tag {
  std::string name;  // lower case
  bool closing = false;
  std::map<std::string, std::string> attrs;
};

const std::vector<std::string> kVoid = {"meta", "img", "hr", "br", "link", "input"};

// Tags in document order; `error` receives the first problem (an unbalanced
// or unterminated tag), when there is one.
std::vector<Tag> tokenize(const std::string& html, std::string* error) {
  std::vector<Tag> tags;
  std::vector<std::string> open;
  size_t i = 0;
  while ((i = html.find('<', i)) != std::string::npos) {
    if (html.compare(i, 2, "<!") == 0) {
      i = html.find('>', i);
      if (i == std::string::npos) break;
      continue;
    }
    const size_t end = html.find('>', i);
    if (end == std::string::npos) {
      *error = "unterminated tag at offset " + std::to_string(i);
      break;
    }
    std::string body = html.substr(i + 1, end - i - 1);
    Tag t;
    size_t p = 0;
    if (!body.empty() && body[0] == '/') t.closing = true, p = 1;
    while (p < body.size() && (std::isalnum(static_cast<unsigned char>(body[p])))) {
      t.name += static_cast<char>(std::tolower(static_cast<unsigned char>(body[p++])));
    }
    if (t.name.empty()) {
      *error = "a '<' that opens no tag at offset " + std::to_string(i);
      break;
    }
    while (p < body.size()) {
      while (p < body.size() && std::isspace(static_cast<unsigned char>(body[p])))
        ++p;
      std::string key;
      while (p < body.size() && body[p] != '=' && !std::isspace(static_cast<unsigned char>(body[p])))
        key += body[p++];
      std::string value;
      if (p < body.size() && body[p] == '=') {
        ++p;
        if (p < body.size() && body[p] == '"') {
          const size_t q = body.find('"', p + 1);
          value = body.substr(p + 1, q - p - 1);
          p = q == std::string::npos ? body.size() : q + 1;
        } else {
          while (p < body.size() && !std::isspace(static_cast<unsigned char>(body[p])))
            value += body[p++];
        }
      }
      std::transform(key.begin(), key.end(), key.begin(), [](unsigned char c) { return std::tolower(c); });
      if (!key.empty()) t.attrs[key] = value;
    }
    if (t.closing) {
      if (open.empty() || open.back() != t.name) {
        *error = "</" + t.name + "> at offset " + std::to_string(i) + " closes " +
                 (open.empty() ? std::string("nothing") : "<" + open.back() + ">");
        break;
      }
      open.pop_back();
    } else if (std::find(kVoid.begin(), kVoid.end(), t.name) == kVoid.end()) {
      open.push_back(t.name);
    }
    tags.push_back(t);
    i = end + 1;
    // Raw text elements: skip to their end tag.
    if (!t.closing && (t.name == "style" || t.name == "script")) {
      const size_t close = html.find("</" + t.name, i);
      if (close == std::string::npos) break;
      i = close;
    }
  }
  if (error->empty() && !open.empty()) *error = "<" + open.back() + "> is never closed";
  return tags;
}

std::optional<std::string> base64_decode(const std::string& in) {
  if (in.size() % 4 != 0) return std::nullopt;
  std::string out;
  uint32_t buf = 0;
  int bits = 0;
  size_t pad = 0;
  for (size_t k = 0; k < in.size(); ++k) {
    const char c = in[k];
    int v;
    if (c >= 'A' && c <= 'Z')
      v = c - 'A';
    else if (c >= 'a' && c <= 'z')
      v = c - 'a' + 26;
    else if (c >= '0' && c <= '9')
      v = c - '0' + 52;
    else if (c == '+')
      v = 62;
    else if (c == '/')
      v = 63;
    else if (c == '=' && k + 2 >= in.size()) {
      ++pad;
      continue;
    } else
      return std::nullopt;
    if (pad > 0) return std::nullopt;  // data after padding
    buf = (buf << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((buf >> bits) & 0xFF);
    }
  }
  return out;
}

std::string url_decode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// Checks one page dbh wrote into `dir`: doctype, balanced tags, no script or
// event handler, no resource from elsewhere, every data: URI an image that
// decodes, every link relative and to a file that exists. Returns the images
// decoded.
std::vector<cv::Mat> check_page(const fs::path& page) {
  const std::string html = read_text(page);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>\n", 0), 0u) << page;
  std::string error;
  const auto tags = tokenize(html, &error);
  EXPECT_EQ(error, "") << page;
  std::vector<cv::Mat> images;
  for (const auto& t : tags) {
    EXPECT_NE(t.name, "script") << page;
    EXPECT_NE(t.name, "iframe") << page;
    EXPECT_NE(t.name, "link") << page;
    for (const auto& [k, v] : t.attrs) {
      EXPECT_NE(k.rfind("on", 0), 0u) << "event handler " << k << " on <" << t.name << "> in " << page;
      if (k == "src") {
        if (v.rfind("data:image/png;base64,", 0) != 0) {
          ADD_FAILURE() << "<" << t.name << " src=" << v.substr(0, 80) << "> in " << page;
          continue;
        }
        const auto bytes = base64_decode(v.substr(std::strlen("data:image/png;base64,")));
        if (!bytes) {
          ADD_FAILURE() << "a data: URI that is not base64 in " << page;
          continue;
        }
        const cv::Mat img = cv::imdecode(std::vector<uchar>(bytes->begin(), bytes->end()), cv::IMREAD_COLOR);
        EXPECT_FALSE(img.empty()) << "a data: URI that is not a decodable PNG in " << page;
        images.push_back(img);
      }
      if (k == "href") {
        const std::string l = lower(v);
        for (const char* scheme : {"http:", "https:", "//", "javascript:", "data:", "file:"}) {
          EXPECT_NE(l.rfind(scheme, 0), 0u) << "<a href=" << v << "> in " << page;
        }
        EXPECT_TRUE(fs::exists(page.parent_path() / url_decode(v)))
            << "link to a missing file: " << v << " in " << page;
      }
    }
  }
  return images;
}

std::string title_of(const std::string& html) {
  const size_t a = html.find("<title>"), b = html.find("</title>");
  return a == std::string::npos || b == std::string::npos ? "" : html.substr(a + 7, b - a - 7);
}

// --- The runs, once for all the tests below. ----------------------------------

struct Runs {
  fs::path dir;
  testing::ProcessResult run, suite;
};
Runs* g_runs = nullptr;

// Runs the failing scenario and the suite the first time a test needs them.
const Runs& runs() {
  if (g_runs == nullptr) {
    g_runs = new Runs;
    g_runs->dir = testing::fresh_dir("dbh-html");
    const fs::path& d = g_runs->dir;
    write_text(d / "fail.yaml", tiny(kFailName, kNanInput));
    write_text(d / "suite" / "a-pass.yaml", tiny("html-pass"));
    write_text(d / "suite" / "b-fail.yaml", tiny("html-suite-fail", kNanInput));
    g_runs->run = dbh({"run", (d / "fail.yaml").string(), "--out", (d / "run").string(), "-q"}, d);
    g_runs->suite = dbh({"suite", (d / "suite").string(), "--out", (d / "suite-out").string(), "-q"}, d);
  }
  return *g_runs;
}

// Removes the runs' folder when every test has run.
class RemoveRuns : public ::testing::Environment {
 public:
  void TearDown() override {
    if (g_runs == nullptr) return;
    std::error_code ec;
    fs::remove_all(g_runs->dir, ec);
    delete g_runs;
    g_runs = nullptr;
  }
};
[[maybe_unused]] ::testing::Environment* const kRemoveRuns = ::testing::AddGlobalTestEnvironment(new RemoveRuns);

class HtmlReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const Runs& r = runs();
    dir_ = &r.dir;
    run_ = &r.run;
    suite_ = &r.suite;
  }
  const fs::path* dir_ = nullptr;
  const testing::ProcessResult* run_ = nullptr;
  const testing::ProcessResult* suite_ = nullptr;
};

TEST_F(HtmlReportTest, RunWritesASelfContainedEscapedReport) {
  // The run fails (non-finite input) against its default expectation (passed).
  ASSERT_EQ(run_->exit_code, 1) << run_->out << run_->err;
  const fs::path page = *dir_ / "run" / "report.html";
  ASSERT_TRUE(fs::exists(page)) << run_->out << run_->err;
  const std::string html = read_text(page);
  const std::string title = title_of(html);
  EXPECT_NE(title.find(kFailNameEscaped), std::string::npos) << title;
  EXPECT_NE(title.find("at step 1"), std::string::npos) << title;
  EXPECT_EQ(html.find("<img src=x"), std::string::npos) << "the scenario name injected markup";
  EXPECT_EQ(html.find("\"co\""), std::string::npos) << "a quote of the scenario name reached the page unescaped";
  // Summary, analysis and the rest, from the same data as report.json.
  for (const char* part : {"nonfinite_input", "badge bad\">diverged", "<span class=\"unmet\">not met</span>",
                           "Evidence gathered by dbh", "Likely causes", "Resolutions", "dbh run ", "id=\"environment\"",
                           "id=\"steps\"", "id=\"events\"", "id=\"memory\"", "nan_input"}) {
    EXPECT_NE(html.find(part), std::string::npos) << part;
  }
  // Events read as `key value` pairs, never as a raw JSON object.
  EXPECT_NE(html.find("fault " + std::string("nan_input")), std::string::npos) << "the fault_fired event's fields";
  EXPECT_EQ(html.find("<code>{&quot;"), std::string::npos) << "an event's fields shown as a JSON object";
  // The plots and the failing batch's overlays, embedded.
  const auto images = check_page(page);
  EXPECT_GE(images.size(), 3u) << "loss.png, memory.png and at least one overlay";
  for (const char* needle : {"alt=\"loss parts per step\"", "alt=\"memory per step\"", "class=\"overlay\""}) {
    EXPECT_NE(html.find(needle), std::string::npos) << needle;
  }
  // Written atomically: no temporary left beside the reports.
  for (const auto& e : fs::directory_iterator(*dir_ / "run")) {
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  }
}

TEST_F(HtmlReportTest, SuiteIndexLinksEveryRunFailuresFirst) {
  ASSERT_EQ(suite_->exit_code, 1) << suite_->out << suite_->err;
  const fs::path root = *dir_ / "suite-out";
  const fs::path page = root / "index.html";
  ASSERT_TRUE(fs::exists(page)) << suite_->out << suite_->err;
  check_page(page);
  const std::string html = read_text(page);
  const size_t fail = html.find("href=\"./b-fail/report.html\"");
  const size_t pass = html.find("href=\"./a-pass/report.html\"");
  ASSERT_NE(fail, std::string::npos) << html;
  ASSERT_NE(pass, std::string::npos) << html;
  EXPECT_LT(fail, pass) << "the failing run is listed first";
  EXPECT_NE(html.find("html-suite-fail"), std::string::npos);
  EXPECT_NE(html.find("nonfinite_input"), std::string::npos);
  EXPECT_NE(html.find("<strong>2</strong> runs"), std::string::npos);
  EXPECT_NE(html.find("1 met"), std::string::npos);
  EXPECT_NE(html.find("1 not met"), std::string::npos);
  EXPECT_NE(html.find("outcome: passed"), std::string::npos) << "the expectation, from report.json";
  for (const char* run : {"a-pass", "b-fail"})
    check_page(root / run / "report.html");
}

// The page's limits, on a report built in memory: an image over 2 MiB is
// linked, not embedded; at most 12 overlays; long step and event tables keep
// their first and last rows; file names and event text stay text.
TEST(HtmlReportLimitsTest, BoundsWhatItEmbedsAndEscapesFileNames) {
  const fs::path dir = testing::fresh_dir("dbh-html-limits");
  testing::RemoveOnExit remove(dir);
  write_text(dir / "s.yaml", tiny("limits <b>"));
  harness::run::RunReport r;
  r.scenario = harness::scenario::load_scenario((dir / "s.yaml").string());
  r.out_dir = (dir / "out").string();
  r.outcome = harness::scenario::Outcome::kDiverged;
  r.failure.klass = "nonfinite_loss";
  r.failure.step = 7;
  r.failure.message = "loss </pre><script>alert(1)</script>";
  r.repro_command = "dbh run 's.yaml'";
  std::vector<uchar> png;
  cv::imencode(".png", cv::Mat(8, 8, CV_8UC3, cv::Scalar(0, 0, 255)), png);
  const std::string small(png.begin(), png.end());
  write_text(dir / "out" / "loss.png", small);
  // Over the per-image limit: a PNG signature and 3 MiB of bytes.
  write_text(dir / "out" / "memory.png", small.substr(0, 8) + std::string(3 * 1024 * 1024, '\x01'));
  harness::run::TrialRecord t;
  t.label = "main";
  t.dir = (dir / "out" / "main").string();
  const std::string odd = "x\"><script>alert(1)</script>#?.png";
  t.analysis.overlays.push_back(odd);
  for (int i = 0; i < 19; ++i)
    t.analysis.overlays.push_back("o" + std::to_string(i) + ".png");
  for (const auto& o : t.analysis.overlays)
    write_text(dir / "out" / "main" / "overlays" / o, small);
  for (int i = 0; i < 500; ++i) {
    harness::supervisor::StepRecord st;
    st.step = i;
    st.loss = i == 7 ? std::nan("") : 1.0 / (i + 1);
    t.analysis.steps.push_back(st);
  }
  r.trials.push_back(t);
  std::string events;
  for (int i = 0; i < 1000; ++i)
    events += "{\"t\":" + std::to_string(i) + ",\"type\":\"heartbeat\",\"step\":" + std::to_string(i) + "}\n";
  events += "{\"t\":\"soon\",\"type\":7,\"step\":\"<i>\"}\n";  // fields of unexpected types
  events += "not json <script>alert(1)</script>\n";
  write_text(dir / "out" / "events.jsonl", events);

  // The files the page links to, as dbh writes them before the page.
  for (const char* f : {"scenario.resolved.json", "repro.sh", "report.md", "report.json", "metrics.csv"}) {
    write_text(dir / "out" / f, "");
  }
  const std::string html = harness::report::report_html(r);
  write_text(dir / "out" / "report.html", html);
  const auto images = check_page(dir / "out" / "report.html");
  EXPECT_EQ(images.size(), 1u + harness::report::kHtmlMaxOverlays) << "loss.png and 12 overlays";
  EXPECT_NE(html.find("memory.png</code></a> not embedded"), std::string::npos);
  EXPECT_NE(html.find("8 more overlays are not embedded"), std::string::npos);
  EXPECT_NE(html.find("x&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;#?.png"), std::string::npos);
  EXPECT_NE(html.find("&lt;/pre&gt;&lt;script&gt;"), std::string::npos);
  EXPECT_NE(html.find("not json &lt;script&gt;"), std::string::npos) << "the last event row is kept";
  EXPECT_NE(html.find("300 rows not shown"), std::string::npos) << "steps: 200 of 500";
  EXPECT_NE(html.find("802 rows not shown"), std::string::npos) << "events: 200 of 1002";
  EXPECT_NE(html.find("class=\"num nonfinite\">nan"), std::string::npos);
  size_t rows = 0;
  for (size_t i = 0; (i = html.find("<tr", i)) != std::string::npos; ++i)
    ++rows;
  EXPECT_LT(rows, 480u);
  EXPECT_LT(html.size(), 200u * 1024) << "a bounded page";
}

// --- Headless Chromium. ------------------------------------------------------

std::string find_chromium() {
  // DBH_CHROMIUM names another browser binary (one that is not executable,
  // e.g. DBH_CHROMIUM=none, skips the browser tests).
  if (const char* env = std::getenv("DBH_CHROMIUM"); env != nullptr && *env != '\0') {
    return ::access(env, X_OK) == 0 ? env : "";
  }
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"}) {
    if (::access(p, X_OK) == 0) return p;
  }
  return "";
}

// Runs Chromium in a process group of its own with a private profile, HOME,
// cache and TMPDIR under `work`, stdout to `out_file`; after it ends or after
// `timeout_s`, kills whatever is left of the group, and waits until no process
// names the profile any more.
int run_browser(const std::string& chromium, std::vector<std::string> args, const fs::path& work,
                const fs::path& out_file, double timeout_s) {
  const fs::path profile = work / "profile";
  fs::create_directories(profile);
  std::vector<std::string> argv = {chromium,
                                   "--headless=new",
                                   "--no-sandbox",
                                   "--disable-gpu",
                                   "--no-first-run",
                                   "--disable-extensions",
                                   "--disable-background-networking",
                                   "--disable-component-update",
                                   "--disable-sync",
                                   "--hide-scrollbars",
                                   "--mute-audio",
                                   "--user-data-dir=" + profile.string()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<std::string> env_storage;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    if (kv.rfind("HOME=", 0) == 0 || kv.rfind("XDG_", 0) == 0 || kv.rfind("TMPDIR=", 0) == 0) continue;
    env_storage.push_back(kv);
  }
  env_storage.push_back("HOME=" + work.string());
  env_storage.push_back("XDG_CONFIG_HOME=" + (work / "config").string());
  env_storage.push_back("XDG_CACHE_HOME=" + (work / "cache").string());
  env_storage.push_back("TMPDIR=" + work.string());
  std::vector<char*> args_c, env_c;
  for (auto& a : argv)
    args_c.push_back(a.data());
  args_c.push_back(nullptr);
  for (auto& e : env_storage)
    env_c.push_back(e.data());
  env_c.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, (work / "stderr.log").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0].c_str(), &actions, &attr, args_c.data(), env_c.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    ADD_FAILURE() << "cannot start " << chromium << ": " << std::strerror(rc);
    return -1;
  }
  const auto result = testing::wait_process(pid, timeout_s);
  // The group is Chromium's alone (its pgid is its pid): helpers it left are killed.
  ::kill(-pid, SIGKILL);
  EXPECT_FALSE(result.timed_out) << chromium << " ran over " << timeout_s << " s; stderr:\n"
                                 << read_text(work / "stderr.log");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!testing::find_processes({profile.string()}).empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(testing::find_processes({profile.string()}).empty()) << "Chromium left processes behind";
  return result.timed_out ? -1 : result.exit_code;
}

class HtmlBrowserTest : public HtmlReportTest {
 protected:
  void SetUp() override {
    chromium_ = find_chromium();
    if (chromium_.empty()) {
      const char* env = std::getenv("DBH_CHROMIUM");
      GTEST_SKIP() << "no Chromium ("
                   << (env != nullptr && *env != '\0' ? "DBH_CHROMIUM=" + std::string(env) + " is not an executable"
                                                      : std::string("/usr/bin/chromium"))
                   << "; install it with DBH_WITH_BROWSER=1 scripts/setup.sh): the pages are checked as text only";
    }
    HtmlReportTest::SetUp();
    work_ = testing::fresh_dir("dbh-chromium");
  }
  void TearDown() override {
    std::error_code ec;
    if (!work_.empty()) fs::remove_all(work_, ec);
  }
  std::string chromium_;
  fs::path work_;
};

TEST_F(HtmlBrowserTest, ChromiumBuildsTheReportsDomWithTheNameAsText) {
  const fs::path page = *dir_ / "run" / "report.html";
  ASSERT_TRUE(fs::exists(page));
  const fs::path dom_file = work_ / "dom.html";
  ASSERT_EQ(run_browser(chromium_, {"--dump-dom", "file://" + page.string()}, work_, dom_file, 90), 0)
      << read_text(work_ / "stderr.log");
  const std::string dom = read_text(dom_file);
  ASSERT_FALSE(dom.empty()) << read_text(work_ / "stderr.log");
  const std::string title = title_of(dom);
  EXPECT_NE(title.find(kFailNameInDom), std::string::npos) << title;
  EXPECT_NE(dom.find("nonfinite_input"), std::string::npos);
  EXPECT_NE(dom.find("diverged"), std::string::npos);
  // The name stayed text: the browser built no element from it.
  EXPECT_EQ(dom.find("onerror=\""), std::string::npos) << "an onerror attribute was parsed";
  EXPECT_EQ(dom.find("<img src=\"x\""), std::string::npos);
  size_t imgs_in_file = 0, imgs_in_dom = 0;
  const std::string html = read_text(page);
  for (size_t i = 0; (i = html.find("<img ", i)) != std::string::npos; ++i)
    ++imgs_in_file;
  for (size_t i = 0; (i = dom.find("<img ", i)) != std::string::npos; ++i)
    ++imgs_in_dom;
  EXPECT_EQ(imgs_in_dom, imgs_in_file);
}

TEST_F(HtmlBrowserTest, ChromiumRendersTheReportAndTheIndex) {
  const fs::path page = *dir_ / "run" / "report.html";
  ASSERT_TRUE(fs::exists(page));
  const fs::path shot = work_ / "report.png";
  ASSERT_EQ(
      run_browser(chromium_, {"--screenshot=" + shot.string(), "--window-size=1200,2000", "file://" + page.string()},
                  work_, work_ / "stdout.txt", 90),
      0)
      << read_text(work_ / "stderr.log");
  const cv::Mat img = cv::imread(shot.string(), cv::IMREAD_COLOR);
  ASSERT_FALSE(img.empty()) << "no screenshot: " << read_text(work_ / "stderr.log");
  EXPECT_EQ(img.cols, 1200);
  EXPECT_EQ(img.rows, 2000);
  cv::Mat gray;
  cv::cvtColor(img, gray, cv::COLOR_BGR2GRAY);
  cv::Scalar mean, stddev;
  cv::meanStdDev(gray, mean, stddev);
  const double ink = static_cast<double>(cv::countNonZero(gray < 200)) / static_cast<double>(gray.total());
  EXPECT_GT(stddev[0], 10.0) << "a blank screenshot (mean " << mean[0] << ")";
  EXPECT_GT(ink, 0.01) << "almost nothing drawn";
  // The red outcome badge (#cf222e): the inline CSS was applied.
  cv::Mat red;
  cv::inRange(img, cv::Scalar(30, 20, 190), cv::Scalar(60, 50, 220), red);
  EXPECT_GT(cv::countNonZero(red), 50) << "no red badge: the page's CSS did not apply";
  std::cout << "report.png: " << img.cols << "x" << img.rows << ", grey mean " << mean[0] << ", stddev " << stddev[0]
            << ", " << ink * 100 << " % ink, " << cv::countNonZero(red) << " badge-red pixels\n";
  if (const char* keep = std::getenv("DBH_KEEP_SCREENSHOT"); keep != nullptr && *keep != '\0') {
    fs::copy_file(shot, keep, fs::copy_options::overwrite_existing);
  }

  const fs::path index_shot = work_ / "index.png";
  ASSERT_EQ(run_browser(chromium_,
                        {"--screenshot=" + index_shot.string(), "--window-size=1200,800",
                         "file://" + (*dir_ / "suite-out" / "index.html").string()},
                        work_, work_ / "stdout.txt", 90),
            0);
  const cv::Mat index = cv::imread(index_shot.string(), cv::IMREAD_GRAYSCALE);
  ASSERT_FALSE(index.empty());
  cv::meanStdDev(index, mean, stddev);
  EXPECT_GT(stddev[0], 5.0) << "a blank index";
}

// The pages of `dbh diagnose` and `dbh bisect` (Markdown rendered by
// report/markdown_html): Chromium builds their tables, the verdict of a tried
// resolution and the step of the bisection, and draws a page that is not
// blank.
TEST_F(HtmlBrowserTest, ChromiumRendersTheDiagnosisAndBisectionPages) {
  const fs::path out = work_ / "diagnosis";
  const auto r = dbh({"diagnose", std::string(DBH_SOURCE_DIR) + "/scenarios/seed-002-unstable-binarization.yaml",
                      "--out", out.string(), "--cache", (work_ / "cache").string(), "-q"},
                     work_);
  ASSERT_EQ(r.exit_code, 1) << r.out << r.err;  // the scenario fails
  struct Page {
    fs::path file;
    std::string title;
    std::vector<std::string> text;
  };
  const std::vector<Page> pages = {
      {out / "diagnosis.html",
       "Diagnosis: seed-002-unstable-binarization",
       {"What works / What fails", "<td>Basic tensor ops on the device</td>", "not tried: it changes only the injected fault"}},
      {out / "bisect-modules" / "bisect.html", "", {"head.thresh", "<table>"}},
  };
  for (const auto& p : pages) {
    ASSERT_TRUE(fs::exists(p.file)) << p.file;
    const fs::path dom_file = work_ / (p.file.stem().string() + ".dom.html");
    ASSERT_EQ(run_browser(chromium_, {"--dump-dom", "file://" + p.file.string()}, work_, dom_file, 90), 0)
        << read_text(work_ / "stderr.log");
    const std::string dom = read_text(dom_file);
    if (!p.title.empty()) {
      EXPECT_EQ(title_of(dom), p.title);
    }
    for (const auto& t : p.text) EXPECT_NE(dom.find(t), std::string::npos) << p.file << ": no " << t << "\n" << dom;
    const fs::path shot = work_ / (p.file.stem().string() + ".png");
    ASSERT_EQ(run_browser(chromium_, {"--screenshot=" + shot.string(), "--window-size=1000,1400", "file://" + p.file.string()},
                          work_, work_ / "stdout.txt", 90),
              0);
    const cv::Mat img = cv::imread(shot.string(), cv::IMREAD_GRAYSCALE);
    ASSERT_FALSE(img.empty()) << p.file;
    cv::Scalar mean, stddev;
    cv::meanStdDev(img, mean, stddev);
    const double ink = static_cast<double>(cv::countNonZero(img < 200)) / static_cast<double>(img.total());
    EXPECT_GT(stddev[0], 5.0) << p.file << ": a blank page";
    EXPECT_GT(ink, 0.005) << p.file << ": almost nothing drawn";
    std::cout << p.file.filename().string() << ": grey mean " << mean[0] << ", stddev " << stddev[0] << ", "
              << ink * 100 << " % ink\n";
    if (const char* keep = std::getenv("DBH_KEEP_SCREENSHOT"); keep != nullptr && *keep != '\0') {
      fs::copy_file(shot, std::string(keep) + "." + p.file.stem().string() + ".png", fs::copy_options::overwrite_existing);
    }
  }
}

}  // namespace
}  // namespace dbh
