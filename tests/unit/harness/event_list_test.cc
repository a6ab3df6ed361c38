// The event protocol as declared (harness/proto/events.h, event_types.h) and
// as documented (docs/events.md, README.md, docs/architecture.md) cannot
// drift apart; the typed events round-trip through the codec and read a
// damaged stream leniently.
#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "harness/proto/event_types.h"
#include "harness/proto/events.h"
#include "tests/support/files.h"
#include "tests/support/paths.h"

namespace dbh::harness {
namespace {

using nlohmann::json;

struct DocumentedEvent {
  std::string name;
  std::vector<std::string> fields;  // as written, `?` marking optional ones
};

// The backticked words of `text`, in order.
std::vector<std::string> backticked(const std::string& text) {
  std::vector<std::string> out;
  for (size_t at = text.find('`'); at != std::string::npos;) {
    const size_t end = text.find('`', at + 1);
    if (end == std::string::npos) break;
    out.push_back(text.substr(at + 1, end - at - 1));
    at = text.find('`', end + 1);
  }
  return out;
}

// The rows of the table under "## Events" in docs/events.md.
std::vector<DocumentedEvent> documented_events() {
  const std::string doc = testing::read_text(std::string(DBH_SOURCE_DIR) + "/docs/events.md");
  EXPECT_FALSE(doc.empty()) << "docs/events.md was not found";
  std::vector<DocumentedEvent> out;
  std::istringstream lines(doc.substr(std::min(doc.size(), doc.find("## Events"))));
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("| `", 0) != 0) continue;
    const size_t last_cell = line.rfind('|', line.size() - 2);
    DocumentedEvent e;
    e.name = backticked(line).front();
    e.fields = backticked(line.substr(last_cell));
    out.push_back(e);
  }
  return out;
}

std::set<std::string> keys(const json& j) {
  std::set<std::string> out;
  for (auto it = j.begin(); it != j.end(); ++it) out.insert(it.key());
  return out;
}

TEST(EventList, DocsListEveryDeclaredEventInOrder) {
  std::vector<std::string> declared(proto::event::kAll.begin(), proto::event::kAll.end());
  std::vector<std::string> listed;
  for (const auto& e : documented_events()) listed.push_back(e.name);
  EXPECT_EQ(listed, declared) << "docs/events.md's table and event::kAll (harness/proto/events.h) differ";
  EXPECT_EQ(std::set<std::string>(declared.begin(), declared.end()).size(), declared.size()) << "a name twice";
}

// `full` has every optional field set; a default-constructed event has none.
template <typename E>
void ExpectDocumentedFields(const E& full) {
  std::set<std::string> all, required;
  bool found = false;
  for (const auto& d : documented_events()) {
    if (d.name != E::kType) continue;
    found = true;
    for (std::string f : d.fields) {
      const bool optional = !f.empty() && f.back() == '?';
      if (optional) f.pop_back();
      all.insert(f);
      if (!optional) required.insert(f);
    }
  }
  ASSERT_TRUE(found) << E::kType << " is not in docs/events.md";
  EXPECT_EQ(keys(to_json(full)), all) << E::kType << ": fields written when all are set";
  EXPECT_EQ(keys(to_json(E{})), required) << E::kType << ": fields written always (the others marked `?`)";
}

TEST(EventList, DocsListEachTypedEventsFields) {
  proto::Hello hello;
  hello.worker = "dbh-adapter 0.1.0";
  hello.capabilities = std::vector<std::string>{"loss_bits"};
  hello.modules = std::vector<std::string>{"decoder.fusion"};
  hello.environment = {{"python", "3.11.7"}};
  hello.config = {{"optim.lr", 0.1}};
  hello.options = nlohmann::json::array({{{"dest", "lr"}, {"strings", {"--lr"}}, {"kind", "value"}, {"nargs", 1}}});
  ExpectDocumentedFields(hello);
  ExpectDocumentedFields(proto::RunBegin{});
  ExpectDocumentedFields(proto::StepBegin{});
  proto::StepEnd measured;
  measured.bce = measured.l1 = measured.dice = measured.grad_norm = 0.5;
  measured.numerics = {{"decoder.fusion", 0.25, 0.125}};
  measured.grad_norm_bits = 7;
  ExpectDocumentedFields(measured);
  ExpectDocumentedFields(proto::BatchSamples{});
  ExpectDocumentedFields(proto::DatasetInfo{});
  proto::SampleRead read;
  read.name = "img_004.png";
  read.error = "OSError: image file is truncated";
  ExpectDocumentedFields(read);
  proto::FaultFired fired;
  fired.module = "decoder";
  fired.detail = {{"real", true}};
  ExpectDocumentedFields(fired);
  proto::Health health;
  health.module = health.mode = health.message = "x";
  health.primary = true;
  health.evidence = std::vector<std::string>{"why"};
  health.stats = {{"nan", 1}};
  health.nonfinite_sites = {{"gradient", 2}};
  ExpectDocumentedFields(health);
  ExpectDocumentedFields(proto::Heartbeat{});
  proto::Checkpoint resumed;
  resumed.resumed = true;
  ExpectDocumentedFields(resumed);
  proto::Eval eval;
  eval.det_reference = 3;
  eval.precision = eval.recall = eval.hmean = 0.5;
  eval.metrics = {{"val/f1", 0.5}};
  ExpectDocumentedFields(eval);
  ExpectDocumentedFields(proto::EvalOverlays{});
  ExpectDocumentedFields(proto::Overlays{});
  proto::EvalCheck check;
  check.words = 0;
  ExpectDocumentedFields(check);
  ExpectDocumentedFields(proto::TuningProgress{});
  proto::Tuning tuning;
  tuning.others_cores = 0.1;
  tuning.over_budget_step_seconds = 42.0;
  tuning.over_budget_probe_size = 160;
  tuning.error = "x";
  ExpectDocumentedFields(tuning);
  proto::RunEnd run_end;
  run_end.resources = {{"open_files", 5}};
  ExpectDocumentedFields(run_end);
  ExpectDocumentedFields(proto::Warning{});
  proto::WorkerError error;
  error.run = error.step = 1;
  error.phase = error.backtrace = error.module = "x";
  error.memory = error.phases = json::object();
  ExpectDocumentedFields(error);
  ExpectDocumentedFields(proto::MemorySnapshot{});
  proto::Done done;
  done.memory = json::object();
  ExpectDocumentedFields(done);
}

// The short lists in docs/scenarios.md and the architecture page name only declared
// events and point at the full list.
TEST(EventList, TheManualAndArchitectureNameOnlyDeclaredEvents) {
  struct Place {
    const char* file;
    const char* from;  // the list starts after this
    const char* to;    // and ends before this
  };
  for (const Place& p : {Place{"/docs/scenarios.md", "stream on fd 3 (", "docs/events.md"},
                         Place{"/docs/architecture.md", "The worker writes ", "docs/events.md"}}) {
    std::string text = testing::read_text(std::string(DBH_SOURCE_DIR) + p.file);
    for (char& c : text) c = c == '\n' ? ' ' : c;  // a list may wrap anywhere
    const size_t from = text.find(p.from);
    ASSERT_NE(from, std::string::npos) << p.file << ": no event list after \"" << p.from << "\"";
    const size_t to = text.find(p.to, from);
    ASSERT_NE(to, std::string::npos) << p.file << ": the event list does not point at " << p.to;
    const auto names = backticked(text.substr(from, to - from));
    EXPECT_GE(names.size(), 5u) << p.file;
    for (const auto& n : names) EXPECT_TRUE(proto::event::is_known(n)) << p.file << " names `" << n << "`, not declared";
  }
}

TEST(EventList, UnknownTypesAreNotKnown) {
  EXPECT_TRUE(proto::event::is_known("step_end"));
  EXPECT_FALSE(proto::event::is_known("step_ended"));
  EXPECT_FALSE(proto::event::is_known(""));
}

proto::Event Through(const std::string& line) { return proto::decode_event(line, "test"); }

TEST(TypedEvents, StepEndRoundTrips) {
  proto::StepEnd s;
  s.run = 1;
  s.step = 7;
  s.loss = 0.25;
  s.bce = 0.5;
  s.loss_bits = 0x3e800000u;
  s.micro_loss_bits = {1u, 0xffffffffu};
  s.grad_norm_bits = 42;
  s.skipped = true;
  s.loss_scale = 1024;
  s.samples = 4;
  s.memory = {{"rss_bytes", 100}};
  s.phases = {{"data", {{"rss_bytes", 90}}}};
  s.silent = json::object();
  s.numerics = {{"encoder.stem", 0.5, 0.25}, {"head.binarize", 0.75, std::nullopt}};
  const auto back = proto::step_end_from(Through(proto::encode(s, 1.5)));
  EXPECT_EQ(to_json(back), to_json(s));
  ASSERT_EQ(back.numerics.size(), 2u);
  EXPECT_FALSE(back.numerics[1].grad.has_value());
  EXPECT_FALSE(back.ops);
  EXPECT_EQ(back.micro_loss_bits, s.micro_loss_bits);
}

TEST(TypedEvents, OpsStepEndWritesFourFields) {
  proto::StepEnd s;
  s.ops = true;
  s.step = 2;
  s.loss = 3.0;
  EXPECT_EQ(keys(to_json(s)), (std::set<std::string>{"run", "step", "loss", "seconds"}));
  // Types stay as they were: `seconds` a float even when 0.
  EXPECT_EQ(to_json(s).dump(), R"({"loss":3.0,"run":0,"seconds":0.0,"step":2})");
  EXPECT_TRUE(proto::step_end_from(Through(proto::encode(s, 0))).ops);
}

TEST(TypedEvents, HealthKeepsCheckSpecificFieldsInExtra) {
  proto::Health h;
  h.check = "loss_spike";
  h.kind = "loss";
  h.site = "total";
  h.extra = {{"median", 1.5}, {"factor", 12.0}};
  const proto::Event e = Through(proto::encode(h, 0));
  EXPECT_DOUBLE_EQ(e.get<double>("median", 0), 1.5);
  EXPECT_FALSE(e.has("primary"));
  const auto back = proto::health_from(e);
  EXPECT_EQ(back.extra, h.extra);
  EXPECT_FALSE(back.primary.has_value());
  EXPECT_EQ(to_json(back), to_json(h));
}

TEST(TypedEvents, ErrorWritesOnlyTheFieldsSet) {
  proto::WorkerError harness_error;
  harness_error.kind = "harness";
  harness_error.message = "bad scenario";
  EXPECT_EQ(keys(to_json(harness_error)), (std::set<std::string>{"kind", "message"}));
  const auto back = proto::error_from(Through(proto::encode(harness_error, 0)));
  EXPECT_FALSE(back.step.has_value());
  EXPECT_FALSE(back.phase.has_value());
  EXPECT_EQ(back.message, "bad scenario");
}

TEST(TypedEvents, FaultFiredOmitsEmptyModuleAndDetail) {
  proto::FaultFired f;
  f.fault = "nan_activation";
  f.index = 0;
  f.step = 1;
  EXPECT_EQ(keys(to_json(f)), (std::set<std::string>{"fault", "index", "run", "step"}));
  f.module = "decoder.fusion";
  f.detail = {{"real", false}};
  EXPECT_EQ(proto::fault_fired_from(Through(proto::encode(f, 0))).module, "decoder.fusion");
}

TEST(TypedEvents, MistypedAndUnknownFieldsReadAsDefaults) {
  const proto::Event e = Through(R"({"type":"step_end","run":"zero","step":null,"loss":0.5,"micro_loss_bits":[1,-2,"x"],)"
                          R"("novel":{"a":1}})");
  const auto s = proto::step_end_from(e);
  EXPECT_EQ(s.run, 0);
  EXPECT_EQ(s.step, 0);
  EXPECT_DOUBLE_EQ(s.loss, 0.5);
  EXPECT_EQ(s.micro_loss_bits, std::vector<uint32_t>{1u});
  EXPECT_TRUE(s.ops);  // no trainer fields
  const auto err = proto::error_from(Through(R"({"type":"error","step":"3","message":7})"));
  EXPECT_FALSE(err.step.has_value());
  EXPECT_EQ(err.message, "");
  const auto o = proto::overlays_from(Through(R"({"type":"overlays","files":["a.png",3,"b.png"]})"));
  EXPECT_EQ(o.files, (std::vector<std::string>{"a.png", "b.png"}));
}

}  // namespace
}  // namespace dbh::harness
