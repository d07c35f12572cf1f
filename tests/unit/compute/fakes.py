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
"""A scriptable in-memory hypervisor for agent tests (4 or 8 nodes)."""

import dataclasses

from nova_numa_overhead.compute import hypervisor as hv_mod


class FakeHypervisor(hv_mod.Hypervisor):
    """Nodes, guests, counters and memory, all set by the test."""

    def __init__(self, nodes=4, cpus_per_node=8, memory_mb=65536,
                 remote=21, llc_mb=None):
        self.nodes = nodes
        self._topology = hv_mod.HostTopology(
            nodes=tuple(hv_mod.NodeInfo(
                id=n, cpus=tuple(range(n * cpus_per_node,
                                       (n + 1) * cpus_per_node)),
                memory_mb=memory_mb, llc_mb=llc_mb) for n in range(nodes)),
            distances=tuple(tuple(10 if i == j else remote
                                  for j in range(nodes))
                            for i in range(nodes)))
        self.free = [memory_mb] * nodes
        self.guests = {}      # name -> DomainInfo
        self.memory = {}      # name -> {node: MiB}
        self.vcpus = {}       # name -> [cpu]
        self.counter = {}     # name -> DomainCounters
        self.nodesets = {}
        self.moves = []
        self.pins = {}
        # name -> CPUs its vCPUs may run on (vcpu_affinity); unset: unknown.
        self.affinity = {}
        self.enabled = set()
        self.down = False
        self.vanish_on = None  # (method, name): DomainGone once
        self.raise_on = {}     # (method, name): exception, every call
        self.recorded = {}     # name -> Recorded (the agent's metadata)
        self.restored = []     # (name, nodes, cpus)
        self.reconnects = 0
        self.move_failures = {}
        # kernel_state(): a KernelState, None (unknown) or an exception.
        self.kernel = None
        self.kernel_reads = 0
        # name -> migration_running() (True, False); unset: None.
        self.jobs = {}

    def kernel_state(self):
        self.kernel_reads += 1
        if isinstance(self.kernel, Exception):
            raise self.kernel
        return self.kernel

    def migration_running(self, domain):
        self._check('migration_running', domain)
        return self.jobs.get(domain.name)

    # -- test helpers -------------------------------------------------------

    def add(self, name, memory, vcpu_node=0, memory_mb=None, pinned=False,
            extra_specs=None, nova=True, metadata_error='', vcpus=2,
            recorded=None, run=''):
        memory = dict(memory)
        self.guests[name] = hv_mod.DomainInfo(
            name=name, uuid='uuid-' + name,
            memory_mb=memory_mb or int(sum(memory.values())), vcpus=vcpus,
            extra_specs=dict(extra_specs or {}), pinned=pinned,
            pinned_reason='test' if pinned else '', nova=nova,
            metadata_error=metadata_error, pid=1000 + len(self.guests),
            run=run)
        if recorded is not None:
            self.recorded[name] = recorded
        self.memory[name] = memory
        for node, mb in memory.items():
            self.free[node] -= mb
        first = vcpu_node * len(self._topology.nodes[0].cpus)
        self.vcpus[name] = [first + i for i in range(vcpus)]
        self.counter[name] = hv_mod.DomainCounters(0, 0, 0, 0, 0)

    def remove(self, name):
        for node, mb in self.memory.pop(name).items():
            self.free[node] += mb
        del self.guests[name]

    def run(self, name, instructions, cycles, refs, misses, stalls):
        """Advance a guest's cumulative counters by these deltas."""
        c = self.counter[name]
        self.counter[name] = hv_mod.DomainCounters(
            c.instructions + instructions, c.cycles + cycles,
            c.cache_references + refs, c.cache_misses + misses,
            c.stalled_cycles + stalls)

    def _check(self, method, domain=None):
        if self.down:
            raise hv_mod.HypervisorUnavailable('connection closed')
        if domain is not None:
            if self.vanish_on == (method, domain.name):
                self.vanish_on = None
                raise hv_mod.DomainGone(domain.name)
            if domain.name not in self.guests:
                raise hv_mod.DomainGone(domain.name)
            error = self.raise_on.get((method, domain.name))
            if error is not None:
                raise error
        elif (method, None) in self.raise_on:
            raise self.raise_on[(method, None)]

    # -- the interface ------------------------------------------------------

    def topology(self):
        self._check('topology')
        return self._topology

    def free_memory_mb(self):
        self._check('free_memory_mb')
        return list(self.free)

    def domains(self):
        self._check('domains')
        return [dataclasses.replace(
            d, allowed_nodes=self.nodesets.get(name, d.allowed_nodes),
            recorded=self.recorded.get(name))
            for name, d in self.guests.items()]

    def record(self, domain, recorded):
        self._check('record', domain)
        self.recorded[domain.name] = recorded

    def restore(self, domain, nodes=None, cpus=None):
        self._check('restore', domain)
        self.restored.append((domain.name, nodes, cpus))
        super().restore(domain, nodes, cpus)

    def enable_counters(self, domain):
        self._check('enable_counters', domain)
        self.enabled.add(domain.name)
        return True

    def counters_enabled(self, domain):
        self._check('counters_enabled', domain)
        return domain.name in self.enabled

    def disable_counters(self, domain):
        self._check('disable_counters', domain)
        self.enabled.discard(domain.name)

    def counters(self, domains):
        self._check('counters')
        return {d.name: self.counter[d.name] for d in domains
                if d.name in self.counter}

    def vcpu_cpus(self, domain):
        self._check('vcpu_cpus', domain)
        return list(self.vcpus[domain.name])

    def vcpu_affinity(self, domain):
        self._check('vcpu_affinity', domain)
        return self.affinity.get(domain.name)

    def memory_per_node(self, domain):
        self._check('memory_per_node', domain)
        return dict(self.memory[domain.name])

    def set_nodeset(self, domain, nodes):
        self._check('set_nodeset', domain)
        if domain.pinned:
            raise hv_mod.HypervisorError('pinned')
        self.nodesets[domain.name] = tuple(nodes)

    def move_pages(self, domain, moves, max_pages):
        self._check('move_pages', domain)
        moved = 0
        requested = 0
        failed = dict(self.move_failures)
        memory = self.memory[domain.name]
        allowed = self.nodesets.get(domain.name)
        for src, dst, mb in moves:
            if allowed and dst not in allowed:
                # The kernel refuses pages outside the cpuset's mems.
                failed['EACCES'] = failed.get('EACCES', 0) + int(mb * 256)
                continue
            mb = min(mb, memory.get(src, 0), self.free[dst])
            if max_pages is not None:
                mb = min(mb, (max_pages - moved) / 256.0)
            requested += int(mb * 256)
            if mb <= 0:
                continue
            memory[src] -= mb
            memory[dst] = memory.get(dst, 0) + mb
            self.free[src] += mb
            self.free[dst] -= mb
            moved += int(mb * 256)
            self.moves.append((domain.name, src, dst, mb))
        return hv_mod.MoveResult(requested=requested, moved=moved,
                                 failed=failed)

    def pin_vcpus(self, domain, cpus):
        self._check('pin_vcpus', domain)
        self.pins[domain.name] = tuple(cpus)

    def reconnect(self):
        self.reconnects += 1
