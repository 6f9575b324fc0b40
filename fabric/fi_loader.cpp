/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libnicmr-fi.so, the module libfabric loads: a loader for the provider proper,
 * libnicmr-fi-impl.so, which sits beside it and needs libnicmr.so (and DPDK's ring library).
 *
 *   libfabric ──dlopen──> libnicmr-fi.so (libfabric, libc) ──dlopen──> libnicmr-fi-impl.so
 *                                                                        └─> libnicmr.so.0
 *
 * Why a loader: when a provider module's dependencies cannot be loaded, libfabric 1.17 says
 * nothing at any FI_LOG_LEVEL (src/fabric.c, ofi_reg_dl_prov: the dlopen failure goes to
 * FI_DBG, which release builds compile out; later versions warn); the provider is just
 * missing and fi_getinfo answers -FI_ENODATA. This module needs nothing libfabric's own
 * process does not have, so it always loads, and it says at FI_LOG_LEVEL=warn why the
 * provider could not be (dlerror(): the missing library, or the missing symbol version).
 */
#include <dlfcn.h>
#include <limits.h>

#include <cstring>

#include <rdma/providers/fi_log.h>
#include <rdma/providers/fi_prov.h>

namespace {

constexpr char kImpl[] = "libnicmr-fi-impl.so";
/* The provider's entry in kImpl (fabric/fi_impl.map). */
constexpr char kImplIni[] = "nicmr_fi_impl_ini";

/* Names the provider in the log lines; never registered (fi_prov_ini returns the real one
 * or nothing). */
struct fi_provider loader_prov = {
	.version = 0,
	.fi_version = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION),
	.context = {},
	.name = "nicmr",
	.getinfo = nullptr,
	.fabric = nullptr,
	.cleanup = nullptr,
};

/* The provider proper, while this module is loaded. */
void *impl_handle;

/* kImpl's path: this module's directory (as libfabric named it in its dlopen) + kImpl; a
 * module found by the dynamic loader's search (no directory) finds kImpl the same way. */
bool impl_path(char *buf, size_t len)
{
	Dl_info info{};
	if (dladdr(&impl_handle, &info) == 0 || /* any address inside this module */
	    info.dli_fname == nullptr)
		return false;
	const char *slash = std::strrchr(info.dli_fname, '/');
	const size_t dir = slash ? size_t(slash - info.dli_fname) + 1 : 0;
	if (dir + sizeof(kImpl) > len)
		return false;
	std::memcpy(buf, info.dli_fname, dir);
	std::memcpy(buf + dir, kImpl, sizeof(kImpl));
	return true;
}

/* libfabric closes this module (fi_fini) after calling the provider's cleanup: the provider
 * proper goes with it. */
__attribute__((destructor)) void unload_impl()
{
	if (impl_handle != nullptr)
		dlclose(impl_handle);
	impl_handle = nullptr;
}

} // namespace

extern "C" FI_EXT_INI
{
	char path[PATH_MAX];
	if (!impl_path(path, sizeof(path))) {
		FI_WARN(&loader_prov, FI_LOG_CORE, "cannot find the directory of this module\n");
		return nullptr;
	}
	/* RTLD_LOCAL: the provider's symbols (and libnicmr.so's) stay out of the application's
	 * namespace, as libfabric's own dlopen of a provider keeps them. */
	impl_handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (impl_handle == nullptr) {
		FI_WARN(&loader_prov, FI_LOG_CORE, "cannot load %s: %s\n", path, dlerror());
		return nullptr;
	}
	using Ini = struct fi_provider *(*)();
	auto ini = reinterpret_cast<Ini>(dlsym(impl_handle, kImplIni));
	if (ini == nullptr) {
		FI_WARN(&loader_prov, FI_LOG_CORE, "cannot load %s: %s\n", path, dlerror());
		dlclose(impl_handle);
		impl_handle = nullptr;
		return nullptr;
	}
	return ini();
}
