/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Thread slots: the one per-thread registry of the process. Whatever a hot path keeps per thread
 * (the device model's counters and reader counts, a device's key caches, a key programmer's UMR
 * lanes) it keeps in an array indexed by the calling thread's slot, instead of each layer
 * keeping thread-locals of its own with its own rules for a thread's exit.
 *
 *   thread_claim()   this thread's claim, fixed at its first call: a slot of its own while one
 *                    of the first kSharedSlot slots is free (given back when the thread exits),
 *                    else the last slot, kSharedSlot, which such threads share
 *   thread_slot()    the claim's slot number
 *   SlotUser         state kept by slot (a cache, a lane) must go when the slot's thread exits,
 *                    since the slot is then another thread's: watch_thread_exit() asks for a
 *                    call of SlotUser::slot_exit on the exiting thread, before its slot is
 *                    given back; unwatch_thread_exits() ends the calls (the user goes away)
 *   membarrier_ready() / membarrier_all()
 *                    whether writers may fence the readers of the slots with membarrier(2)'s
 *                    private expedited command, and that fence
 *
 * A thread with a slot of its own changes what it keeps there with plain loads and stores (no
 * other thread writes it); a thread on the shared slot uses read-modify-writes, or keeps
 * nothing there. A reader that marks its slot with a plain store and a writer that must see
 * the mark pair up through membarrier_all(): it runs a full barrier on every CPU that runs one
 * of the process's threads, so a mark the writer's scan misses belongs to a reader not yet at
 * its load of the writer's flag, or not running (a context switch is a full barrier). That is
 * the argument of the device model's SlotRwLock (emu_slots.h) and of the API's pool lookups.
 *
 * thread_claim() is the hot path: one constant-initialised thread-local load, no lock, no
 * allocation, no system call once claimed. The first call claims (one compare-and-swap) and
 * registers the exit; watch/unwatch are slow paths (a process-wide mutex; watch allocates).
 */
#ifndef NICMR_THREAD_H
#define NICMR_THREAD_H

#include <cstddef>
#include <cstdint>

/*
 * The TLS model of the thread-locals a hot path reads (thread_claim's, the device model's
 * section count): initial-exec, an offset from the thread pointer fixed at load time. The
 * default model of position-independent code calls __tls_get_addr on every access, which cost
 * the provider's fi_mr_reg + fi_close pair about 20 ns (bench-mr's provider row against the
 * native one). libnicmr is loaded by dlopen too (libfabric loads the provider that links it):
 * glibc places initial-exec variables of such a library in the static TLS surplus it reserves
 * for them (the tunable glibc.rtld.optional_static_tls, 512 bytes by default), and these
 * take 12 bytes of it.
 */
#define NICMR_TLS_HOT __attribute__((tls_model("initial-exec")))

namespace nicmr {

/* Slots: kSharedSlot own ones, then the shared one. */
inline constexpr size_t kThreadSlots = 64;
inline constexpr size_t kSharedSlot = kThreadSlots - 1;

/* A thread's claim, in one word: the slot number and what the thread may do there. */
struct SlotClaim {
	static constexpr uintptr_t kSlotMask = 0xff;
	static constexpr uintptr_t kOwn = 0x100;       /* the slot is this thread's alone */
	static constexpr uintptr_t kFenceFree = 0x200; /* and writers fence with membarrier */
	static constexpr uintptr_t kUnset = ~uintptr_t{0};
	uintptr_t word;
	size_t slot() const noexcept { return word & kSlotMask; }
	bool own() const noexcept { return (word & kOwn) != 0; }
	bool fence_free() const noexcept { return (word & kFenceFree) != 0; }
};

namespace detail {
/* SLOW PATH: claims a slot for this thread, stores the claim in *claim and arranges for the
 * thread's exit to run its watchers and give the slot back (and set *claim to the shared
 * slot). */
void claim_thread_slot(uintptr_t *claim) noexcept;
} // namespace detail

/* This thread's claim. The thread-local is constant initialised (kUnset: none yet) and
 * initial-exec (NICMR_TLS_HOT), so an access is one load at the thread pointer, with no guard. */
inline SlotClaim thread_claim() noexcept
{
	NICMR_TLS_HOT thread_local uintptr_t claim = SlotClaim::kUnset;
	if (claim == SlotClaim::kUnset) [[unlikely]]
		detail::claim_thread_slot(&claim);
	return SlotClaim{claim};
}

inline size_t thread_slot() noexcept
{
	return thread_claim().slot();
}

/*
 * The slots that have an owner now: bit i for slot i (kSharedSlot's bit is never set; the shared
 * slot may have users at any time). A writer that publishes with a seq_cst store and then scans
 * per-slot reader marks may skip the slots outside this mask, taken (seq_cst) after its store:
 * a claim this load misses comes after it in the single total order of seq_cst operations (a
 * claim is a seq_cst read-modify-write), and so do that thread's seq_cst marks and loads, which
 * therefore see the publication. A slot given back had no mark left (a thread's sections end
 * before it does). Any thread; one load.
 */
uint64_t thread_slots_owned() noexcept;

/* Whether writers fence readers with membarrier: registered once per process. */
bool membarrier_ready() noexcept;
/* A full barrier on every CPU running one of the process's threads; nothing when
 * !membarrier_ready(), since then no reader is fence-free. */
void membarrier_all() noexcept;

/* Keeps state by thread slot and must drop a slot's when its thread exits. */
class SlotUser {
public:
	/* Runs on the exiting thread that owned slot, once per watch_thread_exit of that thread,
	 * before the slot can be another thread's; under the registry's mutex (so it must not
	 * call watch/unwatch). */
	virtual void slot_exit(size_t slot) noexcept = 0;

protected:
	~SlotUser() = default;
};

/*
 * SLOW PATH. When the calling thread exits, user->slot_exit(its slot) runs on it. Only a thread
 * with a slot of its own can be watched (the shared slot outlives its threads). Watching
 * twice is watching once.
 * Returns 0; -EINVAL (user null, or the thread is on the shared slot); -ENOMEM.
 */
int watch_thread_exit(SlotUser *user) noexcept;

/* SLOW PATH. No slot_exit of user runs after this returns (one in progress has finished).
 * Not from inside slot_exit. */
void unwatch_thread_exits(SlotUser *user) noexcept;

} // namespace nicmr

#endif
