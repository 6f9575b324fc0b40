/* SPDX-License-Identifier: BSD-3-Clause */
#include "emu_slots.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace nicmr::emu::detail {

namespace {

static_assert(kSharedSlot < 32 && kThreadSlots - 1 == kSharedSlot);
static_assert(SlotClaim::kSlotMask >= kThreadSlots - 1);

/* Bit i: slot i has an owner (bits below kSharedSlot only). */
std::atomic<uint32_t> g_owned{0};

long membarrier(int cmd)
{
	return syscall(__NR_membarrier, cmd, 0U, 0);
}

/* Gives the slot back when its thread exits: the next claimant's acquire sees every store
 * this thread made to it. */
struct SlotRelease {
	uintptr_t *claim = nullptr;
	~SlotRelease()
	{
		if (claim == nullptr)
			return;
		const SlotClaim c{*claim};
		/* What this thread does after here (other thread-locals' destructors) goes
		 * through the shared slot. */
		*claim = kSharedSlot;
		if (c.own())
			g_owned.fetch_and(~(uint32_t{1} << c.slot()), std::memory_order_release);
	}
};

} // namespace

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

void claim_thread_slot(uintptr_t *claim) noexcept
{
	uintptr_t word = kSharedSlot;
	uint32_t owned = g_owned.load(std::memory_order_relaxed);
	for (;;) {
		const uint32_t free = ~owned & ((uint32_t{1} << kSharedSlot) - 1);
		if (free == 0)
			break; /* every slot has an owner: share the last */
		const auto bit = static_cast<unsigned>(__builtin_ctz(free));
		/* Acquire: the slot's last owner's stores (its release at exit). */
		if (g_owned.compare_exchange_weak(owned, owned | (uint32_t{1} << bit),
						  std::memory_order_acquire,
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

} // namespace nicmr::emu::detail
