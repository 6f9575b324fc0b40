/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Two network namespaces joined by a veth pair, for the tests that run two "hosts" on one
 * machine (ip(8), root): made by NetnsPair, entered per thread with enter_netns.
 */
#ifndef NICMR_TEST_SUPPORT_NETNS_H
#define NICMR_TEST_SUPPORT_NETNS_H

#include <fcntl.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace nicmr::test {

/* Runs a shell command; true on exit status 0. */
inline bool sh(const std::string &cmd)
{
	const int st = std::system((cmd + " >/dev/null 2>&1").c_str());
	return st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* Enters the named network namespace (ip netns's /run/netns/NAME) on this thread. */
inline bool enter_netns(const std::string &name)
{
	const int fd = ::open(("/run/netns/" + name).c_str(), O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	const bool ok = ::setns(fd, CLONE_NEWNET) == 0;
	::close(fd);
	return ok;
}

/*
 * Two namespaces, nicmr-wA-PID and nicmr-wB-PID, joined by a veth pair with 10.N.M.1/24 and
 * .2/24 (IPv4) or fd00:N:M::1/64 and ::2/64 (IPv6, without duplicate address detection), made
 * by ip(8) and removed by the destructor. ok() false with the reason where they cannot be made
 * (not root, no ip, no veth).
 */
struct NetnsPair {
	std::string a, b, addr_a, addr_b, why;
	bool made = false;
	explicit NetnsPair(bool ipv6)
	{
		const int id = getpid();
		a = "nicmr-wA-" + std::to_string(id);
		b = "nicmr-wB-" + std::to_string(id);
		const std::string n = std::to_string(id % 250 + 1),
				  m = std::to_string(id / 250 % 250);
		const std::string va = "nwa" + std::to_string(id), vb = "nwb" + std::to_string(id);
		addr_a = ipv6 ? "fd00:" + n + ":" + m + "::1" : "10." + n + "." + m + ".1";
		addr_b = ipv6 ? "fd00:" + n + ":" + m + "::2" : "10." + n + "." + m + ".2";
		const std::string plen = ipv6 ? "/64 nodad" : "/24";
		if (!sh("ip netns add " + a) || !sh("ip netns add " + b)) {
			why = "cannot make network namespaces (ip netns add: needs root and ip(8))";
			return;
		}
		made = true;
		const std::string mac_a = "02:00:00:00:00:0a", mac_b = "02:00:00:00:00:0b";
		if (!sh("ip link add " + va + " address " + mac_a + " netns " + a +
			" type veth peer name " + vb + " address " + mac_b + " netns " + b)) {
			why = "cannot make a veth pair between namespaces";
			return;
		}
		const bool up = sh("ip -n " + a + " addr add " + addr_a + plen + " dev " + va) &&
				sh("ip -n " + b + " addr add " + addr_b + plen + " dev " + vb) &&
				sh("ip -n " + a + " link set " + va + " up") &&
				sh("ip -n " + b + " link set " + vb + " up") &&
				sh("ip -n " + a + " link set lo up") &&
				sh("ip -n " + b + " link set lo up") &&
				/* Static neighbours: neighbour discovery on a link just up takes
				 * about a second (IPv6), longer than the default retries of the
				 * first request last (7 * 67 ms). */
				sh("ip -n " + a + " neigh replace " + addr_b + " lladdr " + mac_b +
				   " dev " + va + " nud permanent") &&
				sh("ip -n " + b + " neigh replace " + addr_a + " lladdr " + mac_a +
				   " dev " + vb + " nud permanent");
		if (!up)
			why = "cannot address or bring up the veth pair";
	}
	bool ok() const { return made && why.empty(); }
	~NetnsPair()
	{
		if (made) {
			sh("ip netns del " + a);
			sh("ip netns del " + b);
		}
	}
};

} // namespace nicmr::test

#endif
