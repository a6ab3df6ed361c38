#include "model/nn/hooks.h"

#include <atomic>

namespace dbh::model {
namespace {
std::atomic<ModuleObserver*> g_observer{nullptr};
}  // namespace

void set_module_observer(ModuleObserver* observer) { g_observer.store(observer); }
ModuleObserver* module_observer() { return g_observer.load(std::memory_order_relaxed); }

}  // namespace dbh::model
