#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Open MPI (Debian's openmpi-bin, built against the system libfabric) runs mpi_check over a
libfabric provider through its OFI components, with N ranks on this host or across two network
namespaces joined by a veth pair.

Point-to-point goes through the cm PML and the OFI MTL (`--mca pml cm --mca mtl ofi`), so a
provider Open MPI refuses is a failed MPI_Init, never a silent fall-back to Open MPI's own TCP
or shared-memory transports; `mtl_ofi_provider_include` and FI_PROVIDER name the one provider.
One-sided goes through osc rdma over the OFI BTL with --btl-ofi (the provider's RMA and atomics),
else through osc pt2pt (messages over the MTL).

With --netns the test makes namespaces nicmr-mpi-a and nicmr-mpi-b, joined by a veth pair
(10.78.0.0/24, one address per rank), starts mpirun inside the first, and launches each
namespace's ranks through this script's --agent mode (Open MPI's rsh launcher with `ip netns
exec` in place of ssh); the namespaces are removed at the end. Each rank gets
NICMR_MPI_RANK_ADDR, its own address, which a device spec can name as `addr=` through
--rank-spec (the string's {addr} is replaced).

It FAILS, saying why, when mpirun or the namespaces cannot be had.

usage: run_mpi_test.py --check PATH --np N --provider NAME [--provider-path DIR]
                       [--env K=V]... [--rank-spec SPEC] [--btl-ofi] [--netns] [--timeout S]
       run_mpi_test.py --agent HOST CMD...       (used by mpirun under --netns)
       run_mpi_test.py --rank-exec CMD...        (used by mpirun: sets the rank's spec)
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import netns_pair  # noqa: E402

NS = ["nicmr-mpi-a", "nicmr-mpi-b"]
VETH = ["nmpi-a", "nmpi-b"]
NET = "10.78.0."


def fail(msg):
    print("mpi: FAIL: " + msg, flush=True)
    sys.exit(1)


def rank_addr(ns_index, local_rank):
    """The address of a rank: 10.78.0.<10 * (namespace + 1) + local rank + 1>."""
    return NET + str(10 * (ns_index + 1) + local_rank + 1)


def agent(argv):
    """mpirun's rsh agent: `agent HOST COMMAND...` runs COMMAND in HOST's namespace."""
    host, cmd = argv[0], argv[1:]
    if host not in NS:
        fail("agent: unknown host " + host)
    log = os.environ.get("NICMR_MPI_AGENT_LOG")
    if log:
        with open(log, "a") as f:
            f.write(host + "\n")
    os.execvp("ip", ["ip", "netns", "exec", host, "env", "NICMR_MPI_NS=" + host, "sh", "-c",
                     " ".join(cmd)])


def rank_exec(argv):
    """Runs one rank with its address and, when NICMR_MPI_RANK_SPEC is set, its device spec."""
    local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0"))
    ns = os.environ.get("NICMR_MPI_NS")
    if ns in NS:
        os.environ["NICMR_MPI_RANK_ADDR"] = rank_addr(NS.index(ns), local)
    spec = os.environ.get("NICMR_MPI_RANK_SPEC")
    if spec:
        os.environ["FI_NICMR_DEVICE"] = spec.replace(
            "{addr}", os.environ.get("NICMR_MPI_RANK_ADDR", ""))
    os.execvp(argv[0], argv)


def netns_up(per_ns):
    netns_pair.up(NS, VETH, [[rank_addr(i, local) + "/24" for local in range(per_ns)]
                             for i in range(len(NS))], fail)


def netns_down():
    netns_pair.down(NS)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--agent":
        agent(sys.argv[2:])
    if len(sys.argv) > 1 and sys.argv[1] == "--rank-exec":
        rank_exec(sys.argv[2:])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", required=True)
    p.add_argument("--np", type=int, required=True)
    p.add_argument("--provider", required=True)
    p.add_argument("--provider-path")
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--rank-spec")
    p.add_argument("--btl-ofi", action="store_true")
    p.add_argument("--netns", action="store_true")
    p.add_argument("--timeout", type=int, default=300)
    p.add_argument("checks", nargs="*")
    a = p.parse_args()

    mpirun = shutil.which("mpirun")
    if not mpirun:
        fail("mpirun not found (package openmpi-bin)")
    me = os.path.abspath(__file__)
    env = dict(os.environ)
    # Open MPI refuses to run as root unless told that it is meant.
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    # --mca rtc ^hwloc: the daemons' run-time control would share the hwloc topology through
    # a shared-memory segment mapped at a fixed hole, which crashed an orted in
    # hwloc_shmem_topology_write now and then (ranks are not bound here anyway).
    cmd = [mpirun, "-np", str(a.np), "--oversubscribe", "--bind-to", "none", "--mca", "rtc",
           "^hwloc",
           "--mca", "pml", "cm", "--mca", "mtl", "ofi",
           "--mca", "mtl_ofi_provider_include", a.provider,
           "-x", "FI_PROVIDER=" + a.provider]
    if a.provider_path:
        cmd += ["-x", "FI_PROVIDER_PATH=" + a.provider_path]
    for kv in a.env:
        cmd += ["-x", kv]
    if a.rank_spec:
        cmd += ["-x", "NICMR_MPI_RANK_SPEC=" + a.rank_spec]
    if a.btl_ofi:
        cmd += ["--mca", "osc", "rdma", "--mca", "btl", "self,ofi",
                "--mca", "btl_ofi_provider_include", a.provider]
    else:
        # One-sided as messages over the MTL: every byte still crosses the provider.
        cmd += ["--mca", "osc", "pt2pt", "--mca", "btl", "self"]
    # A session directory base of this run's own: Open MPI names its session directories by
    # host name and a job family hashed from mpirun's pid, and one left behind by a killed run
    # (or another run's, with the same family) made an orted's mkdir fail with "File exists".
    # Both namespaces' daemons share this host's /tmp and name.
    tmpbase = tempfile.mkdtemp(prefix="nicmr-mpi-session-")
    cmd += ["--mca", "orte_tmpdir_base", tmpbase]
    if a.netns:
        if os.geteuid() != 0:
            fail("--netns needs root (ip netns)")
        per_ns = (a.np + 1) // 2
        netns_up(per_ns)
        hostfile = os.path.join(os.environ.get("TMPDIR", "/tmp"),
                                "nicmr-mpi-hosts.%d" % os.getpid())
        with open(hostfile, "w") as f:
            for ns in NS:
                f.write("%s slots=%d\n" % (ns, per_ns))
        agent_log = hostfile + ".agent"
        env["NICMR_MPI_AGENT_LOG"] = agent_log
        cmd = ["ip", "netns", "exec", NS[0]] + cmd + [
            "--hostfile", hostfile, "--map-by", "node",
            "--mca", "plm_rsh_agent", sys.executable + " " + me + " --agent",
            "--mca", "oob_tcp_if_include", NET + "0/24",
            "--mca", "orte_keep_fqdn_hostnames", "1"]
    cmd += [sys.executable, me, "--rank-exec", a.check] + a.checks
    print("mpi: " + " ".join(cmd), flush=True)
    try:
        r = subprocess.run(cmd, env=env, timeout=a.timeout)
    except subprocess.TimeoutExpired:
        fail("mpirun did not finish in %d s" % a.timeout)
    finally:
        shutil.rmtree(tmpbase, ignore_errors=True)
        if a.netns:
            netns_down()
            os.unlink(hostfile)
    if r.returncode != 0:
        fail("mpirun exited with %d" % r.returncode)
    if a.netns:
        # Ranks ran in both namespaces: mpirun launched a daemon in each.
        with open(agent_log) as f:
            launched = set(f.read().split())
        os.unlink(agent_log)
        if launched != set(NS):
            fail("mpirun launched daemons in %s, not in both namespaces" % sorted(launched))
    print("mpi: PASS: %d ranks over %s%s" % (a.np, a.provider,
                                            " across two namespaces" if a.netns else ""))


if __name__ == "__main__":
    main()
