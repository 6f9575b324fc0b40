/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The device model's command trace: an opt-in recorder of every command the model executes
 * (and of every UMR work request, the end of bring-up's story), for the bring-up transcript
 * test and for reading what a driver sent.
 *
 *   execute_locked(in, out) --status--> decode_command(in, out, status) --> TraceEntry
 *   Exec::umr()             --CQE syn-> decode_umr(wqe, key, syndrome)   --> TraceEntry
 *                                                     |
 *                                  CmdTrace::record (first `capacity` entries kept)
 *                                                     |
 *          render(entry)          one line, every field: "CREATE_CQ op_mod=0 status=OK ..."
 *          transcript(entries)    one line per command, only the fields that say what the
 *                                 driver asked for (no addresses, object numbers as names
 *                                 such as eq1, cq1), runs of equal lines folded into "[xN]"
 *
 * Off by default (EmuConfig::trace_capacity = 0): the model then holds no recorder and the
 * data path pays one predictable branch per UMR. On, recording takes the recorder's mutex and
 * allocates nothing (the entries are reserved at creation); the decoder reads the command's
 * buffers through the layout table (drivers/common/mlx5/mlx5_prm.h) after the handler ran, so
 * it never changes what the model does. doc/device-model.md, "Command trace".
 */
#ifndef NICMR_EMU_MLX5_TRACE_H
#define NICMR_EMU_MLX5_TRACE_H

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace nicmr::emu {

/* How a field's value is written. */
enum class TraceKind : uint8_t {
	num,	  /* decimal (signed 32-bit for QUERY_PAGES num_pages) */
	hex,	  /* 0x-hex */
	cap_type, /* QUERY/SET_HCA_CAP capability type: general, atomic, roce, nicmr_ext or hex */
	cap_mode, /* max or cur */
	/* Object numbers: raw in render(), names in transcript() (eq1 = the first EQ the trace
	 * saw created, ?N = a number no command in the trace created). */
	eq,
	cq,
	qp,
	pd,
	uar,
	mkey, /* an mkey index or key: never in the transcript (which one is free varies) */
	addr, /* an address or IOVA: never in the transcript */
};

struct TraceField {
	const char *name = nullptr;
	uint64_t value = 0;
	TraceKind kind = TraceKind::num;
	bool transcript = true; /* part of the transcript line */
	bool defines = false;	/* the number of an object this command created */
};

struct TraceEntry {
	static constexpr size_t kMaxFields = 20;
	/* A command (opcode = PRM opcode) or a work request (opcode = WQE opcode, e.g. UMR). */
	enum class Source : uint8_t { command, wqe };
	Source source = Source::command;
	uint16_t opcode = 0;
	uint16_t op_mod = 0;
	uint8_t status = 0;    /* command status; for a WQE its CQE syndrome (0 = success) */
	uint32_t syndrome = 0; /* command syndrome (0 for a WQE) */
	uint8_t nfields = 0;
	std::array<TraceField, kMaxFields> fields{};

	/* Appends a field (quietly dropped beyond kMaxFields: the decoder stays under it). */
	void add(const char *name, uint64_t value, TraceKind kind = TraceKind::num,
		 bool transcript = true, bool defines = false) noexcept;
	/* The field of that name, or nullptr. */
	const TraceField *find(const char *name) const noexcept;
};

/* The command's name as the PRM spells it ("CREATE_MKEY"), "UMR" for the UMR WQE, or "OP_0x..."
 */
std::string trace_op_name(const TraceEntry &e);

/* One line with every field and the status: "QUERY_PAGES op_mod=1 status=OK function_id=0
 * num_pages=8". */
std::string render(const TraceEntry &e);

/*
 * The transcript of a sequence, one line per entry: name, op_mod, then the transcript fields
 * (objects named in creation order), then "status=NAME syndrome=0x..." when the status is not
 * OK (for a WQE: "cqe_syndrome=0x..." when not 0); a run of equal lines becomes one line ending
 * in " [xN]". This is the format of the bring-up reference (test/api/bringup-reference.txt).
 */
std::vector<std::string> transcript(const std::vector<TraceEntry> &entries);

/* The decoders (emu_mlx5_trace.cpp). in/out as execute() saw them; they read only within
 * in_len/out_len. */
TraceEntry decode_command(const uint8_t *in, size_t in_len, const uint8_t *out, size_t out_len,
			  uint8_t status, uint32_t syndrome);
/* A UMR WQE of len bytes (control segment first) posted on qpn for key, which completed with
 * CQE syndrome cqe_syndrome. */
TraceEntry decode_umr(const uint8_t *wqe, size_t len, uint32_t qpn, uint32_t key,
		      uint8_t cqe_syndrome);

/* The recorder. Thread-safe. */
class CmdTrace {
public:
	/* Keeps the first capacity entries (reserved now); later ones are counted as dropped. */
	explicit CmdTrace(size_t capacity);
	void record(const TraceEntry &e);
	std::vector<TraceEntry> entries() const;
	uint64_t dropped() const;
	void clear();

private:
	mutable std::mutex mu_;
	size_t capacity_;
	std::vector<TraceEntry> entries_; /* guarded by mu_ */
	uint64_t dropped_ = 0;		  /* guarded by mu_ */
};

} // namespace nicmr::emu

#endif
