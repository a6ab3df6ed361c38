#include "harness/supervisor/event_digest.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <map>

#include "harness/common/json_fields.h"
#include "harness/common/text.h"
#include "harness/proto/event_types.h"

namespace dbh::harness::supervisor {

// A name the worker chose (a module, a site, a kind): cut, otherwise as sent.
// Note [Escaped at output only]: a name is compared as the worker sent it
// (an expectation naming a module with a backtick matches it), and each
// output escapes it for itself (markdown_code, esc, one_line).
std::string quoted_name(const std::string& s) { return truncate_utf8(s, kMaxQuotedNameBytes); }

}  // namespace dbh::harness::supervisor

namespace dbh::harness::supervisor::internal {

std::string quoted(const std::string& s, size_t max) { return truncate_utf8(s, max); }

// A worker's JSON as kept for the reports (a health event's body): every
// string cut to kMaxQuotedNameBytes, at most kMaxQuotedItems entries per
// object or list, at most four levels deep.
nlohmann::json bounded_json(const nlohmann::json& j, int depth) {
  if (j.is_string()) return truncate_utf8(j.get<std::string>(), kMaxQuotedNameBytes);
  if (depth >= 4 && (j.is_object() || j.is_array())) return nullptr;
  if (j.is_object()) {
    nlohmann::json out = nlohmann::json::object();
    for (auto it = j.begin(); it != j.end() && out.size() < kMaxQuotedItems; ++it) {
      out[truncate_utf8(it.key(), kMaxQuotedNameBytes)] = bounded_json(*it, depth + 1);
    }
    return out;
  }
  if (j.is_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (size_t i = 0; i < j.size() && i < kMaxQuotedItems; ++i) out.push_back(bounded_json(j[i], depth + 1));
    return out;
  }
  return j;
}

// The checks of the silent-failure monitors, each also its failure class.
bool is_silent_check(const std::string& check) {
  return check == "input_denormalised" || check == "labels_degenerate" || check == "predictions_collapsed";
}

namespace {

// Bound on the metrics of one evaluation an external worker reports.
constexpr size_t kMaxOwnMetrics = 64;

EvalRecord eval_record(const proto::Eval& v) {
  EvalRecord ev;
  ev.run = v.run;
  ev.step = v.step;
  ev.precision = v.precision.value_or(0);
  ev.recall = v.recall.value_or(0);
  ev.hmean = v.hmean.value_or(0);
  ev.has_hmean = v.hmean.has_value();
  if (v.metrics.is_object()) {
    for (auto it = v.metrics.begin(); it != v.metrics.end() && ev.metrics.size() < kMaxOwnMetrics; ++it) {
      if (it.value().is_number()) ev.metrics.emplace_back(quoted_name(it.key()), it.value().get<double>());
    }
  }
  ev.gt = v.gt;
  ev.det = v.det;
  ev.matched = v.matched;
  ev.images = v.images;
  ev.prob_mean = v.prob_mean;
  ev.text_fraction = v.text_fraction;
  ev.seconds = v.seconds;
  ev.det_reference = v.det_reference.value_or(-1);
  return ev;
}

// A step's memory per phase as kept: at most kMaxPhases phases (names cut),
// each at most kMaxPhaseFigures numbers.
nlohmann::json bounded_phases(const nlohmann::json& phases) {
  nlohmann::json out = nlohmann::json::object();
  for (auto it = phases.begin(); it != phases.end() && out.size() < kMaxPhases; ++it) {
    if (!it->is_object()) continue;
    nlohmann::json figures = nlohmann::json::object();
    for (auto f = it->begin(); f != it->end() && figures.size() < kMaxPhaseFigures; ++f) {
      if (f->is_number()) figures[one_line(truncate_utf8(f.key(), 64))] = *f;
    }
    out[one_line(truncate_utf8(it.key(), 64))] = std::move(figures);
  }
  return out;
}

// Note [Files a worker names]: a file a worker's event names (an overlay)
// is kept only as a relative path of at most `depth` plain names inside the
// trial folder, each of letters, digits, '.', '_' and '-' (no absolute path,
// no "." or "..", no empty name); the reports link and embed it from there
// (and report/html_page.cc refuses one that resolves outside).
bool is_trial_file(const std::string& file, size_t depth) {
  if (file.empty() || file.size() > kMaxQuotedNameBytes) return false;
  size_t parts = 0;
  size_t begin = 0;
  while (begin <= file.size()) {
    const size_t end = std::min(file.find('/', begin), file.size());
    const std::string name = file.substr(begin, end - begin);
    // Letters, digits, '.', '_' and '-' only: a name is also a link target
    // and Markdown text, and "", "." and ".." lead elsewhere.
    if (name.empty() || name == "." || name == ".." || ++parts > depth) return false;
    for (const char c : name) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') return false;
    }
    begin = end + 1;
  }
  return true;
}

// A memory sample as kept: its numbers only (at most 32, names cut; dbh's
// worker sends 9 on CUDA), so a report reads every figure as a number.
nlohmann::json memory_figures(const nlohmann::json& memory) {
  constexpr size_t kMaxMemoryFigures = 32;
  nlohmann::json out = nlohmann::json::object();
  if (!memory.is_object()) return out;
  for (auto it = memory.begin(); it != memory.end() && out.size() < kMaxMemoryFigures; ++it) {
    if (it->is_number()) out[quoted_name(it.key())] = *it;
  }
  return out;
}

// The phases of the failing step as kept: at most kMaxPhases, each a
// memory sample.
nlohmann::json phase_figures(const nlohmann::json& phases) {
  nlohmann::json out = nlohmann::json::object();
  if (!phases.is_object()) return out;
  for (auto it = phases.begin(); it != phases.end() && out.size() < kMaxPhases; ++it) {
    if (it->is_object()) out[quoted_name(it.key())] = memory_figures(*it);
  }
  return out;
}

// `memory_budget` as kept: its documented fields (docs/events.md), each of
// its type or left out, its text one line and cut.
nlohmann::json budget_record(const nlohmann::json& body) {
  nlohmann::json b = nlohmann::json::object();
  const auto keep = [&](const char* key, bool (nlohmann::json::*is)() const noexcept) {
    const auto it = body.find(key);
    if (it != body.end() && ((*it).*is)()) b[key] = *it;
  };
  keep("applied", &nlohmann::json::is_boolean);
  for (const char* key : {"budget_bytes", "device_total", "used_before", "ballast_bytes"}) {
    keep(key, &nlohmann::json::is_number_integer);
  }
  keep("allocator_fraction", &nlohmann::json::is_number);
  if (const auto it = body.find("method"); it != body.end() && it->is_string()) {
    b["method"] = quoted_name(it->get<std::string>());
  }
  if (const auto it = body.find("detail"); it != body.end() && it->is_string()) {
    b["detail"] = one_line(quoted(it->get<std::string>()));
  }
  return b;
}

// A step's record; its memory raises the trial's peaks in `a`.
StepRecord step_record(const proto::StepEnd& end, TrialAnalysis& a, EventDigest& d) {
  StepRecord st;
  st.run = end.run;
  st.step = end.step;
  st.loss = end.loss;
  st.bce = end.bce;
  st.l1 = end.l1;
  st.dice = end.dice;
  st.lr = end.lr;
  st.grad_norm = end.grad_norm;
  st.seconds = end.seconds;
  st.loss_bits = end.loss_bits;
  st.grad_norm_bits = end.grad_norm_bits;
  const size_t micro = std::min(end.micro_loss_bits.size(), kMaxMicroBatchBits);
  if (d.micro_bits + micro <= kMaxMicroBatchBitsKept) {
    st.micro_loss_bits.assign(end.micro_loss_bits.begin(),
                              end.micro_loss_bits.begin() + static_cast<std::ptrdiff_t>(micro));
    d.micro_bits += micro;
  }
  st.skipped = end.skipped;
  st.loss_scale = end.loss_scale;
  const bool detailed = a.steps.size() < kMaxDetailedSteps;
  if (detailed && d.module_records + end.numerics.size() <= kMaxModuleRecords) {
    st.modules = end.numerics;
    d.module_records += end.numerics.size();
  }
  if (end.memory.is_object()) {
    const auto& m = end.memory;
    const auto rss = count_field(m, "rss_bytes");
    st.rss_bytes = rss.value_or(0);
    a.memory_known = a.memory_known || rss.has_value();
    if (m.contains("cuda_peak_allocated_bytes")) {
      const auto peak = count_field(m, "cuda_peak_allocated_bytes");
      st.peak_bytes = peak.value_or(0);
      a.memory_known = a.memory_known || peak.has_value();
      a.cuda_memory_seen = true;
    } else if (const auto peak = count_field(m, "peak_rss_bytes")) {
      a.peak_memory_bytes = std::max(a.peak_memory_bytes, *peak);
      a.memory_known = true;
    }
  }
  if (end.phases.is_object()) {
    if (detailed) st.phases = bounded_phases(end.phases);
    if (st.peak_bytes == 0) {
      for (const auto& [phase, m] : end.phases.items()) {
        const auto rss = count_field(m, "rss_bytes");
        st.peak_bytes = std::max(st.peak_bytes, rss.value_or(0));
        a.memory_known = a.memory_known || rss.has_value();
      }
      st.peak_bytes = std::max(st.peak_bytes, st.rss_bytes);
    }
  }
  // getrusage's high-water mark and /proc's current RSS are read at
  // different moments; the peak is at least every sample taken.
  a.peak_memory_bytes = std::max({a.peak_memory_bytes, st.peak_bytes, st.rss_bytes});
  a.max_step_peak_bytes = std::max(a.max_step_peak_bytes, st.peak_bytes);
  return st;
}

// A `fault_fired` event as the fault list reads it (Note [A trial's events
// are read as they arrive]: its strings cut, at most kMaxFaultFirings).
void record_firing(const proto::FaultFired& fired, EventDigest& d) {
  if (d.firings.size() >= kMaxFaultFirings) return;
  EventDigest::Firing f;
  f.index = fired.index;
  f.step = fired.step;
  if (!fired.module.empty()) f.module = quoted_name(fired.module);
  const auto& detail = fired.detail;
  if (detail.is_object() && detail.contains("real") && detail["real"].is_boolean()) {
    f.real = detail["real"].get<bool>();
    const auto it = detail.find("cuda_error");
    if (it != detail.end() && it->is_string()) f.hardware_error = quoted_name(it->get<std::string>());
  }
  d.firings.push_back(std::move(f));
}

void record_error(const proto::Event& e, TrialAnalysis& a, EventDigest& d) {
  const auto err = proto::error_from(e);
  if (err.kind == proto::error_kind::kHarness) {
    if (!d.harness_error) d.harness_error = e;
    return;
  }
  if (err.kind == proto::error_kind::kUnavailable && !d.unavailable) d.unavailable = e;
  if (!d.first_error && err.kind != proto::error_kind::kDiverged) {
    d.first_error = e;
    if (!err.memory.is_null()) {
      a.memory_at_failure = {{"memory", memory_figures(err.memory)},
                             {"phases", phase_figures(err.phases)}};
    }
  } else if (d.other_errors.size() < kMaxQuotedItems) {
    d.other_errors.push_back(quoted(err.phase.value_or("train"), kMaxQuotedNameBytes) + ": " + quoted(err.message));
  }
}

// Note [The schedule asked for]: a step joins its run's summary.
void record_schedule(int64_t run, int64_t step, EventDigest& d) {
  auto it = d.run_steps.find(run);
  if (it == d.run_steps.end()) {
    if (d.run_steps.size() >= kMaxScheduleRuns) {
      d.too_many_runs = true;
      return;
    }
    it = d.run_steps.emplace(run, EventDigest::RunSteps{0, step, step, true}).first;
  } else {
    it->second.in_order = it->second.in_order && it->second.last < INT64_MAX && step == it->second.last + 1;
  }
  ++it->second.count;
  it->second.last = step;
}

// An external worker's `hello` environment as kept: at most 16 string
// values, names and values cut (the worker chose them, and any size).
nlohmann::json bounded_environment(const nlohmann::json& env) {
  nlohmann::json out = nlohmann::json::object();
  if (!env.is_object()) return out;
  for (auto it = env.begin(); it != env.end() && out.size() < 16; ++it) {
    if (it->is_string()) out[truncate_utf8(it.key(), 40)] = truncate_utf8(it->get<std::string>(), 200);
  }
  return out;
}

// Note [Samples as the loader reads them]: a `sample_read` joins the set of
// indices read (bounded); its name is kept cut; the first that raised is the
// failed sample.
void record_sample_read(const proto::SampleRead& r, TrialAnalysis& a, EventDigest& d) {
  if (r.index < 0 || r.index >= kMaxDatasetSamples || (a.dataset_size && r.index >= *a.dataset_size)) return;
  if (d.samples_read.size() < kMaxSamplesRead) d.samples_read.insert(r.index);
  if (r.name && a.sample_names.size() < kMaxSamplesRead && d.sample_name_bytes < kMaxSampleTextBytes &&
      !a.sample_names.count(r.index)) {
    std::string name = truncate_utf8(*r.name, kMaxSampleNameBytes);
    d.sample_name_bytes += name.size();
    a.sample_names.emplace(r.index, std::move(name));
  }
  if (r.error && !a.failed_sample) {
    a.failed_sample = r.index;
    a.failed_sample_error = truncate_utf8(*r.error, kMaxSampleNameBytes * 2);
  }
}

void record_run_end(const proto::RunEnd& end, TrialAnalysis& a) {
  if (a.run_checksums.size() >= kMaxScheduleRuns) return;
  a.run_checksums.push_back(quoted_name(end.checksum));
  if (end.resources.is_object() || !a.run_end_open_files.empty()) {
    a.run_end_open_files.push_back(count_field(end.resources, "open_files"));
    a.run_end_threads.push_back(count_field(end.resources, "threads"));
    a.run_end_children.push_back(count_field(end.resources, "children"));
  }
  // Every run's end holds a place in each series, unknown when not reported,
  // so that a figure is never compared with another run's.
  const auto& m = end.memory;
  a.run_end_rss.push_back(count_field(m, "rss_bytes"));
  if (m.is_object() && (m.contains("cuda_allocated_bytes") || !a.run_end_cuda_allocated.empty())) {
    a.run_end_cuda_allocated.push_back(count_field(m, "cuda_allocated_bytes"));
    a.run_end_cuda_reserved.push_back(count_field(m, "cuda_reserved_bytes"));
  }
}

}  // namespace


}  // namespace dbh::harness::supervisor::internal

namespace dbh::harness::supervisor {

using namespace internal;

void EventDigester::feed(const proto::Event& e) {
  TrialAnalysis& a = a_;
  EventDigest& d = d_;
  if (e.type == proto::event::kHello) {
    auto hello = proto::hello_from(e);
    d.hello_seen = true;
    a.scenario_hash = quoted_name(hello.scenario_hash);
    a.worker = truncate_utf8(hello.worker.value_or(""), kMaxSampleNameBytes);
    a.worker_environment = bounded_environment(hello.environment);
    d.config = proto::flatten_config(hello.config);
    a.worker_facts = {{"torch", truncate_utf8(hello.torch_version, kMaxSampleNameBytes)},
                      {"device", truncate_utf8(hello.device, kMaxSampleNameBytes)},
                      {"threads", hello.threads}};
  } else if (e.type == proto::event::kWarning) {
    if (a.warnings.size() < kMaxQuotedItems) a.warnings.push_back(quoted(proto::warning_from(e).message));
  } else if (e.type == proto::event::kEval) {
    if (a.evals.size() < kMaxEvalRecords) a.evals.push_back(eval_record(proto::eval_from(e)));
  } else if (e.type == proto::event::kEvalCheck) {
    const proto::EvalCheck check = proto::eval_check_from(e);
    a.evaluator_self_check = check.hmean;
    a.validation_words = check.words;
  } else if (e.type == proto::event::kEvalOverlays) {
    for (const auto& file : proto::overlays_from(e).files) {
      if (a.eval_overlays.size() < kMaxQuotedItems && is_trial_file(file, 4)) a.eval_overlays.push_back(file);
    }
  } else if (e.type == proto::event::kStepBegin) {
    const auto b = proto::step_begin_from(e);
    d.open_step = b.step;
    d.open_run = b.run;
  } else if (e.type == proto::event::kStepEnd) {
    const auto end = proto::step_end_from(e);
    if (end.ops) ++a.ops_steps;
    StepRecord st = step_record(end, a, d);
    record_schedule(st.run, st.step, d);
    if (a.steps.size() < kMaxStepRecords) a.steps.push_back(std::move(st));
    ++a.steps_completed;
    d.open_step.reset();
  } else if (e.type == proto::event::kFaultFired) {
    record_firing(proto::fault_fired_from(e), d);
  } else if (e.type == proto::event::kCheckpoint) {
    const auto c = proto::checkpoint_from(e);
    if (c.resumed && !d.resumed_at) d.resumed_at = c.step;
  } else if (e.type == proto::event::kMemorySnapshot) {
    a.memory_snapshot = quoted_name(proto::memory_snapshot_from(e).file);
  } else if (e.type == proto::event::kOverlays) {
    a.overlays.clear();
    for (const auto& file : proto::overlays_from(e).files) {
      if (a.overlays.size() < kMaxQuotedItems && is_trial_file(file, 1)) a.overlays.push_back(file);
    }
  } else if (e.type == proto::event::kMemoryBudget) {
    a.budget = budget_record(e.body);
  } else if (e.type == proto::event::kBatch) {
    if (a.batches.size() < kMaxStepRecords && d.batch_text_bytes < kMaxSampleTextBytes) {
      auto b = proto::batch_from(e);
      if (b.samples.size() > kMaxQuotedItems * 10) b.samples.resize(kMaxQuotedItems * 10);
      for (auto& sample : b.samples) {
        sample = truncate_utf8(sample, kMaxSampleNameBytes);
        d.batch_text_bytes += sample.size() + sizeof(std::string);
      }
      a.batches.emplace_back(b.step, std::move(b.samples));
    }
  } else if (e.type == proto::event::kDataset) {
    const int64_t size = proto::dataset_info_from(e).size;
    if (size >= 0 && size <= kMaxDatasetSamples) {
      a.dataset_size = size;
    } else if (size > kMaxDatasetSamples && d.dataset_claims_refused++ == 0) {
      a.warnings.push_back("the worker's `dataset` event says it holds " + std::to_string(size) +
                           " samples, more than dbh believes of a dataset (" + std::to_string(kMaxDatasetSamples) +
                           "): its size is unknown");
    }
  } else if (e.type == proto::event::kSampleRead) {
    record_sample_read(proto::sample_read_from(e), a, d);
  } else if (e.type == proto::event::kHealth) {
    const auto h = proto::health_from(e);
    if (h.primary.value_or(false) && h.check == "finite" && !d.primary_health) d.primary_health = e;
    if (h.primary.value_or(false) && is_silent_check(h.check) && !d.silent_health) d.silent_health = e;
  } else if (e.type == proto::event::kError) {
    record_error(e, a, d);
  } else if (e.type == proto::event::kRunBegin) {
    const auto b = proto::run_begin_from(e);
    if (b.memory.is_object() && a.run_begin_rss.size() < kMaxScheduleRuns) {
      a.run_begin_rss.push_back(count_field(b.memory, "rss_bytes"));
    }
  } else if (e.type == proto::event::kRunEnd) {
    record_run_end(proto::run_end_from(e), a);
  } else if (e.type == proto::event::kDone) {
    const auto done = proto::done_from(e);
    a.done_seen = true;
    d.done_status = quoted_name(done.status);
    if (const auto peak = count_field(done.memory, "peak_rss_bytes")) {
      a.peak_memory_bytes = std::max(a.peak_memory_bytes, *peak);
      a.memory_known = true;
    }
  }
}

}  // namespace dbh::harness::supervisor
