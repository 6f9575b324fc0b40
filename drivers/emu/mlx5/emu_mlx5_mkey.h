/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The device's mkey table: what a ConnectX keeps per memory key, and the one door to it.
 *
 *   index (24 bits) --> directory[index >> 10] --> chunk of 1024 slots (made on first use,
 *                       freed with the table) --> Slot { lock word, live, MkeyEntry { mkc (64
 *                       raw PRM bytes), pg_access, translations (raw MTT or KLM entries,
 *                       capacity = mkc translations_octword_size) } }
 *
 * Index 0 is never handed out (so that a zeroed key is never valid). The entry keeps the mkc
 * bytes exactly as the device would hold them in its memory; fields are read through the PRM
 * layout table.
 *
 * Concurrency: one reader/writer spin lock per slot, no lock over the table. Finding a slot is
 * two acquire loads (the directory never shrinks while the table lives). Readers (the data
 * path's access checks, QUERY_MKEY) hold the slots they use shared; writers (UMR, LOCAL_INVAL,
 * CREATE/DESTROY_MKEY) hold one slot exclusive. So accesses and UMRs on different mkeys never
 * wait for each other, and a reader sees an entry whole, never half an update.
 *   - A WQE's access checks take their keys through a Hold: every slot it finds stays held
 *     (shared) until the Hold ends, so validate() and the copy after it see the same keys (a UMR
 *     of one of them waits for the WQE; an access that starts after the UMR's CQE sees it).
 *   - Readers wait only while a writer holds the slot, never for a waiting writer; a writer
 *     waits for the readers to leave and holds no other slot meanwhile. A reader may hold many
 *     slots in any order: with no reader ever waiting on a waiting writer, and no writer
 *     waiting while holding, no cycle can form.
 *   - Lock word: bit 31 = writer, bits 0..30 = readers. Reader: CAS count + 1 while bit 31 is
 *     clear (acquire), fetch_sub (release). Writer: CAS 0 -> bit 31 (acquire), store 0
 *     (release). Waiters spin, then yield (only under contention: the uncontended paths are one
 *     atomic read-modify-write each and no system call).
 * create/destroy/clear also take a mutex that serialises them (index search, live count).
 */
#ifndef NICMR_EMU_MLX5_MKEY_H
#define NICMR_EMU_MLX5_MKEY_H

#include <sys/mman.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

namespace nicmr::emu {

/*
 * nicmr extension state of an mkey (prm::mkey_ext; doc/device-model.md, "Extensions"). Not a
 * ConnectX feature. flags and counter_iova change only with the slot held exclusive; spent is
 * the one field a reader (a WQE holding the slot shared) writes: the single-use claim, an
 * exchange that exactly one of racing accesses wins.
 */
struct MkeyExt {
	uint32_t flags = 0;	   /* prm::mkey_ext::settable bits */
	uint64_t counter_iova = 0; /* with mkey_ext::counter */
	/* A copyable atomic: entries are moved into and out of the table under its locks. */
	struct Spent {
		std::atomic<uint8_t> v{0};
		Spent() = default;
		/* Relaxed: copies happen with the slot held exclusive or the entry private. */
		Spent(const Spent &o) noexcept : v(o.v.load(std::memory_order_relaxed)) {}
		Spent &operator=(const Spent &o) noexcept
		{
			v.store(o.v.load(std::memory_order_relaxed), std::memory_order_relaxed);
			return *this;
		}
	};
	mutable Spent spent;

	void clear() noexcept
	{
		flags = 0;
		counter_iova = 0;
		spent.v.store(0, std::memory_order_relaxed); /* slot held exclusive */
	}
};

/*
 * The allocator of an mkey's translation table: tables of 64 KiB and more are anonymous memory
 * (zero pages until written) and elements are default-initialised, so that resize() of a large
 * table touches nothing. A ConnectX's firmware reserves MTT memory for an mkey without writing
 * every entry; an on-demand-paging mkey of 256 MiB (65536 entries, none present) is then made in
 * the same time as one of 4 KiB (doc/odp.md). Smaller tables come from calloc. Elements that
 * resize() adds within the capacity after a shrink keep their old bytes: tables are sized once.
 */
template <class T> struct LazyZeroAlloc {
	using value_type = T;
	static constexpr size_t kMmapBytes = size_t{64} << 10;
	LazyZeroAlloc() noexcept = default;
	template <class U> LazyZeroAlloc(const LazyZeroAlloc<U> &) noexcept {}
	T *allocate(size_t n)
	{
		const size_t bytes = n * sizeof(T);
		void *p = nullptr;
		if (bytes >= kMmapBytes) {
			p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (p == MAP_FAILED)
				throw std::bad_alloc();
		} else {
			p = std::calloc(n, sizeof(T));
			if (p == nullptr)
				throw std::bad_alloc();
		}
		return static_cast<T *>(p);
	}
	void deallocate(T *p, size_t n) noexcept
	{
		if (n * sizeof(T) >= kMmapBytes)
			munmap(p, n * sizeof(T));
		else
			std::free(p);
	}
	/* Default-initialisation: the memory is zero already. */
	template <class U> void construct(U *p) noexcept { ::new (static_cast<void *>(p)) U; }
	template <class U, class... A> void construct(U *p, A &&...a)
	{
		::new (static_cast<void *>(p)) U(std::forward<A>(a)...);
	}
	template <class U> bool operator==(const LazyZeroAlloc<U> &) const noexcept { return true; }
};

struct MkeyEntry {
	std::array<uint8_t, 64> mkc{}; /* mlx5_prm.h mkc layout, big-endian */
	bool pg_access = false;
	uint32_t access_mode = 0; /* prm::access_mode value */
	/* translations_octword_size * 16 bytes, zero when made (resize) */
	std::vector<uint8_t, LazyZeroAlloc<uint8_t>> translations;
	/* The PD given at CREATE_MKEY: the one DEALLOC_PD accounting charges (a UMR may point
	 * the mkc's pd elsewhere later without the command path's lock). */
	uint32_t owner_pd = 0;
	MkeyExt ext; /* nicmr extensions; cleared by a UMR bind or revoke */
};

class MkeyTable {
	struct Slot;

public:
	/* Indices 1 .. 2^log_size - 1. */
	explicit MkeyTable(uint32_t log_size);
	~MkeyTable();
	MkeyTable(const MkeyTable &) = delete;
	MkeyTable &operator=(const MkeyTable &) = delete;

	uint32_t capacity() const noexcept { return capacity_; }
	size_t live() const noexcept { return live_.load(std::memory_order_relaxed); }

	/*
	 * Stores e at index want (1 .. capacity - 1), or at a free index of the table's choosing
	 * when want is 0 (not sequential: emu_mlx5_mkey.cpp, create). Errors: -ERANGE (want out of
	 * range), -EBUSY (want is live), -ENOSPC (no free index), -ENOMEM (no memory for the
	 * index's chunk).
	 */
	int create(uint32_t want, MkeyEntry &&e, uint32_t *index);
	/* Removes index and hands its entry back in *old (if not null). -ERANGE, -ENOENT. */
	int destroy(uint32_t index, MkeyEntry *old);
	/* Removes every entry (TEARDOWN_HCA). */
	void clear();

	/* Runs f(const MkeyEntry &) with the slot held shared. -ERANGE, -ENOENT. Never call back
	 * into the table from f. */
	template <class F> int with(uint32_t index, F &&f) const
	{
		if (index == 0 || index >= capacity_)
			return -ERANGE;
		Slot *s = slot(index);
		if (s == nullptr)
			return -ENOENT;
		lock_shared(*s);
		const bool live = s->live;
		if (live)
			f(static_cast<const MkeyEntry &>(s->e));
		unlock_shared(*s);
		return live ? 0 : -ENOENT;
	}
	/* Runs f(MkeyEntry *) with the slot held exclusive (nullptr when index has no entry);
	 * UMR and LOCAL_INVAL change a key this way, atomically for every reader. */
	template <class F> auto update(uint32_t index, F &&f)
	{
		Slot *s = index == 0 || index >= capacity_ ? nullptr : slot(index);
		if (s == nullptr)
			return f(static_cast<MkeyEntry *>(nullptr));
		lock_exclusive(*s);
		/* Released on every way out of f, exceptions included. */
		struct Unlock {
			Slot &s;
			~Unlock() { unlock_exclusive(s); }
		} u{*s};
		return f(s->live ? &s->e : nullptr);
	}
	/* Runs f(index, const MkeyEntry &) for every live entry, each with its slot held shared
	 * (a snapshot per entry, not of the whole table). */
	template <class F> void for_each(F &&f) const
	{
		for (uint32_t c = 0; c < chunks_; c++) {
			Slot *chunk = dir_[c].load(std::memory_order_acquire);
			for (uint32_t i = 0; chunk != nullptr && i < kChunk; i++) {
				Slot &s = chunk[i];
				lock_shared(s);
				if (s.live)
					f(c * kChunk + i, static_cast<const MkeyEntry &>(s.e));
				unlock_shared(s);
			}
		}
	}

	/*
	 * The keys one WQE uses: find() holds each slot shared until the Hold ends. Device hot
	 * path: no allocation while the keys fit kInline plus the spill vector's capacity (the
	 * caller keeps that vector across WQEs, so it grows once to the largest key set).
	 */
	class Hold {
	public:
		static constexpr size_t kInline = 8;
		Hold(const MkeyTable &t, std::vector<const void *> &spill) noexcept
		    : t_(t), spill_(spill)
		{
			spill_.clear();
		}
		~Hold();
		Hold(const Hold &) = delete;
		Hold &operator=(const Hold &) = delete;
		/* The live entry at index, held until the Hold ends; nullptr when there is none. */
		const MkeyEntry *find(uint32_t index);

	private:
		const MkeyTable &t_;
		std::vector<const void *> &spill_;
		Slot *held_[kInline] = {};
		size_t n_ = 0;
	};

private:
	static constexpr uint32_t kChunkShift = 10;
	static constexpr uint32_t kChunk = uint32_t{1} << kChunkShift;
	static constexpr uint32_t kWriter = uint32_t{1} << 31;
	/* A cache line of its own (or two): the keys of different threads never share one. */
	struct alignas(64) Slot {
		std::atomic<uint32_t> lock{0}; /* bit 31 writer, bits 0..30 readers */
		bool live = false;	       /* guarded by lock */
		MkeyEntry e;		       /* guarded by lock */
	};

	/* The slot of index when its chunk exists (index in range). */
	Slot *slot(uint32_t index) const noexcept
	{
		/* Acquire pairs with the release store that published the chunk. */
		Slot *chunk = dir_[index >> kChunkShift].load(std::memory_order_acquire);
		return chunk == nullptr ? nullptr : &chunk[index & (kChunk - 1)];
	}
	/* With mu_ held: the slot of index, making its chunk if needed (nullptr: no memory). */
	Slot *slot_or_make(uint32_t index);
	static void lock_shared(Slot &s) noexcept;
	static void unlock_shared(Slot &s) noexcept;
	static void lock_exclusive(Slot &s) noexcept;
	static void unlock_exclusive(Slot &s) noexcept;

	const uint32_t capacity_;
	const uint32_t chunks_;
	std::unique_ptr<std::atomic<Slot *>[]> dir_;
	std::mutex mu_;		      /* serialises create, destroy and clear */
	std::atomic<size_t> live_{0}; /* written under mu_; relaxed reads are statistics */
	uint32_t next_ = 0;	      /* the position the search for a free index starts at; mu_ */
	/* The index create(0) hands out at position p: p with its low 3 bits reversed. */
	static constexpr uint32_t index_at(uint32_t p) noexcept
	{
		return (p & ~7u) | (p & 1) << 2 | (p & 2) | (p & 4) >> 2;
	}
};

} // namespace nicmr::emu

#endif
