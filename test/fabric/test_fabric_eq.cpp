/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Event queues through the installed libfabric (fi_eq(3)): events the application writes
 * (FI_WRITE) read back in order and whole, FI_PEEK, a buffer too small, a full queue, the wait
 * objects (FI_WAIT_UNSPEC, FI_WAIT_FD with fi_control(FI_GETWAIT) and fi_trywait,
 * FI_WAIT_YIELD) woken by a writer on another thread, and every refusal with its code.
 */
#include <poll.h>

#include <rdma/fi_eq.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "test_fabric_util.h"

namespace nicmr::test {
namespace {

class EventQueue : public FabricFixture {
protected:
	/* Opens eq_ with these attributes; returns fi_eq_open's code. */
	int open_eq(uint64_t flags, enum fi_wait_obj wait, size_t size = 0)
	{
		fi_eq_attr attr{};
		attr.flags = flags;
		attr.wait_obj = wait;
		attr.size = size;
		return fi_eq_open(fabric_.get(), &attr, eq_.out(), nullptr);
	}
	static fi_eq_entry entry(uintptr_t ctx, uint64_t data)
	{
		fi_eq_entry e{};
		e.context = reinterpret_cast<void *>(ctx);
		e.data = data;
		return e;
	}
	/* Writes one event from another thread after ms milliseconds, then joins in TearDown. */
	void write_later(int ms, uint32_t event, uint64_t data)
	{
		writer_ = std::thread([this, ms, event, data] {
			std::this_thread::sleep_for(std::chrono::milliseconds(ms));
			fi_eq_entry e = entry(1, data);
			EXPECT_EQ(fi_eq_write(eq_.get(), event, &e, sizeof(e), 0),
				  ssize_t(sizeof(e)));
		});
	}
	void TearDown() override
	{
		if (writer_.joinable())
			writer_.join();
		eq_.reset();
		FabricFixture::TearDown();
	}
	Fid<fid_eq> eq_;
	std::thread writer_;
};

TEST_F(EventQueue, WrittenEventsAreReadInOrderAndWhole)
{
	ASSERT_EQ(open_eq(FI_WRITE, FI_WAIT_UNSPEC), 0);
	fi_eq_entry a = entry(0x10, 7), b = entry(0x20, 9);
	EXPECT_EQ(fi_eq_write(eq_.get(), FI_NOTIFY, &a, sizeof(a), 0), ssize_t(sizeof(a)));
	EXPECT_EQ(fi_eq_write(eq_.get(), FI_MR_COMPLETE, &b, sizeof(b), 0), ssize_t(sizeof(b)));
	const char note[] = "a short event";
	EXPECT_EQ(fi_eq_write(eq_.get(), FI_AV_COMPLETE, note, sizeof(note), 0),
		  ssize_t(sizeof(note)));

	uint32_t ev = 0;
	fi_eq_entry got{};
	/* A buffer too small for the front event: it stays. */
	EXPECT_EQ(fi_eq_read(eq_.get(), &ev, &got, sizeof(got) - 1, 0), -FI_ETOOSMALL);
	EXPECT_EQ(fi_eq_read(eq_.get(), &ev, &got, sizeof(got), FI_PEEK), ssize_t(sizeof(got)));
	EXPECT_EQ(ev, uint32_t(FI_NOTIFY));
	ev = 0;
	got = {};
	EXPECT_EQ(fi_eq_read(eq_.get(), &ev, &got, sizeof(got), 0), ssize_t(sizeof(got)));
	EXPECT_EQ(ev, uint32_t(FI_NOTIFY));
	EXPECT_EQ(std::memcmp(&got, &a, sizeof(a)), 0);
	EXPECT_EQ(fi_eq_read(eq_.get(), &ev, &got, sizeof(got), 0), ssize_t(sizeof(got)));
	EXPECT_EQ(ev, uint32_t(FI_MR_COMPLETE));
	EXPECT_EQ(std::memcmp(&got, &b, sizeof(b)), 0);
	char buf[64] = {};
	EXPECT_EQ(fi_eq_read(eq_.get(), &ev, buf, sizeof(buf), 0), ssize_t(sizeof(note)));
	EXPECT_EQ(ev, uint32_t(FI_AV_COMPLETE));
	EXPECT_STREQ(buf, note);
	EXPECT_EQ(fi_eq_read(eq_.get(), &ev, buf, sizeof(buf), 0), -FI_EAGAIN);
	fi_eq_err_entry err{};
	EXPECT_EQ(fi_eq_readerr(eq_.get(), &err, 0), -FI_EAGAIN) << "written events are no errors";
}

TEST_F(EventQueue, AFullQueueRefusesTheWriteUntilARead)
{
	ASSERT_EQ(open_eq(FI_WRITE, FI_WAIT_NONE, 2), 0);
	fi_eq_entry e = entry(1, 1);
	EXPECT_EQ(fi_eq_write(eq_.get(), FI_NOTIFY, &e, sizeof(e), 0), ssize_t(sizeof(e)));
	EXPECT_EQ(fi_eq_write(eq_.get(), FI_NOTIFY, &e, sizeof(e), 0), ssize_t(sizeof(e)));
	EXPECT_EQ(fi_eq_write(eq_.get(), FI_NOTIFY, &e, sizeof(e), 0), -FI_EAGAIN);
	uint32_t ev = 0;
	EXPECT_EQ(fi_eq_read(eq_.get(), &ev, &e, sizeof(e), 0), ssize_t(sizeof(e)));
	EXPECT_EQ(fi_eq_write(eq_.get(), FI_NOTIFY, &e, sizeof(e), 0), ssize_t(sizeof(e)));
}

TEST_F(EventQueue, BadWritesReadsAndOpensHaveTheirCodes)
{
	{
		fi_eq_attr attr{};
		attr.size = 65537;
		Fid<fid_eq> eq;
		EXPECT_EQ(fi_eq_open(fabric_.get(), &attr, eq.out(), nullptr), -FI_EINVAL);
		attr.size = 0;
		attr.flags = FI_READ;
		EXPECT_EQ(fi_eq_open(fabric_.get(), &attr, eq.out(), nullptr), -FI_EBADFLAGS);
		attr.flags = 0;
		for (fi_wait_obj w : {FI_WAIT_SET, FI_WAIT_MUTEX_COND}) {
			attr.wait_obj = w;
			EXPECT_EQ(fi_eq_open(fabric_.get(), &attr, eq.out(), nullptr), -FI_ENOSYS)
				<< w;
		}
		/* FI_AFFINITY is a hint and is taken. */
		attr.wait_obj = FI_WAIT_NONE;
		attr.flags = FI_AFFINITY;
		attr.signaling_vector = 1;
		EXPECT_EQ(fi_eq_open(fabric_.get(), &attr, eq.out(), nullptr), 0);
	}
	ASSERT_EQ(open_eq(0, FI_WAIT_UNSPEC), 0);
	fi_eq_entry e = entry(1, 1);
	EXPECT_EQ(fi_eq_write(eq_.get(), FI_NOTIFY, &e, sizeof(e), 0), -FI_EINVAL)
		<< "an EQ without FI_WRITE";
	uint32_t ev = 0;
	EXPECT_EQ(fi_eq_sread(eq_.get(), &ev, &e, sizeof(e), -1, 0), -FI_EINVAL)
		<< "forever, on an EQ nobody can write";
	eq_.reset();

	ASSERT_EQ(open_eq(FI_WRITE, FI_WAIT_NONE), 0);
	EXPECT_EQ(fi_eq_write(eq_.get(), FI_NOTIFY, nullptr, sizeof(e), 0), -FI_EINVAL);
	static char big[4097];
	EXPECT_EQ(fi_eq_write(eq_.get(), FI_NOTIFY, big, sizeof(big), 0), -FI_EINVAL);
	EXPECT_EQ(fi_eq_write(eq_.get(), FI_NOTIFY, big, sizeof(big) - 1, 0), 4096);
	EXPECT_EQ(fi_eq_write(eq_.get(), FI_NOTIFY, &e, sizeof(e), FI_PEEK), -FI_EBADFLAGS);
	EXPECT_EQ(fi_eq_read(eq_.get(), &ev, &e, sizeof(e), FI_COMPLETION), -FI_EBADFLAGS);
	EXPECT_EQ(fi_eq_read(eq_.get(), nullptr, &e, sizeof(e), 0), -FI_EINVAL);
	EXPECT_EQ(fi_eq_sread(eq_.get(), &ev, big, sizeof(big), 10, 0), -FI_EINVAL)
		<< "fi_eq(3): no fi_eq_sread with FI_WAIT_NONE";
	int fd = -1;
	EXPECT_EQ(fi_control(&eq_->fid, FI_GETWAIT, &fd), -FI_ENODATA);
	EXPECT_EQ(fi_control(&eq_->fid, FI_GETOPSFLAG, &fd), -FI_ENOSYS);
}

TEST_F(EventQueue, SreadWaitsForAWriterOnAnotherThread)
{
	ASSERT_EQ(open_eq(FI_WRITE, FI_WAIT_UNSPEC), 0);
	uint32_t ev = 0;
	fi_eq_entry got{};
	EXPECT_EQ(fi_eq_sread(eq_.get(), &ev, &got, sizeof(got), 10, 0), -FI_EAGAIN);
	write_later(20, FI_NOTIFY, 42);
	EXPECT_EQ(fi_eq_sread(eq_.get(), &ev, &got, sizeof(got), -1, 0), ssize_t(sizeof(got)));
	EXPECT_EQ(ev, uint32_t(FI_NOTIFY));
	EXPECT_EQ(got.data, 42u);
}

TEST_F(EventQueue, YieldWaitTakesAWriterOnAnotherThread)
{
	ASSERT_EQ(open_eq(FI_WRITE, FI_WAIT_YIELD), 0);
	write_later(20, FI_NOTIFY, 5);
	uint32_t ev = 0;
	fi_eq_entry got{};
	EXPECT_EQ(fi_eq_sread(eq_.get(), &ev, &got, sizeof(got), 5000, 0), ssize_t(sizeof(got)));
	EXPECT_EQ(got.data, 5u);
}

TEST_F(EventQueue, AnFdWaitObjectIsReadableWhileAnEventIsQueued)
{
	ASSERT_EQ(open_eq(FI_WRITE, FI_WAIT_FD), 0);
	int fd = -1;
	ASSERT_EQ(fi_control(&eq_->fid, FI_GETWAIT, &fd), 0);
	ASSERT_GE(fd, 0);
	EXPECT_EQ(fi_control(&eq_->fid, FI_GETWAIT, nullptr), -FI_EINVAL);
	auto readable = [fd](int ms) {
		pollfd p{fd, POLLIN, 0};
		return ::poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
	};
	fid *fids[] = {&eq_->fid};
	EXPECT_FALSE(readable(0));
	EXPECT_EQ(fi_trywait(fabric_.get(), fids, 1), 0) << "nothing queued: safe to block";

	fi_eq_entry e = entry(3, 3);
	ASSERT_EQ(fi_eq_write(eq_.get(), FI_NOTIFY, &e, sizeof(e), 0), ssize_t(sizeof(e)));
	ASSERT_EQ(fi_eq_write(eq_.get(), FI_NOTIFY, &e, sizeof(e), 0), ssize_t(sizeof(e)));
	EXPECT_TRUE(readable(0));
	EXPECT_EQ(fi_trywait(fabric_.get(), fids, 1), -FI_EAGAIN);
	uint32_t ev = 0;
	EXPECT_EQ(fi_eq_read(eq_.get(), &ev, &e, sizeof(e), 0), ssize_t(sizeof(e)));
	EXPECT_TRUE(readable(0)) << "one event is still queued";
	EXPECT_EQ(fi_eq_read(eq_.get(), &ev, &e, sizeof(e), 0), ssize_t(sizeof(e)));
	EXPECT_FALSE(readable(0));
	EXPECT_EQ(fi_trywait(fabric_.get(), fids, 1), 0);

	/* A writer on another thread wakes both a poll on the fd and fi_eq_sread. */
	write_later(20, FI_NOTIFY, 8);
	EXPECT_TRUE(readable(5000));
	writer_.join();
	write_later(20, FI_NOTIFY, 9);
	fi_eq_entry got{};
	EXPECT_EQ(fi_eq_sread(eq_.get(), &ev, &got, sizeof(got), 5000, 0), ssize_t(sizeof(got)));
	EXPECT_EQ(got.data, 8u);
	writer_.join();
	EXPECT_EQ(fi_eq_sread(eq_.get(), &ev, &got, sizeof(got), 5000, 0), ssize_t(sizeof(got)));
	EXPECT_EQ(got.data, 9u);
	EXPECT_FALSE(readable(0));

	/* fi_trywait knows only EQs with an fd. */
	Fid<fid_eq> other;
	fi_eq_attr attr{};
	attr.wait_obj = FI_WAIT_UNSPEC;
	ASSERT_EQ(fi_eq_open(fabric_.get(), &attr, other.out(), nullptr), 0);
	fid *mixed[] = {&eq_->fid, &other->fid};
	EXPECT_EQ(fi_trywait(fabric_.get(), mixed, 2), -FI_EINVAL);
}

} // namespace
} // namespace nicmr::test
