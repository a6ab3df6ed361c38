// Note [Nothing left to train]: one decision for the worker's input check,
// the worker's resume and `dbh train --resume`; Note [One training
// session]: one step loop for the worker and `dbh train`.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "harness/worker/training.h"
#include "tests/support/files.h"

namespace dbh::harness {
namespace {

TEST(NothingLeftToTrain, ACheckpointAtOrAfterTheLastStepLeavesNothing) {
  scenario::Scenario s;
  s.train.max_steps = 10;
  EXPECT_FALSE(worker::nothing_left_to_train(s, 0).has_value());
  EXPECT_FALSE(worker::nothing_left_to_train(s, 9).has_value());
  const auto at_last = worker::nothing_left_to_train(s, 10);
  ASSERT_TRUE(at_last.has_value());
  EXPECT_EQ(at_last->step, 10);
  EXPECT_EQ(std::string(at_last->key), "train.max_steps");
  ASSERT_TRUE(worker::nothing_left_to_train(s, 12).has_value());
}

TEST(NothingLeftToTrain, AReplayThatStopsEarlierEndsAtItsStopAndSaysSo) {
  scenario::Scenario s;
  s.train.max_steps = 10;
  s.train.stop_after = 4;
  EXPECT_FALSE(worker::nothing_left_to_train(s, 3).has_value());
  const auto last = worker::nothing_left_to_train(s, 4);
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->step, 4);
  EXPECT_EQ(std::string(last->key), "train.stop_after");
  // A stop at or after the last step changes nothing: max_steps decides.
  s.train.stop_after = 10;
  ASSERT_TRUE(worker::nothing_left_to_train(s, 10).has_value());
  EXPECT_EQ(std::string(worker::nothing_left_to_train(s, 10)->key), "train.max_steps");
}

namespace fs = std::filesystem;

// A small, fast training on synthetic boxes.
scenario::Scenario small_training() {
  scenario::Scenario s;
  s.data.size = 64;
  s.data.batch_size = 1;
  s.train.threads = 1;
  s.train.max_steps = 10;
  return s;
}

std::set<std::string> files_in(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

// Which steps train, when checkpoints are written and in what order a caller
// hears of it, decided in one place for the worker and dbh train.
TEST(TrainSteps, TrainsToTheLastStepWithCheckpointsAtTheirCadenceInOrder) {
  const testing::ScratchDir dir("dbh-session");
  scenario::Scenario s = small_training();
  s.train.stop_after = 4;  // a replay: the last step is the stop's
  s.train.checkpoint_every = 2;
  model::DbNet net = worker::make_net(s);
  model::Trainer trainer(net, worker::train_options(s));
  const model::BatchSource batches = worker::make_batch_source(s, nullptr);
  std::vector<std::string> heard;
  worker::StepHooks hooks;
  hooks.before_step = [&](int64_t step) { heard.push_back("begin " + std::to_string(step)); };
  hooks.after_step = [&](const model::StepResult& r) { heard.push_back("end " + std::to_string(r.step)); };
  hooks.checkpointed = [&](int64_t next, const std::string& path) {
    EXPECT_TRUE(fs::is_regular_file(path)) << path;
    heard.push_back("checkpoint " + std::to_string(next) + " " + fs::path(path).filename().string());
  };
  hooks.step_done = [&](const model::StepResult& r, const worker::ValidationResult* v) {
    EXPECT_EQ(v, nullptr);  // no validation set: none
    heard.push_back("done " + std::to_string(r.step));
  };
  worker::train_steps(net, trainer, batches, worker::ValidationSet{}, s, worker::SessionSite{1, dir.string(), nullptr}, hooks);
  EXPECT_EQ(trainer.next_step(), 4);
  EXPECT_EQ(heard, (std::vector<std::string>{"begin 0", "end 0", "done 0", "begin 1", "end 1",
                                             "checkpoint 2 checkpoint-r1-s2.pt", "done 1", "begin 2", "end 2",
                                             "done 2", "begin 3", "end 3", "checkpoint 4 checkpoint-r1-s4.pt",
                                             "done 3"}));
  // Complete checkpoints only: no temporary is left beside them.
  EXPECT_EQ(files_in(dir), (std::set<std::string>{"checkpoint-r1-s2.pt", "checkpoint-r1-s4.pt"}));
  // Resumed from its last checkpoint, nothing is left to train.
  model::Trainer again(net, worker::train_options(s));
  again.load_checkpoint((dir / "checkpoint-r1-s4.pt").string());
  heard.clear();
  worker::train_steps(net, again, batches, worker::ValidationSet{}, s, worker::SessionSite{1, dir.string(), nullptr}, hooks);
  EXPECT_TRUE(heard.empty());
}

// Note [The same state, step by step]: run 0 saves the state each step
// starts from; a replay starts each step from the saved one (never from a
// link), and a state of another model names the key, the file and the shapes.
TEST(TrainSteps, AReplayStartsEveryStepFromTheSavedState) {
  const testing::ScratchDir dir("dbh-states");
  scenario::Scenario s = small_training();
  s.train.stop_after = 2;
  s.monitors.numerics_save_states = true;
  model::DbNet recorded = worker::make_net(s);
  model::Trainer trainer(recorded, worker::train_options(s));
  const model::BatchSource batches = worker::make_batch_source(s, nullptr);
  worker::train_steps(recorded, trainer, batches, worker::ValidationSet{}, s, worker::SessionSite{0, dir.string(), nullptr},
                      {});
  EXPECT_EQ(files_in(dir), (std::set<std::string>{"state-s0.pt", "state-s1.pt"}));
  scenario::Scenario replay = small_training();
  replay.train.seed = 7;  // another initialisation
  replay.monitors.numerics_replay = dir.string();
  model::DbNet net = worker::make_net(replay);
  const auto first_weight = [](model::DbNet& n) { return n->parameters().front().detach().clone(); };
  const torch::Tensor own = first_weight(net);
  worker::exchange_state(net, replay, worker::SessionSite{0, "", nullptr}, 1);
  EXPECT_FALSE(torch::equal(first_weight(net), own));
  // The weights after the recording's first step are what step 1 started from.
  model::DbNet again = worker::make_net(s);
  worker::exchange_state(again, replay, worker::SessionSite{0, "", nullptr}, 1);
  EXPECT_TRUE(torch::equal(first_weight(again), first_weight(net)));
  // A link named as a state is not read.
  const testing::ScratchDir links("dbh-states-link");
  fs::create_symlink(dir.path() / "state-s0.pt", links.path() / "state-s0.pt");
  replay.monitors.numerics_replay = links.string();
  model::DbNet untouched = worker::make_net(replay);
  const torch::Tensor before = first_weight(untouched);
  worker::exchange_state(untouched, replay, worker::SessionSite{0, "", nullptr}, 0);
  EXPECT_TRUE(torch::equal(first_weight(untouched), before));
  // Another model's state: refused by name.
  scenario::Scenario other = small_training();
  other.model.encoder = 34;
  other.monitors.numerics_replay = dir.string();
  model::DbNet wider = worker::make_net(other);
  try {
    worker::exchange_state(wider, other, worker::SessionSite{0, "", nullptr}, 0);
    ADD_FAILURE() << "a state of another model was taken";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("monitors.numerics_replay: " + (dir.path() / "state-s0.pt").string()),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("(a state of another model)"), std::string::npos) << e.what();
  }
}

TEST(TrainSteps, ACheckpointThatCannotBeWrittenSaysWhereAndLeavesNothing) {
  const testing::ScratchDir dir("dbh-session");
  scenario::Scenario s = small_training();
  s.train.checkpoint_every = 1;
  model::DbNet net = worker::make_net(s);
  model::Trainer trainer(net, worker::train_options(s));
  const std::string missing = (dir / "no-such-folder").string();
  try {
    worker::train_steps(net, trainer, worker::make_batch_source(s, nullptr), worker::ValidationSet{}, s, worker::SessionSite{0, missing, nullptr}, {});
    FAIL() << "expected a CheckpointWriteError";
  } catch (const worker::CheckpointWriteError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind(missing + "/checkpoint-r0-s1.pt: expected a writable file, got an error (", 0), 0u) << what;
  }
  EXPECT_EQ(trainer.next_step(), 1);  // the step trained; its checkpoint is what failed
  EXPECT_TRUE(files_in(dir).empty());
}

}  // namespace
}  // namespace dbh::harness
