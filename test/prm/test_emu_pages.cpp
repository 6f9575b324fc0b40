/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The device model's bring-up firmware behaviour (doc/device-model.md, "Bring-up" and
 * "Pages"), driven by raw commands: initializing waits for the queue address, checksums are
 * enforced after INIT_HCA until SET_HCA_CAP turns them off, ACCESS_REG HOST_ENDIANNESS, page
 * requests on the async EQ with commands held until the pages come on another slot, the EQ
 * overrun without a consumer index, and a health syndrome that stops the command interface.
 */
#include <gtest/gtest.h>

#include <thread>

#include "test_emu_dp_harness.h"

namespace nicmr::emu::test {
namespace {

using namespace std::chrono_literals;

uint32_t syn(Syndrome s)
{
	return static_cast<uint32_t>(s);
}

#define EXPECT_STATUS(reply, st, sy)                                                               \
	do {                                                                                       \
		Reply r_ = (reply);                                                                \
		EXPECT_EQ(r_.status(), st);                                                        \
		EXPECT_EQ(r_.syndrome(), syn(sy));                                                 \
	} while (0)

Cmd simple(uint16_t op, uint16_t op_mod = 0)
{
	return Cmd(op, 16, 16, op_mod);
}

uint32_t bar_field(bus::PciFunction &fn, prm::Field f)
{
	uint32_t raw = fn.bar0_read32(prm::dword_byte_offset(f));
	return static_cast<uint32_t>(prm::get(&raw, prm::in_dword(f)));
}

} // namespace

/* rdma-core writes the queue address before wait_fw_init: firmware leaves initializing set
 * until then. A driver that waits first (nicmr's old order) waits forever. */
TEST(EmuMlx5Boot, InitializingClearsOnlyOnceTheQueueAddressIsWritten)
{
	std::unique_ptr<EmuMlx5> e;
	ASSERT_EQ(emu_mlx5_create(EmuConfig{}, &e), 0);
	bus::PciFunction &fn = e->function();
	std::this_thread::sleep_for(20ms); /* the boot delay (0) long gone */
	EXPECT_EQ(bar_field(fn, prm::init_seg::initializing), 1u);
	EXPECT_FALSE(e->device().booted());
	/* A doorbell now is ignored, as while booting. */
	uint32_t bell = 0;
	prm::set(&bell, prm::in_dword(prm::init_seg::cmd_dbell), 1);
	fn.bar0_write32(prm::dword_byte_offset(prm::init_seg::cmd_dbell), bell);
	EXPECT_EQ(e->device().stats().dropped, 1u);

	uint32_t h = 0, l = 0;
	fn.bar0_write32(prm::dword_byte_offset(prm::init_seg::cmdq_addr_h), h);
	EXPECT_EQ(bar_field(fn, prm::init_seg::initializing), 1u) << "the high half is not enough";
	prm::set(&l, prm::in_dword(prm::init_seg::cmdq_addr_l), 0x1000);
	fn.bar0_write32(prm::dword_byte_offset(prm::init_seg::cmdq_addr_l), l);
	EXPECT_EQ(bar_field(fn, prm::init_seg::initializing), 0u);
	EXPECT_TRUE(e->device().booted());
}

TEST(EmuMlx5Boot, BootDelayStillCountsAfterTheAddress)
{
	EmuConfig cfg;
	cfg.boot_delay = 50ms;
	std::unique_ptr<EmuMlx5> e;
	ASSERT_EQ(emu_mlx5_create(cfg, &e), 0);
	bus::PciFunction &fn = e->function();
	uint32_t l = 0;
	prm::set(&l, prm::in_dword(prm::init_seg::cmdq_addr_l), 0x1000);
	fn.bar0_write32(prm::dword_byte_offset(prm::init_seg::cmdq_addr_l), l);
	EXPECT_EQ(bar_field(fn, prm::init_seg::initializing), 1u);
	const auto end = std::chrono::steady_clock::now() + 5s;
	while (bar_field(fn, prm::init_seg::initializing) != 0 &&
	       std::chrono::steady_clock::now() < end)
		std::this_thread::sleep_for(1ms);
	EXPECT_EQ(bar_field(fn, prm::init_seg::initializing), 0u);
}

/* Firmware bring-up by hand up to INIT_HCA, with or without the general SET_HCA_CAP. */
void bring_up_to_init(Harness &h, bool set_caps)
{
	ASSERT_EQ(h.enable_hca(), prm::status::ok);
	Cmd issi(prm::opcode::set_issi, prm::set_issi_in::size, 16);
	issi.set(prm::set_issi_in::current_issi, 1);
	ASSERT_EQ(h.run(issi).status(), prm::status::ok);
	const int32_t boot = h.query_pages(prm::query_pages_op_mod::boot);
	ASSERT_EQ(h.give_pages(boot, 0).status(), prm::status::ok);
	if (set_caps) {
		ASSERT_EQ(h.run(h.set_general_caps()).status(), prm::status::ok);
	}
	const int32_t init = h.query_pages(prm::query_pages_op_mod::init);
	ASSERT_EQ(h.give_pages(init, boot).status(), prm::status::ok);
	ASSERT_EQ(h.init_hca(), prm::status::ok);
}

/* rdma-core's and Linux's handle_hca_cap turn checksums off; a driver that does not (nicmr
 * before) has every unsigned entry refused once INIT_HCA took the caps. */
TEST(EmuMlx5Checksum, UnsignedEntriesAreRefusedAfterInitHcaWhileChecksumsAreOn)
{
	Harness h;
	ASSERT_EQ(h.rc(), 0);
	PostOpts unsigned_entry;
	unsigned_entry.signature = 0;
	/* Before INIT_HCA the caps are not in force: unsigned entries go through. */
	EXPECT_EQ(h.run(simple(prm::opcode::enable_hca), unsigned_entry).status(), prm::status::ok);
	ASSERT_EQ(h.run(simple(prm::opcode::disable_hca)).status(), prm::status::ok);
	bring_up_to_init(h, false);
	Reply r = h.post(simple(prm::opcode::alloc_pd), unsigned_entry);
	ASSERT_TRUE(r.completed);
	EXPECT_EQ(r.delivery, prm::delivery_status::signature_err);
	EXPECT_EQ(h.dev().pds_allocated(), 0u);
	EXPECT_EQ(h.dev().stats().delivery_errors, 1u);
}

TEST(EmuMlx5Checksum, SetHcaCapTurningThemOffLetsUnsignedEntriesThrough)
{
	Harness h;
	ASSERT_EQ(h.rc(), 0);
	bring_up_to_init(h, true);
	PostOpts unsigned_entry;
	unsigned_entry.signature = 0;
	const int32_t regular = h.query_pages(prm::query_pages_op_mod::regular);
	ASSERT_EQ(h.give_pages(regular, 100).status(), prm::status::ok);
	Reply r = h.post(simple(prm::opcode::alloc_pd), unsigned_entry);
	ASSERT_TRUE(r.completed);
	EXPECT_EQ(r.delivery, prm::delivery_status::ok);
	EXPECT_EQ(r.status(), prm::status::ok);
}

TEST(EmuMlx5AccessReg, HostEndiannessIsKeptOtherRegistersAreRefused)
{
	Harness h;
	ASSERT_EQ(h.rc(), 0);
	namespace m = prm::access_register_in;
	namespace he = prm::reg_host_endianness;
	auto reg = [](uint16_t op_mod, uint16_t id, uint8_t value) {
		Cmd c(prm::opcode::access_reg, m::size + he::size,
		      prm::access_register_out::size + he::size, op_mod);
		c.set(m::register_id, id);
		c.set_at(m::data_offset, he::he, value);
		return c;
	};
	/* Before ENABLE_HCA the function does not answer. */
	EXPECT_STATUS(
		h.run(reg(prm::access_register_op_mod::write, prm::reg_id::host_endianness, 0)),
		prm::status::bad_sys_state, Syndrome::hca_disabled);
	ASSERT_EQ(h.enable_hca(), prm::status::ok);
	EXPECT_EQ(h.dev().host_endianness(), -1);
	EXPECT_EQ(h.run(reg(prm::access_register_op_mod::write, prm::reg_id::host_endianness, 0x80))
			  .status(),
		  prm::status::ok);
	EXPECT_EQ(h.dev().host_endianness(), 0x80);
	Reply rd = h.run(reg(prm::access_register_op_mod::read, prm::reg_id::host_endianness, 0));
	ASSERT_EQ(rd.status(), prm::status::ok);
	EXPECT_EQ(rd.get_at(prm::access_register_out::data_offset, he::he), 0x80u);
	EXPECT_STATUS(h.run(reg(prm::access_register_op_mod::write, 0x5002, 0)),
		      prm::status::bad_param, Syndrome::reg_unsupported);
	EXPECT_STATUS(h.run(reg(2, prm::reg_id::host_endianness, 0)), prm::status::bad_param,
		      Syndrome::bad_op_mod);
	Cmd bare(prm::opcode::access_reg, m::size, prm::access_register_out::size,
		 prm::access_register_op_mod::write);
	bare.set(m::register_id, prm::reg_id::host_endianness);
	EXPECT_STATUS(h.run(bare), prm::status::bad_input_len, Syndrome::reg_data_short);
}

/* PMTU is read per port (Linux's mlx5_query_port_mtu): a port off the wire has the model's
 * largest, 9216 + 22; writes (setting a port's MTU) and ports the device has not are refused. */
TEST(EmuMlx5AccessReg, PmtuIsReadPerPortAndNotWritten)
{
	Harness h;
	ASSERT_EQ(h.rc(), 0);
	ASSERT_EQ(h.enable_hca(), prm::status::ok);
	namespace m = prm::access_register_in;
	namespace pm = prm::reg_pmtu;
	auto pmtu = [](uint16_t op_mod, uint32_t port, size_t data = pm::size,
		       size_t out_data = pm::size) {
		Cmd c(prm::opcode::access_reg, m::size + data,
		      prm::access_register_out::size + out_data, op_mod);
		c.set(m::register_id, prm::reg_id::pmtu);
		if (data >= pm::size)
			c.set_at(m::data_offset, pm::local_port, port);
		return c;
	};
	const size_t d = prm::access_register_out::data_offset;
	for (uint32_t port : {1u, 2u}) {
		Reply r = h.run(pmtu(prm::access_register_op_mod::read, port));
		ASSERT_EQ(r.status(), prm::status::ok) << port;
		EXPECT_EQ(r.get_at(d, pm::local_port), port);
		EXPECT_EQ(r.get_at(d, pm::max_mtu), 9216u + 22u);
		EXPECT_EQ(r.get_at(d, pm::admin_mtu), 9216u + 22u);
		EXPECT_EQ(r.get_at(d, pm::oper_mtu), 9216u + 22u);
	}
	EXPECT_STATUS(h.run(pmtu(prm::access_register_op_mod::read, 0)), prm::status::bad_param,
		      Syndrome::pmtu_port);
	EXPECT_STATUS(h.run(pmtu(prm::access_register_op_mod::read, 3)), prm::status::bad_param,
		      Syndrome::pmtu_port);
	EXPECT_STATUS(h.run(pmtu(prm::access_register_op_mod::write, 1)), prm::status::bad_param,
		      Syndrome::reg_unsupported);
	EXPECT_STATUS(h.run(pmtu(prm::access_register_op_mod::read, 1, 0)),
		      prm::status::bad_input_len, Syndrome::reg_data_short);
	EXPECT_STATUS(h.run(pmtu(prm::access_register_op_mod::read, 1, pm::size, 0)),
		      prm::status::bad_output_len, Syndrome::reg_data_short);
}

namespace {

/* A bed with an async EQ of 2^log_size entries for page requests on a UAR of its own. */
class PageBed {
public:
	explicit PageBed(EmuConfig cfg = {}, uint32_t log_size = 4) : b_(cfg)
	{
		if (!b_.ok())
			return;
		uar_ = b_.alloc_uar();
		log_ = log_size;
		for (size_t i = 0; i < (size_t{1} << log_size); i++)
			prm::set(b_.at(kEqOff + i * 64), prm::eqe::owner, 1);
		Cmd c(prm::opcode::create_eq, prm::create_eq_in::size + 8,
		      prm::create_eq_out::size);
		c.set_at(prm::create_eq_in::eqc_offset, prm::eqc::log_eq_size, log_size);
		c.set_at(prm::create_eq_in::eqc_offset, prm::eqc::uar_page, uar_);
		c.set(prm::create_eq_in::event_bitmask,
		      prm::event_bit(prm::event_type::page_request));
		c.set_at(prm::create_eq_in::pas_offset, prm::pas_entry, DpBed::iova(kEqOff));
		Reply r = b_.h().run(c);
		ok_ = r.status() == prm::status::ok;
		eqn_ = static_cast<uint32_t>(r.get(prm::create_eq_out::eq_number));
	}
	bool ok() const { return ok_; }
	Harness &h() { return b_.h(); }
	EmuMlx5Device &dev() { return b_.dev(); }

	/* The next PAGE_REQUEST: (function_id, num_pages). */
	std::optional<std::pair<uint16_t, int32_t>> next()
	{
		uint8_t *e = b_.at(kEqOff + (ci_ & ((1u << log_) - 1)) * 64);
		std::atomic_ref<uint8_t>(e[63]).load(std::memory_order_acquire);
		if (prm::get(e, prm::eqe::owner) != ((ci_ >> log_) & 1))
			return std::nullopt;
		ci_++;
		EXPECT_EQ(prm::get(e, prm::eqe::event_type), prm::event_type::page_request);
		return std::make_pair(
			static_cast<uint16_t>(prm::get(e, prm::eqe_page_req::function_id)),
			static_cast<int32_t>(
				static_cast<uint32_t>(prm::get(e, prm::eqe_page_req::num_pages))));
	}
	/* Writes the consumer index back (update-only doorbell, rdma-core's eq_update_ci). */
	void update_ci()
	{
		uint32_t db = 0;
		prm::set(&db, prm::eq_doorbell::eqn, eqn_);
		prm::set(&db, prm::eq_doorbell::consumer_index, ci_);
		h().fn().bar0_write32(prm::uar::page_offset(uar_) + prm::eq_doorbell::update_offset,
				      db);
	}
	/* MANAGE_PAGES give of n pages from page index first, on the page slot (31). */
	Reply give(uint32_t n, uint32_t first, uint16_t function_id)
	{
		Cmd c(prm::opcode::manage_pages, prm::manage_pages_in::pas_offset + 8 * size_t{n},
		      prm::manage_pages_out::size, prm::manage_pages_op_mod::give);
		c.set(prm::manage_pages_in::input_num_entries, n);
		c.set(prm::manage_pages_in::function_id, function_id);
		for (uint32_t i = 0; i < n; i++)
			c.set_at(prm::manage_pages_in::pas_offset + 8 * size_t{i}, prm::pas_entry,
				 kIova + kPagesOff + (first + i) * uint64_t{4096});
		PostOpts o;
		o.slot = 31;
		return h().run(c, o);
	}

private:
	DpBed b_;
	bool ok_ = false;
	uint32_t uar_ = 0, eqn_ = 0, log_ = 0, ci_ = 0;
};

} // namespace

/* Firmware that lacks pages holds the command (slot 0 stays device-owned) and asks on the
 * async EQ; the pages arrive on another slot and the held command completes. */
TEST(EmuMlx5PageRequest, CommandWaitsForPagesGivenOnAnotherSlot)
{
	EmuConfig cfg;
	cfg.page_function_id = 7;
	PageBed b(cfg);
	ASSERT_TRUE(b.ok());
	EXPECT_FALSE(b.next().has_value()) << "nothing missing yet";
	ASSERT_EQ(b.dev().request_pages(4), 0);
	auto req = b.next();
	ASSERT_TRUE(req.has_value());
	EXPECT_EQ(req->first, 7);
	EXPECT_EQ(req->second, 4);

	PostOpts o;
	o.wait = false;
	b.h().post(simple(prm::opcode::alloc_pd), o);
	std::this_thread::sleep_for(20ms);
	EXPECT_TRUE(b.h().owned_by_device(0)) << "held until the pages come";
	EXPECT_EQ(b.dev().stats().stalled, 1u);
	EXPECT_FALSE(b.next().has_value()) << "already asked: no second request";

	/* The pages must be for the function the request named. */
	EXPECT_STATUS(b.give(4, 200, 0), prm::status::bad_param, Syndrome::bad_function_id);
	EXPECT_TRUE(b.h().owned_by_device(0));
	ASSERT_EQ(b.give(4, 200, 7).status(), prm::status::ok);
	Reply pd = b.h().collect(0, 16, 5000ms);
	ASSERT_TRUE(pd.completed);
	EXPECT_EQ(pd.status(), prm::status::ok);
	EXPECT_NE(pd.get(prm::alloc_pd_out::pd), 0u);
	EXPECT_TRUE(b.dev().check_invariants());
}

/* Linux pagealloc.c answers a request it cannot meet with MANAGE_PAGES alloc_fail: the held
 * command then fails (NO_RESOURCES) instead of waiting forever. */
TEST(EmuMlx5PageRequest, CannotGiveFailsTheHeldCommand)
{
	PageBed b;
	ASSERT_TRUE(b.ok());
	ASSERT_EQ(b.dev().request_pages(2), 0);
	ASSERT_TRUE(b.next().has_value());
	PostOpts o;
	o.wait = false;
	b.h().post(simple(prm::opcode::alloc_pd), o);
	EXPECT_TRUE(b.h().owned_by_device(0));
	Cmd fail(prm::opcode::manage_pages, prm::manage_pages_in::size, prm::manage_pages_out::size,
		 prm::manage_pages_op_mod::alloc_fail);
	PostOpts p;
	p.slot = 31;
	ASSERT_EQ(b.h().run(fail, p).status(), prm::status::ok);
	Reply pd = b.h().collect(0, 16, 5000ms);
	ASSERT_TRUE(pd.completed);
	EXPECT_STATUS(pd, prm::status::no_resources, Syndrome::pages_refused);
	/* The next command asks again. */
	b.h().post(simple(prm::opcode::alloc_pd), o);
	auto again = b.next();
	ASSERT_TRUE(again.has_value());
	EXPECT_EQ(again->second, 2);
	ASSERT_EQ(b.give(2, 210, 0).status(), prm::status::ok);
	EXPECT_EQ(b.h().collect(0, 16, 5000ms).status(), prm::status::ok);
}

/* A negative request: firmware returns pages; MANAGE_PAGES take gives back that many. */
TEST(EmuMlx5PageRequest, NegativeRequestReturnsPagesOnTake)
{
	PageBed b;
	ASSERT_TRUE(b.ok());
	const size_t held = b.dev().pages_given();
	ASSERT_EQ(b.dev().request_pages(3), 0);
	ASSERT_TRUE(b.next().has_value());
	ASSERT_EQ(b.give(3, 220, 0).status(), prm::status::ok);
	/* regular_pages (16) + 3 asked: returning 20 is more than it wanted. */
	EXPECT_EQ(b.dev().request_pages(-20), -EINVAL);
	ASSERT_EQ(b.dev().request_pages(-3), 0);
	auto req = b.next();
	ASSERT_TRUE(req.has_value());
	EXPECT_EQ(req->second, -3);
	Cmd take(prm::opcode::manage_pages, 16, 16 + 3 * 8, prm::manage_pages_op_mod::take);
	take.set(prm::manage_pages_in::input_num_entries, 3);
	Reply r = b.h().run(take);
	ASSERT_EQ(r.status(), prm::status::ok);
	EXPECT_EQ(r.get(prm::manage_pages_out::output_num_entries), 3u);
	EXPECT_EQ(b.dev().pages_given(), held);
}

/* 2^log_size events without the consumer index written back: the async EQ overruns, a fatal
 * health syndrome (0xc) as rdma-core's hsynd_str names it, and commands stop. */
TEST(EmuMlx5PageRequest, AsyncEqOverrunsWithoutTheConsumerIndex)
{
	PageBed b({}, 2);
	ASSERT_TRUE(b.ok());
	for (int i = 0; i < 4; i++) {
		ASSERT_EQ(b.dev().request_pages(1), 0) << i;
		ASSERT_TRUE(b.next().has_value());
	}
	EXPECT_EQ(b.dev().request_pages(1), -EOVERFLOW);
	EXPECT_EQ(bar_field(b.h().fn(), prm::health::synd), prm::health_synd::async_eq_overrun_err);
	EXPECT_EQ(bar_field(b.h().fn(), prm::health::rfr), 1u);
	EXPECT_EQ(b.dev().data_path().stats().eq_overruns, 1u);
	PostOpts o;
	o.wait = false;
	b.h().post(simple(prm::opcode::query_issi), o);
	std::this_thread::sleep_for(10ms);
	EXPECT_TRUE(b.h().owned_by_device(0)) << "firmware in a fatal state completes nothing";
}

TEST(EmuMlx5PageRequest, ConsumerIndexWrittenBackKeepsTheEqAlive)
{
	PageBed b({}, 2);
	ASSERT_TRUE(b.ok());
	for (int i = 0; i < 12; i++) {
		ASSERT_EQ(b.dev().request_pages(1), 0) << i;
		ASSERT_TRUE(b.next().has_value());
		b.update_ci();
	}
	EXPECT_EQ(bar_field(b.h().fn(), prm::health::synd), 0u);
	EXPECT_EQ(b.dev().data_path().stats().eq_overruns, 0u);
}

TEST(EmuMlx5Health, RaisedSyndromeStopsTheCommandInterface)
{
	Harness h;
	ASSERT_EQ(h.rc(), 0);
	ASSERT_EQ(h.enable_hca(), prm::status::ok);
	h.dev().raise_health_syndrome(prm::health_synd::fw_err, 0x1234);
	EXPECT_EQ(bar_field(h.fn(), prm::health::synd), prm::health_synd::fw_err);
	EXPECT_EQ(bar_field(h.fn(), prm::health::ext_synd), 0x1234u);
	/* Read-only to the driver. */
	h.fn().bar0_write32(prm::dword_byte_offset(prm::health::synd), 0);
	EXPECT_EQ(bar_field(h.fn(), prm::health::synd), prm::health_synd::fw_err);
	const uint64_t dropped = h.dev().stats().dropped;
	PostOpts o;
	o.timeout = 20ms;
	EXPECT_FALSE(h.post(simple(prm::opcode::query_issi), o).completed);
	EXPECT_EQ(h.dev().stats().dropped, dropped + 1);
}

} // namespace nicmr::emu::test
