#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dbh::harness::scenario {

// Note [Lightning aliases]: users train DBNet with Lightning + Hydra and
// think in that command line's keys (`trainer.precision=16-mixed`,
// `dataloaders.train_dataloader.batch_size=2`). One table maps those keys to
// dbh's scenario keys; `dbh scenario from-command` converts a whole command
// line with it, and the override parser (load_scenario) translates each
// `key=value` with it, so both read a key the same way. A Lightning setting
// dbh cannot honour is never dropped: the converter lists it with its reason,
// the override parser refuses it.

struct ImageSize {
  int64_t width = 0;
  int64_t height = 0;
};

/// Parses `text`, the value `where` gives (a flag such as "--target_size" or
/// a key such as "preprocessing.target_size", with any prefix), strictly: `N`, `N,N`,
/// `[N, N]` or `(N, N)` (also `[N]`), spaces allowed around the numbers, each
/// N a whole number of pixels from 1 to kMaxImageSize. Throws UsageError
/// "<where>: expected …, got "<at most 80 bytes of
/// text>" (<what is wrong>)" for anything else: an empty value, a trailing or
/// doubled comma, an unbalanced, mismatched or nested bracket, more than two
/// numbers, a sign, a fraction, a letter, 0, or a number above the maximum.
ImageSize parse_image_size(const std::string& where, const std::string& text);
inline constexpr int64_t kMaxImageSize = 8192;

/// One dbh value as Lightning writes it: the word dbh passes to a Lightning
/// training, then every other word Lightning takes for the same thing.
struct LightningValue {
  const char* dbh;                        // dbh's value: fp32, fp16, bf16; cpu, cuda
  const char* passed;                     // Lightning's spelling, the one dbh passes
  std::vector<const char*> also;          // the other spellings read as it
};

// Note [Lightning's values, once]: `trainer.precision` and
// `trainer.accelerator` are written one way in Lightning and another in dbh.
// These two tables are the one source of the mapping for the alias table
// (overrides and from-command), the user-configuration mapping (a `hello`'s
// config), the worker contract (what dbh passes) and the adapter
// (python/dbh_adapter/lightning.py's `_PRECISION`, which a unit test renders
// from the table and finds there).
const std::vector<LightningValue>& lightning_precisions();
const std::vector<LightningValue>& lightning_accelerators();

/// The row of `table` that `word` spells (its `passed` or one of `also`), or
/// nullptr.
const LightningValue* lightning_value_of(const std::vector<LightningValue>& table, const std::string& word);

/// The row of `table` for dbh's value `dbh`, or nullptr.
const LightningValue* lightning_value_for(const std::vector<LightningValue>& table, const std::string& dbh);

/// What one Lightning/Hydra `key=value` means for a dbh scenario.
struct AliasTranslation {
  enum class Kind {
    kMapped,     // sets dbh's `key` to `value`
    kSatisfied,  // dbh already behaves so (trainer.devices=1): nothing to set
    kUnmapped,   // a valid Lightning setting dbh cannot honour (`reason`)
    kInvalid,    // a value the alias does not accept (`expected`)
  };
  Kind kind = Kind::kUnmapped;
  std::string alias;     // the Lightning/Hydra key, `+`/`++` removed
  std::string key;       // dbh's key ("" when the alias has none)
  std::string value;     // kMapped: dbh's value as a YAML flow scalar
  std::string expected;  // the values the alias accepts, in words
  std::string reason;    // why it is satisfied or unmapped; a note when mapped
};

/// One row of the alias table, for documentation.
struct AliasDoc {
  std::string alias;    // "trainer.precision"
  std::string dbh_key;  // "train.precision"; "" when there is none
  std::string values;   // "32, 32-true → fp32; 16, 16-mixed → fp16; …"
};
const std::vector<AliasDoc>& alias_docs();

/// The first Lightning/Hydra key the table maps to dbh's `dbh_key`
/// ("dataloaders.train_dataloader.batch_size" for data.batch_size), or "".
/// An external worker receives dbh's keys under these names.
std::string first_alias_of(const std::string& dbh_key);

/// The dbh keys an external worker always receives as `key=value` (what
/// dbh's commands change between trials: batch, accumulation, precision,
/// learning rate, seed, last step, dataset, device, loader workers), in the
/// order they are passed (docs/worker-protocol.md, "Passed keys").
const std::vector<std::string>& worker_passed_keys();

/// `key` without Hydra's `+` or `++` prefix.
std::string hydra_key(const std::string& key);

/// Translates the Lightning/Hydra `key=value` (`value` as written; one pair of
/// quotes is removed, as Hydra does). nullopt when `key` is not a
/// Lightning/Hydra key (a dbh key, left alone). Keys under Lightning-only
/// roots (trainer., dataloaders., callbacks., logger., paths.) that the table
/// does not know are kUnmapped.
std::optional<AliasTranslation> translate_alias(const std::string& key, const std::string& value);

/// The override parser's translation step: a Lightning/Hydra override becomes
/// dbh's `key=value`; one dbh already satisfies becomes nullopt; any other
/// override is returned unchanged. Throws ScenarioError naming the override,
/// the alias and the expected values when the alias cannot be mapped.
std::optional<std::string> translate_override(const std::string& override_text);

/// The message for an alias that cannot be mapped: "<alias> (Lightning; dbh's
/// <key>): expected …, got "…" (reason)".
std::string describe_unmappable(const AliasTranslation& t, const std::string& value);

}  // namespace dbh::harness::scenario
