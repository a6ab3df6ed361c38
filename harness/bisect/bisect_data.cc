// Bisection over the dataset: the samples that make the run fail
// (bisect/parts.h).
#include "harness/bisect/parts.h"
#include "harness/bisect/sample_pool.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "harness/probe/probe.h"
#include "harness/bisect/search.h"
#include "harness/common/error.h"
#include "harness/common/files.h"
#include "harness/common/out_file.h"
#include "harness/common/text.h"
#include "harness/scenario/schema.h"
#include "model/data/scan.h"

namespace dbh::harness::bisect {
namespace fs = std::filesystem;

namespace {

// Writes a dataset in `dir` holding only the images `keep` of the dataset at
// `root` (images linked, annotations rewritten or linked), in the dataset's
// order. Returns `dir`.
std::string write_dataset_copy(const model::ScanResult& scan, const std::set<std::string>& keep, const fs::path& dir) {
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir / "images", ec);
  if (ec) throw ReportError(dir.string() + ": expected a folder for a dataset copy, got: " + ec.message());
  const fs::path root = fs::absolute(scan.root);
  auto link = [&](const fs::path& from, const fs::path& to) {
    std::error_code e;
    fs::create_symlink(from, to, e);
    if (e) fs::copy_file(from, to, fs::copy_options::overwrite_existing, e);
    if (e) throw ReportError(to.string() + ": expected a link to " + from.string() + ", got: " + e.message());
  };
  for (const auto& file : keep) {
    const fs::path src = root / "images" / file;
    if (fs::exists(src, ec)) link(src, dir / "images" / file);
  }
  if (scan.format == "UFO JSON") {
    std::ifstream in(root / "annotations.json");
    const auto j = ojson::parse(in, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.contains("images") || !j["images"].is_object()) {
      throw ReportError((root / "annotations.json").string() +
                        ": expected a UFO JSON object with \"images\" to copy, got something else");
    }
    ojson copy = j;
    copy["images"] = ojson::object();
    for (auto it = j["images"].begin(); it != j["images"].end(); ++it) {
      if (keep.count(it.key())) copy["images"][it.key()] = it.value();
    }
    write_file_atomically((dir / "annotations.json").string(),
                          copy.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  } else {
    fs::create_directories(dir / "icdar", ec);
    std::set<std::string> stems;
    for (const auto& f : keep) stems.insert(fs::path(f).stem().string());
    for (const auto& e : fs::directory_iterator(root / "icdar", ec)) {
      std::string stem = e.path().stem().string();
      if (stem.rfind("gt_", 0) == 0) stem = stem.substr(3);
      if (e.path().extension() == ".txt" && stems.count(stem)) link(e.path(), dir / "icdar" / e.path().filename());
    }
  }
  return dir.string();
}

struct RemoveOnExit {  // removes a folder when it goes out of scope
  fs::path dir;
  ~RemoveOnExit() { std::error_code ec; if (!dir.empty()) fs::remove_all(dir, ec); }
};

// Note [Every bad sample]: at most this many independent failing subsets are
// searched for, and at most kUnreachedSearched samples the failing run never
// reached.
constexpr size_t kMaxDefects = 4;

// A data bisection's ground: the scenario, the dataset as scanned (dbh's
// worker) or as the worker's loader reported it (an external worker, Note
// [Samples as the loader reads them]), the reproduced failure and the search
// over subsets of its samples.
struct DataSearch {
  probe::Prober& prober;
  const BisectOptions& o;
  const scenario::Scenario& s;
  const model::ScanResult* scan;    // dbh's order of the dataset folder; null for an external worker
  const supervisor::TrialAnalysis* reported;    // what an external worker's loader read; null for dbh's worker
  Search& search;
  std::string base_repro;  // the command that reproduces the failure on the whole dataset

  const std::vector<model::ImageAnnotation>& images() const { return scan->images; }
  ojson sample_json(int64_t i) const {
    if (scan == nullptr) {
      ojson j = {{"index", i}};
      if (const auto it = reported->sample_names.find(i); it != reported->sample_names.end()) j["name"] = it->second;
      return j;
    }
    const auto& im = scan->images[static_cast<size_t>(i)];
    std::vector<std::string> ids;
    for (const auto& w : im.words) ids.push_back(w.id);
    return ojson{{"index", i}, {"file", im.file}, {"annotation_ids", ids}};
  }
  // The dataset's samples at `indices`, as code spans: a file name (or the
  // name a worker gave) is shown verbatim, never read as markup (`**`,
  // `<img …>`) in bisect.md or its page.
  std::string names(const std::vector<int64_t>& indices) const {
    std::string text;
    for (const int64_t i : indices) {
      std::string name;
      if (scan != nullptr) {
        name = scan->images[static_cast<size_t>(i)].file;
      } else if (const auto it = reported->sample_names.find(i); it != reported->sample_names.end()) {
        name = it->second;
      }
      text += (text.empty() ? "" : ", ") + (name.empty() ? "sample " + std::to_string(i) : markdown_code(name));
    }
    return text;
  }
};

// Before training: the dataset is validated (and, with preflight, decoded)
// as a whole before data.subset applies, so every subset fails and ddmin
// cannot isolate anything. A sample the message names is the answer, once
// the data without it passes and it alone fails.
void bisect_data_before_training(DataSearch& d, Outputs& out) {
  const scenario::Scenario& s = d.s;
  const auto& images = d.images();
  const auto& fail = out.rep.baseline.analysis;
  out.repro = d.base_repro;
  std::vector<int64_t> named;
  // The samples the message names, whatever its class (the failure's
  // identity keeps a file only where the file is the cause).
  const std::vector<std::string> files = files_named(fail.failure.message);
  for (size_t i = 0; i < images.size(); ++i) {
    for (const auto& f : files) {
      if (images[i].file == f) named.push_back(static_cast<int64_t>(i));
    }
  }
  const std::string what = "`" + fail.failure.klass + "` before training: \"" + one_line(fail.failure.message) + "\"";
  if (named.empty()) {
    out.summary = "the failure happens before training (" + what + ") and names no sample of the dataset";
    out.doubts.push_back("the dataset is checked as a whole before " + std::string(DBH_SCENARIO_KEY(data.subset)) +
                         " applies, so no subset can isolate a failure before training; fix what the message "
                         "names, or run `dbh data check " +
                         s.data.path + "`");
    out.result = {{"samples", ojson::array()}, {"before_training", true}, {"class", fail.failure.klass},
                  {"message", fail.failure.message}};
    return;
  }
  out.found = true;
  std::set<std::string> named_files, others;
  for (const int64_t i : named) named_files.insert(images[static_cast<size_t>(i)].file);
  for (const auto& im : images) {
    if (!named_files.count(im.file)) others.insert(im.file);
  }
  RemoveOnExit copies{fs::path(d.prober.session_dir()) / "datasets"};
  std::vector<std::string> extra_base;
  if (!s.data.subset.empty()) extra_base.push_back(scenario::override_text(DBH_SCENARIO_KEY(data.subset), "[]"));
  bool without_passes = false;
  if (others.empty()) {
    out.doubts.push_back("the dataset holds only the named sample(s): there is no data without them to compare");
  }
  // Note [Every bad sample], before training: the data without the named
  // samples may fail naming another; that one joins the answer.
  Signature any_file = out.rep.sig;
  any_file.files.clear();
  Search further(d.prober, out.rep, any_file);
  for (size_t round = 0; !others.empty() && round < kMaxDefects; ++round) {
    const std::string without =
        write_dataset_copy(*d.scan, others, copies.dir / ("without-named-" + std::to_string(round)));
    probe::ProbeResult last;
    const probe::Verdict v = further.verdict(concat(extra_base, {scenario::override_text(DBH_SCENARIO_KEY(data.path), without)}),
                                      "re-check: data without the named sample(s)", /*fresh=*/true, &last);
    without_passes = v == probe::Verdict::kPass;
    if (v != probe::Verdict::kFail) break;
    size_t added = 0;
    for (const auto& f : files_named(last.analysis.failure.message)) {
      if (!others.count(f)) continue;
      others.erase(f);
      named_files.insert(f);
      for (size_t i = 0; i < images.size(); ++i) {
        if (images[i].file == f) named.push_back(static_cast<int64_t>(i));
      }
      ++added;
    }
    if (added == 0) break;
    std::sort(named.begin(), named.end());
  }
  if (!others.empty() && !without_passes) {
    out.doubts.push_back("re-check: the data without the named sample(s) did not pass");
  }
  const std::string alone = write_dataset_copy(*d.scan, named_files, copies.dir / "named-only");
  const bool alone_fails = d.search.verdict(concat(extra_base, {scenario::override_text(DBH_SCENARIO_KEY(data.path), alone)}),
                                            "re-check: the named sample(s) alone", /*fresh=*/true) == probe::Verdict::kFail;
  if (!alone_fails) out.doubts.push_back("re-check: the named sample(s) alone did not fail the same way");
  out.confirmed = without_passes && alone_fails;
  for (const auto& c : d.search.contradictions()) out.doubts.push_back(c);
  for (const auto& c : further.contradictions()) out.doubts.push_back(c);
  for (const auto& note : d.search.notes()) out.details.push_back(note);
  for (const auto& note : further.notes()) out.details.push_back(note);
  conclude(out, confidence(out.rep, d.search.passes() + further.passes()));
  ojson samples = ojson::array();
  for (const int64_t i : named) samples.push_back(d.sample_json(i));
  out.result = {{"samples", samples}, {"before_training", true}, {"method", "named by the failure"},
                {"class", fail.failure.klass}, {"consumed", 0}};
  out.summary = "the failure happens before training and names " + d.names(named) + " (index " + list_yaml(named) +
                ")" +
                (out.confirmed ? named.size() == 1 ? ": the data without it passes, it alone fails"
                                                   : ": the data without them passes, they alone fail"
                               : "");
  if (fail.failure.klass == "data_invalid") {
    out.summary += ". A data defect: `" + shell_command({self_command(), "data", "check", s.data.path}) +
                   "` lists every sample dbh cannot read, without training";
  }
  out.details.push_back("the dataset is validated as a whole before " + std::string(DBH_SCENARIO_KEY(data.subset)) +
                        " applies, so subsets cannot isolate this failure; the answer is the sample its message "
                        "names, checked on copies of the dataset with and without it");
}

// The overrides that train on `subset` alone: enough steps to consume every
// sample once, and at least up to the failing step so the scenario's fault
// schedule stays valid.
std::vector<std::string> subset_overrides(const scenario::Scenario& s, int64_t last_step, const std::vector<int64_t>& subset) {
  const int64_t steps =
      std::max<int64_t>({int64_t{1}, (static_cast<int64_t>(subset.size()) + s.data.batch_size - 1) / s.data.batch_size,
                         std::min(last_step + 1, s.train.last_step())});
  return std::vector<std::string>{scenario::override_text(DBH_SCENARIO_KEY(data.subset), list_yaml(subset)),
                                  scenario::override_text(DBH_SCENARIO_KEY(train.max_steps), std::to_string(steps)),
                                  "controls=[]"};
}

std::string subset_label(const std::string& prefix, const std::vector<int64_t>& subset) {
  std::string what = prefix + "samples " + list_yaml(subset);
  return what.size() > 44 ? prefix + std::to_string(subset.size()) + " samples" : what;
}

// Note [Every bad sample]: what the search for further failing subsets found.
struct DefectSearch {
  std::vector<std::vector<int64_t>> defects;  // the failing subsets, the first one first
  bool rest_passes = false;                   // the data without them passes
  bool searched_unreached = false;            // the samples the run never reached were searched too
  std::string left_over;                      // why the search stopped with data still failing
};

// Note [Every bad sample]: a dataset with two broken files holds two
// independent answers, and a 1-minimal subset names only one. While the
// data without every subset found so far still fails with the same class
// (naming any file: the next defect names its own), ddmin runs again on
// what is left; first over the samples the failing run consumed, then,
// for a data defect, over the samples it never reached (at most
// kUnreachedSearched of them). Whatever is left unsearched is said, with
// `dbh data check`, which reads every sample without training.
//
// Note [The rest of the data is the control]: a failing run that read
// nothing but its answer (a bad sample first in the order, raising at once)
// leaves no consumed data without it; the samples it never reached are that
// data (the first kUnreachedSearched of them), and run without the answer
// they decide whether the answer is the whole failure.
DefectSearch search_further_defects(DataSearch& d, Outputs& out, Search& further, int64_t last_step,
                                    const std::vector<int64_t>& minimal, const std::vector<int64_t>& consumed,
                                    const std::vector<int64_t>& unreached, const std::vector<int64_t>& control,
                                    bool data_defect) {
  DefectSearch found;
  found.defects = {minimal};
  std::set<int64_t> found_set(minimal.begin(), minimal.end());
  auto without_found = [&](const std::vector<int64_t>& pool) {
    std::vector<int64_t> left;
    for (const int64_t i : pool) {
      if (!found_set.count(i)) left.push_back(i);
    }
    return left;
  };
  const auto overrides = [&](const std::vector<int64_t>& subset) { return subset_overrides(d.s, last_step, subset); };
  std::vector<int64_t> pool = consumed;
  bool in_consumed = true;  // `pool` is what the failing run read
  for (;;) {
    const std::vector<int64_t> rest = without_found(pool);
    if (rest.empty() && in_consumed && !control.empty()) {
      // Note [The rest of the data is the control].
      found.searched_unreached = !unreached.empty();  // the control is every unreached sample
      pool = control;
      in_consumed = false;
      continue;
    }
    if (rest.empty()) {
      if (in_consumed) {
        out.doubts.push_back("every sample of the dataset is in the answer: there is no data without it to compare");
      }
      found.rest_passes = !in_consumed;
    } else {
      const std::string what = "re-check: the data without " + std::string(found.defects.size() == 1 ? "it" : "them") +
                               (in_consumed ? "" : " (samples the run never reached)");
      const probe::Verdict v = further.verdict(overrides(rest), what, /*fresh=*/true);
      found.rest_passes = v == probe::Verdict::kPass;
      if (v == probe::Verdict::kFail && found.defects.size() < kMaxDefects) {
        if (!d.o.quiet) {
          std::cout << "the data without " << found_set.size() << " sample(s) still fails: searching " << rest.size()
                    << " samples for another" << std::endl;
        }
        const auto again = ddmin(rest.size(), [&](const std::vector<size_t>& idx) {
          std::vector<int64_t> subset;
          for (size_t k : idx) subset.push_back(rest[k]);
          return further.verdict(overrides(subset), subset_label("", subset), /*fresh=*/false);
        });
        if (again.reproduced && !again.minimal.empty()) {
          std::vector<int64_t> next;
          for (size_t k : again.minimal) next.push_back(rest[k]);
          if (further.verdict(overrides(next), subset_label("re-check: ", next), /*fresh=*/true) != probe::Verdict::kFail) {
            out.doubts.push_back("re-check: the subset " + list_yaml(next) + " did not fail again when run fresh");
          }
          found.defects.push_back(next);
          found_set.insert(next.begin(), next.end());
          continue;
        }
        found.left_over = "the data without the " + std::to_string(found_set.size()) +
                          " sample(s) found still fails, but no subset of it fails alone";
      } else if (v == probe::Verdict::kFail) {
        found.left_over = "the data without the " + std::to_string(found_set.size()) + " sample(s) found still fails (" +
                          std::to_string(kMaxDefects) + " subsets found; the search stops there)";
      } else if (v != probe::Verdict::kPass) {
        found.left_over = "the data without the " + std::to_string(found_set.size()) + " sample(s) found " +
                          (v == probe::Verdict::kDifferent ? "failed differently" : "could not be judged");
      }
    }
    // The consumed samples are clean: for a data defect, the samples the
    // failing run never reached may hold more.
    if (found.rest_passes && data_defect && !found.searched_unreached && !unreached.empty() &&
        unreached.size() <= kUnreachedSearched && found.defects.size() < kMaxDefects) {
      found.searched_unreached = true;
      pool = unreached;
      in_consumed = false;
      continue;
    }
    break;
  }
  return found;
}


struct MinimalSubset {
  std::vector<int64_t> samples;
  bool reproduced = false;  // ddmin's subset fails the same way
  bool fails = false;       // confirmed by a fresh probe
  std::string method = "ddmin";
};

using SubsetOverrides = std::function<std::vector<std::string>(const std::vector<int64_t>&)>;

struct DataAnswer {
  const std::vector<int64_t>& minimal;
  const std::string& method;
  size_t consumed = 0;
  size_t unsearched = 0;
  int64_t dataset_size = 0;
  bool external = false;
  bool data_defect = false;
};

// The smallest failing subset of the pool: the sample whose read raised
// when training on it alone fails the same way (one probe names and confirms
// it), else ddmin over the samples read.
MinimalSubset minimal_subset(Search& search, const SamplePool& pool, const supervisor::TrialAnalysis& fail,
                             const SubsetOverrides& overrides, Outputs& out) {
  MinimalSubset m;
  if (pool.raised) {
    const std::vector<int64_t> alone{*pool.raised};
    if (search.verdict(overrides(alone), "the sample whose read raised, alone", /*fresh=*/true) == probe::Verdict::kFail) {
      m.samples = alone;
      m.reproduced = m.fails = true;
      m.method = "the read that raised";
      out.details.push_back("the worker's loader raised reading sample " + std::to_string(*pool.raised) + " (" +
                            one_line(fail.failed_sample_error) + "); trained on alone, it fails the same way");
      return m;
    }
    out.details.push_back("the worker's loader raised reading sample " + std::to_string(*pool.raised) +
                          ", but training on it alone does not fail the same way: searching the samples read");
  }
  const std::vector<int64_t>& consumed = pool.consumed;
  auto subset_of = [&](const std::vector<size_t>& idx) {
    std::vector<int64_t> subset;
    for (size_t k : idx) subset.push_back(consumed[k]);
    return subset;
  };
  const auto ahead = search.ahead([&](const std::vector<size_t>& idx) {
    return std::make_pair(overrides(subset_of(idx)), subset_label("", subset_of(idx)));
  });
  const auto r = ddmin(consumed.size(), [&](const std::vector<size_t>& idx) {
    const std::vector<int64_t> subset = subset_of(idx);
    return search.verdict(overrides(subset), subset_label("", subset), /*fresh=*/false);
  }, ahead);
  search.nothing_ahead();
  for (size_t k : r.minimal) m.samples.push_back(consumed[k]);
  m.reproduced = r.reproduced;
  return m;
}

// The answer of a search that reproduced: every defect's samples, the
// summary and what was left unsearched.
void write_data_answer(const DataSearch& d, const DataAnswer& a, const DefectSearch& found, ojson samples,
                       Outputs& out) {
  const std::vector<int64_t>& minimal = a.minimal;
  const bool external = a.external;
  const scenario::Scenario& s = d.s;
  std::vector<int64_t> all_found;
  ojson groups = ojson::array();
  std::string group_names;
  for (const auto& defect : found.defects) {
    ojson g = ojson::array();
    for (const int64_t i : defect) {
      if (std::find(all_found.begin(), all_found.end(), i) == all_found.end()) {
        all_found.push_back(i);
        if (all_found.size() > minimal.size()) samples.push_back(d.sample_json(i));
      }
      g.push_back(i);
    }
    groups.push_back(g);
    group_names += (group_names.empty() ? "" : "; ") + d.names(defect) + " (index " + list_yaml(defect) + ")";
  }
  out.result["samples"] = samples;
  out.result["defects"] = groups;
  out.result["unsearched"] = a.unsearched;
  const std::string check_cmd = shell_command({self_command(), "data", "check", s.data.path});
  const std::string of_what = external ? " samples the worker's loader read: " : " samples the run consumed: ";
  if (found.defects.size() == 1) {
    out.summary = (a.method == "ddmin" ? "a 1-minimal failing subset of the " + std::to_string(a.consumed) + of_what
                                     : std::string("the sample whose read raised: ")) +
                  d.names(minimal) + " (index " + list_yaml(minimal) + ")" +
                  (out.confirmed ? "; the data without it passes" : "");
  } else {
    out.summary = std::to_string(found.defects.size()) + " independent failing subsets, each failing alone: " +
                  group_names + (out.confirmed ? "; the data without them passes" : "");
  }
  if (a.unsearched > 0) {
    out.details.push_back(std::to_string(a.unsearched) + " of the " + std::to_string(a.dataset_size) +
                          (external ? " samples were not read by the failing run and were not searched"
                                    : " samples come after the failing step and were not searched; `" + check_cmd +
                                          "` reads every sample without training"));
  }
  if (a.data_defect && !external) {
    out.summary += ". A data defect: `" + check_cmd + "` lists every sample dbh cannot read, without training";
  }
}

}  // namespace

Outputs bisect_data(probe::Prober& prober, const BisectOptions& o) {
  Outputs out;
  out.kind = BisectKind::kData;
  const scenario::Scenario s = prober.load({});
  if (s.data.source != scenario::DataSource::kReal) {
    throw ScenarioError("bisect data: expected " + std::string(DBH_SCENARIO_KEY(data.source)) + " real, got " +
                        to_string(s.data.source));
  }
  const bool external = s.worker.external();
  ReproducePlan plan;
  plan.first_may_be_cached = true;
  out.rep = reproduce(prober, plan, o, s.model.decoder);
  out.doubts = out.rep.notes;
  const std::string base_repro = command_line(prober.scenario_path(), prober.base_overrides());
  if (out.rep.failures == 0) {
    out.summary = "the failure does not reproduce";
    out.repro = base_repro;
    return out;
  }
  // An external worker's reads are in its trial's events, which a probe
  // cache's summary does not keep: a failing run answered from it is run
  // again for them.
  if (external && out.rep.baseline.cached && out.rep.baseline.analysis.samples_read.empty() &&
      !out.rep.baseline.analysis.dataset_size) {
    probe::ProbeResult again = prober.probe_fresh({}, "the failing run again: the samples its loader reads");
    if (again.verdict == probe::Verdict::kFail) out.rep.baseline = std::move(again);
  }
  const auto& fail = out.rep.baseline.analysis;
  std::optional<model::ScanResult> scan;
  if (!external) scan = model::scan_dataset(s.data.path, s.data.on_invalid, {}, /*check_images=*/false);
  Search search(prober, out.rep, out.rep.sig);
  DataSearch d{prober, o, s, scan ? &*scan : nullptr, external ? &fail : nullptr, search, base_repro};
  if (out.rep.sig.before_training && !(external && fail.failed_sample)) {
    if (!external) {
      bisect_data_before_training(d, out);
      return out;
    }
    out.repro = base_repro;
    out.summary = "the failure happens before training and the worker's loader reported no sample whose read raised";
    out.doubts.push_back("no subset can isolate a failure before the loader reads a sample");
    out.result = {{"samples", ojson::array()}, {"before_training", true}, {"class", fail.failure.klass}};
    return out;
  }

  const int64_t last_step = fail.failure.step ? *fail.failure.step : s.train.last_step() - 1;
  const SamplePool pool = external ? pool_from_worker(fail) : pool_from_sampler(s, *scan, last_step);
  const std::vector<int64_t>& consumed = pool.consumed;
  const SubsetOverrides overrides = [&](const std::vector<int64_t>& subset) {
    return subset_overrides(s, last_step, subset);
  };
  out.details.push_back(pool.how);
  const MinimalSubset m = minimal_subset(search, pool, fail, overrides, out);
  const std::vector<int64_t>& minimal = m.samples;
  const bool reproduced = m.reproduced;
  bool minimal_fails = m.fails;
  const std::string& method = m.method;
  out.found = reproduced;
  ojson samples = ojson::array();
  for (const int64_t i : minimal) samples.push_back(d.sample_json(i));
  out.result = {{"samples", samples}, {"consumed", consumed.size()}, {"class", fail.failure.klass},
                {"method", method}};
  if (external) out.result["order"] = pool.consumed.size() == static_cast<size_t>(pool.dataset_size) &&
                                              fail.samples_read.empty()
                                          ? "every sample (the worker reported none it read)"
                                          : "as the worker's loader read them";
  out.repro = command_line(prober.scenario_path(), concat(prober.base_overrides(), overrides(minimal)));
  if (!reproduced) {
    out.summary = "training on the consumed samples alone does not fail the same way";
    return out;
  }
  // Confirm with fresh probes: the subset fails, the data without it passes.
  if (!minimal_fails) {
    minimal_fails =
        search.verdict(overrides(minimal), subset_label("re-check: ", minimal), /*fresh=*/true) == probe::Verdict::kFail;
  }
  if (!minimal_fails) out.doubts.push_back("re-check: the minimal subset did not fail the same way when run again");
  const bool data_defect = fail.failure.klass == "data_invalid";
  Signature any_file = out.rep.sig;
  any_file.files.clear();
  Search further(prober, out.rep, any_file);
  const DefectSearch found =
      search_further_defects(d, out, further, last_step, minimal, consumed, pool.unreached, pool.unreached_first,
                             data_defect);
  if (!found.left_over.empty()) out.doubts.push_back(found.left_over);
  const size_t unsearched = found.searched_unreached ? 0 : pool.unreached_count;
  out.confirmed = minimal_fails && found.rest_passes && found.left_over.empty();
  for (const auto& c : search.contradictions()) out.doubts.push_back(c);
  for (const auto& c : further.contradictions()) out.doubts.push_back(c);
  for (const auto& note : search.notes()) out.details.push_back(note);
  for (const auto& note : further.notes()) out.details.push_back(note);
  conclude(out, confidence(out.rep, search.passes() + further.passes()));
  DataAnswer a{minimal, method, consumed.size(), unsearched, pool.dataset_size, external,
               fail.failure.klass == "data_invalid"};
  write_data_answer(d, a, found, samples, out);
  return out;
}

}  // namespace dbh::harness::bisect
