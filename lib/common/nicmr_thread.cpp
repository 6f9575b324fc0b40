/* SPDX-License-Identifier: BSD-3-Clause */
#include "nicmr_thread.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <mutex>
#include <new>
#include <vector>

namespace nicmr {

namespace {

static_assert(kSharedSlot < 64 && kThreadSlots - 1 == kSharedSlot);
static_assert(SlotClaim::kSlotMask >= kThreadSlots - 1);

/* Bit i: slot i has an owner (bits below kSharedSlot only). */
std::atomic<uint64_t> g_owned{0};

/* The watchers of each own slot. Never destroyed: threads (the main one included) may exit
 * after static destructors have run. */
struct Registry {
	std::mutex mu;
	std::vector<SlotUser *> watchers[kSharedSlot]; /* mu */
};
Registry &registry()
{
	static Registry *r = new Registry;
	return *r;
}

long membarrier(int cmd)
{
	return syscall(__NR_membarrier, cmd, 0U, 0);
}

/* Runs the slot's watchers and gives the slot back when its thread exits: the next claimant's
 * acquire sees every store this thread made to it. */
struct SlotRelease {
	uintptr_t *claim = nullptr;
	~SlotRelease()
	{
		if (claim == nullptr)
			return;
		const SlotClaim c{*claim};
		if (c.own()) {
			Registry &r = registry();
			std::lock_guard lk(r.mu);
			for (SlotUser *u : r.watchers[c.slot()])
				u->slot_exit(c.slot());
			r.watchers[c.slot()].clear();
		}
		/* What this thread does after here (other thread-locals' destructors) goes
		 * through the shared slot. */
		*claim = kSharedSlot;
		if (c.own())
			g_owned.fetch_and(~(uint64_t{1} << c.slot()), std::memory_order_release);
	}
};

} // namespace

uint64_t thread_slots_owned() noexcept
{
	return g_owned.load(std::memory_order_seq_cst);
}

bool membarrier_ready() noexcept
{
	/* Once per process: the registration must precede every expedited call. */
	static const bool ready = [] {
		const long cmds = membarrier(MEMBARRIER_CMD_QUERY);
		return cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0 &&
		       membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
	}();
	return ready;
}

void membarrier_all() noexcept
{
	/* Registered when ready, so the call cannot fail. */
	if (membarrier_ready())
		membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED);
}

void detail::claim_thread_slot(uintptr_t *claim) noexcept
{
	uintptr_t word = kSharedSlot;
	uint64_t owned = g_owned.load(std::memory_order_relaxed);
	for (;;) {
		const uint64_t free = ~owned & ((uint64_t{1} << kSharedSlot) - 1);
		if (free == 0)
			break; /* every slot has an owner: share the last */
		const auto bit = static_cast<unsigned>(__builtin_ctzll(free));
		/* Acquire: the slot's last owner's stores (its release at exit). seq_cst: the
		 * order thread_slots_owned() promises its scanning writers. */
		if (g_owned.compare_exchange_weak(owned, owned | (uint64_t{1} << bit),
						  std::memory_order_seq_cst,
						  std::memory_order_relaxed)) {
			word = bit | SlotClaim::kOwn |
			       (membarrier_ready() ? SlotClaim::kFenceFree : 0);
			break;
		}
	}
	*claim = word;
	thread_local SlotRelease release;
	release.claim = claim;
}

int watch_thread_exit(SlotUser *user) noexcept
{
	const SlotClaim c = thread_claim();
	if (user == nullptr || !c.own())
		return -EINVAL;
	Registry &r = registry();
	std::lock_guard lk(r.mu);
	std::vector<SlotUser *> &w = r.watchers[c.slot()];
	if (std::find(w.begin(), w.end(), user) != w.end())
		return 0;
	try {
		w.push_back(user);
	} catch (const std::bad_alloc &) {
		return -ENOMEM;
	}
	return 0;
}

void unwatch_thread_exits(SlotUser *user) noexcept
{
	Registry &r = registry();
	std::lock_guard lk(r.mu);
	for (std::vector<SlotUser *> &w : r.watchers)
		std::erase(w, user);
}

} // namespace nicmr
