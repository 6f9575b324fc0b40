/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The slow path's check of the FI_MR_ALLOCATED contract: memory outside every pool registers
 * only when every page is mapped with the access the device needs. This program runs twice: on
 * the kernel's MADV_POPULATE_* path and with NICMR_NO_MADV_POPULATE=1 (the path of kernels
 * before 5.14); both must give the same answers.
 */
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "test_api_util.h"

using namespace nicmr::test;

namespace {

class SlowPath : public ::testing::Test {
protected:
	void SetUp() override
	{
		ASSERT_EQ(nicmr_device_open(kSpec, &dev), 0);
		ASSERT_EQ(nicmr_pd_alloc(dev, &pd), 0);
	}
	void TearDown() override
	{
		EXPECT_EQ(nicmr_pd_free(pd), 0);
		EXPECT_EQ(nicmr_device_close(dev), 0);
	}
	nicmr_device *dev = nullptr;
	nicmr_pd *pd = nullptr;
};

/* A memfd of file_len bytes mapped over map_len bytes (shared, read and write). */
struct FileMap {
	FileMap(size_t file_len, size_t map_len, int prot) : len(map_len)
	{
		fd = memfd_create("nicmr-test", MFD_CLOEXEC);
		if (fd < 0 || ftruncate(fd, off_t(file_len)) != 0)
			return;
		void *m = mmap(nullptr, map_len, prot, MAP_SHARED, fd, 0);
		p = m == MAP_FAILED ? nullptr : static_cast<char *>(m);
	}
	~FileMap()
	{
		if (p)
			munmap(p, len);
		if (fd >= 0)
			close(fd);
	}
	FileMap(const FileMap &) = delete;
	FileMap &operator=(const FileMap &) = delete;
	int fd = -1;
	char *p = nullptr;
	size_t len;
};

} // namespace

bool populate_disabled()
{
	const char *v = std::getenv("NICMR_NO_MADV_POPULATE");
	return v != nullptr && std::strcmp(v, "1") == 0;
}

TEST_F(SlowPath, PagesPastTheEndOfTheirFileAreRefused)
{
	FileMap f(4096, 3 * 4096, PROT_READ | PROT_WRITE);
	ASSERT_NE(f.p, nullptr);
	/* Populating sees the SIGBUS an access would raise: -EFAULT. Without it (kernels before
	 * 5.14) the mapping looks fine and locking the pages fails: -ENOMEM. */
	const int want = populate_disabled() ? -ENOMEM : -EFAULT;
	const auto before = stats(dev);
	nicmr_mr *mr = nullptr;
	EXPECT_EQ(nicmr_mr_reg(pd, f.p, 3 * 4096, NICMR_ACCESS_SEND, 0, 0, &mr), want);
	EXPECT_EQ(nicmr_mr_reg(pd, f.p + 4096, 10, NICMR_ACCESS_REMOTE_WRITE, 0, 0, &mr), want);
	EXPECT_EQ(mr, nullptr);
	expect_same(stats(dev), before);
	ASSERT_EQ(nicmr_mr_reg(pd, f.p, 4096, NICMR_ACCESS_REMOTE_WRITE, 0, 0, &mr), 0)
		<< "the page inside the file is backed";
	EXPECT_EQ(stats(dev).pinned_pages, before.pinned_pages + 1);
	EXPECT_EQ(nicmr_mr_dereg(mr), 0);
	expect_released(stats(dev), before);
}

TEST_F(SlowPath, ReadOnlySharedFileMemoryRegistersForReadsOnly)
{
	FileMap f(2 * 4096, 2 * 4096, PROT_READ);
	ASSERT_NE(f.p, nullptr);
	const auto before = stats(dev);
	nicmr_mr *mr = nullptr;
	EXPECT_EQ(nicmr_mr_reg(pd, f.p, 8192, NICMR_ACCESS_RECV, 0, 0, &mr), -EFAULT);
	EXPECT_EQ(nicmr_mr_reg(pd, f.p, 8192, NICMR_ACCESS_REMOTE_WRITE, 0, 0, &mr), -EFAULT);
	expect_same(stats(dev), before);
	ASSERT_EQ(nicmr_mr_reg(pd, f.p, 8192, NICMR_ACCESS_SEND | NICMR_ACCESS_REMOTE_READ, 0, 0,
			       &mr),
		  0);
	EXPECT_EQ(nicmr_mr_dereg(mr), 0);
	expect_released(stats(dev), before);
}

TEST_F(SlowPath, UntouchedAnonymousMemoryIsBackedOnRegistration)
{
	/* Never written: no page exists yet. Registering faults them in (and locks them). */
	Anon m(4 * 4096);
	ASSERT_NE(m.get(), nullptr);
	unsigned char vec[4] = {};
	ASSERT_EQ(mincore(m.get(), 4 * 4096, vec), 0);
	nicmr_mr *mr = nullptr;
	ASSERT_EQ(nicmr_mr_reg(pd, m.get(), 4 * 4096, NICMR_ACCESS_REMOTE_WRITE, 0, 0, &mr), 0);
	ASSERT_EQ(mincore(m.get(), 4 * 4096, vec), 0);
	for (unsigned char v : vec)
		EXPECT_EQ(v & 1, 1) << "resident while registered";
	EXPECT_EQ(nicmr_mr_dereg(mr), 0);
}

TEST_F(SlowPath, AHoleOrAProtNonePageAnywhereIsRefusedAndLeavesNothing)
{
	Anon m(4 * 4096);
	ASSERT_NE(m.get(), nullptr);
	ASSERT_EQ(mprotect(m.get() + 2 * 4096, 4096, PROT_NONE), 0);
	const auto before = stats(dev);
	nicmr_mr *mr = nullptr;
	EXPECT_EQ(nicmr_mr_reg(pd, m.get(), 4 * 4096, NICMR_ACCESS_SEND, 0, 0, &mr), -EFAULT);
	ASSERT_EQ(munmap(m.get() + 3 * 4096, 4096), 0);
	EXPECT_EQ(nicmr_mr_reg(pd, m.get() + 3 * 4096 - 1, 2, NICMR_ACCESS_SEND, 0, 0, &mr),
		  -EFAULT);
	expect_same(stats(dev), before);
	ASSERT_EQ(nicmr_mr_reg(pd, m.get(), 2 * 4096, NICMR_ACCESS_REMOTE_WRITE, 0, 0, &mr), 0);
	EXPECT_EQ(nicmr_mr_dereg(mr), 0);
}
