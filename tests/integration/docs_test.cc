// Note [The manual's commands run as pasted]: the README is the front door
// (at most 250 lines) and docs/ the manual, with an index that lists every
// page; every relative link of them resolves. Every command of a `sh` block
// of the README and of docs/ has one row below, and every row a command: its
// documented exit status, and who runs it. The commands of a page run here,
// in the page's order, each as written (continuations, quotes, `( … )`,
// `cd`), through bash, from a folder that holds the repository's entries as
// links (the outputs a command writes there, `reports/runs/` and its own
// files, stay in the test's folder); the one substitution is `/tmp/`, which
// becomes the test's own folder so that two runs never meet. A block's
// settings (`export …`, `. …`, `NAME=value`) apply to the commands after them
// in that block. Placeholders (SCENARIO, DIR) belong in `text` blocks: a `sh`
// block is what a reader pastes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/files.h"
#include "tests/support/paths.h"
#include "tests/support/python_env.h"
#include "tests/support/subprocess.h"

namespace dbh {
namespace {

namespace fs = std::filesystem;

const fs::path kSource = DBH_SOURCE_DIR;

// A command of a `sh` block: its text as bash reads it, and as one line.
struct DocCommand {
  std::string page;                   // relative to the source root
  int line = 0;                       // where it starts
  std::string text;                   // as written (continuations kept)
  std::string flat;                   // continuations joined, for matching
  std::vector<std::string> settings;  // the block's settings before it
};

// One row per command of the manual.
struct Row {
  const char* page;
  const char* starts;  // the command's beginning, as written
  int exit;            // its documented exit status
  const char* runner;  // "" when this test runs it; else who does, and why not here
};

constexpr const char* kTheBuild =
    "the build's own: `./dev` runs these presets, and `.ci/run` runs `./dev test` on a clean clone";

const Row kRows[] = {
    {"README.md", "./dev main", 0, kTheBuild},
    {"README.md", "./dev test", 0, kTheBuild},
    {"README.md", "dbh env", 0, ""},
    {"README.md", "dbh run scenarios/nan-activation.yaml", 0, ""},
    {"README.md", "dbh bisect modules scenarios/nan-activation.yaml", 0, ""},
    {"README.md", "dbh diagnose scenarios/seed-002-unstable-binarization.yaml", 1, ""},
    {"README.md", "dbh suite scenarios/silent --junit suite.xml", 0, ""},
    {"README.md", "dbh scenario from-command --external --data fixtures/real", 0, ""},
    {"README.md", "dbh run mine.yaml 'faults=[{name: nan_activation", 1, ""},
    {"README.md", "dbh bisect config --good mine.yaml --bad 'model.optimizer.lr=1e6 seed=7'", 0, ""},
    {"docs/building.md", "cmake --preset dev -DTorch_DIR=", 0, kTheBuild},
    {"docs/building.md", "cmake --build --preset dev", 0, kTheBuild},
    {"docs/model.md", "dbh data check fixtures/real", 0, ""},
    {"docs/model.md", "dbh data show fixtures/real --index 0", 0, ""},
    {"docs/model.md", "dbh train --data fixtures/real --steps 10", 0, ""},
    {"docs/model.md", "dbh eval --weights /tmp/run/checkpoint-final.pt", 0, ""},
    {"docs/own-training.md", "pip install ./python", 0,
     "the set-up's own: `scripts/setup.sh python` installs the adapter so, and a test may not change the .venv"},
    {"docs/own-training.md", "dbh scenario from-command --external --data fixtures/real", 0, ""},
    {"docs/own-training.md", "dbh run mine.yaml 'faults=[{name: nan_activation", 1, ""},
    {"docs/own-training.md", "dbh bisect modules mine.yaml", 0, ""},
    {"docs/own-training.md", "dbh repeat mine.yaml --processes 2", 0, ""},
    {"docs/own-training.md", "dbh bisect config --good mine.yaml", 0, ""},
    {"docs/own-training.md", "(cd $T/argparse_folder && dbh scenario from-command", 0, ""},
    {"docs/own-training.md", "(cd $T/experiment_yaml && dbh scenario from-command", 0, ""},
    {"docs/own-training.md", "(cd $T/option_pairs && dbh scenario from-command", 0, ""},
    {"docs/own-training.md", "(cd $T/lightning_cli && dbh scenario from-command", 0, ""},
    {"docs/own-training.md", "(cd $T/hydra_lightning && dbh scenario from-command", 0, ""},
    {"docs/own-training.md", "dbh bisect config --good examples/pytorch-regions/scenarios/clean.yaml", 0, ""},
    {"docs/own-training.md", "dbh diagnose examples/pytorch-regions/scenarios/clean.yaml optim.step_size=50", 1, ""},
    {"docs/own-training.md", "dbh repeat examples/pytorch-regions/scenarios/second-run-leak.yaml", 0, ""},
    {"docs/own-training.md", "dbh run examples/pytorch-regions/scenarios/frozen-learning.yaml", 0, ""},
    {"docs/own-training.md", "dbh run examples/pytorch-regions/scenarios/validation-zero.yaml", 0, ""},
    {"docs/own-training.md", "(cd examples/pytorch-regions && dbh scenario from-command", 0, ""},
    {"docs/own-training.md", "dbh scenario from-command 'python runners/train.py", 0, ""},
    {"docs/own-training.md", "dbh run s.yaml hardware.device=cpu", 0, ""},
};

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// The pages: the README and every page of docs/.
std::vector<std::string> pages() {
  std::vector<std::string> out = {"README.md"};
  for (const auto& e : fs::directory_iterator(kSource / "docs")) {
    if (e.path().extension() == ".md") out.push_back("docs/" + e.path().filename().string());
  }
  std::sort(out.begin() + 1, out.end());
  return out;
}

std::vector<std::string> lines_of(const fs::path& file) {
  std::ifstream in(file);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

bool is_setting(const std::string& flat) {
  static const std::regex kSetting(R"(^(export [A-Za-z_]\w*=.*|\. \S+.*|[A-Za-z_]\w*=\S*)$)");
  return std::regex_match(flat, kSetting);
}

// Every command of the page's `sh` blocks, in order, settings apart.
std::vector<DocCommand> commands_of(const std::string& page) {
  const auto lines = lines_of(kSource / page);
  std::vector<DocCommand> out;
  std::vector<std::string> settings;
  bool in_block = false;
  bool shell = false;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    if (starts_with(l, "```")) {
      in_block = !in_block;
      shell = in_block && l == "```sh";
      settings.clear();
      continue;
    }
    if (!in_block || !shell || l.empty() || l[0] == '#') continue;
    DocCommand c{page, static_cast<int>(i + 1), l, l, settings};
    while (!c.text.empty() && c.text.back() == '\\' && i + 1 < lines.size()) {
      c.text += "\n" + lines[++i];
      c.flat = c.flat.substr(0, c.flat.size() - 1) + " " + lines[i].substr(lines[i].find_first_not_of(' '));
    }
    if (is_setting(c.flat)) {
      settings.push_back(c.text);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::vector<const Row*> rows_of(const DocCommand& c) {
  std::vector<const Row*> out;
  for (const Row& r : kRows) {
    if (c.page == r.page && starts_with(c.flat, r.starts)) out.push_back(&r);
  }
  return out;
}

TEST(DocsTest, TheReadmeIsTheFrontDoorAndTheManualHasAnIndex) {
  EXPECT_LE(lines_of(kSource / "README.md").size(), 250u) << "the README is the front door: the manual is docs/";
  std::ifstream in(kSource / "docs/README.md");
  std::stringstream index;
  index << in.rdbuf();
  for (const std::string& page : pages()) {
    if (page == "README.md" || page == "docs/README.md") continue;
    const std::string name = fs::path(page).filename().string();
    EXPECT_NE(index.str().find("](" + name + ")"), std::string::npos) << "docs/README.md does not list " << page;
  }
}

TEST(DocsTest, EveryRelativeLinkResolves) {
  std::vector<std::string> files = pages();
  files.push_back("python/README.md");
  static const std::regex kLink(R"(\]\(([^)\s]+)\))");
  int links = 0;
  for (const std::string& page : files) {
    int n = 0;
    for (const std::string& l : lines_of(kSource / page)) {
      ++n;
      for (std::sregex_iterator it(l.begin(), l.end(), kLink), end; it != end; ++it) {
        std::string target = (*it)[1];
        if (target.find("://") != std::string::npos || starts_with(target, "#")) continue;
        target = target.substr(0, target.find('#'));
        ++links;
        EXPECT_TRUE(fs::exists(kSource / fs::path(page).parent_path() / target))
            << page << ":" << n << ": the link " << target << " leads nowhere";
      }
    }
  }
  EXPECT_GE(links, 20) << "the README and the index link the manual's pages";
}

TEST(DocsTest, EveryCommandOfTheManualHasOneRowAndEveryRowACommand) {
  std::set<const Row*> used;
  for (const std::string& page : pages()) {
    for (const DocCommand& c : commands_of(page)) {
      const auto rows = rows_of(c);
      EXPECT_EQ(rows.size(), 1u) << c.page << ":" << c.line << ": `" << c.flat
                                 << "` needs one row in tests/integration/docs_test.cc (its exit status, who runs it)";
      used.insert(rows.begin(), rows.end());
    }
  }
  for (const Row& r : kRows) {
    EXPECT_TRUE(used.count(&r) > 0) << r.page << ": no command begins `" << r.starts << "`";
  }
}

// A folder that holds the repository's entries as links, but its own
// `reports/` (where runs write by default; dbh reads its knowledge base from
// its home, never from here) and its own `tmp/`.
fs::path workspace(const fs::path& root) {
  const fs::path work = root / "work";
  fs::create_directories(work / "reports");
  fs::create_directories(root / "tmp");
  for (const auto& e : fs::directory_iterator(kSource)) {
    const std::string name = e.path().filename().string();
    if (name == "reports" || name == ".git") continue;
    fs::create_directory_symlink(e.path(), work / name);
  }
  return work;
}

std::string with_tmp(std::string text, const fs::path& tmp) {
  const std::string to = tmp.string() + "/";  // itself under /tmp/: search on after it
  for (size_t at = text.find("/tmp/"); at != std::string::npos; at = text.find("/tmp/", at + to.size())) {
    text.replace(at, 5, to);
  }
  return text;
}

class DocsPageTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DocsPageTest, RunsAsPasted) {
  const std::string page = GetParam();
  const auto commands = commands_of(page);
  ASSERT_FALSE(commands.empty()) << page << " has no command";
  testing::ScratchDir dir("docs");
  const fs::path work = workspace(dir);
  testing::EnvChanges env = testing::venv_python_env();
  env["PATH"] = fs::path(testing::dbh_binary()).parent_path().string() + ":" + *env["PATH"];
  int ran = 0;
  for (const DocCommand& c : commands) {
    const auto rows = rows_of(c);
    ASSERT_EQ(rows.size(), 1u) << c.page << ":" << c.line;
    if (*rows[0]->runner != '\0') continue;
    std::string script = "set -e\n";
    for (const std::string& s : c.settings) script += s + "\n";
    script += c.text + "\n";
    const auto r = testing::run_process_with_env({"/bin/bash", "-c", with_tmp(script, dir / "tmp")}, env,
                                                 work.string(), 900);
    ++ran;
    EXPECT_EQ(r.exit_code, rows[0]->exit)
        << c.page << ":" << c.line << ": `" << c.flat << "`\n--- stdout (end)\n"
        << r.out.substr(r.out.size() > 3000 ? r.out.size() - 3000 : 0) << "\n--- stderr (end)\n"
        << r.err.substr(r.err.size() > 3000 ? r.err.size() - 3000 : 0);
  }
  EXPECT_GT(ran, 0) << page;
}

// The pages with commands to run; own-training's (Lightning trials, a
// diagnosis of minutes) are in the slow list of tests/CMakeLists.txt.
INSTANTIATE_TEST_SUITE_P(Pages, DocsPageTest,
                         ::testing::Values("README.md", "docs/model.md", "docs/own-training.md"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = fs::path(info.param).stem().string();
                           for (char& ch : name) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return name;
                         });

}  // namespace
}  // namespace dbh
