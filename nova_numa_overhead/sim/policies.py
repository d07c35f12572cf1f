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
"""Placement policies compared by the simulator.

Every policy sees a guest arrive with its scenario placement: the node its
vCPUs are pinned to, and where the kernel's first touch would put its
memory (Nova's default). It may then change where the memory lies and, for
the vCPU schedulers of the literature, where the vCPUs run. Dynamic
policies also act every simulated second (``step``).

* ``nova-default``: the scenario's placement, untouched.
* ``numad``: the smallest node set scoring best by free CPU x free memory /
  distance^2; vCPUs and memory moved there (numad's rule).
* ``interleave``: memory evenly over all nodes.
* ``vtrms``: each vCPU to the node with the best affinity to its memory
  (lowest measured latency, penalised by load).
* ``vprobe``: memory-intensive (LLC-thrashing/fitting) guests' vCPUs spread
  evenly over the nodes by LLC pressure.
* ``vdarm``: classify by CPI and bandwidth sensitivity; gather memory and
  vCPUs on one node, or spread memory evenly, or leave alone.
* ``overhead-aware`` / ``overhead-aware+fifo``: this project: the real
  agent (collector, estimator, planner, placer, rebalancer) on the
  ``sim`` backend, without and with the periodic swap-FIFO rebalancing.
* ``overhead-aware+vcpu``: with the optional co-location of vCPUs and
  memory (``[numa_overhead_agent] colocate_vcpus``).
* ``oracle``: the best placement of vCPUs and memory found by search.
"""

import itertools

from oslo_config import cfg

from nova_numa_overhead.compute import agent as agent_mod
from nova_numa_overhead import conf as plugin_conf
from nova_numa_overhead.overhead import classifier
from nova_numa_overhead.sim import backend as backend_mod
from nova_numa_overhead.sim import model


class Policy:
    """Places arriving guests; may act every step."""

    name = 'base'
    dynamic = False

    def attach(self, hv: backend_mod.SimHypervisor) -> None:
        self.hv = hv
        self.host = hv.host

    def place(self, guest: model.Guest) -> None:
        """The guest is about to start with its scenario placement."""

    def step(self, now: float) -> None:
        """One simulated second passed."""


class NovaDefault(Policy):
    name = 'nova-default'


def _loads(host, skip=None):
    cores = [0.0] * host.spec.size
    for g in host.guests.values():
        if g is skip:
            continue
        for n, f in g.cpu.items():
            cores[n] += g.vcpus * f
    return cores


class Numad(Policy):
    name = 'numad'

    def place(self, guest):
        spec = self.host.spec
        cores = _loads(self.host)
        free = self.host.free_mb()
        home = min(guest.cpu, key=lambda n: -guest.cpu[n])

        def score(node):
            free_cpu = max(spec.nodes[node].cores - cores[node], 0.1)
            dist = spec.distances[home][node] / 10.0
            return free_cpu * max(free[node], 1) / dist ** 2

        fits = [n for n in range(spec.size) if free[n] >= guest.memory_mb]
        if not fits:
            return
        best = max(fits, key=lambda n: (score(n), -n))
        guest.cpu = {best: 1.0}
        guest.pages = {best: guest.memory_mb}


class Interleave(Policy):
    name = 'interleave'

    def place(self, guest):
        n = self.host.spec.size
        guest.pages = {i: guest.memory_mb / n for i in range(n)}


class VTRMS(Policy):
    name = 'vtrms'

    def place(self, guest):
        spec = self.host.spec
        cores = _loads(self.host)
        mem = guest.mem_fractions()

        def cost(node):
            latency = sum(f * spec.latency_ns[node][m]
                          for m, f in mem.items())
            busy = cores[node] / spec.nodes[node].cores
            return latency * (1.0 + max(0.0, busy - 0.5))

        guest.cpu = {min(range(spec.size), key=lambda n: (cost(n), n)): 1.0}


class VProbe(Policy):
    name = 'vprobe'
    dynamic = True
    period = 5

    def place(self, guest):
        self._spread()

    def step(self, now):
        if int(now) % self.period == 0:
            self._spread()

    def _spread(self):
        spec = self.host.spec
        intensive = []
        for g in self.host.guests.values():
            kind, _ = classifier.llc_type(g.profile.api * 1000.0, 1000.0)
            if kind != classifier.FRIENDLY and not g.pinned:
                intensive.append(g)
        # Balance LLC pressure: the heaviest first, to the lightest node.
        pressure = [0.0] * spec.size
        for g in self.host.guests.values():
            if g not in intensive:
                for n, f in g.cpu.items():
                    pressure[n] += g.profile.footprint_mb * f
        for g in sorted(intensive, key=lambda g: (-g.profile.api, g.name)):
            node = min(range(spec.size), key=lambda n: (pressure[n], n))
            g.cpu = {node: 1.0}
            pressure[node] += g.profile.footprint_mb


class VDARM(Policy):
    name = 'vdarm'
    dynamic = True
    period = 5

    def step(self, now):
        if int(now) % self.period:
            return
        result = self.host.solve()
        spec = self.host.spec
        for g in self.host.guests.values():
            if g.pinned or g.name not in result.guests:
                continue
            r = result.guests[g.name]
            misses = r.ips * g.profile.api * (1 - r.hit)
            kind = classifier.classify(
                r.ips, r.ips * r.cpi, r.ips * g.profile.api, misses, 1.0,
                available_mbps=min(n.mc_gbps for n in spec.nodes) * 1000)
            if kind.vdarm_class == 1:
                node = max(g.pages, key=lambda n: (g.pages[n], -n))
                free = self.host.free_mb()[node] + g.pages[node]
                if free >= g.memory_mb:
                    g.pages = {node: g.memory_mb}
                    g.cpu = {node: 1.0}
            elif kind.vdarm_class == 2:
                g.pages = {i: g.memory_mb / spec.size
                           for i in range(spec.size)}


class OverheadAware(Policy):
    """The project's agent, unchanged, on the simulated host."""

    name = 'overhead-aware'
    dynamic = True
    rebalance_every = 0
    colocate = False

    def attach(self, hv):
        super().attach(hv)
        conf = plugin_conf.register_opts(cfg.ConfigOpts())
        conf([])
        for name, value in (('enforcement', 'pages'),
                            ('reserve_mb', 256),
                            ('migrate_rate_mb_per_s', 0),
                            ('max_move_mb_per_period', 4096),
                            ('rebalance_threshold', 5),
                            ('colocate_vcpus', self.colocate)):
            conf.set_override(name, value, group='numa_overhead_agent')
        self.clock = [0.0]
        self.agent = agent_mod.Agent(conf, hv, _NullPublisher(),
                                     hv.host.spec.name,
                                     clock=lambda: self.clock[0],
                                     sleep=lambda s: None)
        hv.register_lifecycle(self.agent.on_lifecycle)

    def step(self, now):
        self.clock[0] = now
        self.agent.cycle()
        if self.rebalance_every and int(now) % self.rebalance_every == 0:
            # What the agent service does every rebalance_interval.
            self.agent.rebalance()
            self.agent.colocate()


class OverheadAwareFifo(OverheadAware):
    name = 'overhead-aware+fifo'
    rebalance_every = 5


class OverheadAwareVcpu(OverheadAware):
    """With the optional co-location of vCPUs and memory
    (``[numa_overhead_agent] colocate_vcpus``).
    """

    name = 'overhead-aware+vcpu'
    rebalance_every = 5
    colocate = True


class _NullPublisher:

    def __init__(self):
        self.reports = []

    def publish(self, report):
        self.reports.append(report)
        return True


def objective(host: model.Host) -> float:
    """Mean throughput of the guests, normalised to each running alone."""
    tput = host.throughput(host.solve())
    return sum(tput.values()) / len(tput) if tput else 0.0


def candidates(host: model.Host, guest: model.Guest) -> list:
    """(vCPU node, memory placement) pairs the oracle tries for a guest.

    Every node for the vCPUs; for the memory every single node, an even
    spread and, up to four nodes, every pair split in halves.
    """
    n = host.spec.size
    mb = guest.memory_mb
    memory = [{i: mb} for i in range(n)]
    memory.append({i: mb / n for i in range(n)})
    if n <= 4:
        for a, b in itertools.combinations(range(n), 2):
            memory.append({a: mb / 2, b: mb / 2})
    return [(cpu, pages) for cpu in range(n) for pages in memory]


class Oracle(Policy):
    """The best placement found by search, vCPUs and memory together.

    Coordinate descent over :func:`candidates`, one guest at a time, from
    two starting points (the scenario's placement and every guest
    co-located on its first-touch node), until no single change improves
    the mean throughput: a bounded search, not a proof of optimality.
    """

    name = 'oracle'
    max_passes = 4

    def optimise(self) -> None:
        guests = [g for g in self.host.guests.values() if not g.pinned]
        start = [(dict(g.cpu), dict(g.pages)) for g in guests]
        best_value, best = self._descent(guests)
        for g in guests:
            node = max(g.pages, key=lambda n: (g.pages[n], -n))
            g.cpu, g.pages = {node: 1.0}, {node: g.memory_mb}
        if not self._fits():
            for g, (cpu, pages) in zip(guests, start):
                g.cpu, g.pages = cpu, pages
        value, placement = self._descent(guests)
        if value < best_value:
            placement = best
        for g, (cpu, pages) in zip(guests, placement):
            g.cpu, g.pages = dict(cpu), dict(pages)

    def _fits(self):
        return all(f >= 0 for f in self.host.free_mb())

    def _descent(self, guests):
        current = objective(self.host)
        for _ in range(self.max_passes):
            improved = False
            for g in guests:
                keep = (dict(g.cpu), dict(g.pages))
                for cpu, pages in candidates(self.host, g):
                    g.cpu, g.pages = {cpu: 1.0}, dict(pages)
                    if not self._fits():
                        continue
                    value = objective(self.host)
                    if value > current + 1e-9:
                        current, improved = value, True
                        keep = (dict(g.cpu), dict(g.pages))
                g.cpu, g.pages = keep
            if not improved:
                break
        return current, [(dict(g.cpu), dict(g.pages)) for g in guests]


POLICIES = {cls.name: cls for cls in (
    NovaDefault, Numad, Interleave, VTRMS, VProbe, VDARM, OverheadAware,
    OverheadAwareFifo, OverheadAwareVcpu, Oracle)}
