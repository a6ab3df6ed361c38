// The worker is untrusted input (docs/worker-protocol.md): fake workers in
// bash and Python, written by the tests, each run through the real binary
// behind `worker.command`. Whatever a worker sends, says or leaves behind,
// the supervisor verifies it, bounds it, owns the names and processes around
// it and escapes it. Every case checks the exit code and the message, that
// nothing of the trial is left running, that nothing was written outside
// --out and the cache, and that dbh's outputs and its own peak memory stay
// bounded.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/files.h"
#include "tests/support/paths.h"
#include "tests/support/subprocess.h"

namespace dbh {
namespace {

namespace fs = std::filesystem;

// What every case's dbh may use at most: its outputs (the trial's journal
// included) and its own resident memory (LibTorch is linked in).
constexpr int64_t kMaxOutputBytes = int64_t{40} << 20;
constexpr int64_t kMaxReportBytes = int64_t{256} << 10;
constexpr int64_t kMaxPeakRssBytes = int64_t{900} << 20;

// The fake worker's vocabulary (bash): `hello`, answering describe mode,
// steps, a passing run. $1 is the case's marker, which every process of the
// case carries on its command line.
const char* kPrelude = R"(#!/bin/bash
MARK="$1"
e(){ printf '%s\n' "$1" >&3; }
CAPS=${CAPS:-'["loss_bits","stop_after","checkpoint","resume","subset","monitors.finite","monitors.localise","fault:nan_activation"]'}
MODULES=${MODULES:-'["stem","body","head"]'}
NAME=${NAME:-fake 1}
hello(){ e '{"type":"hello","t":0,"schema_version":1,"pid":'$$',"seed":0,"scenario_hash":"'"$DBH_SCENARIO_HASH"'","scenario":"x","trial":0,"git":"","dbh_version":"","torch_version":"none","device":"cpu","threads":1,"worker":"'"$NAME"'","capabilities":'"$CAPS"',"modules":'"$MODULES${CONFIG:+,\"config\":$CONFIG}"'}'; [ "${DBH_WORKER_DESCRIBE:-}" = 1 ] && { e '{"type":"done","t":0,"status":"described"}'; exit 0; }; }
step(){ e '{"type":"step_begin","t":0,"run":'${2:-0}',"step":'$1'}'; e '{"type":"step_end","t":0,"run":'${2:-0}',"step":'$1',"loss":0.5,"loss_bits":1056964608,"lr":0.1,"seconds":0.01}'; }
begin(){ e '{"type":"run_begin","t":0,"run":0,"memory":{}}'; }
finish(){ e '{"type":"run_end","t":0,"run":0,"steps":'${1:-4}',"checksum":"0","memory":{}}'; e '{"type":"done","t":0,"status":"passed"}'; exit 0; }
steps(){ for s in $(seq 0 $(( $1 - 1 ))); do step $s; done; }
passing(){ begin; steps ${1:-4}; finish ${1:-4}; }
linger(){ (exec -a "linger-$MARK" sleep "${1:-600}"); }
)";

struct TrustCase {
  std::string name;       // the case, as gtest names it
  std::string klass;      // verify, bound, own, escape, signal, contract
  std::string body;       // the worker after the prelude (bash), or a whole script when it starts with "#!"
  std::string yaml;       // scenario lines after the common ones
  std::string worker_yaml;  // lines inside `worker:`
  int exit_code = 0;
  std::string needle;     // in dbh's stdout, stderr or report.md
  std::vector<std::string> command = {"run"};  // dbh's command before the scenario
  int signal_after_ms = 0;  // send SIGINT to dbh this long after it starts (0: none)
  std::string absent;       // in no line of report.md outside its code blocks
  std::string absent_html;  // not in report.html
  std::vector<std::string> made_by_worker;  // folders the worker itself makes beside --out (dbh must write nothing there)
};

std::ostream& operator<<(std::ostream& os, const TrustCase& c) { return os << c.klass << "/" << c.name; }

const std::string kBigLine = "$(head -c 3000000 /dev/zero | tr '\\0' x)";

std::vector<TrustCase> cases() {
  std::vector<TrustCase> c;
  auto add = [&](TrustCase t) { c.push_back(std::move(t)); };
  // --- verify: a worker's word is checked against what was asked --------------------------------------------------
  add({"ZeroOfFourStepsThenPassed", "verify", "hello; begin; finish 0", "", "", 1,
       "after 0 step(s), but the schedule asked for 4 (steps 0 … 3)"});
  // A pass needs a trained step: a worker's own checkpoint event that says it
  // resumed at or past the last step makes a pass of nothing.
  for (const char* at : {"4", "9"}) {
    add({std::string("AResumeAtStep") + at + "OfFourThenPassed", "verify",
         std::string("hello; begin; e '{\"type\":\"checkpoint\",\"t\":0,\"run\":0,\"step\":") + at +
             ",\"path\":\"x\",\"resumed\":true}'; finish 0",
         "train: {max_steps: 4, resume_from: ../w.sh}\n", "", 1,
         std::string("the worker reported `done passed` after resuming at step ") + at});
  }
  add({"SevenOfFourSteps", "verify", "hello; begin; steps 7; finish 7", "", "", 1, "after 7 step(s)"});
  add({"StepsOutOfOrder", "verify", "hello; begin; step 0; step 2; step 1; step 3; finish 4", "", "", 1,
       "but the schedule asked for 4"});
  add({"ARunNotAskedFor", "verify", "hello; begin; steps 4; step 0 1; finish 4", "", "", 1, "steps of run 1"});
  add({"StopAfterIgnored", "verify", "hello; passing 4", "train: {max_steps: 4, stop_after: 2}\n", "", 1,
       "the schedule asked for 2"});
  add({"AKeyTheTrainingDidNotApply", "verify", "CONFIG='{\"optim.lr\":0.1,\"optim.name\":\"sgd\"}'; hello; passing",
       "train: {max_steps: 4, lr: 0.5}\n", "  keys: {train.lr: optim.lr}\n", 1,
       "but the worker's configuration holds"});
  // Note [One flattening of a worker's configuration]: nested or flat, the same keys.
  add({"ANestedKeyTheTrainingDidNotApply", "verify", "CONFIG='{\"optim\":{\"lr\":0.1,\"name\":\"sgd\"}}'; hello; passing",
       "train: {max_steps: 4, lr: 0.5}\n", "  keys: {train.lr: optim.lr}\n", 1,
       "but the worker's configuration holds \"optim.lr=0.1\""});
  add({"ANestedKeyTheTrainingApplied", "verify", "CONFIG='{\"optim\":{\"lr\":0.5}}'; hello; passing",
       "train: {max_steps: 4, lr: 0.5}\n", "  keys: {train.lr: optim.lr}\n", 0, "PASS"});
  add({"AKeyAppliedFlatButNotNested", "verify", "CONFIG='{\"optim.lr\":0.5,\"optim\":{\"lr\":0.1}}'; hello; passing",
       "train: {max_steps: 4, lr: 0.5}\n", "  keys: {train.lr: optim.lr}\n", 1, "but the worker's configuration holds"});
  add({"AKeyHiddenPastFiveThousandOthers", "verify",
       "CONFIG=\"{$(for i in $(seq 5000); do printf '\"p%d\":0,' $i; done)\\\"zz\\\":{\\\"lr\\\":0.1}}\"; hello; passing",
       "train: {max_steps: 4, lr: 0.5}\n", "  keys: {train.lr: zz.lr}\n", 1, "cannot be confirmed"});
  add({"AKeyTheTrainingApplied", "verify", "CONFIG='{\"optim.lr\":5e-1}'; hello; passing",
       "train: {max_steps: 4, lr: 0.5}\n", "  keys: {train.lr: optim.lr}\n", 0, "PASS"});
  add({"ACapabilityItLacksRefusedByRun", "verify", "CAPS='[\"loss_bits\"]'; hello; passing", "", "", 2,
       "expected a worker that serves the capability `monitors.finite`"});
  add({"ACapabilityItLacksRefusedBySuite", "verify", "CAPS='[\"loss_bits\"]'; hello; passing", "", "", 2,
       "expected a worker that serves the capability `monitors.finite`", {"suite"}});
  add({"AFaultItDoesNotServe", "verify", "hello; passing", "faults: [{name: lr_spike, at_step: 1}]\n", "", 2,
       "the capability `fault:lr_spike`"});
  add({"AModuleItDoesNotHave", "verify", "hello; passing",
       "faults: [{name: nan_activation, module: decoder.fusion, at_step: 1}]\n", "", 2,
       "expected a module name of the worker's model"});
  add({"AModuleWithoutItsParentsName", "verify", "MODULES='[\"net\",\"net.body\",\"net.body.fusion\"]'; hello; passing",
       "faults: [{name: nan_activation, module: body.fusion, at_step: 1}]\n", "", 2,
       "(did you mean \"net.body.fusion\"?)"});
  add({"AHelloWithoutCapabilities", "verify",
       "e '{\"type\":\"hello\",\"t\":0,\"schema_version\":1}'; [ \"${DBH_WORKER_DESCRIBE:-}\" = 1 ] && exit 0; passing",
       "", "", 2, "without capabilities"});
  // --- bound: nothing a worker sends makes dbh keep, write or print without limit ---------------------------------
  add({"AThreeMegabyteEventLine", "bound", "hello; begin; e \"" + kBigLine + "\"; steps 4; finish 4", "", "", 1,
       "expected an event line of at most 1048576 bytes, got 3000000 bytes (skipped)"});
  add({"TwoHundredThousandHeartbeats", "bound",
       "hello; begin; yes '{\"type\":\"heartbeat\",\"t\":0,\"run\":0,\"step\":0,\"module\":\"m\"}' | head -n 200000 >&3;"
       " steps 4; finish 4",
       "", "", 0, "PASS"});
  // Note [A trial's events are read as they arrive]: dbh keeps what the
  // events say, not the events; its memory stays flat however many come.
  add({"TwoHundredThousandStepsOfAFourStepSchedule", "bound",
       R"(hello; begin; seq 0 199999 | awk '{printf "{\"type\":\"step_end\",\"t\":0,\"run\":0,\"step\":%d,)"
       R"(\"loss\":0.5,\"lr\":0.1,\"phases\":{\"forward\":{\"rss_bytes\":%d}}}\n", $1, $1}' >&3; finish 4)",
       "", "", 1, "after 200000 step(s) (0 … 199999), but the schedule asked for 4"});
  add({"SixtyThousandStepsOfASixtyThousandStepSchedule", "bound",
       R"(hello; begin; seq 0 59999 | awk '{printf "{\"type\":\"step_end\",\"t\":0,\"run\":0,\"step\":%d,)"
       R"(\"loss\":%g,\"lr\":0.1}\n", $1, 1 / ($1 + 1)}' >&3; finish 60000)",
       "train: {max_steps: 60000}\n", "", 0, "PASS"});
  add({"FiftyThousandErrorsAndWarnings", "bound",
       R"(hello; begin; step 0; seq 50000 | awk '{printf "{\"type\":\"error\",\"t\":0,\"kind\":\"exception\",)"
       R"(\"run\":0,\"step\":1,\"message\":\"boom %d\"}\n{\"type\":\"warning\",\"t\":0,\"message\":)"
       R"(\"careful %d\"}\n", $1, $1}' >&3; e '{"type":"done","t":0,"status":"error"}'; exit 1)",
       "", "", 1, "boom 1"});
  add({"TenThousandBadLines", "bound", "hello; begin; yes 'not json' | head -n 10000 >&3; steps 4; finish 4", "", "",
       1, "undecodable line"});
  add({"AMegabyteErrorMessage", "bound",
       "hello; begin; e '{\"type\":\"step_begin\",\"t\":0,\"run\":0,\"step\":0}'; "
       "e '{\"type\":\"error\",\"t\":0,\"kind\":\"exception\",\"run\":0,\"step\":0,\"message\":\"'$(head -c 900000 "
       "/dev/zero | tr '\\0' y)'\"}'; e '{\"type\":\"done\",\"t\":0,\"status\":\"error\"}'; exit 1",
       "", "", 1, "yyyyyyyy"});
  add({"AMegabyteNameAndFiveThousandCapabilities", "bound",
       "NAME=$(head -c 1000000 /dev/zero | tr '\\0' n); CAPS=\"[$(for i in $(seq 5000); do printf '\"c%d\",' $i; "
       "done)\\\"loss_bits\\\"]\"; hello; passing",
       "", "", 2, "and 232 more"});
  add({"AHundredThousandWarnings", "bound",
       "hello; begin; yes '{\"type\":\"warning\",\"t\":0,\"message\":\"careful\"}' | head -n 100000 >&3; steps 4; "
       "finish 4",
       "", "", 0, "PASS"});
  add({"AHugeModuleNameInAFinding", "bound",
       "hello; begin; e '{\"type\":\"step_begin\",\"t\":0,\"run\":0,\"step\":1}'; e '{\"type\":\"health\",\"t\":0,"
       "\"run\":0,\"step\":1,\"check\":\"finite\",\"kind\":\"activation\",\"site\":\"x\",\"primary\":true,\"module\":\"'"
       "$(head -c 200000 /dev/zero | tr '\\0' m)'\"}'; e '{\"type\":\"error\",\"t\":0,\"kind\":\"diverged\",\"run\":0,"
       "\"step\":1,\"message\":\"nan\"}'; e '{\"type\":\"done\",\"t\":0,\"status\":\"diverged\"}'; exit 1",
       "", "", 1, "diverged"});
  add({"FortyMegabytesOnStdoutAndStderr", "bound",
       "hello; begin; head -c 40000000 /dev/zero | tr '\\0' o; head -c 40000000 /dev/zero | tr '\\0' e >&2; steps 4; "
       "finish 4",
       "", "", 0, "more to stderr than stderr.log keeps"});
  add({"SampleReadsOutsideTheDataset", "bound",
       "hello; e '{\"type\":\"dataset\",\"t\":0,\"size\":3}'; begin; for i in -5 1 99999999999 2; do "
       "e '{\"type\":\"sample_read\",\"t\":0,\"index\":'$i'}'; done; steps 4; finish 4",
       "", "", 0, "PASS"});
  // --- own: dbh's names, files and processes are dbh's ------------------------------------------------------------
  add({"AnEnvSettingTheEventFd", "own", "hello; passing", "", "  env: {DBH_EVENT_FD: \"7\"}\n", 2,
       "worker.env.DBH_EVENT_FD: expected a variable of the training's own (the DBH_ names are dbh's"});
  add({"AnEnvSettingTheSupervisorPid", "own", "hello; passing", "", "  env: {DBH_SUPERVISOR_PID: \"1\"}\n", 2,
       "the DBH_ names are dbh's"});
  add({"AnEnvNameHoldingEquals", "own", "hello; passing", "", "  env: {\"A=B\": x}\n", 2,
       "expected a variable name ([A-Za-z_][A-Za-z0-9_]*), got \"A=B\""});
  add({"AnEnvNameHoldingASpace", "own", "hello; passing", "", "  env: {\"MY VAR\": x}\n", 2,
       "expected a variable name"});
  add({"AMisspeltKey", "own", "hello; passing", "", "  keys: {train.lrr: optimizer.lr}\n", 2,
       "did you mean \"train.lr\"?"});
  add({"AKeyWithASpaceInTheUsersName", "own", "hello; passing", "", "  keys: {train.lr: \"optimizer lr\"}\n", 2,
       "expected the key it reaches the command as, one word"});
  add({"ADaemonThatCalledSetsid", "own",
       "hello; setsid bash -c 'exec -a \"linger-$0\" sleep 600' \"$MARK\" & disown; passing", "", "", 0, "PASS"});
  add({"ADoubleForkedDaemon", "own", "hello; ( ( linger & ) & ); passing", "", "", 0, "PASS"});
  add({"AGrandchildHoldingThePipeAfterDone", "own",
       "hello; (setsid bash -c 'while :; do echo \"{\\\"type\\\":\\\"warning\\\",\\\"t\\\":0,\\\"message\\\":\\\"x\\\"}\" "
       ">&3; sleep 0.05; done' \"$MARK\" &); passing",
       "", "", 0, "PASS"});
  add({"AWorkerThatOverwritesTheScenarioFileItWasGiven", "own",
       "hello; echo '{}' > \"$DBH_SCENARIO\" 2>/dev/null; passing", "", "", 0, "PASS"});
  add({"AWorkerThatWritesItsOwnJournalAndLog", "own",
       "hello; begin; step 0; step 1; echo '{\"type\":\"done\",\"t\":0,\"status\":\"failed\"}' > "
       "\"$DBH_TRIAL_DIR/events.jsonl\"; echo mine > \"$DBH_TRIAL_DIR/stdout.log\"; step 2; step 3; finish 4",
       "", "", 0, "the worker's is kept as worker-events.jsonl"});
  // --- escape: names a worker chose never become markup or commands ------------------------------------------------
  add({"AModuleNameWithMarkup", "escape",
       "MODULES='[\"a|b\",\"<script>x</script>\"]'; hello; begin; e '{\"type\":\"step_begin\",\"t\":0,\"run\":0,"
       "\"step\":1}'; e '{\"type\":\"health\",\"t\":0,\"run\":0,\"step\":1,\"check\":\"finite\",\"kind\":\"activation\","
       "\"site\":\"x\",\"primary\":true,\"module\":\"a|b\\n# <script>alert(1)</script>\"}'; e '{\"type\":\"error\",\"t\":0,"
       "\"kind\":\"diverged\",\"run\":0,\"step\":1,\"message\":\"nan\"}'; e '{\"type\":\"done\",\"t\":0,\"status\":"
       "\"diverged\"}'; exit 1",
       "", "", 1, "diverged"});
  add({"AnErrorMessageThatIsAWorkflowCommand", "escape",
       "hello; begin; e '{\"type\":\"step_begin\",\"t\":0,\"run\":0,\"step\":0}'; e '{\"type\":\"error\",\"t\":0,"
       "\"kind\":\"exception\",\"run\":0,\"step\":0,\"message\":\"boom\\n::error::injected\\u001b[31mred\"}'; "
       "e '{\"type\":\"done\",\"t\":0,\"status\":\"error\"}'; exit 1",
       "", "", 1, "boom"});
  add({"AWorkerNameWithANewline", "escape", "NAME='w\\n::warning::x'; hello; passing", "", "", 0, "PASS"});
  add({"ABudgetDetailWithMarkup", "escape",
       "hello; e '{\"type\":\"memory_budget\",\"t\":0,\"applied\":true,\"method\":\"m\",\"budget_bytes\":1024,"
       "\"detail\":\"x\\n# <script>alert(1)</script>\\n::error::pwn [a](javascript:alert(1))\"}'; passing",
       "", "", 0, "PASS", {"run"}, 0, "](javascript:"});
  const std::string markdown_error =
       "hello; begin; e '{\"type\":\"step_begin\",\"t\":0,\"run\":0,\"step\":0}'; e '{\"type\":\"error\",\"t\":0,"
       "\"kind\":\"exception\",\"run\":0,\"step\":0,\"message\":\"boom\\r::error::cr\\n# <script>alert(1)</script>\\n"
       "[click](javascript:alert(1)) ![t](https://evil.example/t.png)\"}'; e '{\"type\":\"done\",\"t\":0,\"status\":"
       "\"error\"}'; exit 1";
  add({"AnErrorMessageWithMarkdown", "escape", markdown_error,
       "", "", 1, "boom", {"run"}, 0, "](javascript:"});
  // A worker whose step 0 fails with an error naming `module`.
  auto error_in_module = [](const std::string& module) {
    return "hello; begin; e '{\"type\":\"step_begin\",\"t\":0,\"run\":0,\"step\":0}'; e '{\"type\":\"error\","
           "\"t\":0,\"kind\":\"exception\",\"run\":0,\"step\":0,\"module\":\"" + module +
           "\",\"message\":\"boom\"}'; e '{\"type\":\"done\",\"t\":0,\"status\":\"error\"}'; exit 1";
  };
  add({"AModuleNameWithABacktick", "escape", error_in_module("m` ![t](https://evil.example/x.png) `"),
       "", "", 1, "boom", {"run"}, 0, "![t]("});
  // The same through `dbh suite` as on GitHub Actions: JUnit and the job summary.
  add({"AnErrorMessageWithMarkdownInASuite", "escape", markdown_error,
       "", "", 1, "boom", {"suite"}, 0, "![t]("});
  add({"AModuleNameWithABacktickInASuite", "escape",
       error_in_module("m` ![t](https://evil.example/x.png) <script>`"),
       "", "", 1, "boom", {"suite"}, 0, "![t]("});
  add({"AWarningWithMarkupInASuite", "escape",
       "hello; e '{\"type\":\"warning\",\"t\":0,\"message\":\"w\\n::error::x <script>alert(1)</script> "
       "[a](javascript:alert(1)) ![t](https://evil.example/w.png)\"}'; passing",
       "", "", 0, "", {"suite"}, 0, "![t]("});
  // Note [Escaped at output only]: a name is compared as sent, and shown escaped.
  add({"AModuleWithABacktickMeetsTheExpectationNamingIt", "escape",
       "MODULES='[\"m`x\",\"head\"]'; hello; begin; e '{\"type\":\"step_begin\",\"t\":0,\"run\":0,\"step\":0}'; "
       "e '{\"type\":\"error\",\"t\":0,\"kind\":\"exception\",\"run\":0,\"step\":0,\"module\":\"m`x\",\"message\":"
       "\"boom\"}'; e '{\"type\":\"done\",\"t\":0,\"status\":\"error\"}'; exit 1",
       "expect: {outcome: failed, module: \"m`x\"}\n", "", 0, "expectation met"});
  add({"AnExpectationWithALineBreak", "escape",
       "MODULES='[\"a\\n::error::x\",\"head\"]'; hello; begin; e '{\"type\":\"step_begin\",\"t\":0,\"run\":0,"
       "\"step\":0}'; e '{\"type\":\"error\",\"t\":0,\"kind\":\"exception\",\"run\":0,\"step\":0,\"module\":"
       "\"a\\n::error::x\",\"message\":\"boom\"}'; e '{\"type\":\"done\",\"t\":0,\"status\":\"error\"}'; exit 1",
       "expect: {outcome: failed, module: \"a\\n::error::x\"}\n", "", 0, "expectation met"});
  add({"AHealthSiteThatClosesItsCodeSpan", "escape",
       "hello; begin; e '{\"type\":\"step_begin\",\"t\":0,\"run\":0,\"step\":1}'; e '{\"type\":\"health\",\"t\":0,"
       "\"run\":0,\"step\":1,\"check\":\"finite\",\"kind\":\"activation\",\"site\":\"s` ![t](https://evil.example/s.png) `\","
       "\"primary\":true,\"module\":\"head\"}'; e '{\"type\":\"error\",\"t\":0,\"kind\":\"diverged\",\"run\":0,\"step\":1,"
       "\"message\":\"nan\"}'; e '{\"type\":\"done\",\"t\":0,\"status\":\"diverged\"}'; exit 1",
       "", "", 1, "diverged", {"run"}, 0, "![t](", "src=\"https://evil"});
  add({"OverlayFilesOutsideTheTrial", "escape",
       "C=\"$DBH_TRIAL_DIR/../../cache\"; mkdir -p \"$C\" \"$DBH_TRIAL_DIR/overlays\"; "
       "printf '\\x89PNG\\r\\n\\x1a\\nSECRET-OUTSIDE-OUT' > \"$C/secret.png\"; "
       "ln -s \"$C/secret.png\" \"$DBH_TRIAL_DIR/overlays/link.png\"; hello; begin; "
       "e '{\"type\":\"step_begin\",\"t\":0,\"run\":0,\"step\":0}'; e '{\"type\":\"error\",\"t\":0,\"kind\":"
       "\"exception\",\"run\":0,\"step\":0,\"message\":\"boom\"}'; e '{\"type\":\"overlays\",\"t\":0,\"run\":0,"
       "\"step\":0,\"files\":[\"link.png\",\"../../../cache/secret.png\",\"'\"$C\"'/secret.png\","
       "\"a`](javascript:alert(1)) ![t](https://evil.example/t.png) [`b\"]}'; "
       "e '{\"type\":\"eval_overlays\",\"t\":0,\"run\":0,\"step\":0,\"files\":[\"../cache/secret.png\"]}'; "
       "e '{\"type\":\"done\",\"t\":0,\"status\":\"error\"}'; exit 1",
       "", "", 1, "boom", {"run"}, 0, "](https://evil", "iVBORw0KGgpTRUNSRVQt"});
  add({"AHealthModeOfThreeHundredKilobytes", "bound",
       "hello; begin; e '{\"type\":\"step_begin\",\"t\":0,\"run\":0,\"step\":0}'; "
       "e '{\"type\":\"health\",\"t\":0,\"run\":0,\"step\":0,\"check\":\"finite\",\"kind\":\"loss\",\"site\":\"total\","
       "\"primary\":true,\"mode\":\"cheap\\n::error::fromMode\\n# <script>alert(1)</script>\\n"
       "'\"$(head -c 300000 /dev/zero | tr '\\0' x)\"'\"}'; e '{\"type\":\"done\",\"t\":0,\"status\":\"diverged\"}'; exit 1",
       "", "", 1, "diverged"});
  // --- verify: mistyped fields are no crash, and a pass must name its scenario ------------------------------------
  add({"AMemoryBudgetOfMistypedFields", "verify",
       "hello; e '{\"type\":\"memory_budget\",\"t\":0,\"method\":7,\"applied\":\"no\",\"budget_bytes\":\"x\","
       "\"detail\":[1]}'; passing",
       "", "", 0, "PASS"});
  add({"AnErrorWithMistypedMemory", "verify",
       "hello; begin; e '{\"type\":\"step_begin\",\"t\":0,\"run\":0,\"step\":0}'; e '{\"type\":\"step_end\",\"t\":0,"
       "\"run\":0,\"step\":0,\"loss\":0.5,\"memory\":{\"rss_bytes\":\"x\",\"peak_rss_bytes\":1e300},\"phases\":"
       "{\"data\":[1],\"forward\":{\"rss_bytes\":\"y\"}}}'; e '{\"type\":\"error\",\"t\":0,\"kind\":\"exception\",\"run\":0,"
       "\"step\":1,\"message\":\"boom\",\"memory\":{\"rss_bytes\":\"x\"},\"phases\":[1,2]}'; "
       "e '{\"type\":\"done\",\"t\":0,\"status\":\"error\"}'; exit 1",
       "", "", 1, "boom"});
  add({"APassWithoutAHello", "verify", "[ \"${DBH_WORKER_DESCRIBE:-}\" = 1 ] && hello; passing", "", "", 1,
       "without a `hello` event"});
  add({"APassOfAnotherScenario", "verify", "DBH_SCENARIO_HASH=deadbeef; hello; passing", "", "", 1,
       "names scenario hash deadbeef"});
  add({"AnUnavailableAfterADivergence", "verify",
       "hello; begin; step 0; e '{\"type\":\"step_begin\",\"t\":0,\"run\":0,\"step\":1}'; e '{\"type\":\"health\","
       "\"t\":0,\"run\":0,\"step\":1,\"check\":\"finite\",\"kind\":\"loss\",\"site\":\"total\",\"primary\":true}'; "
       "e '{\"type\":\"error\",\"t\":0,\"kind\":\"diverged\",\"run\":0,\"step\":1,\"message\":\"nan\"}'; "
       "e '{\"type\":\"error\",\"t\":0,\"kind\":\"unavailable\",\"message\":\"cuda not here\"}'; "
       "e '{\"type\":\"done\",\"t\":0,\"status\":\"diverged\"}'; exit 1",
       "", "", 1, "diverged"});
  add({"ADaemonThatWipedItsEnvironmentAndCalledSetsid", "own",
       "hello; ( env -i setsid bash -c 'exec -a \"linger-$0\" sleep 600' \"$MARK\" & ); passing", "", "", 0, "PASS"});
  // --- signal: every phase ends with 128 + signal and nothing left running ----------------------------------------
  add({"CtrlCWhileTheWorkerDescribesItself", "signal",
       "[ \"${DBH_WORKER_DESCRIBE:-}\" = 1 ] && { linger; }; hello; passing", "", "", 130, "", {"run"},
       3000});
  add({"CtrlCWhileItTrains", "signal", "hello; begin; step 0; linger; finish 1", "", "", 130, "",
       {"run"}, 5000});
  add({"AWorkerIgnoringTermOnCtrlC", "signal", "trap '' TERM; hello; begin; step 0; while :; do sleep 1; done", "",
       "", 130, "", {"run"}, 5000});
  // --- contract: what a worker's stream says, judged by the stream ------------------------------------------------
  add({"InvalidJsonIsNoPass", "contract", "hello; begin; steps 4; e 'not json'; finish 4", "", "", 1,
       "undecodable line"});
  add({"NoHelloAtAll", "contract", "exit 0", "", "", 2, "expected a worker that writes `hello` on fd 3"});
  add({"ADescribeThatPrintsGarbage", "contract", "echo garbage >&3; exit 0", "", "", 2,
       "expected a worker that writes `hello`"});
  add({"ADescribeThatDies", "contract", "kill -SEGV $$", "", "", 2, "an end by signal 11"});
  add({"ADescribeThatHangs", "contract", "linger", "limits: {deadline_s: 3, silence_s: 2, grace_s: 1}\n",
       "", 2, "no answer within"});
  add({"ExitWithoutDone", "contract", "hello; begin; steps 4; exit 0", "", "", 1, "without a `done` event"});
  add({"ACrashIsACrashAtItsStep", "contract", "hello; begin; step 0; e '{\"type\":\"step_begin\",\"t\":0,\"run\":0,"
       "\"step\":1}'; kill -SEGV $$", "", "", 1, "crashed"});
  add({"AHangIsHung", "contract", "hello; begin; step 0; linger",
       "limits: {deadline_s: 60, silence_s: 2, grace_s: 1}\n", "", 1, "hung"});
  add({"ANanLossIsNotAPass", "contract",
       "hello; begin; e '{\"type\":\"step_begin\",\"t\":0,\"run\":0,\"step\":0}'; e '{\"type\":\"step_end\",\"t\":0,"
       "\"run\":0,\"step\":0,\"loss\":NaN,\"loss_bits\":2143289344}'; steps 4; finish 4",
       "", "", 1, "FAIL"});
  add({"APythonWorkerThatForksAndExits", "contract",
       "#!/usr/bin/env python3\nimport os, sys, json, time\nmark = sys.argv[1]\nw = lambda e: os.write(3, (json.dumps(e) + "
       "'\\n').encode())\nw({'type': 'hello', 't': 0, 'schema_version': 1, 'pid': os.getpid(), 'scenario_hash': "
       "os.environ['DBH_SCENARIO_HASH'], 'capabilities': ['loss_bits', 'stop_after', 'monitors.finite'], 'modules': "
       "['m'], 'worker': 'py 1'})\nif os.environ.get('DBH_WORKER_DESCRIBE') == '1':\n    w({'type': 'done', 't': 0, "
       "'status': 'described'}); sys.exit(0)\nif os.fork() == 0:\n    os.setsid()\n    os.execvp('sleep', ['linger-' + mark, '600'])\nw({'type': 'run_begin', 't': 0, 'run': 0, 'memory': {}})\nfor s in range(4):\n    w({'type': "
       "'step_begin', 't': 0, 'run': 0, 'step': s}); w({'type': 'step_end', 't': 0, 'run': 0, 'step': s, 'loss': 0.5, "
       "'loss_bits': 1056964608, 'lr': 0.1})\nw({'type': 'run_end', 't': 0, 'run': 0, 'steps': 4, 'checksum': '0', "
       "'memory': {}})\nw({'type': 'done', 't': 0, 'status': 'passed'})\n",
       "", "", 0, "PASS"});
  add({"ACheckpointInTheWorkersOwnFormat", "contract",
       "#!/usr/bin/env python3\nimport json, os, sys\nw = lambda e: os.write(3, (json.dumps(e) + '\\n').encode())\n"
       "w({'type': 'hello', 't': 0, 'schema_version': 1, 'pid': os.getpid(), 'scenario_hash': "
       "os.environ['DBH_SCENARIO_HASH'], 'capabilities': ['loss_bits', 'stop_after', 'checkpoint', 'resume', "
       "'monitors.finite'], 'modules': ['m'], 'worker': 'own-format 1'})\n"
       "if os.environ.get('DBH_WORKER_DESCRIBE') == '1':\n    w({'type': 'done', 't': 0, 'status': 'described'}); "
       "sys.exit(0)\ntrain = json.load(open(os.environ['DBH_SCENARIO']))['train']\n"
       "last = train.get('stop_after') or train['max_steps']; every = train.get('checkpoint_every') or 0\n"
       "start = 0\nif train.get('resume_from'):\n    start = json.load(open(train['resume_from']))['next']  # its own "
       "format: not a zip\nw({'type': 'run_begin', 't': 0, 'run': 0, 'memory': {}})\nif start:\n    w({'type': "
       "'checkpoint', 't': 0, 'run': 0, 'step': start, 'path': train['resume_from'], 'resumed': True})\n"
       "for s in range(start, last):\n    w({'type': 'step_begin', 't': 0, 'run': 0, 'step': s})\n    if s == 5:\n"
       "        w({'type': 'error', 't': 0, 'kind': 'diverged', 'run': 0, 'step': s, 'message': 'loss is nan'})\n"
       "        w({'type': 'done', 't': 0, 'status': 'diverged'}); sys.exit(1)\n"
       "    w({'type': 'step_end', 't': 0, 'run': 0, 'step': s, 'loss': 0.5, 'loss_bits': 1056964608, 'lr': 0.1})\n"
       "    if every and (s + 1) % every == 0 and s + 1 < last:\n"
       "        path = os.path.join(os.environ['DBH_TRIAL_DIR'], 'checkpoint-r0-s%d.pt' % (s + 1))\n"
       "        json.dump({'next': s + 1}, open(path, 'w'))\n"
       "        w({'type': 'checkpoint', 't': 0, 'run': 0, 'step': s + 1, 'path': path})\n"
       "w({'type': 'run_end', 't': 0, 'run': 0, 'steps': last, 'checksum': '0', 'memory': {}})\n"
       "w({'type': 'done', 't': 0, 'status': 'passed'})\n",
       "train: {max_steps: 8}\n", "", 0, "the first failing step is 5", {"bisect", "steps"}});
  // --- depth: a structure's depth is input, refused where it is decoded (Note [Depth is input]) -----------------
  add({"AHelloWhoseConfigNestsHalfAMillionLevels", "depth",
       "CONFIG=\"{\\\"k\\\":$(head -c 500000 /dev/zero | tr '\\0' '[')$(head -c 500000 /dev/zero | tr '\\0' ']')}\"; "
       "hello; passing",
       "", "", 2, "expected an event nested at most 64 levels deep"});
  add({"ARunHelloNestedDeeperThanTheLimit", "depth",
       "[ \"${DBH_WORKER_DESCRIBE:-}\" = 1 ] && hello; CONFIG=\"{\\\"k\\\":$(head -c 70 /dev/zero | tr '\\0' '[')"
       "$(head -c 70 /dev/zero | tr '\\0' ']')}\"; hello; passing",
       "", "", 1, "nested at most 64 levels deep"});
  add({"AConfigSixtyLevelsDeepIsRead", "depth",
       "CONFIG=\"{\\\"k\\\":$(head -c 60 /dev/zero | tr '\\0' '[')$(head -c 60 /dev/zero | tr '\\0' ']')}\"; "
       "hello; passing",
       "", "", 0, "PASS"});
  add({"AStepEndWithNumericsNestedAHundredThousandLevels", "depth",
       "hello; begin; steps 4; e \"{\\\"type\\\":\\\"step_end\\\",\\\"t\\\":0,\\\"run\\\":0,\\\"step\\\":3,\\\"numerics\\\":"
       "$(head -c 100000 /dev/zero | tr '\\0' '[')$(head -c 100000 /dev/zero | tr '\\0' ']')}\"; finish 4",
       "", "", 1, "nested at most 64 levels deep"});
  add({"AWarningWhoseMessageIsDeepObjects", "depth",
       "hello; begin; e \"{\\\"type\\\":\\\"warning\\\",\\\"t\\\":0,\\\"message\\\":"
       "$(for i in $(seq 3000); do printf '{\"a\":'; done)1$(head -c 3000 /dev/zero | tr '\\0' '}')}\"; steps 4; "
       "finish 4",
       "", "", 1, "nested at most 64 levels deep"});
  add({"BracketsInsideAStringAreText", "depth",
       "hello; begin; e \"{\\\"type\\\":\\\"warning\\\",\\\"t\\\":0,\\\"message\\\":\\\""
       "$(head -c 100000 /dev/zero | tr '\\0' '[')\\\"}\"; steps 4; finish 4",
       "", "", 0, "PASS"});
  // --- unknown: a number absent, mistyped or out of range is unknown, never 0 (Note [An unknown is no zero]) -----
  auto three_runs = [](const std::string& memory_of_run) {
    return "CAPS='[\"loss_bits\",\"stop_after\",\"monitors.finite\",\"in_process_runs\"]'; mem(){ " +
           memory_of_run + "; }; hello; for r in 0 1 2; do e '{\"type\":\"run_begin\",\"t\":0,\"run\":'$r',"
           "\"memory\":{}}'; for s in 0 1 2 3; do step $s $r; done; e '{\"type\":\"run_end\",\"t\":0,\"run\":'$r',"
           "\"steps\":4,\"checksum\":\"0\",\"memory\":'\"$(mem $r)\"'}'; done; e '{\"type\":\"done\",\"t\":0,"
           "\"status\":\"passed\"}'; exit 0";
  };
  const std::string runs = "repeat: {in_process: 3}\n";
  add({"ARunEndMemoryThatIsAString", "unknown",
       three_runs("[ $1 = 2 ] && echo '{\"rss_bytes\":\"300 MiB\"}' || echo '{\"rss_bytes\":314572800}'"), runs, "",
       0, "PASS"});
  add({"ARunEndMemoryThatIsMissing", "unknown",
       three_runs("[ $1 = 2 ] && echo '{}' || echo '{\"rss_bytes\":314572800}'"), runs, "", 0, "PASS"});
  add({"ARunEndMemoryThatIsNegative", "unknown",
       three_runs("[ $1 = 1 ] && echo '{\"rss_bytes\":-1}' || echo '{\"rss_bytes\":314572800}'"), runs, "", 0,
       "PASS"});
  add({"ARunEndMemoryPastAnyMachine", "unknown",
       three_runs("[ $1 = 2 ] && echo '{\"rss_bytes\":1e300}' || echo '{\"rss_bytes\":314572800}'"), runs, "", 0,
       "PASS"});
  add({"ARunEndCountOfFilesThatIsAString", "unknown",
       "CAPS='[\"loss_bits\",\"stop_after\",\"monitors.finite\",\"in_process_runs\"]'; hello; for r in 0 1 2; do e '{\"type\":\"run_begin\",\"t\":0,\"run\":'$r',\"memory\":{}}'; "
       "for s in 0 1 2 3; do step $s $r; done; e '{\"type\":\"run_end\",\"t\":0,\"run\":'$r',\"steps\":4,\"checksum\":"
       "\"0\",\"memory\":{},\"resources\":{\"open_files\":'$([ $r = 2 ] && echo '\"many\"' || echo $((10 + r)))'}}'; "
       "done; e '{\"type\":\"done\",\"t\":0,\"status\":\"passed\"}'; exit 0",
       runs, "", 0, "PASS"});
  add({"KnownGrowthIsStillALeak", "unknown",
       three_runs("echo '{\"rss_bytes\":'$(( 314572800 + $1 * 104857600 ))'}'"), runs, "", 1,
       "resident memory grew by 100.0 MiB per run"});
  add({"ABoundOnPeakMemoryWithNoFigure", "unknown", "hello; passing",
       "expect: {outcome: passed, max_peak_memory: 1GiB}\n", "", 1, "got no memory figure from the worker"});
  add({"ABoundOnPeakMemoryWithMistypedFigures", "unknown",
       "hello; begin; for s in 0 1 2 3; do e '{\"type\":\"step_begin\",\"t\":0,\"run\":0,\"step\":'$s'}'; "
       "e '{\"type\":\"step_end\",\"t\":0,\"run\":0,\"step\":'$s',\"loss\":0.5,\"memory\":{\"rss_bytes\":\"x\","
       "\"peak_rss_bytes\":-5}}'; done; finish 4",
       "expect: {outcome: passed, max_peak_memory: 1GiB}\n", "", 1, "got no memory figure from the worker"});
  // --- folder: the trial's folder and dbh's files in it are dbh's (Note [dbh's files in a trial]) ----------------
  const std::string elsewhere =
      "E=\"$(cd \"$DBH_TRIAL_DIR/../..\" && pwd)/elsewhere\"; mkdir -p \"$E\"; ";
  add({"AWorkerThatReplacesItsTrialFolderWithALink", "folder",
       "hello; " + elsewhere + "mv \"$DBH_TRIAL_DIR\" \"$DBH_TRIAL_DIR.moved\"; ln -s \"$E\" \"$DBH_TRIAL_DIR\"; passing",
       "", "", 0, "left a link to", {"run"}, 0, "", "", {"elsewhere"}});
  add({"AWorkerThatReplacesItsTrialFolderWithAFile", "folder",
       "hello; rm -rf \"$DBH_TRIAL_DIR\"; echo mine > \"$DBH_TRIAL_DIR\"; passing", "", "", 0,
       "left a file in place of its trial folder"});
  add({"AWorkerThatRemovesItsTrialFolder", "folder", "hello; rm -rf \"$DBH_TRIAL_DIR\"; passing", "", "", 0, "PASS"});
  add({"AWorkerThatOverwritesEveryFileBesideItsFolder", "folder",
       "hello; begin; step 0; e '{\"type\":\"step_begin\",\"t\":0,\"run\":0,\"step\":1}'; "
       "e '{\"type\":\"error\",\"t\":0,\"kind\":\"exception\",\"run\":0,\"step\":1,\"message\":\"boom\"}'; "
       "for f in $(find \"$DBH_TRIAL_DIR/..\" -type f 2>/dev/null); do case \"$f\" in *.yaml|*.json) ;; *) "
       "echo '{\"type\":\"done\",\"t\":0,\"status\":\"passed\"}' > \"$f\";; esac; done; "
       "e '{\"type\":\"done\",\"t\":0,\"status\":\"error\"}'; exit 1",
       "", "", 1, "boom"});
  add({"AWorkerThatLinksItsParentsNames", "folder",
       "hello; for n in stdout.log stderr.log events.jsonl stacks.txt; do ln -sf /dev/full \"$DBH_TRIAL_DIR/$n\"; done; "
       "passing",
       "", "", 0, "the worker's is kept as worker-events.jsonl"});
  add({"AHungWorkerThatReplacedItsFolderBeforeItsStacks", "folder",
       "hello; " + elsewhere + "rm -rf \"$DBH_TRIAL_DIR\"; ln -s \"$E\" \"$DBH_TRIAL_DIR\"; begin; step 0; linger",
       "limits: {deadline_s: 60, silence_s: 2, grace_s: 1}\n", "", 1, "hung", {"run"}, 0, "", "", {"elsewhere"}});
  // --- line: a line over the bound is named as such where an event was expected ----------------------------------
  add({"AHelloOverTheLineBound", "line",
       "CONFIG=\"{\\\"k\\\":\\\"$(head -c 1200000 /dev/zero | tr '\\0' x)\\\"}\"; hello; passing", "", "", 2,
       "the event stream's bad line(s): events.jsonl:1: expected an event line of at most 1048576 bytes"});
  add({"ARunHelloOverTheLineBound", "line",
       "[ \"${DBH_WORKER_DESCRIBE:-}\" = 1 ] && hello; CONFIG=\"{\\\"k\\\":\\\"$(head -c 1200000 /dev/zero | tr '\\0' x)"
       "\\\"}\"; hello; passing",
       "", "", 1, "expected an event line of at most 1048576 bytes"});
  add({"AHelloJustUnderTheLineBound", "line",
       "CONFIG=\"{\\\"k\\\":\\\"$(head -c 1000000 /dev/zero | tr '\\0' x)\\\"}\"; hello; passing", "", "", 0, "PASS"});
  // --- claim: a size a worker claims is capped before anything is allocated from it -----------------------------
  // (Note [A claimed size is a claim]) A Python worker whose 40 samples hold
  // one that raises (17); it says its dataset holds `size` samples and reads
  // `extra` indices besides its own (or, with `reads` false, reports none).
  auto claiming = [](const std::string& size, const std::string& extra, bool reads) {
    return "#!/usr/bin/env python3\nimport json, os, sys\nw = lambda e: os.write(3, (json.dumps(e) + '\\n').encode())\n"
           "w({'type': 'hello', 't': 0, 'schema_version': 1, 'pid': os.getpid(), 'scenario_hash': "
           "os.environ['DBH_SCENARIO_HASH'], 'capabilities': ['loss_bits', 'stop_after', 'subset', 'monitors.finite'], "
           "'modules': ['m'], 'worker': 'claims 1'})\nif os.environ.get('DBH_WORKER_DESCRIBE') == '1':\n"
           "    w({'type': 'done', 't': 0, 'status': 'described'}); sys.exit(0)\n"
           "s = json.load(open(os.environ['DBH_SCENARIO']))\nsubset = s['data'].get('subset') or list(range(40))\n"
           "w({'type': 'dataset', 't': 0, 'size': " + size + "})\nfor i in [" + extra + "]:\n"
           "    w({'type': 'sample_read', 't': 0, 'index': i})\nw({'type': 'run_begin', 't': 0, 'run': 0, 'memory': {}})\n"
           "w({'type': 'step_begin', 't': 0, 'run': 0, 'step': 0})\nfor i in subset:\n" +
           (reads ? "    w({'type': 'sample_read', 't': 0, 'index': i})\n" : "    pass\n") +
           "if 17 in subset:\n    w({'type': 'error', 't': 0, 'kind': 'exception', 'run': 0, 'step': 0, 'message': "
           "'ValueError: sample 17'})\n    w({'type': 'done', 't': 0, 'status': 'error'}); sys.exit(1)\n"
           "for st in range(s['train']['max_steps']):\n    if st:\n        w({'type': 'step_begin', 't': 0, 'run': 0, "
           "'step': st})\n    w({'type': 'step_end', 't': 0, 'run': 0, 'step': st, 'loss': 0.5, 'loss_bits': "
           "1056964608, 'lr': 0.1})\nw({'type': 'run_end', 't': 0, 'run': 0, 'steps': s['train']['max_steps'], "
           "'checksum': '0', 'memory': {}})\nw({'type': 'done', 't': 0, 'status': 'passed'})\n";
  };
  const std::string kFound17 = "of the 40 samples the worker's loader read: sample 17 (index [17])";
  add({"ADatasetOfATrillionSamplesWithReads", "claim", claiming("10**12", "10**11, -3, 2**63 - 1", true), "", "", 0,
       kFound17, {"bisect", "data"}});
  add({"ADatasetOfATrillionSamplesWithoutReads", "claim", claiming("10**12", "", false), "", "", 2,
       "got neither", {"bisect", "data"}});
  add({"ADatasetOfAMillionSamplesWithoutReads", "claim", claiming("10**6", "", false), "", "", 2,
       "got only its size (1000000)", {"bisect", "data"}});
  add({"ReadsAtIndicesPastAnyDataset", "claim", claiming("40", "10**15, 2**40", true), "", "", 0, kFound17,
       {"bisect", "data"}});
  add({"ANegativeDatasetSize", "claim", claiming("-5", "", true), "", "", 0, kFound17, {"bisect", "data"}});
  // --- rung: each diagnosis rung is checked against what its trial did (Note [A rung is checked against …]) -----
  const std::string ignores_rungs =
      "CAPS='[\"loss_bits\",\"stop_after\",\"monitors.finite\",\"ops\",\"synthetic_data\"]'; hello; begin; ";
  const std::string fails_at_1 =
      "step 0; e '{\"type\":\"step_begin\",\"t\":0,\"run\":0,\"step\":1}'; e '{\"type\":\"error\",\"t\":0,\"kind\":"
      "\"exception\",\"run\":0,\"step\":1,\"message\":\"boom\"}'; e '{\"type\":\"done\",\"t\":0,\"status\":\"error\"}'; "
      "exit 1";
  add({"AnOpsRungThatTrains", "rung", ignores_rungs + fails_at_1, "", "", 1, "train.mode=ops not applied",
       {"diagnose"}});
  add({"AModelStepRungThatTrainsFourSteps", "rung",
       ignores_rungs + "step 0; step 1; step 2; e '{\"type\":\"step_begin\",\"t\":0,\"run\":0,\"step\":3}'; "
       "e '{\"type\":\"error\",\"t\":0,\"kind\":\"exception\",\"run\":0,\"step\":3,\"message\":\"boom\"}'; "
       "e '{\"type\":\"done\",\"t\":0,\"status\":\"error\"}'; exit 1",
       "", "", 1, "train.stop_after=1 not applied", {"diagnose"}});
  add({"ASyntheticRungThatFailsReadingASample", "rung",
       ignores_rungs + "e '{\"type\":\"step_begin\",\"t\":0,\"run\":0,\"step\":0}'; e '{\"type\":\"sample_read\",\"t\":0,"
       "\"index\":5,\"error\":\"OSError: image file is truncated\"}'; e '{\"type\":\"error\",\"t\":0,\"kind\":"
       "\"exception\",\"run\":0,\"step\":0,\"message\":\"OSError: image file is truncated\"}'; e '{\"type\":\"done\","
       "\"t\":0,\"status\":\"error\"}'; exit 1",
       "", "", 1, "failed reading a sample", {"diagnose"}});
  return c;
}

// `line` without its Markdown code spans (a run of n backticks to the next
// run of exactly n): what a reader sees rendered as text.
std::string without_code_spans(const std::string& line) {
  std::string out;
  size_t i = 0;
  while (i < line.size()) {
    if (line[i] != '`') {
      out += line[i++];
      continue;
    }
    size_t n = 0;
    while (i + n < line.size() && line[i + n] == '`') ++n;
    size_t j = i + n, close = std::string::npos;
    while (j < line.size()) {
      if (line[j] != '`') {
        ++j;
        continue;
      }
      size_t m = 0;
      while (j + m < line.size() && line[j + m] == '`') ++m;
      if (m == n) {
        close = j;
        break;
      }
      j += m;
    }
    if (close == std::string::npos) {  // no closing run: the backticks are text
      out.append(line, i, n);
      i += n;
    } else {
      i = close + n;
    }
  }
  return out;
}

// The disk `dir` takes: each file once, however many names it has.
int64_t folder_bytes(const fs::path& dir) {
  int64_t bytes = 0;
  std::set<std::pair<dev_t, ino_t>> seen;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
    struct stat st {};
    if (lstat(e.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (seen.emplace(st.st_dev, st.st_ino).second) bytes += static_cast<int64_t>(st.st_size);
  }
  return bytes;
}

// Every path under `dir` but those under `out` and `cache`.
std::set<std::string> files_outside(const fs::path& dir, const fs::path& out, const fs::path& cache) {
  std::set<std::string> files;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->path() == out || it->path() == cache) {
      it.disable_recursion_pending();
      continue;
    }
    files.insert(it->path().string());
  }
  return files;
}

class WorkerTrustTest : public ::testing::TestWithParam<TrustCase> {};

TEST_P(WorkerTrustTest, KeepsTheContract) {
  const TrustCase& c = GetParam();
  const testing::ScratchDir dir("dbh-worker-trust-" + c.name);
  const std::string marker = "trust-case-" + c.name + "-" + std::to_string(getpid());
  const bool python = c.body.rfind("#!", 0) == 0;
  const fs::path script = dir.path() / (python ? "w.py" : "w.sh");
  testing::write_text(script, python ? c.body : std::string(kPrelude) + c.body + "\n");
  const fs::path scenarios = dir.path() / "scenarios";
  fs::create_directories(scenarios);
  const fs::path scenario = scenarios / "s.yaml";
  const bool own_train = c.yaml.find("train:") != std::string::npos;
  const bool own_limits = c.yaml.find("limits:") != std::string::npos;
  testing::write_text(scenario, "name: trust-case\nworker:\n  command: [" + std::string(python ? "python3" : "bash") +
                                    ", " + script.string() + ", " + marker + "]\n" + c.worker_yaml +
                                    "data: {source: real}\n" + (own_train ? "" : "train: {max_steps: 4}\n") +
                                    (own_limits ? "" : "limits: {deadline_s: 60, silence_s: 30, grace_s: 1}\n") +
                                    c.yaml);
  const fs::path out = dir.path() / "out", cache = dir.path() / "cache";
  const auto before = files_outside(dir.path(), out, cache);
  std::vector<std::string> argv = {DBH_BINARY};
  argv.insert(argv.end(), c.command.begin(), c.command.end());
  argv.push_back(c.command.front() == "suite" ? scenarios.string() : scenario.string());
  for (const std::string& a : {std::string("--out"), out.string()}) argv.push_back(a);
  if (c.command.front() == "bisect" || c.command.front() == "diagnose") argv.insert(argv.end(), {"--cache", cache.string()});
  testing::ProcessResult r;
  if (c.signal_after_ms > 0) {
    // Ctrl-C as a terminal sends it: to dbh (its worker has a group of its own).
    const fs::path log = dir.path() / "dbh.log";
    const pid_t pid = testing::spawn_process(argv, dir.path().string(), log.string());
    std::this_thread::sleep_for(std::chrono::milliseconds(c.signal_after_ms));
    kill(pid, SIGINT);
    r = testing::wait_process(pid, 60);
    r.out = testing::read_text(log);
  } else if (c.command.front() == "suite") {
    // As on GitHub Actions: the suite also writes the job summary and the
    // annotations (and always out/junit.xml).
    r = testing::run_process_with_env(argv,
                                      {{"GITHUB_ACTIONS", "true"},
                                       {"GITHUB_STEP_SUMMARY", (dir.path() / "summary.md").string()},
                                       {"GITHUB_WORKSPACE", dir.path().string()}},
                                      dir.path().string(), 240);
  } else {
    r = testing::run_process(argv, dir.path().string(), 240);
  }
  const std::string report = fs::exists(out / "report.md") ? testing::read_text(out / "report.md") : "";
  std::string all = r.out + r.err + report;
  for (const char* page : {"diagnosis.md", "bisect.md"}) {
    if (fs::exists(out / page)) all += testing::read_text(out / page);
  }
  if (!c.absent_html.empty() && fs::exists(out / "report.html")) {
    EXPECT_EQ(testing::read_text(out / "report.html").find(c.absent_html), std::string::npos)
        << c << ": " << c.absent_html << " reached report.html";
  }
  EXPECT_FALSE(r.timed_out) << c;
  EXPECT_EQ(r.exit_code, c.exit_code) << c << "\n" << r.out.substr(0, 3000) << r.err.substr(0, 3000);
  if (!c.needle.empty()) {
    EXPECT_NE(all.find(c.needle), std::string::npos) << c << ": " << all.substr(0, 4000);
  }
  // Nothing of the case is left running.
  std::vector<pid_t> left;
  for (int i = 0; i < 100; ++i) {
    left = testing::find_processes({marker});
    if (left.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(left.empty()) << c << ": " << left.size() << " process(es) of the trial outlived dbh";
  for (const pid_t p : left) kill(p, SIGKILL);
  // Nothing written outside --out and the cache (the log of a signalled run is the test's own).
  auto after = files_outside(dir.path(), out, cache);
  after.erase((dir.path() / "dbh.log").string());
  after.erase((dir.path() / "summary.md").string());  // the job summary the suite was asked for
  for (const auto& made : c.made_by_worker) after.erase((dir.path() / made).string());
  EXPECT_EQ(after, before) << c;
  // Bounded: outputs, the report pages, dbh's own memory, what it printed.
  EXPECT_LE(folder_bytes(out), kMaxOutputBytes) << c;
  for (const char* page : {"report.md", "report.html", "report.json"}) {
    if (fs::exists(out / page)) {
      EXPECT_LE(static_cast<int64_t>(fs::file_size(out / page)), kMaxReportBytes) << c << page;
    }
  }
  if (c.signal_after_ms == 0) {
    EXPECT_LE(r.peak_rss_bytes, kMaxPeakRssBytes) << c;
  }
  EXPECT_LE(r.out.size() + r.err.size(), size_t{64} << 10) << c;
  // Escaped: no line of dbh's output is a workflow command, and the pages
  // carry no markup the worker wrote.
  for (const std::string& text : {r.out, r.err}) {
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      // dbh's own annotations (a suite on GitHub Actions) are the only
      // workflow commands; the worker's text is inside their message.
      const bool own = line.rfind("::error title=dbh ", 0) == 0 || line.rfind("::warning title=dbh ", 0) == 0 ||
                       line.rfind("::notice title=dbh ", 0) == 0;
      EXPECT_TRUE(own || line.rfind("::", 0) != 0) << c << ": " << line;
    }
    EXPECT_EQ(text.find('\x1b'), std::string::npos) << c << ": a terminal escape reached the terminal";
  }
  if (fs::exists(out / "report.html")) {
    EXPECT_EQ(testing::read_text(out / "report.html").find("<script>alert"), std::string::npos) << c;
  }
  // JUnit and the GitHub job summary: no markup the worker wrote.
  if (fs::exists(out / "junit.xml")) {
    const std::string xml = testing::read_text(out / "junit.xml");
    EXPECT_EQ(xml.find("<script"), std::string::npos) << c;
    EXPECT_EQ(xml.find('\x1b'), std::string::npos) << c;
  }
  if (fs::exists(dir.path() / "summary.md")) {
    std::istringstream lines(testing::read_text(dir.path() / "summary.md"));
    size_t fence = 0;  // the open code block's fence length (0: none); a closing fence is at least as long
    for (std::string line; std::getline(lines, line);) {
      const size_t ticks = line.find_first_not_of('`') == std::string::npos ? line.size() : line.find_first_not_of('`');
      if (ticks >= 3 && (fence == 0 || (ticks >= fence && ticks == line.size()))) {
        fence = fence == 0 ? ticks : 0;
        continue;
      }
      if (fence > 0) continue;  // a code block shows its text verbatim
      const std::string text = without_code_spans(line);
      EXPECT_EQ(text.find("<script"), std::string::npos) << c << ": " << line;
      EXPECT_EQ(text.find("](javascript:"), std::string::npos) << c << ": " << line;
      if (!c.absent.empty()) EXPECT_EQ(text.find(c.absent), std::string::npos) << c << ": " << line;
    }
  }
  if (!report.empty()) {
    // No line the worker wrote starts a line of report.md (`cat report.md`
    // in a CI log would run a "::" line), and outside the code blocks no
    // text of it is a link, an image or a tag.
    EXPECT_EQ(report.find("\r::"), std::string::npos) << c << ": a CI log breaks lines at \\r too";
    std::istringstream lines(report);
    bool in_code = false, in_front_matter = report.rfind("---\n", 0) == 0;
    int line_no = 0;
    for (std::string line; std::getline(lines, line);) {
      // The front matter's values are YAML strings, and code spans are
      // verbatim: neither is rendered as Markdown.
      if (line_no++ > 0 && line == "---") in_front_matter = false;
      if (line.rfind("```", 0) == 0) in_code = !in_code;
      EXPECT_NE(line.rfind("<script", 0), 0u) << c << ": " << line;
      EXPECT_NE(line.rfind("# <script", 0), 0u) << c << ": " << line;
      EXPECT_NE(line.rfind("::", 0), 0u) << c << ": " << line;
      if (in_code || in_front_matter) continue;
      const std::string text = without_code_spans(line);
      EXPECT_EQ(text.find("](javascript:"), std::string::npos) << c << ": " << line;
      if (!c.absent.empty()) EXPECT_EQ(text.find(c.absent), std::string::npos) << c << ": " << line;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Catalogue, WorkerTrustTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<TrustCase>& info) {
                           return info.param.klass + "_" + info.param.name;
                         });

// The catalogue's size per class: each class has several cases, and there
// are at least 90.
TEST(WorkerTrustCatalogue, CoversEveryClass) {
  std::map<std::string, int> per_class;
  for (const auto& c : cases()) ++per_class[c.klass];
  EXPECT_GE(cases().size(), 90u);
  for (const char* k : {"verify", "bound", "own", "escape", "signal", "contract", "depth", "unknown", "folder", "line", "claim", "rung"}) {
    EXPECT_GE(per_class[k], 3) << k;
  }
}

}  // namespace
}  // namespace dbh
