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
"""A real QEMU guest under real libvirt (qemu:///system) inside the VM.

The guest is written the way nova-compute writes a floating guest: Nova's
metadata with the flavor's extra specs and no ``<numatune>``. It has no
OS: it is started paused with its RAM preallocated, so its pages exist at
once and stay where they are put.
"""

import os
import subprocess
import time
import uuid as uuid_mod

import libvirt

from nova_numa_overhead.compute import agent as agent_mod
from nova_numa_overhead.compute import cgroups
from nova_numa_overhead.compute import hypervisor as hv_mod
from nova_numa_overhead.compute import libvirt_driver
from nova_numa_overhead.compute import numa_stat
from nova_numa_overhead.compute import pages
from tests import base as tests_base
from tests.numa import base
from tests.unit.compute import libvirt_fixtures

URI = 'qemu:///system'
GUEST_MB = 128
TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def guest_xml(name: str, extra_specs: dict, numatune: str = '',
              preallocate: bool = True) -> str:
    """A floating Nova guest (no numatune unless given) without an OS; its
    RAM touched at start (by QEMU's main thread) with ``preallocate``.
    """
    return (
        "<domain type='qemu'>"
        '<name>%(name)s</name><uuid>%(uuid)s</uuid>%(metadata)s'
        "<memory unit='KiB'>%(kib)d</memory>"
        "<currentMemory unit='KiB'>%(kib)d</currentMemory>"
        '%(backing)s'
        "<vcpu placement='static'>1</vcpu>"
        '<cputune><shares>1024</shares></cputune>%(numatune)s'
        "<os><type arch='x86_64' machine='pc'>hvm</type></os>"
        '<devices><emulator>/usr/bin/qemu-system-x86_64</emulator>'
        "<controller type='usb' model='none'/>"
        "<memballoon model='none'/></devices>"
        '</domain>'
        % {'name': name, 'uuid': uuid_mod.uuid4(), 'kib': GUEST_MB * 1024,
           'metadata': libvirt_fixtures._metadata(name, GUEST_MB, 1,
                                                  extra_specs),
           'numatune': numatune,
           'backing': "<memoryBacking><allocation mode='immediate'/>"
                      '</memoryBacking>' if preallocate else ''})


class FakePublisher:

    def __init__(self):
        self.reports = []

    def publish(self, report):
        self.reports.append(report)
        return True


class LibvirtTestCase(base.TestCase):

    def setUp(self):
        super().setUp()
        subprocess.run([os.path.join(TOP, 'tools', 'numa-vm.sh'),
                        '--libvirtd'], check=True, timeout=120)
        self.useFixture(base.Privsep())
        try:
            self.conn = libvirt.open(URI)
        except libvirt.libvirtError as e:
            # Say why: libvirtd's own log (a driver that failed to start).
            try:
                with open('/var/log/libvirt/libvirtd.log') as f:
                    tail = f.read().splitlines()[-5:]
            except OSError:
                tail = []
            self.fail('%s; libvirtd.log ends with:\n%s' % (e, '\n'.join(tail)))
        self.addCleanup(self.conn.close)
        self.hv = libvirt_driver.LibvirtHypervisor(
            URI, mover=pages.PageMover())
        self.addCleanup(self.hv.close)

    def start_guest(self, extra_specs=None, numatune='', preallocate=True):
        name = 'instance-%s' % uuid_mod.uuid4().hex[:8]
        dom = self.conn.defineXML(guest_xml(
            name, extra_specs or {'numa_overhead:policy': 'spread'},
            numatune, preallocate))
        self.addCleanup(libvirt_fixtures.remove_guest, self.conn, name)
        dom.createWithFlags(libvirt.VIR_DOMAIN_START_PAUSED)
        return dom

    def info(self, dom) -> hv_mod.DomainInfo:
        found = [d for d in self.hv.domains() if d.name == dom.name()]
        self.assertEqual(1, len(found))
        return found[0]

    def ram_nodes(self, pid) -> dict:
        """MiB of the guest's RAM mapping per node (numa_maps)."""
        ram = numa_stat.guest_ram_ranges(numa_stat.read_ranges(pid))
        self.assertEqual(1, len(ram), ram)
        return {n: c * ram[0].page_size / (1024 * 1024)
                for n, c in ram[0].pages.items() if c}

    def thread_mems(self, pid) -> list:
        directory, _version = cgroups.process_cpuset(pid)
        result = []
        for cgroup in cgroups.thread_cgroups(directory):
            with open(os.path.join(cgroup, 'cpuset.mems')) as f:
                result.append((os.path.basename(cgroup),
                               cgroups.parse_mems(f.read())))
        return result

    def assertOnlyOn(self, nodes, per_node):
        outside = {n: mb for n, mb in per_node.items()
                   if n not in nodes and mb >= 1}
        self.assertEqual({}, outside, per_node)


class TestHost(LibvirtTestCase):

    def test_topology_from_capabilities(self):
        topology = self.hv.topology()
        self.assertEqual(base.expected_node_cpus(),
                         [list(n.cpus) for n in topology.nodes])
        self.assertEqual(base.expected_distances(),
                         [list(row) for row in topology.distances])
        for node, size_mb in zip(topology.nodes, base.expected_node_mb()):
            self.assertGreater(node.memory_mb, size_mb * 0.8)
            self.assertLessEqual(node.memory_mb, size_mb)
        free = self.hv.free_memory_mb()
        self.assertEqual(4, len(free))
        self.assertTrue(all(0 < f <= n.memory_mb
                            for f, n in zip(free, topology.nodes)))


class TestNovaFloatingGuest(LibvirtTestCase, tests_base.TestCase):

    def make_agent(self):
        # The paper's first placement (memory over several nodes): the
        # restriction mechanics are what this checks.
        self.flags(group='numa_overhead_agent', enforcement='pages',
                   reserve_mb=16, migrate_rate_mb_per_s=0,
                   remote_placement=True)
        return agent_mod.Agent(self.conf, self.hv, FakePublisher(), 'vm')

    def check_placed(self, dom, decision):
        info = self.info(dom)
        plan = sorted(decision.plan)
        self.assertIn(decision.action, ('restricted', 'moved'), decision)
        # The cgroups of every thread carry the plan; libvirt's XML does
        # not know (and its numatune is still absent).
        self.assertEqual([('emulator', tuple(plan)), ('vcpu0', tuple(plan))],
                         self.thread_mems(info.pid))
        self.assertNotIn('<numatune', dom.XMLDesc(0))
        every = len(plan) == self.hv.topology().size
        self.assertEqual(() if every else tuple(plan), info.allowed_nodes)
        # The guest's RAM is on the planned nodes, in the planned shares
        # (what the agent measures also counts QEMU's own memory: the
        # largest share keeps that).
        ram = self.ram_nodes(info.pid)
        self.assertOnlyOn(plan, ram)
        measured = self.hv.memory_per_node(info)
        self.assertOnlyOn(plan, measured)
        for node, share in decision.plan.items():
            self.assertGreaterEqual(measured.get(node, 0), share - 4,
                                    (decision, measured))
        return info

    def test_placed_restricted_repeatedly_and_again_after_restart(self):
        # One guest for all of it: a QEMU start costs minutes under TCG.
        dom = self.start_guest()
        # Its vCPUs float over every node (no <vcpu cpuset>): the affinity
        # libvirt gives spans the host (what the default first placement
        # reads to leave such a guest to the kernel).
        topology = self.hv.topology()
        self.assertEqual(
            tuple(sorted(c for n in topology.nodes for c in n.cpus)),
            self.hv.vcpu_affinity(self.info(dom)))
        # QEMU's driver keeps jobs: none runs (what tells the agent that a
        # live migration ended without an event).
        self.assertIs(False, self.hv.migration_running(self.info(dom)))
        agent = self.make_agent()
        self.hv.register_lifecycle(agent.on_lifecycle)
        self.assertTrue(agent.cycle())
        first = agent.decisions[dom.name()]
        self.assertGreater(len(first.plan), 1, first)
        info = self.check_placed(dom, first)
        # Any number of later changes works (libvirt's own API would refuse
        # the second), and the kernel moves the pages each time.
        for nodes in ([3], [2], [1, 3]):
            self.hv.set_nodeset(info, nodes)
            self.assertOnlyOn(nodes, self.ram_nodes(info.pid))
            self.assertEqual(tuple(nodes), self.info(dom).allowed_nodes)
        self.assertNotIn('<numatune', dom.XMLDesc(0))
        # Nova's nodes back: what the machine scope allows (every node
        # here), not written out by the agent from its own topology.
        self.hv.restore(info, (), None)
        self.assertEqual({}, self.narrowed(info))
        # Its vCPUs through their cgroups the same way: the affinity the
        # kernel gives their threads, and nothing in the XML that a live
        # migration copies to its destination; then what the parent
        # cgroup allows again.
        every = tuple(sorted(c for n in topology.nodes for c in n.cpus))
        cpus = tuple(sorted(topology.nodes[1].cpus))
        self.hv.pin_vcpus(info, cpus)
        self.assertEqual(cpus, self.hv.vcpu_affinity(self.info(dom)))
        self.assertNotIn('vcpupin', dom.XMLDesc(
            libvirt.VIR_DOMAIN_XML_MIGRATABLE))
        self.hv.restore(info, None, ())
        self.assertEqual(every, self.hv.vcpu_affinity(self.info(dom)))
        # A restart (Nova's hard reboot, a migration's arrival) is a new
        # QEMU: the 'started' event places it again (the agent service's
        # event thread does what this loop does).
        dom.destroy()
        dom.createWithFlags(libvirt.VIR_DOMAIN_START_PAUSED)
        deadline = time.monotonic() + 300
        while agent.decisions.get(dom.name()) is first:
            self.assertLess(time.monotonic(), deadline, 'no placement')
            agent.wait_for_events(5)
            agent.handle_events()
        decision = agent.decisions[dom.name()]
        again = self.check_placed(dom, decision)
        self.assertNotEqual(info.pid, again.pid)
        # Every node with CPUs (nodes 2 and 3 have none here).
        self.assertEqual({n.id for n in topology.nodes if n.cpus},
                         agent.vcpu_reach(again))

    def test_default_first_placement_of_a_floating_guest(self):
        # The default policy and first placement: a guest whose vCPUs may
        # run on both nodes with CPUs, its RAM not preallocated (as Nova
        # starts it), paused: what it touched is QEMU's own (12 MiB over
        # nodes 0 and 1 when measured), within placer.OUTSIDE_MB wherever
        # its vCPU runs. Left to the kernel.
        self.flags(group='numa_overhead_agent', enforcement='pages',
                   reserve_mb=16, migrate_rate_mb_per_s=0)
        agent = agent_mod.Agent(self.conf, self.hv, FakePublisher(), 'vm')
        self.assertTrue(agent.cycle())
        # Started after the agent's first listing: a guest just started.
        dom = self.start_guest(extra_specs={'hw:cpu_policy': 'shared'},
                               preallocate=False)
        agent.cycle()
        decision = agent.decisions[dom.name()]
        info = self.info(dom)
        self.assertEqual('skipped', decision.action, decision)
        self.assertIn('its vCPUs may run on nodes 0,1, beyond the plan\'s '
                      'nodes', decision.reason)
        self.assertIn('its memory is there already', decision.reason)
        self.assertIn('not confined', decision.reason)
        self.assertEqual((), info.allowed_nodes)
        self.assertEqual({}, self.narrowed(info))

    def narrowed(self, info) -> dict:
        """Threads of the guest whose cpuset.mems is narrower than the
        host's memory nodes.
        """
        every = tuple(range(self.hv.topology().size))
        return {name: mems for name, mems in self.thread_mems(info.pid)
                if mems and tuple(mems) != every}


class TestLibvirtLiveNumatune(LibvirtTestCase):
    """What libvirt itself allows live (the facts the design rests on)."""

    def test_nova_guest_changes_once_then_strict(self):
        dom = self.start_guest()
        pid = self.info(dom).pid
        dom.setNumaParameters({libvirt.VIR_DOMAIN_NUMA_NODESET: '2'},
                              libvirt.VIR_DOMAIN_AFFECT_LIVE)
        self.assertOnlyOn([2], self.ram_nodes(pid))
        self.assertEqual('strict', libvirt_driver.live_numatune_mode(
            dom.XMLDesc(0)))
        error = self.assertRaises(
            libvirt.libvirtError, dom.setNumaParameters,
            {libvirt.VIR_DOMAIN_NUMA_NODESET: '3'},
            libvirt.VIR_DOMAIN_AFFECT_LIVE)
        self.assertIn('requires restrictive numa mode', str(error))
        self.assertOnlyOn([2], self.ram_nodes(pid))
        # The agent does not override a numatune: it says why.
        error = self.assertRaises(hv_mod.HypervisorError, self.hv.set_nodeset,
                                  self.info(dom), [3])
        self.assertIn("numatune mode is 'strict'", str(error))

    def test_restrictive_numatune_through_libvirt(self):
        dom = self.start_guest(
            numatune="<numatune><memory mode='restrictive' nodeset='0-3'/>"
                     '</numatune>')
        info = self.info(dom)
        for nodes in ([3], [2]):
            self.hv.set_nodeset(info, nodes)
            self.assertOnlyOn(nodes, self.ram_nodes(info.pid))
            self.assertEqual(tuple(nodes), self.info(dom).allowed_nodes)
