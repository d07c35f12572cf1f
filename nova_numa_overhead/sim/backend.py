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

The unchanged agent (collector, estimator, placer, rebalancer) runs against
a simulated host through this backend: it reads counters the model
produces, and its nodeset restrictions, page moves and vCPU pins change the
model.
"""

from nova_numa_overhead.compute import hypervisor as hv_mod
from nova_numa_overhead.sim import model

PAGES_PER_MB = 256


class SimHypervisor(hv_mod.Hypervisor):
    """A :class:`~nova_numa_overhead.sim.model.Host` as a hypervisor."""

    def __init__(self, host: model.Host):
        self.host = host
        spec = host.spec
        first = 0
        nodes = []
        for i, node in enumerate(spec.nodes):
            nodes.append(hv_mod.NodeInfo(
                id=i, cpus=tuple(range(first, first + node.cores)),
                memory_mb=node.memory_mb))
            first += node.cores
        self._topology = hv_mod.HostTopology(nodes=tuple(nodes),
                                             distances=spec.distances)
        self._counters: dict = {}
        self.moved_mb = 0.0
        self.events = []
        self._callbacks = []

    # -- driving the simulation -------------------------------------------

    def advance(self, seconds: float) -> model.Result:
        """Run the model for ``seconds``; counters accumulate."""
        result = self.host.solve()
        for name, res in result.guests.items():
            guest = self.host.guests[name]
            inc = model.counters(self.host.spec, guest, res, seconds)
            old = self._counters.get(name, (0, 0, 0, 0, 0))
            self._counters[name] = tuple(a + b for a, b in zip(old, inc))
        return result

    def start(self, guest: model.Guest) -> None:
        """A guest starts (and its 'started' event fires)."""
        self.host.add(guest)
        for callback in self._callbacks:
            callback('started', guest.name)

    def stop(self, name: str) -> None:
        self.host.remove(name)
        self._counters.pop(name, None)
        for callback in self._callbacks:
            callback('stopped', name)

    # -- the interface ------------------------------------------------------

    def _guest(self, domain) -> model.Guest:
        guest = self.host.guests.get(domain.name)
        if guest is None:
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
            for g in self.host.guests.values()]

    def enable_counters(self, domain):
        self._guest(domain)
        return True

    def counters(self, domains):
        return {d.name: hv_mod.DomainCounters(*self._counters[d.name])
                for d in domains if d.name in self._counters}

    def vcpu_cpus(self, domain):
        guest = self._guest(domain)
        cpus = []
        for node, frac in sorted(guest.cpu.items()):
            count = int(round(frac * guest.vcpus))
            base = self._topology.nodes[node].cpus
            cpus.extend(base[i % len(base)] for i in range(count))
        return cpus[:guest.vcpus] or [self._topology.nodes[0].cpus[0]]

    def memory_per_node(self, domain):
        guest = self._guest(domain)
        return {n: int(mb) for n, mb in guest.pages.items() if mb >= 1}

    def set_nodeset(self, domain, nodes):
        guest = self._guest(domain)
        if guest.pinned:
            raise hv_mod.HypervisorError('%s is pinned' % guest.name)
        nodes = tuple(sorted(nodes))
        guest.allowed = nodes
        # The kernel migrates what lies outside the new nodeset into it.
        free = self.host.free_mb()
        for node in [n for n in guest.pages if n not in nodes]:
            mb = guest.pages.pop(node)
            target = max(nodes, key=lambda n: (free[n], -n))
            guest.pages[target] = guest.pages.get(target, 0) + mb
            free[target] -= mb
            self.moved_mb += mb

    def move_pages(self, domain, moves, max_pages):
        guest = self._guest(domain)
        budget = None if max_pages is None else max_pages / PAGES_PER_MB
        moved = requested = 0.0
        failed = {}
        free = self.host.free_mb()
        for src, dst, mb in moves:
            requested += mb
            if guest.allowed and dst not in guest.allowed:
                failed['EACCES'] = failed.get('EACCES', 0) + int(
                    mb * PAGES_PER_MB)
                continue
            amount = min(mb, guest.pages.get(src, 0), max(free[dst], 0))
            if budget is not None:
                amount = min(amount, budget - moved)
            if amount <= 0:
                if free[dst] <= 0:
                    failed['ENOMEM'] = failed.get('ENOMEM', 0) + int(
                        mb * PAGES_PER_MB)
                continue
            guest.pages[src] -= amount
            if guest.pages[src] <= 0:
                del guest.pages[src]
            guest.pages[dst] = guest.pages.get(dst, 0) + amount
            free[dst] -= amount
            moved += amount
        self.moved_mb += moved
        return hv_mod.MoveResult(requested=int(requested * PAGES_PER_MB),
                                 moved=int(moved * PAGES_PER_MB),
                                 failed=failed)

    def pin_vcpus(self, domain, cpus):
        guest = self._guest(domain)
        node_of = self._topology.node_of_cpu()
        counts = {}
        for cpu in cpus:
            counts[node_of[cpu]] = counts.get(node_of[cpu], 0) + 1
        total = float(sum(counts.values()))
        guest.cpu = {n: c / total for n, c in counts.items()}

    def register_lifecycle(self, callback):
        self._callbacks.append(callback)
