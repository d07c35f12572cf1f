# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.
"""The ``sim`` hypervisor backend: the agent's interface on the model.

The unchanged agent (collector, estimator, placer, rebalancer) runs
against a simulated host through this backend. What it reads is what a
real host would give it:

* counters per domain, summed over its vCPUs, with sampling noise
  (``NOISE``), and only the events of the host's counter profile
  (``COUNTER_PROFILES``): a typical KVM host gives cycles, instructions
  and LLC references and misses; the backend-stall event is missing on
  most (libvirt then reads it as 0, and so does this backend);
* where the guest's pages are now (pages still in the migration queue
  have not moved yet);
* on a ``resctrl`` host, the memory traffic of every guest per node where
  its vCPUs run, local and total, as libvirt's memory-bandwidth stats
  give it (cumulative, with the cache events' noise): LLC misses x 64
  bytes, split over the nodes by where its vCPUs run, local being the
  part that goes to its pages on the same node.

What it does goes through the host's physics: a nodeset change is a
cpuset.mems change (the kernel migrates what lies outside, at the
migration rate), a page move joins the migration queue.
"""

import random

from nova_numa_overhead.compute import hypervisor as hv_mod
from nova_numa_overhead.compute import placer as placer_mod
from nova_numa_overhead.sim import host as host_mod
from nova_numa_overhead.sim import model

# The simulated host's base pages are this host's, as the agent counts
# them (256 a MiB on 4 KiB pages).
PAGES_PER_MB = round(1 / placer_mod.page_mb())

# What the host's PMU and libvirt give a per-domain perf group.
PERF = 'perf'                   # cycles, instructions, LLC refs/misses
PERF_STALLS = 'perf+stalls'     # and stalled-cycles-backend
RESCTRL = 'resctrl'             # perf, and RDT memory-bandwidth monitoring
COUNTER_PROFILES = {
    PERF: 'cycles, instructions, LLC references and misses (most KVM '
          'hosts: the backend-stall event reads 0)',
    PERF_STALLS: 'as perf, and stalled-cycles-backend',
    RESCTRL: 'as perf, and resctrl memory-bandwidth monitoring (MBM, '
             'local and total bytes per node) with LLC occupancy',
}
DEFAULT_COUNTERS = PERF
# Relative standard deviation of one second's counter increment: fixed
# counters (cycles, instructions) are exact but the vCPU threads'
# scheduling jitters; programmable cache events are multiplexed and
# sampled.
NOISE = {'fixed': 0.01, 'cache': 0.03}


class SimHypervisor(hv_mod.Hypervisor):
    """A :class:`~nova_numa_overhead.sim.host.Host` as a hypervisor."""

    def __init__(self, host: host_mod.Host, counters: str = DEFAULT_COUNTERS,
                 seed: int = 0):
        if counters not in COUNTER_PROFILES:
            raise ValueError('unknown counter profile %r (known: %s)'
                             % (counters, ', '.join(COUNTER_PROFILES)))
        self.host = host
        self.counter_profile = counters
        self.rng = random.Random(seed)
        # Its own generator: the perf counters' noise stays what it was
        # (frozen baselines) whether or not the host monitors bandwidth.
        self.mbm_rng = random.Random('%s/resctrl' % seed)
        spec = host.spec
        first = 0
        nodes = []
        for i, node in enumerate(spec.nodes):
            nodes.append(hv_mod.NodeInfo(
                id=i, cpus=tuple(range(first, first + node.cpus)),
                memory_mb=node.memory_mb, cores=node.cores,
                llc_mb=node.llc_mb))
            first += node.cpus
        self._topology = hv_mod.HostTopology(nodes=tuple(nodes),
                                             distances=spec.distances)
        self._counters: dict = {}
        self._truth: dict = {}
        # Name -> [[local, total] bytes per node], cumulative (resctrl).
        self._bytes: dict = {}
        self._callbacks = []

    # -- driving the simulation -------------------------------------------

    def advance(self, result, seconds: float = 1.0) -> None:
        """Counters accumulate ``seconds`` of the model's ``result``."""
        for i, name in enumerate(result.names):
            guest = self.host.guests.get(name)
            if guest is None:
                continue
            instructions = float(result.ips[i]) * seconds
            refs = instructions * guest.profile.api
            misses = refs * (1.0 - float(result.hit[i]))
            stalls = instructions * float(result.stall_cpi[i])
            cycles = instructions * float(result.measured_cpi[i])
            inc = [instructions, cycles, refs, misses, stalls]
            self._truth[name] = inc
            noisy = [self._noisy(v, NOISE['fixed']) for v in inc[:2]]
            noisy += [self._noisy(v, NOISE['cache']) for v in inc[2:]]
            noisy[3] = min(noisy[3], noisy[2])
            noisy[4] = min(noisy[4], noisy[1])
            if self.counter_profile == PERF or \
                    self.counter_profile == RESCTRL:
                noisy[4] = 0.0
            old = self._counters.get(name, (0, 0, 0, 0, 0))
            self._counters[name] = tuple(a + int(b)
                                         for a, b in zip(old, noisy))
            if self.counter_profile == RESCTRL:
                self._monitor(guest, misses * model.CACHE_LINE)

    def _monitor(self, guest: host_mod.Guest, nbytes: float) -> None:
        """resctrl's counts of ``nbytes`` of the guest's memory traffic.

        Counted per node where its vCPUs run (an L3 cache, one per node
        here); local is the part to its pages on that node. The noise of
        the cache events, one draw per node and second for both counts:
        what jitters is how much traffic falls in the second, not where
        it goes.
        """
        counts = self._bytes.setdefault(
            guest.name, [[0, 0] for _ in range(self.host.spec.size)])
        pages = self.host.pages(guest)
        allocated = sum(pages.values())
        for node, share in sorted(guest.cpu.items()):
            noise = max(0.0, 1.0 + self.mbm_rng.gauss(0.0, NOISE['cache']))
            total = nbytes * share * noise
            local = total * pages.get(node, 0.0) / allocated \
                if allocated > 0 else 0.0
            counts[node][0] += int(local)
            counts[node][1] += int(total)

    def _noisy(self, value: float, sigma: float) -> float:
        return max(0.0, value * (1.0 + self.rng.gauss(0.0, sigma)))

    def start(self, guest: host_mod.Guest, preallocate: bool = False
              ) -> None:
        """A guest starts (and its 'started' event fires)."""
        self.host.add(guest, preallocate)
        for callback in self._callbacks:
            callback('started', guest.name)

    def stop(self, name: str) -> None:
        self.host.remove(name)
        self._counters.pop(name, None)
        self._bytes.pop(name, None)
        for callback in self._callbacks:
            callback('stopped', name)

    # -- the interface ------------------------------------------------------

    def _guest(self, domain) -> host_mod.Guest:
        guest = self.host.guests.get(domain.name)
        if guest is None or guest.oom:
            raise hv_mod.DomainGone(domain.name)
        return guest

    def topology(self):
        return self._topology

    def free_memory_mb(self):
        return self.host.free_mb()

    def domains(self):
        return [hv_mod.DomainInfo(
            name=g.name, uuid=g.name, memory_mb=g.memory_mb, vcpus=g.vcpus,
            extra_specs=dict(g.extra_specs), pinned=g.pinned,
            pinned_reason='pinned in the scenario' if g.pinned else '',
            allowed_nodes=tuple(g.allowed))
            for g in self.host.guests.values() if not g.oom]

    def enable_counters(self, domain):
        self._guest(domain)
        return True

    def counters(self, domains):
        return {d.name: hv_mod.DomainCounters(*self._counters[d.name])
                for d in domains if d.name in self._counters}

    def memory_bandwidth(self, domains):
        """Cumulative (local, total) bytes per node; {} unless resctrl."""
        if self.counter_profile != RESCTRL:
            return {}
        return {d.name: {node: tuple(c)
                         for node, c in enumerate(self._bytes[d.name])}
                for d in domains if d.name in self._bytes}

    def vcpu_cpus(self, domain):
        guest = self._guest(domain)
        return vcpu_cpus(guest, self._topology)

    def vcpu_affinity(self, domain):
        # Every CPU for vCPUs the kernel places; else those of the nodes
        # they are kept on (by the scenario or pin_vcpus: nodes, not
        # single CPUs, are what the simulated host tracks).
        guest = self._guest(domain)
        nodes = range(self.host.spec.size) if guest.floating else \
            sorted(n for n, f in guest.cpu.items() if f > 0)
        return tuple(c for n in nodes for c in self._topology.nodes[n].cpus)

    def memory_per_node(self, domain):
        guest = self._guest(domain)
        return {n: int(mb) for n, mb in self.host.pages(guest).items()
                if mb >= 1}

    def set_nodeset(self, domain, nodes):
        guest = self._guest(domain)
        if guest.pinned:
            raise hv_mod.HypervisorError('%s is pinned' % guest.name)
        self.host.restrict(guest, nodes)

    def move_pages(self, domain, moves, max_pages):
        guest = self._guest(domain)
        budget = None if max_pages is None else max_pages / PAGES_PER_MB
        queued = requested = 0.0
        failed = {}
        free = self.host.free_mb()
        pages = self.host.pages(guest)
        # Pages already on their way (the kernel's, or an earlier call's)
        # are not found where they were: move_pages(2) moves a page once.
        for entry in self.host.queue:
            if entry[0] is guest:
                pages[entry[1]] = max(pages.get(entry[1], 0.0) - entry[3],
                                      0.0)
        allowed = self.host.allowed(guest)
        for src, dst, mb in moves:
            requested += mb
            if dst not in allowed:
                failed['EACCES'] = failed.get('EACCES', 0) + int(
                    mb * PAGES_PER_MB)
                continue
            amount = min(mb, pages.get(src, 0.0))
            if budget is not None:
                amount = min(amount, budget - queued)
            if amount > free[dst]:
                failed['ENOMEM'] = failed.get('ENOMEM', 0) + int(
                    (amount - free[dst]) * PAGES_PER_MB)
                amount = max(free[dst], 0)
            if amount <= 0:
                continue
            self.host.enqueue(guest, src, dst, amount, host_mod.REMOTE)
            pages[src] -= amount
            free[dst] -= amount
            queued += amount
        return hv_mod.MoveResult(requested=int(requested * PAGES_PER_MB),
                                 moved=int(queued * PAGES_PER_MB),
                                 failed=failed)

    def pin_vcpus(self, domain, cpus):
        guest = self._guest(domain)
        node_of = self._topology.node_of_cpu()
        unknown = sorted(set(cpus) - set(node_of))
        if not cpus or unknown:
            # As the libvirt driver: no CPU, or CPUs the host lacks.
            raise hv_mod.HypervisorError(
                'cannot pin the vCPUs of %s to CPUs %s' % (
                    guest.name, unknown or 'none'))
        cpu = pinned(self._topology, cpus)
        if cpu is None:
            guest.floating = True
            return
        guest.cpu = cpu
        guest.floating = False

    def register_lifecycle(self, callback):
        self._callbacks.append(callback)


def pinned(topology, cpus) -> dict | None:
    """Node -> fraction of a guest's vCPUs pinned to ``cpus`` (host CPU
    ids the topology has), as the simulated host runs them: in proportion
    to the CPUs of each node; None for every CPU of the host, which is not
    pinned at all (libvirt's vcpupin to every CPU): the kernel's load
    balancer places them.
    """
    node_of = topology.node_of_cpu()
    if set(cpus) >= set(node_of):
        return None
    counts = {}
    for cpu in cpus:
        counts[node_of[cpu]] = counts.get(node_of[cpu], 0) + 1
    total = float(sum(counts.values()))
    return {n: c / total for n, c in counts.items()}


def vcpu_cpus(guest, topology) -> list:
    """Host CPUs of the guest's vCPUs, as its node fractions say."""
    cpus = []
    for node, frac in sorted(guest.cpu.items()):
        count = int(round(frac * guest.vcpus))
        base = topology.nodes[node].cpus
        cpus.extend(base[i % len(base)] for i in range(count))
    return cpus[:guest.vcpus] or [topology.nodes[0].cpus[0]]
