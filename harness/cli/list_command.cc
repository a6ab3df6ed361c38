#include "harness/cli/list_command.h"

#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "harness/cli/suite_outputs.h"
#include "harness/common/error.h"
#include "harness/common/files.h"
#include "harness/common/home.h"
#include "harness/common/text.h"
#include "harness/scenario/fault_catalog.h"
#include "harness/scenario/profile.h"
#include "harness/scenario/scenario.h"

namespace dbh::harness::cli {
namespace fs = std::filesystem;

int list_command(const std::string& what, const std::string& dir, const scenario::InputChecks& checks) {
  if (what == "faults") {
    for (const auto& f : scenario::fault_catalog()) {
      std::cout << f.name << "\n    " << f.help << "\n";
      auto print = [](const scenario::ParamSpec& p) {
        std::cout << "    " << p.name << " (" << to_string(p.type)
                  << (p.required ? ", required" : p.default_value.empty() ? "" : ", default " + p.default_value) << ")";
        if (!p.allowed.empty()) {
          std::cout << " one of:";
          for (const auto& a : p.allowed) std::cout << " " << a;
        }
        if (!p.help.empty()) std::cout << ": " << p.help;
        std::cout << "\n";
      };
      for (const auto& p : f.params) print(p);
    }
    std::cout << "every fault also takes:\n";
    for (const auto& p : scenario::schedule_params()) {
      std::cout << "    " << p.name << " (" << to_string(p.type) << "): " << p.help << "\n";
    }
    return 0;
  }
  if (what == "profiles") {
    try {
      for (const auto& p : scenario::list_profiles()) {
        std::cout << std::left << std::setw(16) << p.name << std::setw(32) << p.display_name << std::setw(10)
                  << scenario::format_bytes(p.memory_bytes) << std::setw(14) << p.architecture << p.notes << "\n";
      }
    } catch (const ScenarioError& e) {
      std::cerr << "dbh: " << one_line(e.what()) << "\n";
      return 2;
    }
    return 0;
  }
  if (what == "scenarios") {
    const fs::path d = dir.empty() ? fs::path(dbh_home()) / "scenarios" : fs::path(dir);
    if (std::error_code ec; !fs::is_directory(d, ec)) {
      std::cerr << "dbh list scenarios: " << one_line(d.string()) << ": expected a folder of scenarios, got "
                << describe_path(d.string()) << "\n";
      return 2;
    }
    std::vector<std::string> files;
    try {
      files = expand_scenarios({d.string()});
    } catch (const ScenarioError& e) {
      std::cerr << "dbh: " << one_line(e.what()) << "\n";
      return 2;
    }
    // A name begins the line: one line, and never "::" (a CI log's workflow
    // command).
    const auto line_start = [](const std::string& text) {
      const std::string l = one_line(text);
      return l.rfind("::", 0) == 0 ? " " + l : l;
    };
    for (const auto& f : files) {
      try {
        const auto s = scenario::load_scenario(f, {}, checks);
        std::cout << std::left << std::setw(36) << line_start(s.name) << " expect " << to_string(s.expect.outcome)
                  << (s.expect.failure_class ? "/" + *s.expect.failure_class : "") << "  "
                  << one_line(s.description.size() > 90 ? s.description.substr(0, 87) + "..." : s.description) << "\n";
      } catch (const ScenarioError& e) {
        std::cout << std::left << std::setw(36) << line_start(fs::path(f).stem().string()) << " INVALID: " << one_line(e.what())
                  << "\n";
      }
    }
    return 0;
  }
  std::cerr << "dbh list: expected faults or scenarios, got " << what << "\n";
  return 2;
}

}  // namespace dbh::harness::cli
