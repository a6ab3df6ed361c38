// Dependencies run one way (docs/architecture.md): every #include of the
// model and the harness is checked against the layers below, so a lower part
// that starts including a higher one fails here, naming the file and line.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "tests/support/paths.h"

namespace dbh {
namespace {

namespace fs = std::filesystem;

// Each part's layer: a file may include its own part and parts of a lower
// layer only. The worker is a process the supervisor starts, never a header
// it includes; a run's value and verdicts (run) are made from the
// supervisor's trials, and reports written from that value, so report sits
// above run; the probe service (an isolated, cached trial) is below
// bisection, diagnose and qualify, which call it.
const std::map<std::string, int>& layers() {
  static const std::map<std::string, int> l = {
      {"model", 0},          {"harness/version", 0}, {"harness/step_code", 0}, {"harness/common", 1}, {"harness/gpu", 1},
      {"harness/kb", 2},     {"harness/proto", 2},   {"harness/env", 2},    {"harness/scenario", 3},
      {"harness/supervisor", 4}, {"harness/faults", 4}, {"harness/monitors", 4}, {"harness/worker", 5},
      {"harness/run", 5},    {"harness/report", 6},  {"harness/numerics", 6}, {"harness/probe", 7},
      {"harness/bisect", 8}, {"harness/diagnose", 9}, {"harness/qualify", 9}, {"harness/cli", 10},
  };
  return l;
}

// The part a path ("harness/probe/probe.h", "model/data/scan.h") belongs to.
std::string part_of(const std::string& path) {
  if (path.rfind("model/", 0) == 0) return "model";
  const auto slash = path.find('/', std::string("harness/").size());
  if (path.rfind("harness/", 0) == 0) {
    return slash == std::string::npos ? path.substr(0, path.rfind('.')) : path.substr(0, slash);
  }
  return "";
}

TEST(LayersTest, PartLayersAreKnown) {
  EXPECT_EQ(part_of("harness/bisect/search.h"), "harness/bisect");
  EXPECT_EQ(part_of("model/data/scan.h"), "model");
  EXPECT_EQ(part_of("harness/version.h"), "harness/version");
  EXPECT_EQ(part_of("third_party/x.h"), "");
}

TEST(LayersTest, NoPartIncludesAHigherOne) {
  const fs::path root = DBH_SOURCE_DIR;
  const std::regex include(R"re(^\s*#\s*include\s*"((harness|model)/[^"]+)")re");
  int64_t files = 0, includes = 0;
  for (const char* top : {"harness", "model"}) {
    for (const auto& e : fs::recursive_directory_iterator(root / top)) {
      const auto ext = e.path().extension();
      if (!e.is_regular_file() || (ext != ".h" && ext != ".cc" && ext != ".cu")) continue;
      const std::string rel = fs::relative(e.path(), root).string();
      const std::string from = part_of(rel);
      ASSERT_TRUE(layers().count(from)) << rel << ": a part with no layer: add it to layers() and docs/architecture.md";
      ++files;
      std::ifstream in(e.path());
      std::string line;
      int n = 0;
      while (std::getline(in, line)) {
        ++n;
        std::smatch m;
        if (!std::regex_search(line, m, include)) continue;
        ++includes;
        const std::string to = part_of(m[1].str());
        ASSERT_TRUE(layers().count(to)) << rel << ":" << n << ": includes " << m[1] << ", a part with no layer";
        if (to == from) continue;
        EXPECT_LT(layers().at(to), layers().at(from))
            << rel << ":" << n << ": " << from << " (layer " << layers().at(from) << ") includes " << m[1] << " ("
            << to << ", layer " << layers().at(to) << "): expected only lower layers (docs/architecture.md)";
      }
    }
  }
  EXPECT_GT(files, 100);
  EXPECT_GT(includes, 300);
}

// `dbh run` and `dbh suite` run trials, never a search: they use the probe
// service's input manifest and full-disk check, not bisection.
TEST(LayersTest, RunAndSuiteDoNotIncludeBisection) {
  const std::regex include(R"re(^\s*#\s*include\s*"(harness/bisect/[^"]+)")re");
  for (const char* file : {"harness/cli/run_command.cc", "harness/cli/run_command.h", "harness/cli/run_scenario.h",
                           "harness/cli/suite_command.cc", "harness/cli/suite_outputs.cc",
                           "harness/cli/suite_outputs.h"}) {
    std::ifstream in(fs::path(DBH_SOURCE_DIR) / file);
    ASSERT_TRUE(in) << file;
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      std::smatch m;
      EXPECT_FALSE(std::regex_search(line, m, include)) << file << ":" << n << ": includes " << m[1]
                                                          << ": run and suite use harness/probe/, not bisection";
    }
  }
}

// docs/architecture.md says where each part and decision lives: every file
// it names exists (a move that leaves the page pointing at the old place
// fails here), and every part of layers() has its row.
TEST(LayersTest, TheArchitecturePageNamesOnlyFilesThatExist) {
  const fs::path root = DBH_SOURCE_DIR;
  std::ifstream in(root / "docs/architecture.md");
  ASSERT_TRUE(in);
  const std::string page((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Where a name without a folder, or relative to a library's root, may be.
  std::set<std::string> names;
  for (const char* top : {"harness", "model", "python", "docs", "tests", "reports"}) {
    for (const auto& e : fs::recursive_directory_iterator(root / top)) names.insert(e.path().filename().string());
  }
  const std::regex quoted("`([A-Za-z0-9_./{},-]+\\.(h|cc|cu|py|yaml|md|\\{h,cc\\}))`");
  int64_t checked = 0;
  for (auto it = std::sregex_iterator(page.begin(), page.end(), quoted); it != std::sregex_iterator(); ++it) {
    std::string path = (*it)[1].str();
    if (path.rfind("generated/", 0) == 0) continue;  // written by the build
    std::vector<std::string> paths;
    if (const auto brace = path.find(".{h,cc}"); brace != std::string::npos) {
      paths = {path.substr(0, brace) + ".h", path.substr(0, brace) + ".cc"};
    } else {
      paths = {path};
    }
    for (const auto& p : paths) {
      const bool bare = p.find('/') == std::string::npos;
      // A bare page name (report.md, qualification.md) is a file dbh writes.
      if (bare && fs::path(p).extension() == ".md") continue;
      ++checked;
      const bool found = bare ? names.count(p) > 0
                              : fs::exists(root / p) || fs::exists(root / "harness" / p) ||
                                    fs::exists(root / "model" / p) || fs::exists(root / "python" / p);
      EXPECT_TRUE(found) << "docs/architecture.md names `" << p << "`, which is not in the source tree";
    }
  }
  EXPECT_GT(checked, 40);
  for (const auto& [part, layer] : layers()) {
    if (part.rfind("harness/", 0) != 0 || part == "harness/version" || part == "harness/step_code") continue;
    EXPECT_NE(page.find("`" + part + "/`"), std::string::npos)
        << "docs/architecture.md has no row for `" << part << "/`";
  }
}

// Every .h, .cc and .cu file under `top` (relative to the source root).
std::vector<fs::path> source_files(const fs::path& top) {
  std::vector<fs::path> out;
  for (const auto& e : fs::recursive_directory_iterator(fs::path(DBH_SOURCE_DIR) / top)) {
    const auto ext = e.path().extension();
    if (e.is_regular_file() && (ext == ".h" || ext == ".cc" || ext == ".cu")) out.push_back(e.path());
  }
  return out;
}

// Each part's namespace: the common vocabulary (harness/common/, and the
// version and step-code headers) is dbh::harness itself, every other part of
// the harness has dbh::harness::<part>, the model dbh::model. Every file of a
// part declares its code there, so two parts cannot define one name twice
// (two dbh::harness::Judgement broke the one-definition rule).
const std::map<std::string, std::string>& part_namespaces() {
  static const std::map<std::string, std::string> n = {
      {"model", "dbh::model"},
      {"harness/version", "dbh::harness"},
      {"harness/step_code", "dbh::harness"},
      {"harness/common", "dbh::harness"},
      {"harness/gpu", "dbh::harness::gpu"},
      {"harness/kb", "dbh::harness::kb"},
      {"harness/proto", "dbh::harness::proto"},
      {"harness/env", "dbh::harness::env"},
      {"harness/scenario", "dbh::harness::scenario"},
      {"harness/supervisor", "dbh::harness::supervisor"},
      {"harness/faults", "dbh::harness::faults"},
      {"harness/monitors", "dbh::harness::monitors"},
      {"harness/worker", "dbh::harness::worker"},
      {"harness/run", "dbh::harness::run"},
      {"harness/report", "dbh::harness::report"},
      {"harness/probe", "dbh::harness::probe"},
      {"harness/numerics", "dbh::harness::numerics"},
      {"harness/bisect", "dbh::harness::bisect"},
      {"harness/diagnose", "dbh::harness::diagnose"},
      {"harness/qualify", "dbh::harness::qualify"},
      {"harness/cli", "dbh::harness::cli"},
  };
  return n;
}

TEST(LayersTest, EveryPartHasANamespace) {
  for (const auto& [part, layer] : layers()) {
    EXPECT_EQ(part_namespaces().count(part), 1u) << part << " (layer " << layer << ") has no namespace in the table";
  }
  EXPECT_EQ(part_namespaces().size(), layers().size());
}

TEST(LayersTest, APartWithItsOwnNamespaceKeepsItsCodeThere) {
  std::map<std::string, std::string> own;
  for (const auto& [part, ns] : part_namespaces()) {
    if (ns != "dbh::harness" && part.rfind("harness/", 0) == 0) own.emplace(part, ns);
  }
  const std::regex opens(R"re(^namespace (dbh[a-z_:]*) \{)re");
  for (const auto& [part, ns] : own) {
    int64_t files = 0;
    for (const auto& path : source_files(part)) {
      ++files;
      std::ifstream in(path);
      std::string line;
      int n = 0;
      while (std::getline(in, line)) {
        ++n;
        std::smatch m;
        if (!std::regex_search(line, m, opens)) continue;
        const std::string opened = m[1].str();
        EXPECT_TRUE(opened == ns || opened.rfind(ns + "::", 0) == 0)
            << fs::relative(path, DBH_SOURCE_DIR).string() << ":" << n << ": opens namespace " << opened
            << ", but the part's code lives in " << ns;
      }
    }
    EXPECT_GT(files, 0) << part;
  }
}

// A part's `internal` names are its own: no other part reaches into them
// (googletest's `testing::internal` and benchmark's `benchmark::internal`
// are for their own files), so what another part needs is declared outside
// `internal`, where a reader of the part's interface sees it.
TEST(LayersTest, NoPartUsesAnotherPartsInternalNames) {
  const std::regex reach(R"re(\b([a-z_]+)::internal::)re");
  for (const auto& [part, ns] : part_namespaces()) {
    if (!fs::is_directory(fs::path(DBH_SOURCE_DIR) / part)) continue;  // a part of files elsewhere
    const std::string own = ns.substr(ns.rfind(':') + 1);
    for (const auto& path : source_files(part)) {
      std::ifstream in(path);
      std::string line;
      int n = 0;
      while (std::getline(in, line)) {
        ++n;
        for (std::sregex_iterator it(line.begin(), line.end(), reach), end; it != end; ++it) {
          const std::string named = (*it)[1].str();
          EXPECT_TRUE(named == own || named == "torch" || named == "c10" || named == "nlohmann" || named == "testing")
              << fs::relative(path, DBH_SOURCE_DIR).string() << ":" << n << ": uses " << named
              << "::internal, which belongs to that part alone";
        }
      }
    }
  }
}

// One declaration per concept, one name per meaning: no two headers define
// a type of the same name in the same namespace (two `dbh::harness::Judgement`s
// broke the one-definition rule: a build could run one's destructor on the
// other), nor, at namespace scope, in two namespaces (`supervisor::Judgement`
// and `diagnose::Judgement` were two meanings of one name).
TEST(LayersTest, NoTypeIsDefinedTwiceInOneNamespace) {
  const std::regex opens(R"re(^namespace( ([A-Za-z_:]+))? \{)re");
  const std::regex closes(R"re(^\}  // namespace)re");
  const std::regex defines(R"re(^(struct|class|enum class) ([A-Za-z_][A-Za-z0-9_]*)( final)?( *:[^;]*)? *\{)re");
  std::map<std::string, std::string> where;  // qualified name → file:line
  std::map<std::string, std::string> named;  // unqualified name → qualified name
  int64_t types = 0;
  for (const char* top : {"harness", "model"}) {
    for (const auto& path : source_files(top)) {
      if (path.extension() != ".h") continue;
      const std::string rel = fs::relative(path, DBH_SOURCE_DIR).string();
      std::ifstream in(path);
      std::vector<std::string> stack;
      std::string line;
      int n = 0;
      while (std::getline(in, line)) {
        ++n;
        std::smatch m;
        if (std::regex_search(line, m, opens)) {
          stack.push_back(m[2].matched ? m[2].str() : "(anonymous in " + rel + ")");
        } else if (std::regex_search(line, closes) && !stack.empty()) {
          stack.pop_back();
        } else if (std::regex_search(line, m, defines)) {
          std::string name;
          for (const auto& ns : stack) name += ns + "::";
          name += m[2].str();
          ++types;
          const auto [it, fresh] = where.emplace(name, rel + ":" + std::to_string(n));
          EXPECT_TRUE(fresh) << rel << ":" << n << ": defines " << name << ", which " << it->second
                             << " defines too: one name per meaning (a namespace of the part, or another name)";
          const auto [other, first] = named.emplace(m[2].str(), name);
          EXPECT_TRUE(first || other->second == name)
              << rel << ":" << n << ": defines " << name << ", and " << other->second << " ("
              << where.at(other->second) << ") has the same name: one name per meaning";
        }
      }
    }
  }
  EXPECT_GT(types, 100);
}


// A source file's lines with string and character literals blanked (their
// braces are not code) and line comments cut: what the size checks count.
std::vector<std::string> code_lines(const fs::path& path) {
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> lines(1);
  enum class In { kCode, kString, kChar, kRaw, kLineComment, kBlockComment } state = In::kCode;
  std::string raw_end;  // )delim" of a raw string
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      lines.emplace_back();
      if (state == In::kLineComment) state = In::kCode;
      continue;
    }
    std::string& line = lines.back();
    switch (state) {
      case In::kCode:
        if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
          state = In::kLineComment;
        } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '*') {
          state = In::kBlockComment;
          ++i;
        } else if (c == 'R' && i + 1 < text.size() && text[i + 1] == '"') {
          const size_t open = text.find('(', i + 2);
          raw_end = ")" + text.substr(i + 2, open - i - 2) + "\"";
          state = In::kRaw;
          i = open;
          line += "\"\"";
        } else if (c == '"') {
          state = In::kString;
          line += "\"\"";
        } else if (c == '\'' && !(i > 0 && std::isalnum(static_cast<unsigned char>(text[i - 1])))) {
          state = In::kChar;  // not a digit separator (1'000)
        } else {
          line += c;
        }
        break;
      case In::kString:
      case In::kChar:
        if (c == '\\') {
          ++i;
        } else if ((state == In::kString && c == '"') || (state == In::kChar && c == '\'')) {
          state = In::kCode;
        }
        break;
      case In::kRaw:
        if (text.compare(i, raw_end.size(), raw_end) == 0) {
          i += raw_end.size() - 1;
          state = In::kCode;
        }
        break;
      case In::kLineComment:
        break;
      case In::kBlockComment:
        if (c == '*' && i + 1 < text.size() && text[i + 1] == '/') {
          state = In::kCode;
          ++i;
        }
        break;
    }
  }
  return lines;
}

// A function's length: from the first line of its signature (a line at the
// file's outer level, after a blank line, a `;`, `}` or `{`; the signature
// may wrap onto indented lines before its `{`) to its closing brace. Keyed
// "path:name".
std::map<std::string, int> function_lengths(const fs::path& path, const std::string& rel) {
  const std::vector<std::string> lines = code_lines(path);
  const std::regex not_a_function(R"re(^(namespace|struct|class|enum|union|extern|template\s*<.*>\s*(struct|class))\b)re");
  const std::regex name(R"re(([A-Za-z_][A-Za-z0-9_:~]*)\s*\()re");
  std::map<std::string, int> lengths;
  for (size_t i = 0; i < lines.size(); ++i) {
    // The line that opens the body: its signature may wrap, so the brace
    // can end an indented line; the signature's first line is at the outer
    // level.
    const std::string& l = lines[i];
    const auto end = l.find_last_not_of(" \t");
    if (end == std::string::npos || l[end] != '{') continue;
    size_t first = i;
    while (first > 0) {
      const std::string& p = lines[first - 1];
      const auto pe = p.find_last_not_of(" \t");
      if (pe == std::string::npos || p[pe] == ';' || p[pe] == '}' || p[pe] == '{' || p[0] == '#') break;
      --first;
    }
    const std::string& head = lines[first];
    if (head.empty() || std::isspace(static_cast<unsigned char>(head[0])) || head[0] == '}' || head[0] == '#' ||
        std::regex_search(head, not_a_function)) {
      continue;
    }
    std::string signature;
    for (size_t k = first; k <= i; ++k) signature += lines[k] + " ";
    std::smatch m;
    const auto paren = signature.find('(');
    if (paren == std::string::npos || signature.substr(0, paren).find('=') != std::string::npos ||
        !std::regex_search(signature, m, name)) {
      continue;
    }
    int depth = 0;
    size_t j = i;
    for (; j < lines.size(); ++j) {
      for (const char c : lines[j]) depth += c == '{' ? 1 : c == '}' ? -1 : 0;
      if (depth <= 0) break;
    }
    lengths[rel + ":" + m[1].str()] = static_cast<int>(j - first + 1);
    i = j;
  }
  return lengths;
}

// No function is over 120 lines unless it is a table: one row per fault,
// alias, key or fault kind, where a split would scatter the rows.
TEST(LayersTest, NoFunctionIsOver120LinesUnlessATable) {
  const std::set<std::string> tables = {
      "harness/faults/injectors.cc:FaultInjector::Hooks::registry",
      "harness/scenario/aliases.cc:table",
      "harness/scenario/schema.cc:build_table",
      "harness/scenario/fault_catalog.cc:fault_catalog",
  };
  int64_t functions = 0;
  for (const char* top : {"harness", "model"}) {
    for (const auto& path : source_files(top)) {
      if (path.extension() != ".cc") continue;
      const std::string rel = fs::relative(path, DBH_SOURCE_DIR).string();
      for (const auto& [where, length] : function_lengths(path, rel)) {
        ++functions;
        if (tables.count(where) > 0) continue;
        EXPECT_LE(length, 120) << where << " is " << length << " lines: split it into steps";
      }
    }
  }
  // Every function of the sources, wrapped signatures included (1,301 on
  // 2026-12-06): a parser that lost some would pass their lengths unseen.
  EXPECT_GT(functions, 1250);
  // The tables are still there (a renamed one would leave its row unused).
  std::map<std::string, int> found;
  for (const auto& t : tables) {
    const std::string file = t.substr(0, t.find(':'));
    const auto lengths = function_lengths(fs::path(DBH_SOURCE_DIR) / file, file);
    EXPECT_EQ(lengths.count(t), 1u) << t << " is no longer a function of " << file;
  }
}

// Note [Reading JSON that may lie] (common/json_fields.h): nlohmann's
// `.value(key, fallback)` throws for a field of another type, so one mistyped
// field of a worker's event or an earlier run's file would end the harness
// with an internal error. The harness reads such fields with field_or only.
TEST(LayersTest, NoHarnessCodeReadsJsonWithAThrowingValue) {
  const std::regex value(R"re(\.value\([^)])re");
  int64_t files = 0;
  for (const auto& path : source_files("harness")) {
    const std::string rel = fs::relative(path, DBH_SOURCE_DIR).string();
    if (rel == "harness/common/json_fields.h") continue;
    ++files;
    const auto lines = code_lines(path);
    for (size_t n = 0; n < lines.size(); ++n) {
      EXPECT_FALSE(std::regex_search(lines[n], value))
          << rel << ":" << n + 1 << ": reads JSON with .value(key, fallback), which throws for a mistyped field: "
          << "use field_or (harness/common/json_fields.h)";
    }
  }
  EXPECT_GT(files, 100);
}

// No file of the harness is over 600 lines unless it is one table or one
// page.
TEST(LayersTest, NoHarnessFileIsOver600LinesUnlessOneTableOrPage) {
  const std::map<std::string, size_t> allowed = {
      {"harness/scenario/schema.cc", 900},      // one table: every scenario key, its type, range and doc
      {"harness/report/report_html.cc", 760},   // one page: report.html
  };
  for (const auto& path : source_files("harness")) {
    const std::string rel = fs::relative(path, DBH_SOURCE_DIR).string();
    std::ifstream in(path);
    size_t lines = 0;
    for (std::string line; std::getline(in, line);) ++lines;
    size_t limit = 600;
    if (const auto a = allowed.find(rel); a != allowed.end()) limit = a->second;
    EXPECT_LE(lines, limit) << rel << " is " << lines << " lines (at most " << limit << ")";
  }
}

}  // namespace
}  // namespace dbh
