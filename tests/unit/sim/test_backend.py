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
"""The simulated host's resctrl memory-bandwidth monitoring."""

import testtools

from nova_numa_overhead.compute import collector as collector_mod
from nova_numa_overhead.compute import hypervisor as hv_mod
from nova_numa_overhead.sim import backend
from nova_numa_overhead.sim import host as host_mod
from nova_numa_overhead.sim import model
from nova_numa_overhead.sim import presets

GIB = 1024


def guest(name, cpu, memory_node, vcpus=4):
    return host_mod.Guest(name=name, vcpus=vcpus, memory_mb=4 * GIB,
                          profile=presets.PROFILES['ycsb'], cpu=cpu,
                          first_touch=(memory_node,))


class TestResctrl(testtools.TestCase):

    def run_host(self, counters=backend.RESCTRL, seconds=5, seed=0,
                 collector=None):
        host = host_mod.Host(presets.ibm_x3850(4), balancing=False)
        hv = backend.SimHypervisor(host, counters=counters, seed=seed)
        # Half its vCPUs on node 0 where all its memory is, half on node 1.
        hv.start(guest('split', {0: 0.5, 1: 0.5}, 0), preallocate=True)
        hv.start(guest('home', {2: 1.0}, 2), preallocate=True)
        misses = {}
        for t in range(seconds):
            host.step(float(t))
            hv.advance(host.solve())
            for name, truth in hv._truth.items():
                misses[name] = misses.get(name, 0.0) + truth[3]
            if collector is not None:
                collector.measure_bandwidth(hv, hv.domains(), float(t))
        return hv, misses

    def test_local_and_total_per_node_of_the_vcpus(self):
        hv, misses = self.run_host()
        answer = hv.memory_bandwidth(hv.domains())
        split, home = answer['split'], answer['home']
        # Every node of the host, as libvirt lists every L3 cache.
        self.assertEqual([0, 1, 2, 3], sorted(split))
        # Node 0's vCPUs read local memory, node 1's read node 0's.
        local0, total0 = split[0]
        local1, total1 = split[1]
        self.assertEqual(local0, total0)
        self.assertEqual(0, local1)
        self.assertAlmostEqual(1.0, total1 / total0, delta=0.1)
        self.assertEqual((0, 0), split[2])
        # Bytes are LLC misses x 64, within the counters' noise.
        self.assertAlmostEqual(
            1.0, (total0 + total1) / (misses['split'] * model.CACHE_LINE),
            delta=0.05)
        self.assertEqual(home[2][0], home[2][1])
        self.assertAlmostEqual(
            1.0, home[2][1] / (misses['home'] * model.CACHE_LINE),
            delta=0.05)

    def test_cumulative(self):
        short, _ = self.run_host(seconds=2)
        long, _ = self.run_host(seconds=6)
        before = short.memory_bandwidth(short.domains())['home'][2][1]
        after = long.memory_bandwidth(long.domains())['home'][2][1]
        self.assertAlmostEqual(3.0, after / before, delta=0.3)

    def test_only_on_a_resctrl_host(self):
        for counters in (backend.PERF, backend.PERF_STALLS):
            hv, _ = self.run_host(counters=counters)
            self.assertEqual({}, hv.memory_bandwidth(hv.domains()))

    def test_perf_counters_are_unchanged(self):
        # Monitoring draws its noise apart: the perf counters (and so
        # every baseline) are those of a host without it.
        resctrl, _ = self.run_host(counters=backend.RESCTRL, seed=3)
        perf, _ = self.run_host(counters=backend.PERF, seed=3)
        self.assertEqual(perf.counters(perf.domains()),
                         resctrl.counters(resctrl.domains()))

    def test_noise(self):
        a, _ = self.run_host(seed=1)
        b, _ = self.run_host(seed=2)
        total_a = a.memory_bandwidth(a.domains())['home'][2][1]
        total_b = b.memory_bandwidth(b.domains())['home'][2][1]
        self.assertNotEqual(total_a, total_b)
        self.assertAlmostEqual(1.0, total_a / total_b, delta=0.1)

    def test_a_stopped_guest_is_forgotten(self):
        hv, _ = self.run_host()
        domains = hv.domains()
        hv.stop('split')
        self.assertEqual(['home'], list(hv.memory_bandwidth(domains)))

    def test_the_collector_rates(self):
        collector = collector_mod.Collector()
        hv, _ = self.run_host(collector=collector)
        local, total = collector.guests['split'].bandwidth[1]
        self.assertEqual(0, local)
        # The last second's traffic of its node-1 vCPUs, in bytes/s.
        truth = hv._truth['split'][3] * model.CACHE_LINE / 2
        self.assertAlmostEqual(1.0, total / truth, delta=0.15)


class TestAffinity(testtools.TestCase):

    def test_vcpu_affinity_is_where_the_vcpus_may_run(self):
        host = host_mod.Host(presets.ibm_x3850(4), balancing=False)
        hv = backend.SimHypervisor(host)
        pinned = guest('pinned', {1: 1.0}, 1)
        floating = guest('floating', {2: 1.0}, 2)
        floating.floating = True
        for g in (pinned, floating):
            hv.start(g, preallocate=True)
        domains = {d.name: d for d in hv.domains()}
        cpus = {n.id: n.cpus for n in hv.topology().nodes}
        # Kept on its node (as in the papers): that node's CPUs.
        self.assertEqual(tuple(cpus[1]),
                         hv.vcpu_affinity(domains['pinned']))
        # Placed by the kernel: every CPU of the host.
        self.assertEqual(tuple(c for n in sorted(cpus) for c in cpus[n]),
                         hv.vcpu_affinity(domains['floating']))
        # Pinned by the agent: the nodes of the CPUs it gave.
        hv.pin_vcpus(domains['floating'], cpus[3][:2])
        self.assertEqual(tuple(cpus[3]),
                         hv.vcpu_affinity(domains['floating']))
        self.assertFalse(floating.floating)
        # Pinned to every CPU of the host (an undo to Nova's, libvirt's
        # vcpupin to all): not pinned at all, the kernel places them.
        hv.pin_vcpus(domains['floating'],
                     [c for n in sorted(cpus) for c in cpus[n]])
        self.assertTrue(floating.floating)
        self.assertEqual({3: 1.0}, floating.cpu)
        # No CPU, or a CPU the host lacks: refused, nothing changed.
        for bad in ([], [10 ** 6], [cpus[0][0], 10 ** 6]):
            self.assertRaises(hv_mod.HypervisorError, hv.pin_vcpus,
                              domains['floating'], bad)
        self.assertTrue(floating.floating)
