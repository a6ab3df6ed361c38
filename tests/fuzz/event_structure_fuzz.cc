// libFuzzer target, structure-aware: the input drives a generator of event
// streams as a hostile worker writes them (every event type, the protocol's
// field names holding values of every kind: huge and negative counts, long
// strings, lists and objects, and nesting far past kMaxEventDepth written as
// text), then the whole reading path: decode_stream, each typed reader, the
// configuration's flattening, the digester and the trial's classification
// (Note [Depth is input], Note [An unknown is no zero], Note [A claimed size
// is a claim], Note [One flattening of a worker's configuration]).
#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/common/error.h"
#include "harness/kb/knowledge_base.h"
#include "harness/proto/event_types.h"
#include "harness/proto/events.h"
#include "harness/scenario/scenario.h"
#include "harness/supervisor/event_digest.h"
#include "harness/supervisor/outcome.h"

namespace {

using nlohmann::json;
namespace proto = dbh::harness::proto;

// The protocol's field names (docs/events.md), at every level.
const char* const kFields[] = {
    "run", "step", "loss", "loss_bits", "lr", "seconds", "memory", "rss_bytes", "peak_rss_bytes",
    "cuda_allocated_bytes", "cuda_reserved_bytes", "cuda_peak_allocated_bytes", "resources", "open_files",
    "threads", "children", "phases", "forward", "numerics", "config", "options", "capabilities", "modules", "size",
    "index", "name", "error", "status", "kind", "message", "module", "check", "site", "primary", "samples", "files",
    "path", "resumed", "metrics", "hmean", "schema_version", "scenario_hash", "steps", "checksum", "environment",
    "evidence", "mode", "applied", "budget_bytes", "detail", "grad_norm", "skipped", "loss_scale", "dest",
    "strings", "nargs", "worker", "pid", "trial", "device"};

std::string field(FuzzedDataProvider& p) {
  if (p.ConsumeIntegralInRange<int>(0, 7) == 0) return p.ConsumeRandomLengthString(16);
  return kFields[p.ConsumeIntegralInRange<size_t>(0, std::size(kFields) - 1)];
}

json value(FuzzedDataProvider& p, int depth) {
  switch (p.ConsumeIntegralInRange<int>(0, 11)) {
    case 0: return nullptr;
    case 1: return p.ConsumeBool();
    case 2: return p.ConsumeIntegral<int64_t>();
    case 3: return p.ConsumeIntegral<uint64_t>();
    case 4: {
      const double d = p.ConsumeFloatingPoint<double>();
      return std::isfinite(d) ? json(d) : json(1e308);
    }
    case 5: return p.ConsumeRandomLengthString(64);
    case 6: return std::string(p.ConsumeIntegralInRange<size_t>(0, size_t{1} << 14), 'x');
    case 7: {
      static const int64_t kEdges[] = {-1, 0, 1, int64_t{1} << 24, (int64_t{1} << 24) + 1, int64_t{1} << 53,
                                       std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()};
      return kEdges[p.ConsumeIntegralInRange<size_t>(0, std::size(kEdges) - 1)];
    }
    case 8:
    case 9: {
      if (depth > 6) return 0;
      json a = json::array();
      for (int n = p.ConsumeIntegralInRange<int>(0, 6); n > 0; --n) a.push_back(value(p, depth + 1));
      return a;
    }
    default: {
      if (depth > 6) return "x";
      json o = json::object();
      for (int n = p.ConsumeIntegralInRange<int>(0, 6); n > 0; --n) o[field(p)] = value(p, depth + 1);
      return o;
    }
  }
}

std::string event_line(FuzzedDataProvider& p) {
  json e = json::object();
  e["type"] = p.ConsumeIntegralInRange<int>(0, 15) == 0
                  ? json(p.ConsumeRandomLengthString(12))
                  : json(proto::event::kAll[p.ConsumeIntegralInRange<size_t>(0, proto::event::kAll.size() - 1)]);
  e["t"] = 0;
  for (int n = p.ConsumeIntegralInRange<int>(0, 8); n > 0; --n) e[field(p)] = value(p, 1);
  std::string line = e.dump(-1, ' ', false, json::error_handler_t::replace);
  if (p.ConsumeIntegralInRange<int>(0, 3) == 0) {
    // Depth as text, from just inside the limit to far past it.
    const size_t levels = p.ConsumeBool() ? p.ConsumeIntegralInRange<size_t>(0, proto::kMaxEventDepth + 2)
                                          : p.ConsumeIntegralInRange<size_t>(0, 300000);
    line.pop_back();
    line += ",\"" + field(p) + "\":" + std::string(levels, p.ConsumeBool() ? '[' : '{');
    if (line.back() == '{') {
      line.resize(line.size() - levels);
      for (size_t i = 0; i < levels; ++i) line += "{\"a\":";
      line += "1" + std::string(levels, '}') + "}";
    } else {
      line += std::string(levels, ']') + "}";
    }
  }
  return line;
}

// Every typed reader of the event's type; none may crash on any body.
void read_typed(const proto::Event& e) {
  using namespace proto;
  if (e.type == event::kHello) (void)flatten_config(hello_from(e).config);
  else if (e.type == event::kRunBegin) (void)run_begin_from(e);
  else if (e.type == event::kStepBegin) (void)step_begin_from(e);
  else if (e.type == event::kStepEnd) (void)step_end_from(e);
  else if (e.type == event::kBatch) (void)batch_from(e);
  else if (e.type == event::kDataset) (void)dataset_info_from(e);
  else if (e.type == event::kSampleRead) (void)sample_read_from(e);
  else if (e.type == event::kFaultFired) (void)fault_fired_from(e);
  else if (e.type == event::kHealth) (void)health_from(e);
  else if (e.type == event::kHeartbeat) (void)heartbeat_from(e);
  else if (e.type == event::kCheckpoint) (void)checkpoint_from(e);
  else if (e.type == event::kEval) (void)eval_from(e);
  else if (e.type == event::kEvalCheck) (void)eval_check_from(e);
  else if (e.type == event::kOverlays || e.type == event::kEvalOverlays) (void)overlays_from(e);
  else if (e.type == event::kRunEnd) (void)run_end_from(e);
  else if (e.type == event::kWarning) (void)warning_from(e);
  else if (e.type == event::kError) (void)error_from(e);
  else if (e.type == event::kMemorySnapshot) (void)memory_snapshot_from(e);
  else if (e.type == event::kTuningProgress) (void)tuning_progress_from(e);
  else if (e.type == event::kDone) (void)done_from(e);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider p(data, size);
  std::string stream;
  for (int n = p.ConsumeIntegralInRange<int>(1, 24); n > 0; --n) stream += event_line(p) + "\n";
  const auto decoded = proto::decode_stream(stream, "events.jsonl");
  dbh::harness::supervisor::EventDigester digester;
  for (const auto& e : decoded.events) {
    read_typed(e);
    digester.feed(e);
  }
  dbh::harness::supervisor::TrialResult result;
  result.exit_code = p.ConsumeIntegralInRange<int>(0, 2);
  result.bad_lines = decoded.bad_lines;
  dbh::harness::scenario::Scenario s;
  s.worker.command = {"python", "train.py"};  // an external worker: its keys are confirmed
  try {
    (void)dbh::harness::supervisor::classify(result, digester, s, dbh::harness::kb::KnowledgeBase::shipped());
  } catch (const dbh::harness::UsageError&) {  // no knowledge base where the target runs: the digest was read
  }
  return 0;
}
