// dbh never harms the user's data: a corrupt_sample fault changes only the
// copy inside the run folder, even when the annotations name images by
// absolute paths; a dataset with a link out of its folder is refused before
// anything is written; and a truncated JPEG is a named data defect for
// `dbh data check` and for training.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/proto/events.h"
#include "tests/support/paths.h"
#include "tests/support/subprocess.h"

namespace dbh {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

testing::ProcessResult dbh(std::vector<std::string> args) {
  args.insert(args.begin(), DBH_BINARY);
  return testing::run_process(args, DBH_SOURCE_DIR, 300);
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

json read_json(const fs::path& p) { return json::parse(read_text(p)); }

void write_text(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

fs::path real_fixtures() { return fs::path(DBH_SOURCE_DIR) / "fixtures" / "real"; }

// A fresh folder under the test temp dir, removed with everything in it when
// the test ends.
class Sandbox {
 public:
  explicit Sandbox(const std::string& name) {
    std::string templ = (fs::path(::testing::TempDir()) / ("dbh-data-safety-" + name + "-XXXXXX")).string();
    if (mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = fs::canonical(templ);
  }
  ~Sandbox() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Every file and folder under `root` (links not followed) with its bytes and
// modification time, except the folders named in `skip`.
struct Entry {
  std::string kind;  // "file", "folder", "link"
  std::string bytes;
  fs::file_time_type mtime;
  bool operator==(const Entry& o) const { return kind == o.kind && bytes == o.bytes && mtime == o.mtime; }
};
using Snapshot = std::map<std::string, Entry>;

Snapshot snapshot(const fs::path& root, const std::vector<fs::path>& skip = {}) {
  Snapshot out;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
    const fs::path p = it->path();
    if (std::find(skip.begin(), skip.end(), p) != skip.end()) {
      it.disable_recursion_pending();
      continue;
    }
    Entry e;
    if (it->is_symlink()) {
      e.kind = "link";
      e.bytes = fs::read_symlink(p).string();
    } else if (it->is_directory()) {
      e.kind = "folder";
    } else {
      e.kind = "file";
      e.bytes = read_text(p);
      e.mtime = fs::last_write_time(p);
    }
    out[fs::relative(p, root).string()] = e;
  }
  return out;
}

// Names every path whose entry differs between the snapshots.
std::string differences(const Snapshot& before, const Snapshot& after) {
  std::string out;
  for (const auto& [path, entry] : before) {
    const auto it = after.find(path);
    if (it == after.end()) {
      out += "  removed: " + path + "\n";
    } else if (!(it->second == entry)) {
      out += "  changed: " + path + (it->second.bytes != entry.bytes ? " (bytes)" : " (mtime)") + "\n";
    }
  }
  for (const auto& [path, entry] : after) {
    if (before.count(path) == 0) out += "  added: " + path + "\n";
  }
  return out;
}

// The real fixtures at `dir`: images/ and annotations.json.
void copy_real_fixtures(const fs::path& dir) {
  fs::create_directories(dir);
  fs::copy(real_fixtures() / "images", dir / "images");
  fs::copy_file(real_fixtures() / "annotations.json", dir / "annotations.json");
}

void truncate_to_a_third(const fs::path& file) { fs::resize_file(file, fs::file_size(file) / 3); }

std::string scenario(const fs::path& data, const std::string& extra) {
  return "name: data-safety\n"
         "include: " + std::string(DBH_SOURCE_DIR) + "/scenarios/base/tiny-cpu.yaml\n"
         "data:\n"
         "  source: real\n"
         "  path: " + data.string() + "\n"
         "  size: 64\n" +
         extra +
         "expect:\n"
         "  outcome: failed\n"
         "  failure_class: data_invalid\n";
}

const std::string kCorruptSample =
    "train:\n"
    "  max_steps: 2\n"
    "faults:\n"
    "  - name: corrupt_sample\n"
    "    sample: 0\n"
    "    kind: truncate_image\n";

// The fault_fired event of corrupt_sample in a run's events.jsonl.
json corrupt_sample_event(const fs::path& out) {
  std::istringstream lines(read_text(out / "events.jsonl"));
  std::string line;
  while (std::getline(lines, line)) {
    const json e = json::parse(line, nullptr, false);
    if (e.is_object() && e.value("type", "") == harness::proto::event::kFaultFired && e.value("fault", "") == "corrupt_sample") return e;
  }
  return json();
}

TEST(DataSafetyTest, CorruptSampleChangesOnlyTheCopyInTheRunFolder) {
  const Sandbox box("absolute");
  const fs::path t = box.path();
  // A dataset whose annotations name every image by an absolute path, one of
  // them (img_005.jpg) in another folder of the dataset than images/ (a name
  // may not leave the dataset folder).
  copy_real_fixtures(t / "ds");
  fs::create_directories(t / "ds" / "more");
  fs::rename(t / "ds" / "images" / "img_005.jpg", t / "ds" / "more" / "img_005.jpg");
  json annotations = read_json(t / "ds" / "annotations.json");
  json images = json::object();
  for (auto& [name, value] : annotations["images"].items()) {
    const fs::path at = name == "img_005.jpg" ? t / "ds" / "more" / name : t / "ds" / "images" / name;
    images[at.string()] = value;
  }
  annotations["images"] = images;
  write_text(t / "ds" / "annotations.json", annotations.dump(1));
  write_text(t / "scenario" / "safety.yaml", scenario(t / "ds", kCorruptSample));
  const fs::path yaml = t / "scenario" / "safety.yaml";
  const Snapshot before = snapshot(t);
  ASSERT_GE(before.size(), 14u);

  struct Run {
    std::string out;
    std::vector<std::string> overrides;
    std::string image;   // the original the sample reads
    std::string defect;  // in the failure message
  };
  const std::vector<Run> runs = {
      // Sample 0: ds/images/img_001.png, named by its absolute path.
      {"out-png", {}, (t / "ds" / "images" / "img_001.png").string(), "expected a decodable image"},
      // Sample 9 (last in name order): more/img_005.jpg.
      {"out-jpeg", {"faults.0.sample=9"}, (t / "ds" / "more" / "img_005.jpg").string(),
       "got a decode warning: Premature end of JPEG file"},
      {"out-annotation", {"faults.0.kind=nan_coordinate"}, (t / "ds" / "images" / "img_001.png").string(),
       "expected a number, got string \"NaN\""},
  };
  std::vector<fs::path> outs;
  for (const auto& run : runs) {
    SCOPED_TRACE(run.out);
    const fs::path out = t / run.out;
    outs.push_back(out);
    std::vector<std::string> args = {"run", yaml.string()};
    args.insert(args.end(), run.overrides.begin(), run.overrides.end());
    args.insert(args.end(), {"--out", out.string(), "-q"});
    const auto r = dbh(args);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    const json report = read_json(out / "report.json");
    EXPECT_EQ(report["failure"]["class"], "data_invalid");
    EXPECT_EQ(report["steps_completed"], 0);
    const std::string message = report["failure"].value("message", "");
    EXPECT_NE(message.find(run.image), std::string::npos) << message;
    EXPECT_NE(message.find(run.defect), std::string::npos) << message;
    // The fault broke a copy inside the run folder, named after its original.
    const json fired = corrupt_sample_event(out);
    ASSERT_TRUE(fired.is_object()) << read_text(out / "events.jsonl");
    const fs::path copy = fired["detail"].value("copy", "");
    EXPECT_EQ(fs::canonical(copy).string().rfind(out.string() + "/", 0), 0u) << copy;
    EXPECT_EQ(fired["detail"].value("file", ""), ".~" + run.image);
    EXPECT_TRUE(fs::is_regular_file(copy / "images" / (".~" + run.image)));
  }
  const Snapshot after = snapshot(t, outs);
  EXPECT_TRUE(before == after) << "outside the run folders:\n" << differences(before, after);
}

TEST(DataSafetyTest, CorruptSampleOnAJpegFailsTrainingWhereTheBatchNeedsIt) {
  const Sandbox box("lazy");
  const fs::path t = box.path();
  const Snapshot fixtures_before = snapshot(real_fixtures());
  // Sample 4 is img_005.jpg; 6 steps of 2 samples read all 10.
  write_text(t / "lazy.yaml", scenario(real_fixtures(),
                                       "  preflight: false\n"
                                       "train:\n"
                                       "  max_steps: 6\n"
                                       "faults:\n"
                                       "  - name: corrupt_sample\n"
                                       "    sample: 4\n"
                                       "    kind: truncate_image\n"));
  const auto r = dbh({"run", (t / "lazy.yaml").string(), "--out", (t / "out").string(), "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const json report = read_json(t / "out" / "report.json");
  EXPECT_EQ(report["failure"]["class"], "data_invalid");
  EXPECT_FALSE(report["failure"]["step"].is_null()) << report["failure"].dump();
  const std::string message = report["failure"].value("message", "");
  EXPECT_NE(message.find("img_005.jpg: cannot decode the image"), std::string::npos) << message;
  EXPECT_NE(message.find("Premature end of JPEG file"), std::string::npos) << message;
  const Snapshot fixtures_after = snapshot(real_fixtures());
  EXPECT_TRUE(fixtures_before == fixtures_after) << differences(fixtures_before, fixtures_after);
}

TEST(DataSafetyTest, LinkOutOfTheDatasetIsAnInputErrorAndNothingIsWritten) {
  const Sandbox box("link");
  const fs::path t = box.path();
  copy_real_fixtures(t / "ds");
  write_text(t / "secret.txt", "not part of the dataset\n");
  fs::create_symlink(t / "secret.txt", t / "ds" / "images" / "x.png");
  write_text(t / "scenario" / "link.yaml", scenario(t / "ds", kCorruptSample));
  const Snapshot before = snapshot(t);
  const auto r = dbh({"run", (t / "scenario" / "link.yaml").string(), "--out", (t / "out").string(), "-q"});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find((t / "ds" / "images" / "x.png").string() + ": expected a file inside the dataset folder"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("got a link to " + (t / "secret.txt").string()), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(t / "out"));
  const Snapshot after = snapshot(t);
  EXPECT_TRUE(before == after) << differences(before, after);
}

TEST(DataSafetyTest, TruncatedJpegIsANamedDefectForCheckAndTraining) {
  const Sandbox box("truncated");
  const fs::path t = box.path();
  copy_real_fixtures(t / "ds");
  truncate_to_a_third(t / "ds" / "images" / "img_005.jpg");

  const auto check = dbh({"data", "check", (t / "ds").string(), "--json", (t / "check.json").string()});
  EXPECT_EQ(check.exit_code, 1) << check.out << check.err;
  EXPECT_NE(check.out.find("image \"img_005.jpg\": expected a complete JPEG image at "), std::string::npos)
      << check.out;
  EXPECT_NE(check.out.find("got a decode warning: Premature end of JPEG file"), std::string::npos) << check.out;
  const json summary = read_json(t / "check.json");
  ASSERT_EQ(summary["defects"].size(), 1u) << summary["defects"].dump(1);
  EXPECT_EQ(summary["defects"][0]["kind"], "unreadable_image");
  EXPECT_EQ(summary["defects"][0]["image"], "img_005.jpg");
  EXPECT_EQ(summary["images_usable"], 9);

  // Training on it stops at preflight, before the first step.
  write_text(t / "train.yaml", scenario(t / "ds", "train:\n  max_steps: 2\n"));
  const auto r = dbh({"run", (t / "train.yaml").string(), "--out", (t / "out").string(), "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const json report = read_json(t / "out" / "report.json");
  EXPECT_EQ(report["failure"]["class"], "data_invalid");
  EXPECT_TRUE(report["failure"]["step"].is_null()) << report["failure"].dump();
  EXPECT_EQ(report["steps_completed"], 0);
  const std::string message = report["failure"].value("message", "");
  EXPECT_NE(message.find("image \"img_005.jpg\": expected a complete JPEG image"), std::string::npos) << message;
  EXPECT_NE(message.find("Premature end of JPEG file"), std::string::npos) << message;
}

}  // namespace
}  // namespace dbh
