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
"""The libvirt backend against libvirt's in-process test driver.

``test:///default`` is one host per process, shared by every connection
open at the same time and reset when the last one closes; it has two
cells (CPUs 0-7 and 8-15, 2 and 4 GiB) and a running non-Nova guest
called 'test'. Each test defines its own guests under unique names and
removes them again.
"""

import dataclasses
import os
import threading
import time
from unittest import mock
import uuid as uuid_mod

import fixtures
import libvirt

from nova_numa_overhead.compute import hypervisor
from nova_numa_overhead.compute import libvirt_driver
from nova_numa_overhead.compute import numa_stat
from tests import base
from tests.unit.compute import fakes
from tests.unit.compute import libvirt_fixtures

URI = 'test:///default'


def _error(code, domain=0, message='injected'):
    """A libvirtError carrying this code and error domain."""
    error = libvirt.libvirtError(message)
    error.err = (code, domain, message, 2, None, None, None, 0, 0)
    return error


def _callback(event, domain_name):
    """Signature of a lifecycle callback (for autospec)."""


def _mover(domain, moves, max_pages):
    """Signature of the page mover seam (for autospec)."""


class LibvirtDriverTestCase(base.TestCase):

    def setUp(self):
        super().setUp()
        self.now = 1000.0
        self.sleep = mock.create_autospec(time.sleep, side_effect=self._tick)
        self.hv = libvirt_driver.LibvirtHypervisor(URI, sleep=self.sleep,
                                                   clock=self._clock)
        self.addCleanup(self.hv.close)
        # The driver registers the event loop before its first open.
        self.hv.topology()
        self.conn = libvirt.open(URI)
        self.addCleanup(self.conn.close)

    def _clock(self):
        return self.now

    def _tick(self, seconds):
        self.now += seconds

    def _define(self, vcpus=2, memory_mb=512, extra_specs=None, start=True,
                **kwargs):
        """Define (and start) a guest; removed again after the test."""
        return libvirt_fixtures.start_guest(
            self, self.conn, memory_mb, vcpus, extra_specs, start, **kwargs)

    def _info(self, dom):
        """The driver's DomainInfo of this guest."""
        found = [d for d in self.hv.domains() if d.name == dom.name()]
        self.assertEqual(1, len(found), found)
        return found[0]

    def _wait_for(self, predicate, timeout=5.0):
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                self.fail('timed out waiting')
            time.sleep(0.01)


class TestHost(LibvirtDriverTestCase):

    def test_topology(self):
        topo = self.hv.topology()
        self.assertEqual(2, topo.size)
        self.assertEqual(tuple(range(8)), topo.nodes[0].cpus)
        self.assertEqual(tuple(range(8, 16)), topo.nodes[1].cpus)
        self.assertEqual([2048, 4096], [n.memory_mb for n in topo.nodes])
        # The test driver's capabilities have no <distances>: SLIT defaults.
        self.assertEqual(((10, 20), (20, 10)), topo.distances)
        self.assertEqual(16, len(topo.node_of_cpu()))
        self.assertIs(topo, self.hv.topology())

    def test_free_memory(self):
        # The test driver returns each cell's size in KiB where the API
        # says bytes (and ignores guests): 2097152 "bytes" -> 2 MiB.
        raw = self.conn.getCellsFreeMemory(0, 2)
        self.assertEqual([2097152, 4194304], raw)
        self.assertEqual([2, 4], self.hv.free_memory_mb())

    def test_close_then_use_reopens(self):
        self.hv.close()
        self.assertEqual([2, 4], self.hv.free_memory_mb())
        self.sleep.assert_not_called()


class TestParsing(base.TestCase):

    def test_capabilities_with_distances_and_gap(self):
        xml = """<capabilities><host><topology><cells num='2'>
          <cell id='0'><memory unit='GiB'>1</memory>
            <distances><sibling id='0' value='10'/>
                       <sibling id='2' value='32'/></distances>
            <cpus num='2'><cpu id='1'/><cpu id='0'/></cpus></cell>
          <cell id='2'><memory unit='KiB'>2097152</memory>
            <distances><sibling id='0' value='32'/>
                       <sibling id='2' value='10'/></distances>
            <cpus num='1'><cpu id='2'/></cpus></cell>
        </cells></topology></host></capabilities>"""
        topo = libvirt_driver.parse_capabilities(xml)
        self.assertEqual(3, topo.size)
        self.assertEqual((0, 1), topo.nodes[0].cpus)
        self.assertEqual(1024, topo.nodes[0].memory_mb)
        self.assertEqual(hypervisor.NodeInfo(1, (), 0), topo.nodes[1])
        self.assertEqual(2048, topo.nodes[2].memory_mb)
        self.assertEqual(((10, 20, 32), (20, 10, 20), (32, 20, 10)),
                         topo.distances)

    def test_capabilities_count_cores_from_siblings(self):
        xml = """<capabilities><host><topology><cells num='1'>
          <cell id='0'><memory unit='GiB'>1</memory>
            <cpus num='4'>
              <cpu id='0' socket_id='0' core_id='0' siblings='0,2'/>
              <cpu id='1' socket_id='0' core_id='1' siblings='1,3'/>
              <cpu id='2' socket_id='0' core_id='0' siblings='0,2'/>
              <cpu id='3' socket_id='0' core_id='1' siblings='1,3'/>
            </cpus></cell>
        </cells></topology></host></capabilities>"""
        topo = libvirt_driver.parse_capabilities(xml)
        self.assertEqual((0, 1, 2, 3), topo.nodes[0].cpus)
        self.assertEqual(2, topo.nodes[0].cores)

    def test_capabilities_llc_per_node(self):
        # Node 0: one 30 MiB bank (listed twice: counted once); node 1:
        # two CCX banks of 16384 KiB; nodes 2 and 3: a 24 MiB bank over
        # CPUs 4-5 of node 2 and 7 of node 3 (sub-NUMA clusters; CPU 6 is
        # in no cell), split 2:1;
        # node 4 lists only unreadable, tiny, L2 or cell-less banks.
        cells = ''.join(
            "<cell id='%d'><memory unit='GiB'>1</memory><cpus num='2'>"
            "<cpu id='%d'/><cpu id='%d'/></cpus></cell>" % (n, 2 * n,
                                                            2 * n + 1)
            for n in range(5))
        cells = cells.replace("<cpu id='6'/>", "")
        xml = ("<capabilities><host><topology><cells num='5'>%s</cells>"
               "</topology><cache>"
               "<bank id='0' level='3' type='both' size='30' unit='MiB' "
               "cpus='0-1'/>"
               "<bank id='0' level='3' type='both' size='30' unit='MiB' "
               "cpus='0-1'/>"
               "<bank id='1' level='3' type='both' size='16384' "
               "unit='KiB' cpus='2'/>"
               "<bank id='2' level='3' type='both' size='16384' "
               "unit='KiB' cpus='3'/>"
               "<bank id='3' level='3' type='both' size='24' unit='MiB' "
               "cpus='4,5,7,6'/>"
               "<bank id='4' level='3' size='x' unit='MiB' cpus='8'/>"
               "<bank id='5' level='3' size='8' unit='parsecs' cpus='8'/>"
               "<bank id='6' level='3' size='-8' unit='MiB' cpus='8'/>"
               "<bank id='7' level='3' size='100' unit='KiB' cpus='8'/>"
               "<bank id='8' level='3' size='8' unit='MiB'/>"
               "<bank id='9' level='3' size='8' unit='MiB' cpus='99'/>"
               "<bank id='10' level='3' size='1%s' unit='MiB' cpus='8'/>"
               "<bank id='11' level='2' size='1' unit='MiB' cpus='8-9'/>"
               "</cache></host></capabilities>" % (cells, '0' * 400))
        topo = libvirt_driver.parse_capabilities(xml)
        self.assertEqual([30.0, 32.0, 16.0, 8.0, None],
                         [node.llc_mb for node in topo.nodes])
        # Without banks: unknown.
        topo = libvirt_driver.parse_capabilities(xml.split('<cache>')[0] +
                                                 '</host></capabilities>')
        self.assertEqual([None] * 5, [node.llc_mb for node in topo.nodes])

    def test_capabilities_without_cells(self):
        topo = libvirt_driver.parse_capabilities(
            '<capabilities><host/></capabilities>', fallback_cpus=4,
            fallback_memory_mb=1024)
        self.assertEqual(
            (hypervisor.NodeInfo(0, (0, 1, 2, 3), 1024),), topo.nodes)
        self.assertEqual(((10,),), topo.distances)

    def test_sets(self):
        self.assertEqual((0, 1, 3, 8, 9), libvirt_driver.parse_set(
            '0-3,^2,8-9'))
        self.assertEqual((), libvirt_driver.parse_set(''))
        self.assertRaises(ValueError, libvirt_driver.parse_set, '3-1')
        self.assertEqual('0-2,5,7-8',
                         libvirt_driver.format_set([8, 0, 1, 2, 5, 7]))
        self.assertEqual('1', libvirt_driver.format_set({1}))

    def _xml(self, **kwargs):
        args = dict(name='g', uuid=str(uuid_mod.uuid4()), memory_mb=512,
                    vcpus=2, extra_specs={})
        args.update(kwargs)
        return libvirt_fixtures.nova_domain_xml(**args)

    def test_pinned_reasons(self):
        cases = [
            (dict(pinned=True), 'strict numatune with memnodes'),
            (dict(extra_specs={'hw:cpu_policy': 'dedicated'}),
             'hw:cpu_policy=dedicated'),
            (dict(hugepages=True), 'hugepages'),
            (dict(extra_specs={'hw:mem_page_size': 'small'}),
             'hw:mem_page_size=small'),
            (dict(extra_specs={'hw:numa_nodes': '2'}), 'hw:numa_nodes=2'),
            (dict(nodeset='0-1'), ''),
            (dict(extra_specs={'hw:cpu_policy': 'shared'}), ''),
        ]
        for kwargs, reason in cases:
            info = libvirt_driver.parse_domain(self._xml(**kwargs))
            self.assertEqual((bool(reason), reason),
                             (info.pinned, info.pinned_reason), kwargs)

    def test_dedicated_with_vcpupin(self):
        xml = self._xml(extra_specs={'hw:cpu_policy': 'dedicated'}).replace(
            '<os>', '<cputune><vcpupin vcpu="0" cpuset="3"/></cputune><os>')
        info = libvirt_driver.parse_domain(xml)
        self.assertEqual('hw:cpu_policy=dedicated with vcpupin',
                         info.pinned_reason)

    def test_file_backed_memory_is_left_alone(self):
        # Nova's [libvirt] file_backed_memory: the guest's RAM is page
        # cache, which the agent neither measures per node nor moves.
        xml = self._xml().replace(
            '<os>', '<memoryBacking><source type="file"/><access '
            'mode="shared"/></memoryBacking><os>')
        info = libvirt_driver.parse_domain(xml)
        self.assertEqual((True, 'file-backed memory'),
                         (info.pinned, info.pinned_reason))
        memfd = self._xml().replace(
            '<os>', '<memoryBacking><source type="memfd"/></memoryBacking>'
            '<os>')
        self.assertFalse(libvirt_driver.parse_domain(memfd).pinned)

    def test_the_run_is_the_domain_id(self):
        # A running domain's XML carries its id, new at every start: how
        # the agent tells a new QEMU whose start it did not see.
        running = self._xml().replace("<domain type='test'>",
                                      "<domain type='test' id='7'>")
        self.assertEqual('7', libvirt_driver.parse_domain(running).run)
        for xml in (self._xml(), self._xml().replace(
                "<domain type='test'>", "<domain type='test' id='-1'>")):
            self.assertEqual('', libvirt_driver.parse_domain(xml).run)

    def test_unparseable_xml(self):
        info = libvirt_driver.parse_domain('<domain><name>x</nam',
                                           name='x', uuid='u')
        self.assertEqual(('x', 'u', 0), (info.name, info.uuid, info.vcpus))
        self.assertIn('unparseable domain XML', info.metadata_error)
        self.assertFalse(info.pinned)

    def test_odd_extra_specs(self):
        xml = self._xml(extra_specs={'hw:cpu_policy': 'dedicated'}).replace(
            ' name="hw:cpu_policy"', '')
        info = libvirt_driver.parse_domain(xml)
        self.assertEqual('nova:extraSpec without a name', info.metadata_error)
        self.assertEqual({}, info.extra_specs)

    def test_old_nova_without_extra_specs(self):
        info = libvirt_driver.parse_domain(self._xml(extra_specs=None))
        self.assertEqual(({}, '', True),
                         (info.extra_specs, info.metadata_error, info.nova))

    def test_novas_placement_and_the_agents_record(self):
        xml = self._xml(nodeset='1').replace(
            "<vcpu placement='static'>", "<vcpu placement='static' "
            "cpuset='0-3,6'>")
        info = libvirt_driver.parse_domain(xml)
        self.assertEqual((1,), info.nova_nodes)
        self.assertEqual((0, 1, 2, 3, 6), info.nova_cpus)
        self.assertIsNone(info.recorded)
        recorded = hypervisor.Recorded(
            host='cmp-1', nova_nodes=(), nova_cpus=(0, 1, 2, 3, 6),
            nodes=(1,), cpus=(), action='moved', outcome='ok: <1 MiB> & "x"',
            at='2026-11-23T15:00:00Z', moved=3, kept=1, undone=2,
            backoff_undos=2, backoff_until='2026-11-23T15:02:00Z')
        element = libvirt_driver.format_recorded(recorded)
        xml = xml.replace('</metadata>', element.replace(
            '<agent ', '<numa-overhead:agent xmlns:numa-overhead="%s" '
            % libvirt_driver.AGENT_NS, 1).replace(
            '</agent>', '</numa-overhead:agent>').replace(
            '<nova ', '<numa-overhead:nova ').replace(
            '<restriction ', '<numa-overhead:restriction ').replace(
            '<last ', '<numa-overhead:last ').replace(
            '<optimizer ', '<numa-overhead:optimizer ').replace(
            '<backoff ', '<numa-overhead:backoff ') + '</metadata>')
        self.assertEqual(recorded, libvirt_driver.parse_domain(xml).recorded)
        # No backoff (an older agent's record, or none now).
        old = xml.replace(xml[xml.index('<numa-overhead:backoff '):
                              xml.index('/>', xml.index(
                                  '<numa-overhead:backoff ')) + 2], '')
        self.assertEqual(dataclasses.replace(
            recorded, backoff_undos=0, backoff_until=''),
            libvirt_driver.parse_domain(old).recorded)
        # An unreadable time is no wait; the undos still count.
        odd = libvirt_driver.parse_domain(xml.replace(
            '2026-11-23T15:02:00Z', 'soon'))
        self.assertEqual(dataclasses.replace(recorded, backoff_until=''),
                         odd.recorded)
        # A record an older agent wrote has no counts: 0.
        old = old.replace(xml[xml.index('<numa-overhead:optimizer '):
                              xml.index('/>', xml.index(
                                  '<numa-overhead:optimizer ')) + 2], '')
        self.assertEqual(dataclasses.replace(
            recorded, moved=0, kept=0, undone=0, backoff_undos=0,
            backoff_until=''), libvirt_driver.parse_domain(old).recorded)
        # Unreadable counts are an account lost, not the record.
        odd = libvirt_driver.parse_domain(xml.replace('kept="1"',
                                                      'kept="many"'))
        self.assertEqual(dataclasses.replace(recorded, kept=0), odd.recorded)
        broken = xml.replace('nodes="1"', 'nodes="x"')
        info = libvirt_driver.parse_domain(broken)
        self.assertIsNone(info.recorded)
        self.assertEqual('', info.metadata_error)

    def test_event_names(self):
        name = libvirt_driver.LibvirtHypervisor.event_name
        cases = [
            ((libvirt.VIR_DOMAIN_EVENT_STARTED,
              libvirt.VIR_DOMAIN_EVENT_STARTED_BOOTED), 'started'),
            # An arrival is placed at the end of its migration.
            ((libvirt.VIR_DOMAIN_EVENT_STARTED,
              libvirt.VIR_DOMAIN_EVENT_STARTED_MIGRATED), None),
            ((libvirt.VIR_DOMAIN_EVENT_RESUMED,
              libvirt.VIR_DOMAIN_EVENT_RESUMED_MIGRATED), 'resumed'),
            ((libvirt.VIR_DOMAIN_EVENT_RESUMED,
              libvirt.VIR_DOMAIN_EVENT_RESUMED_POSTCOPY), None),
            ((libvirt.VIR_DOMAIN_EVENT_RESUMED,
              libvirt.VIR_DOMAIN_EVENT_RESUMED_POSTCOPY_FAILED), 'resumed'),
            ((libvirt.VIR_DOMAIN_EVENT_RESUMED,
              libvirt.VIR_DOMAIN_EVENT_RESUMED_UNPAUSED), None),
            ((libvirt.VIR_DOMAIN_EVENT_SUSPENDED,
              libvirt.VIR_DOMAIN_EVENT_SUSPENDED_MIGRATED), 'migrating'),
            ((libvirt.VIR_DOMAIN_EVENT_SUSPENDED,
              libvirt.VIR_DOMAIN_EVENT_SUSPENDED_PAUSED), None),
            ((libvirt.VIR_DOMAIN_EVENT_STOPPED,
              libvirt.VIR_DOMAIN_EVENT_STOPPED_MIGRATED), 'stopped'),
            ((libvirt.VIR_DOMAIN_EVENT_CRASHED, 0), 'stopped'),
            ((libvirt.VIR_DOMAIN_EVENT_DEFINED, 0), None),
        ]
        for (event, detail), expected in cases:
            self.assertEqual(expected, name(event, detail), (event, detail))

    def test_event_names_on_an_older_libvirt(self):
        # libvirt < 8.5 has no RESUMED_POSTCOPY_FAILED (Nova runs on 8.0).
        name = libvirt_driver.LibvirtHypervisor.event_name
        self.useFixture(fixtures.MonkeyPatch(
            'libvirt.VIR_DOMAIN_EVENT_RESUMED_POSTCOPY_FAILED',
            fixtures.MonkeyPatch.delete))
        # Looked up afresh (once a libvirt, otherwise).
        libvirt_driver._constants.cache_clear()
        self.addCleanup(libvirt_driver._constants.cache_clear)
        self.assertEqual('resumed', name(
            libvirt.VIR_DOMAIN_EVENT_RESUMED,
            libvirt.VIR_DOMAIN_EVENT_RESUMED_MIGRATED))

    def test_pid_dir_from_uri(self):
        derive = libvirt_driver.LibvirtHypervisor._derive_pid_dir
        self.assertEqual('/run/libvirt/qemu', derive('qemu:///system'))
        self.assertEqual('/run/libvirt/qemu', derive('qemu+unix:///system'))
        self.assertIsNone(derive('qemu+ssh://host/system'))
        self.assertIsNone(derive('qemu:///session'))
        self.assertIsNone(derive(URI))

    def test_kernel_state_of_a_local_qemu_only(self):
        proc = self.useFixture(fixtures.TempDir()).path
        os.makedirs(os.path.join(proc, 'sys', 'kernel'))
        with open(os.path.join(proc, 'sys', 'kernel', 'numa_balancing'),
                  'w') as f:
            f.write('1\n')
        os.makedirs(os.path.join(proc, '1'))
        os.makedirs(os.path.join(proc, '812'))
        with open(os.path.join(proc, '812', 'comm'), 'w') as f:
            f.write('numad\n')
        with open(os.path.join(proc, '812', 'status'), 'w') as f:
            f.write('Name:\tnumad\nUid:\t0\t0\t0\t0\n')
        # No connection needed: the host's /proc is read.
        local = libvirt_driver.LibvirtHypervisor('qemu:///system')
        local.proc = proc
        state = local.kernel_state()
        self.assertEqual((1, (812,)), (state.numa_balancing, state.numad))
        # Another host's kernel, or none at all: unknown.
        for uri in ('qemu+ssh://other/system', URI):
            remote = libvirt_driver.LibvirtHypervisor(uri)
            remote.proc = proc
            self.assertIsNone(remote.kernel_state(), uri)

    def test_without_libvirt_python(self):
        with mock.patch.object(libvirt_driver, 'libvirt', None):
            error = self.assertRaises(hypervisor.HypervisorError,
                                      libvirt_driver.LibvirtHypervisor)
        self.assertIn('libvirt-python', str(error))


class TestDomains(LibvirtDriverTestCase):

    def test_floating_and_pinned(self):
        floating = self._define(vcpus=2, memory_mb=512,
                                extra_specs={'hw:cpu_policy': 'shared'})
        pinned = self._define(vcpus=2, memory_mb=1024, pinned=True,
                              nodeset='1',
                              extra_specs={'hw:cpu_policy': 'dedicated'})
        info = self._info(floating)
        self.assertEqual(
            (floating.UUIDString(), 512, 2, {'hw:cpu_policy': 'shared'}),
            (info.uuid, info.memory_mb, info.vcpus, info.extra_specs))
        self.assertEqual((True, False, '', (), None),
                         (info.nova, info.pinned, info.metadata_error,
                          info.allowed_nodes, info.pid))
        info = self._info(pinned)
        self.assertTrue(info.pinned)
        self.assertEqual('strict numatune with memnodes', info.pinned_reason)
        self.assertEqual((1,), info.allowed_nodes)
        self.assertEqual(1024, info.memory_mb)

    def test_only_running_domains(self):
        dom = self._define(start=False)
        self.assertNotIn(dom.name(), [d.name for d in self.hv.domains()])

    def test_floating_with_nodeset(self):
        info = self._info(self._define(nodeset='1'))
        self.assertEqual(((1,), False), (info.allowed_nodes, info.pinned))

    def test_garbage_metadata(self):
        info = self._info(self._define(garbage_metadata=True))
        self.assertTrue(info.nova)
        self.assertIn('nova:flavor/nova:memory', info.metadata_error)
        self.assertEqual((512, 2), (info.memory_mb, info.vcpus))

    def test_unparseable_domain_xml(self):
        dom = self._define()
        self.useFixture(fixtures.MockPatchObject(
            libvirt.virDomain, 'XMLDesc', autospec=True,
            return_value='<domain'))
        info = self._info(dom)
        self.assertIn('unparseable', info.metadata_error)
        self.assertEqual(dom.UUIDString(), info.uuid)

    def test_non_nova_guest(self):
        dom = self._define(nova_metadata=False)
        info = self._info(dom)
        self.assertEqual((False, {}, '', dom.UUIDString()),
                         (info.nova, info.extra_specs, info.metadata_error,
                          info.uuid))

    def test_pid_file(self):
        pid_dir = self.useFixture(fixtures.TempDir()).path
        hv = libvirt_driver.LibvirtHypervisor(URI, pid_dir=pid_dir)
        self.addCleanup(hv.close)
        dom = self._define()
        with open(os.path.join(pid_dir, dom.name() + '.pid'), 'w') as f:
            f.write('4242\n')
        other = self._define()
        with open(os.path.join(pid_dir, other.name() + '.pid'), 'w') as f:
            f.write('garbage')
        pids = {d.name: d.pid for d in hv.domains()}
        self.assertEqual(4242, pids[dom.name()])
        self.assertIsNone(pids[other.name()])

    def test_vanished_while_listing_is_skipped(self):
        dom = self._define()
        self.useFixture(fixtures.MockPatchObject(
            libvirt.virDomain, 'XMLDesc', autospec=True,
            side_effect=_error(libvirt.VIR_ERR_NO_DOMAIN)))
        self.assertNotIn(dom.name(), [d.name for d in self.hv.domains()])

    def test_vcpu_cpus(self):
        info = self._info(self._define(vcpus=3, pinned=True))
        self.assertEqual([0, 1, 2], self.hv.vcpu_cpus(info))


class TestActions(LibvirtDriverTestCase):

    def test_set_nodeset_without_pid(self):
        # No QEMU pid (remote URI, test driver): libvirt's live numatune,
        # which on a guest without numatune works once and leaves it
        # strict; real libvirt >= 8.0 then refuses every later change (the
        # test driver does not: tests/numa checks the real one).
        dom = self._define()
        info = self._info(dom)
        self.hv.set_nodeset(info, [1, 0])
        self.assertEqual({'numa_mode': libvirt.VIR_DOMAIN_NUMATUNE_MEM_STRICT,
                          'numa_nodeset': '0-1'}, dom.numaParameters())
        self.assertEqual((0, 1), self._info(dom).allowed_nodes)
        self.hv.set_nodeset(info, {1})
        self.assertEqual('1', dom.numaParameters()['numa_nodeset'])

    def test_set_nodeset_restrictive_numatune(self):
        dom = self._define(nodeset='0-1', nodeset_mode='restrictive')
        info = self._info(dom)
        self.hv.set_nodeset(info, [1])
        self.hv.set_nodeset(info, [0])
        self.assertEqual('0', dom.numaParameters()['numa_nodeset'])

    def test_set_nodeset_through_cgroups(self):
        # A Nova floating guest (no numatune) with a local QEMU pid: its
        # cpuset cgroups, as often as needed; its XML does not change.
        calls = []
        hv = self._cgroup_driver(calls.append)
        dom = self._define()
        info = self._info_of(hv, dom)
        self.assertEqual(os.getpid(), info.pid)
        hv.set_nodeset(info, {1})
        hv.set_nodeset(info, [1, 0])
        identity = (info.name, info.uuid)
        self.assertEqual([(identity, [1]), (identity, [0, 1])], calls)
        self.assertEqual('', dom.numaParameters()['numa_nodeset'])

    def test_set_nodeset_strict_numatune_is_refused(self):
        calls = []
        hv = self._cgroup_driver(calls.append)
        dom = self._define(nodeset='0-1')
        error = self.assertRaises(hypervisor.HypervisorError,
                                  hv.set_nodeset, self._info_of(hv, dom), [1])
        self.assertIn("numatune mode is 'strict'", str(error))
        self.assertEqual([], calls)

    def test_set_nodeset_cgroup_failures(self):
        errors = [OSError(13, 'cannot write 1 to .../cpuset.mems: denied'),
                  hypervisor.DomainGone('QEMU of x (pid 1) exited')]

        def refuse(call):
            raise errors.pop(0)

        hv = self._cgroup_driver(refuse)
        dom = self._define()
        info = self._info_of(hv, dom)
        error = self.assertRaises(hypervisor.HypervisorError,
                                  hv.set_nodeset, info, [1])
        self.assertIn('through its cgroups: [Errno 13] cannot write',
                      str(error))
        self.assertRaises(hypervisor.DomainGone, hv.set_nodeset, info, [1])

    def test_set_nodeset_cgroup_helper_not_started(self):
        from oslo_privsep import daemon

        def refuse(call):
            raise daemon.FailedToDropPrivileges(
                'privsep helper command exited non-zero (1)')

        hv = self._cgroup_driver(refuse)
        info = self._info_of(hv, self._define())
        error = self.assertRaises(hypervisor.HypervisorError,
                                  hv.set_nodeset, info, [1])
        self.assertIn('the privileged helper [numa_overhead_cgroups] did '
                      'not start (privsep helper command exited non-zero '
                      '(1)); check its helper_command', str(error))
        self.assertNotIn('\n', str(error))

    def test_cgroup_restriction_shows_in_allowed_nodes(self):
        hv = self._cgroup_driver(lambda call: None)
        dom = self._define()
        self.useFixture(fixtures.MockPatch(
            'nova_numa_overhead.compute.cgroups.memory_nodes',
            autospec=True, side_effect=[(1,), (0, 1), ()]))
        self.assertEqual((1,), self._info_of(hv, dom).allowed_nodes)
        # All nodes, or no restriction at all: every node.
        self.assertEqual((), self._info_of(hv, dom).allowed_nodes)
        self.assertEqual((), self._info_of(hv, dom).allowed_nodes)

    def test_novas_nodes_back_through_cgroups_are_the_parents(self):
        # A floating guest's nodes given back: [] to the cgroup helper
        # (the parent's nodes), not every node of the host.
        calls = []
        hv = self._cgroup_driver(calls.append, cpus=calls.append)
        dom = self._define()
        info = self._info_of(hv, dom)
        hv.restore(info, (), None)
        hv.restore(info, (), ())
        identity = (info.name, info.uuid)
        self.assertEqual([(identity, []), (identity, []), (identity, [])],
                         calls)

    def test_vcpus_of_a_local_qemu_through_cgroups(self):
        # Not virDomainPinVcpu: its <vcpupin> would travel with a live
        # migration. Nova's placement back: what the parent allows ([]).
        calls = []
        hv = self._cgroup_driver(None, cpus=calls.append)
        dom = self._define()
        info = self._info_of(hv, dom)
        hv.pin_vcpus(info, {3, 2})
        hv.restore(info, None, ())
        hv.restore(info, None, (1, 2))
        identity = (info.name, info.uuid)
        self.assertEqual([(identity, [2, 3]), (identity, []),
                          (identity, [1, 2])], calls)
        self.assertNotIn('vcpupin', dom.XMLDesc(0))
        self.assertRaises(hypervisor.HypervisorError, hv.pin_vcpus, info,
                          [999])

    def test_vcpus_through_libvirt_where_they_have_no_cgroup(self):
        # libvirt made no cpuset cgroup for the vCPU threads: its own
        # pinning, from then on; a refused write stays an error.
        from nova_numa_overhead.compute import cgroups
        errors = [cgroups.CgroupError('no vCPU cgroup (vcpuN) next to x'),
                  OSError(13, 'denied')]
        calls = []

        def refuse(call):
            calls.append(call)
            raise errors.pop(0)
        hv = self._cgroup_driver(None, cpus=refuse)
        dom = self._define()
        info = self._info_of(hv, dom)
        hv.pin_vcpus(info, [1])
        hv.pin_vcpus(info, [0])
        self.assertEqual(1, len(calls))
        self.assertIn('vcpupin', dom.XMLDesc(0))
        hv2 = self._cgroup_driver(None, cpus=refuse)
        self.assertRaises(hypervisor.HypervisorError, hv2.pin_vcpus,
                          self._info_of(hv2, dom), [1])

    def _cgroup_driver(self, record, cpus=None):
        pid_dir = self.useFixture(fixtures.TempDir()).path
        hv = libvirt_driver.LibvirtHypervisor(
            URI, pid_dir=pid_dir,
            memory_nodes=lambda identity, nodes: record((identity, nodes)),
            vcpu_cpus=lambda identity, c: cpus((identity, c)))
        self.addCleanup(hv.close)
        self._pid_dir = pid_dir
        return hv

    def _info_of(self, hv, dom):
        with open(os.path.join(self._pid_dir, dom.name() + '.pid'), 'w') as f:
            f.write('%d\n' % os.getpid())
        found = [d for d in hv.domains() if d.name == dom.name()]
        self.assertEqual(1, len(found), found)
        return found[0]

    def test_set_nodeset_refusals(self):
        dom = self._define()
        info = self._info(dom)
        # The test driver itself accepts any nodeset ('7', '0-5').
        for nodes in ([2], [], [-1]):
            self.assertRaises(hypervisor.HypervisorError,
                              self.hv.set_nodeset, info, nodes)
        self.assertEqual('', dom.numaParameters()['numa_nodeset'])
        pinned = self._info(self._define(pinned=True))
        error = self.assertRaises(hypervisor.HypervisorError,
                                  self.hv.set_nodeset, pinned, [0, 1])
        self.assertIn('strict numatune', str(error))

    def test_pin_vcpus(self):
        dom = self._define(vcpus=2)
        self.hv.pin_vcpus(self._info(dom), [2, 3])
        _info, maps = dom.vcpus()
        # The test driver's CPU map has 8 CPUs (capabilities say 16).
        expected = tuple(i in (2, 3) for i in range(len(maps[0])))
        self.assertEqual([expected, expected], maps)

    def test_vcpu_affinity(self):
        dom = self._define(vcpus=2)
        info = self._info(dom)
        # The test driver's vCPUs may run on any of its CPUs at first.
        _info, maps = dom.vcpus()
        self.assertEqual(tuple(range(len(maps[0]))),
                         self.hv.vcpu_affinity(info))
        self.hv.pin_vcpus(info, [2, 3])
        self.assertEqual((2, 3), self.hv.vcpu_affinity(info))
        dom.pinVcpu(1, tuple(i == 5 for i in range(len(maps[0]))))
        self.assertEqual((2, 3, 5), self.hv.vcpu_affinity(info))

    def test_vcpu_affinity_without_maps_is_unknown(self):
        dom = self._define()
        self.useFixture(fixtures.MockPatchObject(
            libvirt.virDomain, 'vcpus', autospec=True,
            return_value=([], [])))
        self.assertIsNone(self.hv.vcpu_affinity(self._info(dom)))

    def test_pin_vcpus_refusals(self):
        info = self._info(self._define())
        self.assertRaises(hypervisor.HypervisorError,
                          self.hv.pin_vcpus, info, [99])
        self.assertRaises(hypervisor.HypervisorError,
                          self.hv.pin_vcpus, info, [])
        pinned = self._info(self._define(pinned=True))
        self.assertRaises(hypervisor.HypervisorError,
                          self.hv.pin_vcpus, pinned, [4])
        self.assertEqual([0, 1], self.hv.vcpu_cpus(pinned))

    def test_enable_counters(self):
        dom = self._define()
        result = self.hv.enable_counters(self._info(dom))
        self.assertIsInstance(result, bool)
        # The test driver accepts the events (it has no counters though).
        self.assertTrue(result)
        enabled = {k for k, v in dom.perfEvents().items() if v}
        self.assertEqual(set(libvirt_driver.PERF_EVENTS), enabled)

    def test_enable_counters_unsupported(self):
        info = self._info(self._define())
        set_perf = self.useFixture(fixtures.MockPatchObject(
            libvirt.virDomain, 'setPerfEvents', autospec=True,
            side_effect=_error(libvirt.VIR_ERR_SYSTEM_ERROR,
                               libvirt.VIR_FROM_PERF))).mock
        self.assertFalse(self.hv.enable_counters(info))
        self.assertEqual(2, set_perf.call_count)
        self.assertNotIn('stalled_cycles_backend',
                         set_perf.call_args.args[1])

    def test_enable_counters_core_subset(self):
        info = self._info(self._define())
        set_perf = self.useFixture(fixtures.MockPatchObject(
            libvirt.virDomain, 'setPerfEvents', autospec=True,
            side_effect=[_error(libvirt.VIR_ERR_SYSTEM_ERROR,
                                libvirt.VIR_FROM_PERF), 0])).mock
        self.assertTrue(self.hv.enable_counters(info))
        self.assertEqual(2, set_perf.call_count)

    def test_counters(self):
        dom = self._define()
        info = self._info(dom)
        self.hv.enable_counters(info)
        # The test driver reports no perf statistics at all.
        self.assertEqual({}, self.hv.counters([info]))
        other = self._define()
        # With the vCPU threads' time (VCPU stats): 2 vCPUs.
        stats = {'perf.instructions': 100, 'perf.cpu_cycles': 200,
                 'perf.cache_references': 30, 'perf.cache_misses': 3,
                 'vcpu.current': 2, 'vcpu.maximum': 2, 'vcpu.0.state': 1,
                 'vcpu.0.time': 7000, 'vcpu.0.wait': 9, 'vcpu.1.time': 500}
        get_stats = self.useFixture(fixtures.MockPatchObject(
            libvirt.virConnect, 'domainListGetStats', autospec=True,
            side_effect=lambda conn, doms, stats_, flags=0: [
                (doms[0], stats), (doms[1], {})])).mock
        result = self.hv.counters([info, self._info(other)])
        self.assertEqual(
            {dom.name(): hypervisor.DomainCounters(100, 200, 30, 3, 0,
                                                   vcpu_ns=7500)},
            result)
        self.assertEqual(
            libvirt.VIR_DOMAIN_STATS_PERF | libvirt.VIR_DOMAIN_STATS_VCPU,
            get_stats.call_args[0][2])
        # Without waiting for a job on any guest.
        self.assertEqual(libvirt.VIR_CONNECT_GET_ALL_DOMAINS_STATS_NOWAIT,
                         get_stats.call_args[0][3])

    def test_move_pages(self):
        info = self._info(self._define())
        error = self.assertRaises(hypervisor.HypervisorError,
                                  self.hv.move_pages, info, [(0, 1, 4)], 64)
        self.assertIn('privsep', str(error))
        result = hypervisor.MoveResult(requested=64, moved=60,
                                       failed={'EBUSY': 4})
        mover = mock.create_autospec(_mover, return_value=result)
        hv = libvirt_driver.LibvirtHypervisor(URI, mover=mover)
        self.addCleanup(hv.close)
        # The domain's identity, never a pid: the helper finds QEMU.
        self.assertIs(result, hv.move_pages(info, [(0, 1, 4)], 64))
        mover.assert_called_once_with((info.name, info.uuid), [(0, 1, 4)],
                                      64)
        pinned = dataclasses.replace(info, pinned=True)
        self.assertRaises(hypervisor.HypervisorError,
                          hv.move_pages, pinned, [(0, 1, 4)], 64)


class TestRecord(LibvirtDriverTestCase):

    def test_live_metadata_round_trip(self):
        dom = self._define()
        info = self._info(dom)
        recorded = hypervisor.Recorded(
            host='cmp-1', nova_nodes=(), nova_cpus=(), nodes=(1,),
            cpus=(8, 9), action='restricted', outcome='ok: policy spread',
            at='2026-11-23T15:00:00Z')
        self.hv.record(info, recorded)
        self.assertEqual(recorded, self._info(dom).recorded)
        # Live only: Nova's persistent definition is left alone.
        self.assertNotIn(libvirt_driver.AGENT_NS,
                         dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))
        later = dataclasses.replace(recorded, nodes=(0, 1), action='moved')
        self.hv.record(info, later)
        self.assertEqual(later, self._info(dom).recorded)
        # The guest keeps Nova's own metadata.
        self.assertTrue(self._info(dom).nova)

    def test_restore(self):
        dom = self._define()
        info = self._info(dom)
        self.hv.set_nodeset(info, [1])
        self.hv.pin_vcpus(info, [8, 9])
        self.hv.restore(self._info(dom), nodes=(), cpus=())
        self.assertEqual('0-1', dom.numaParameters()['numa_nodeset'])
        for cpumap in dom.vcpuPinInfo(0):
            self.assertTrue(all(cpumap), cpumap)


class TestRestoreEveryNode(base.TestCase):

    def test_every_node_is_every_node_with_memory(self):
        # A memoryless node, or a gap in the node ids: in no cpuset.mems.
        hv = fakes.FakeHypervisor(nodes=3)
        nodes = list(hv._topology.nodes)
        nodes[1] = dataclasses.replace(nodes[1], memory_mb=0)
        hv._topology = dataclasses.replace(hv._topology, nodes=tuple(nodes))
        hv.add('g', {0: 1024})
        hv.restore(hv.guests['g'], nodes=())
        self.assertEqual((0, 2), hv.nodesets['g'])
        self.assertEqual((0, 2), hv._topology.memory_nodes())


class TestMemoryPerNode(LibvirtDriverTestCase):

    def _patch_readers(self, cgroup, numa_maps):
        """Mock numa_stat's two readers with these mock arguments."""
        return (
            self.useFixture(fixtures.MockPatchObject(
                numa_stat, 'read_cgroup_numa_stat', autospec=True,
                **cgroup)).mock,
            self.useFixture(fixtures.MockPatchObject(
                numa_stat, 'read_numa_maps', autospec=True,
                **numa_maps)).mock)

    def test_estimate_without_pid(self):
        dom = self._define(memory_mb=513)
        info = self._info(dom)
        self.assertEqual({0: 257, 1: 256}, self.hv.memory_per_node(info))
        self.hv.set_nodeset(info, [1])
        self.assertEqual({1: 513}, self.hv.memory_per_node(info))

    def test_cgroup_numa_stat(self):
        info = self._info(self._define())
        info = dataclasses.replace(info, pid=1234)
        cgroup, numa_maps = self._patch_readers(
            {'return_value': {0: 100, 1: 412}}, {'return_value': {0: 1}})
        self.assertEqual({0: 100, 1: 412}, self.hv.memory_per_node(info))
        cgroup.assert_called_once_with(1234)
        numa_maps.assert_not_called()

    def test_numa_maps_fallback(self):
        info = self._info(self._define())
        info = dataclasses.replace(info, pid=1234)
        _cgroup, numa_maps = self._patch_readers(
            {'return_value': None}, {'return_value': {1: 512}})
        self.assertEqual({1: 512}, self.hv.memory_per_node(info))
        numa_maps.assert_called_once_with(1234)

    def test_both_readers_fail(self):
        info = self._info(self._define(memory_mb=512))
        info = dataclasses.replace(info, pid=1234)
        self._patch_readers({'side_effect': OSError('no cgroup')},
                            {'return_value': None})
        self.assertEqual({0: 256, 1: 256}, self.hv.memory_per_node(info))

    HUGEPAGE_GUEST = (
        "<domain type='kvm'><name>huge</name>"
        "<memory unit='KiB'>%(kib)d</memory>"
        '<memoryBacking><hugepages>'
        "<page size='1048576' unit='KiB'/></hugepages></memoryBacking>"
        '%(numatune)s<cpu><numa>'
        "<cell id='0' cpus='0-1' memory='%(half)d' unit='KiB'/>"
        "<cell id='1' cpus='2-3' memory='%(half)d' unit='KiB'/>"
        '</numa></cpu></domain>')

    def test_hugepages_from_the_xml(self):
        # No cgroup counts hugepages: Nova's strict memnodes say where
        # they are; the cgroup has QEMU's own memory.
        xml = self.HUGEPAGE_GUEST % {
            'kib': 8 << 20, 'half': 4 << 20, 'numatune':
            "<numatune><memory mode='strict' nodeset='1,3'/>"
            "<memnode cellid='0' mode='strict' nodeset='1'/>"
            "<memnode cellid='1' mode='strict' nodeset='3'/></numatune>"}
        info = libvirt_driver.parse_domain(xml, pid=1234)
        self.assertTrue(info.pinned)
        self.assertEqual(((1, 4096), (3, 4096)), info.hugepage_mb)
        cgroup, numa_maps = self._patch_readers(
            {'return_value': {0: 150, 1: 20}}, {'return_value': {1: 8202}})
        self.assertEqual({0: 150, 1: 4116, 3: 4096},
                         self.hv.memory_per_node(info))
        numa_maps.assert_not_called()
        # One strict nodeset without memnodes: spread over it.
        xml = self.HUGEPAGE_GUEST % {
            'kib': 8 << 20, 'half': 4 << 20, 'numatune':
            "<numatune><memory mode='strict' nodeset='0-1'/></numatune>"}
        self.assertEqual(((0, 4096), (1, 4096)),
                         libvirt_driver.parse_domain(xml).hugepage_mb)
        # Nothing says where: measured as any other guest.
        xml = self.HUGEPAGE_GUEST % {'kib': 8 << 20, 'half': 4 << 20,
                                     'numatune': ''}
        self.assertEqual((), libvirt_driver.parse_domain(xml).hugepage_mb)


def _monitor(index, vcpus, nodes):
    """Stats of one ``memory.bandwidth.monitor.<index>``: nodes is a list
    of (L3 cache id, local bytes, total bytes).
    """
    prefix = 'memory.bandwidth.monitor.%d.' % index
    stats = {prefix + 'name': 'vcpus_%s' % vcpus, prefix + 'vcpus': vcpus,
             prefix + 'node.count': len(nodes)}
    for j, (ident, local, total) in enumerate(nodes):
        stats.update({'%snode.%d.id' % (prefix, j): ident,
                      '%snode.%d.bytes.local' % (prefix, j): local,
                      '%snode.%d.bytes.total' % (prefix, j): total})
    return stats


def _bandwidth_stats(*monitors):
    """A domain's VIR_DOMAIN_STATS_MEMORY answer with these monitors."""
    stats = {'memory.bandwidth.monitor.count': len(monitors)}
    for i, nodes in enumerate(monitors):
        stats.update(_monitor(i, '0-1', nodes))
    return stats


# As libvirt >= 6.0 gives it for a guest with two monitors on a 2-socket
# Intel host (virsh domstats --memory).
GOOD_STATS = _bandwidth_stats(
    [(0, 4807114752, 10208067584), (1, 5850161152, 8693735424)],
    [(0, 290701312, 853811200), (1, 229425152, 406044672)])


class TestMemoryBandwidth(LibvirtDriverTestCase):
    """resctrl memory-bandwidth monitoring (libvirt's test driver has no
    resctrl: its answers are mocked).
    """

    def _answer(self, *per_domain):
        """Mock domainListGetStats: the i-th domain gets per_domain[i]."""
        return self.useFixture(fixtures.MockPatchObject(
            libvirt.virConnect, 'domainListGetStats', autospec=True,
            side_effect=lambda conn, doms, stats, flags=0: list(
                zip(doms, per_domain)))).mock

    def test_test_driver_has_no_monitor(self):
        info = self._info(self._define())
        self.assertEqual({}, self.hv.memory_bandwidth([info]))

    def test_base_class_has_no_source(self):
        self.assertEqual({}, hypervisor.Hypervisor.memory_bandwidth(
            self.hv, [self._info(self._define())]))

    def test_good_answer(self):
        monitored, plain = self._define(), self._define()
        stats = self._answer(GOOD_STATS, {})
        result = self.hv.memory_bandwidth([self._info(monitored),
                                           self._info(plain)])
        # Both monitors summed per node; the guest without one is absent.
        self.assertEqual(
            {monitored.name(): {0: (4807114752 + 290701312,
                                    10208067584 + 853811200),
                                1: (5850161152 + 229425152,
                                    8693735424 + 406044672)}},
            result)
        self.assertEqual(libvirt.VIR_DOMAIN_STATS_MEMORY,
                         stats.call_args.args[2])
        self.assertNotIn('memory bandwidth', self.logger.output)

    def test_missing_keys(self):
        good, bad = self._define(), self._define()
        broken = dict(GOOD_STATS)
        del broken['memory.bandwidth.monitor.1.node.1.bytes.local']
        self._answer(GOOD_STATS, broken)
        domains = [self._info(good), self._info(bad)]
        result = self.hv.memory_bandwidth(domains)
        self.assertEqual([good.name()], list(result))
        warnings = [line for line in self.logger.output.splitlines()
                    if 'malformed memory bandwidth' in line]
        self.assertEqual(1, len(warnings), self.logger.output)
        self.assertIn(bad.name(), warnings[0])
        self.assertIn('memory.bandwidth.monitor.1.node.1.bytes.local is '
                      'missing', warnings[0])
        # Warned once; the next malformed answer is a debug line.
        warned = self.useFixture(fixtures.FakeLogger(level='WARNING'))
        self.assertEqual([good.name()],
                         list(self.hv.memory_bandwidth(domains)))
        self.assertEqual('', warned.output)

    def test_garbage_values(self):
        doms = [self._define() for _ in range(5)]
        node = 'memory.bandwidth.monitor.0.node.0.'
        answers = [
            dict(GOOD_STATS, **{node + 'bytes.total': 'lots'}),
            dict(GOOD_STATS, **{node + 'bytes.local': -1}),
            dict(GOOD_STATS, **{node + 'id': None}),
            dict(GOOD_STATS, **{'memory.bandwidth.monitor.count': 2.5}),
            'not a dict of stats']
        self._answer(*answers)
        self.assertEqual({}, self.hv.memory_bandwidth(
            [self._info(d) for d in doms]))
        output = self.logger.output
        self.assertIn("bytes.total is 'lots', not a non-negative integer",
                      output)
        self.assertIn('bytes.local is -1', output)
        self.assertEqual(4, output.count('malformed memory bandwidth'),
                         output)

    def test_unreadable_answer(self):
        info = self._info(self._define())
        self.useFixture(fixtures.MockPatchObject(
            libvirt.virConnect, 'domainListGetStats', autospec=True,
            return_value=[None]))
        self.assertEqual({}, self.hv.memory_bandwidth([info]))
        self.assertIn('unreadable memory bandwidth answer',
                      self.logger.output)

    def test_no_constant(self):
        # libvirt-python older than 6.0 has no VIR_DOMAIN_STATS_MEMORY.
        info = self._info(self._define())
        self.useFixture(fixtures.MonkeyPatch(
            'libvirt.VIR_DOMAIN_STATS_MEMORY', fixtures.MonkeyPatch.delete))
        stats = self._answer(GOOD_STATS)
        self.assertEqual({}, self.hv.memory_bandwidth([info]))
        stats.assert_not_called()

    def test_libvirt_refuses(self):
        info = self._info(self._define())
        self.useFixture(fixtures.MockPatchObject(
            libvirt.virConnect, 'domainListGetStats', autospec=True,
            side_effect=_error(libvirt.VIR_ERR_OPERATION_UNSUPPORTED)))
        self.assertRaises(hypervisor.HypervisorError,
                          self.hv.memory_bandwidth, [info])

    def test_vanished_domain_is_skipped(self):
        dom = self._define()
        info = self._info(dom)
        libvirt_fixtures.remove_guest(self.conn, dom.name())
        stats = self._answer(GOOD_STATS)
        self.assertEqual({}, self.hv.memory_bandwidth([info]))
        stats.assert_not_called()

    def test_l3_caches_are_mapped_to_nodes(self):
        # AMD-like: two L3 caches (CCX) per node, ids 0-3; cache 4 spans
        # both nodes (sub-NUMA clustering) and cannot be attributed.
        caches = ''.join(
            "<bank id='%d' level='3' type='both' size='16' unit='MiB' "
            "cpus='%s'/>" % (i, cpus) for i, cpus in enumerate(
                ('0-3', '4-7', '8-11', '12-15', '6-9')))
        caches += "<bank id='0' level='2' type='both' size='1' unit='MiB' " \
                  "cpus='0'/>"
        xml = self.conn.getCapabilities().replace(
            '</host>', '<cache>%s</cache></host>' % caches, 1)
        self.useFixture(fixtures.MockPatchObject(
            libvirt.virConnect, 'getCapabilities', autospec=True,
            return_value=xml))
        hv = libvirt_driver.LibvirtHypervisor(URI)
        self.addCleanup(hv.close)
        dom = self._define()
        info = self._info(dom)
        self._answer(_bandwidth_stats(
            [(0, 10, 100), (1, 20, 200), (2, 30, 300), (3, 40, 400),
             (4, 50, 500)]))
        self.assertEqual({dom.name(): {0: (30, 300), 1: (70, 700)}},
                         hv.memory_bandwidth([info]))


class TestMemoryBandwidthParsing(base.TestCase):

    def test_parse(self):
        self.assertEqual({}, libvirt_driver.parse_memory_bandwidth({}))
        self.assertEqual({}, libvirt_driver.parse_memory_bandwidth(
            {'memory.bandwidth.monitor.count': 0}))
        self.assertEqual(
            {0: (4807114752 + 290701312, 10208067584 + 853811200),
             1: (5850161152 + 229425152, 8693735424 + 406044672)},
            libvirt_driver.parse_memory_bandwidth(GOOD_STATS))

    def test_monitor_nodes(self):
        topology = libvirt_driver.parse_capabilities(
            "<capabilities><host><topology><cells num='2'>"
            "<cell id='0'><cpus num='2'><cpu id='0'/><cpu id='1'/></cpus>"
            "</cell><cell id='1'><cpus num='2'><cpu id='2'/><cpu id='3'/>"
            "</cpus></cell></cells></topology></host></capabilities>")
        # Without cache banks (older libvirt): cache id = node id.
        self.assertEqual({0: 0, 1: 1},
                         libvirt_driver.monitor_nodes({}, topology))
        self.assertEqual(
            {0: 0, 1: 1, 2: None},
            libvirt_driver.monitor_nodes(
                {0: (0, 1), 1: (2, 3), 2: (1, 2)}, topology))

    def test_l3_banks(self):
        xml = ("<capabilities><host><cache>"
               "<bank id='0' level='3' type='both' size='15' unit='MiB' "
               "cpus='0-5'/>"
               "<bank id='1' level='3' type='both' size='15' unit='MiB' "
               "cpus='6-11'/>"
               "<bank id='bad' level='3' cpus='0'/>"
               "<bank id='0' level='2' cpus='0'/>"
               "</cache></host></capabilities>")
        self.assertEqual({0: (0, 1, 2, 3, 4, 5), 1: (6, 7, 8, 9, 10, 11)},
                         libvirt_driver.parse_l3_banks(xml))
        self.assertEqual({}, libvirt_driver.parse_l3_banks(
            '<capabilities><host/></capabilities>'))


class TestLifecycle(LibvirtDriverTestCase):

    def test_started_and_stopped(self):
        events = []
        broken = mock.create_autospec(
            _callback, side_effect=RuntimeError('callback bug'))
        self.hv.register_lifecycle(broken)
        self.hv.register_lifecycle(lambda e, n: events.append((e, n)))
        dom = self._define(start=False)
        name = dom.name()
        dom.create()
        self._wait_for(lambda: ('started', name) in events)
        dom.destroy()
        self._wait_for(lambda: ('stopped', name) in events)
        self.assertEqual([('started', name), ('stopped', name)],
                         [e for e in events if e[1] == name])
        broken.assert_any_call('started', name)

    def test_registered_while_libvirt_is_down(self):
        events = []
        hv = libvirt_driver.LibvirtHypervisor(URI, sleep=self.sleep,
                                              clock=self._clock)
        self.addCleanup(hv.close)
        with mock.patch.object(libvirt, 'open', autospec=True,
                               side_effect=_error(libvirt.VIR_ERR_NO_CONNECT)):
            hv.register_lifecycle(lambda e, n: events.append((e, n)))
        hv.reconnect()
        dom = self._define()
        self._wait_for(lambda: ('started', dom.name()) in events)

    def test_migration_iteration(self):
        events = []
        self.hv.register_lifecycle(lambda e, n: events.append((e, n)))
        dom = self._define()
        # The test driver does not migrate: libvirt's callbacks, called
        # as libvirt calls them.
        for iteration in (1, 2, 3):
            self.hv._on_migration_iteration(self.conn, dom, iteration, None)
        self.hv._on_lifecycle(self.conn, dom,
                              libvirt.VIR_DOMAIN_EVENT_SUSPENDED,
                              libvirt.VIR_DOMAIN_EVENT_SUSPENDED_MIGRATED,
                              None)
        self.assertEqual([('migrating', dom.name())] * 2,
                         [e for e in events if e[1] == dom.name() and
                          e[0] == 'migrating'])
        # Both callbacks are registered on the connection.
        self.assertEqual(2, len(self.hv._callback_ids))

    def test_a_domain_held_by_a_migration_job_is_not_listed(self):
        # Until its migration ends, every change waits for the job.
        dom = self._define()
        other = self._define()
        paused = libvirt.VIR_DOMAIN_PAUSED
        running = libvirt.VIR_DOMAIN_RUNNING
        for state, listed in (
                ((paused, libvirt.VIR_DOMAIN_PAUSED_MIGRATION), False),
                ((paused, libvirt.VIR_DOMAIN_PAUSED_POSTCOPY), False),
                ((running, libvirt.VIR_DOMAIN_RUNNING_POSTCOPY), False),
                ((running, 11), False),     # RUNNING_POSTCOPY_FAILED
                ((paused, libvirt.VIR_DOMAIN_PAUSED_USER), True),
                ((running, libvirt.VIR_DOMAIN_RUNNING_MIGRATED), True)):
            real = libvirt.virDomain.state

            def fake_state(self_, flags=0, state=state):
                if self_.name() == dom.name():
                    return list(state)
                return real(self_, flags)
            with mock.patch.object(libvirt.virDomain, 'state', fake_state):
                names = [d.name for d in self.hv.domains()]
            self.assertEqual(listed, dom.name() in names, state)
            self.assertIn(other.name(), names)

    def test_migration_running(self):
        dom = self._define()
        info = self._info(dom)
        # The test driver keeps no jobs: unknown.
        self.assertIsNone(self.hv.migration_running(info))
        for kind, running in ((libvirt.VIR_DOMAIN_JOB_NONE, False),
                              (libvirt.VIR_DOMAIN_JOB_UNBOUNDED, True),
                              (libvirt.VIR_DOMAIN_JOB_BOUNDED, True),
                              (libvirt.VIR_DOMAIN_JOB_CANCELLED, False)):
            with mock.patch.object(libvirt.virDomain, 'jobInfo',
                                   autospec=True,
                                   return_value=[kind] + [0] * 11):
                self.assertIs(running, self.hv.migration_running(info))
        with mock.patch.object(
                libvirt.virDomain, 'jobInfo', autospec=True,
                side_effect=_error(libvirt.VIR_ERR_INTERNAL_ERROR)):
            self.assertRaises(hypervisor.HypervisorError,
                              self.hv.migration_running, info)

    def test_every_callback_leaves_a_dropped_connection(self):
        self.hv.register_lifecycle(lambda e, n: None)
        ids = list(self.hv._callback_ids)
        self.assertEqual(2, len(ids))
        with mock.patch.object(
                libvirt.virConnect, 'domainEventDeregisterAny',
                autospec=True,
                side_effect=_error(libvirt.VIR_ERR_INTERNAL_ERROR)) as drop:
            self.hv._drop()
        self.assertEqual(ids, [c[0][1] for c in drop.call_args_list])

    def test_reregistered_after_reconnect(self):
        events = []
        self.hv.register_lifecycle(lambda e, n: events.append((e, n)))
        self.hv.close()
        self.hv.free_memory_mb()
        dom = self._define()
        self._wait_for(lambda: ('started', dom.name()) in events)


class TestErrors(LibvirtDriverTestCase):

    def test_undefined_domain_is_gone(self):
        dom = self._define()
        info = self._info(dom)
        dom.destroy()
        dom.undefine()
        self.assertRaises(hypervisor.DomainGone, self.hv.vcpu_cpus, info)
        self.assertRaises(hypervisor.DomainGone, self.hv.vcpu_affinity,
                          info)
        self.assertRaises(hypervisor.DomainGone, self.hv.set_nodeset, info,
                          [0])
        self.assertRaises(hypervisor.DomainGone, self.hv.enable_counters,
                          info)
        self.assertEqual({}, self.hv.counters([info]))

    def test_stopped_domain_is_gone(self):
        # A persistent guest stays defined when it stops: libvirt says
        # "domain is not running" (VIR_ERR_OPERATION_INVALID).
        dom = self._define()
        info = self._info(dom)
        dom.destroy()
        self.assertRaises(hypervisor.DomainGone, self.hv.vcpu_cpus, info)
        self.assertRaises(hypervisor.DomainGone, self.hv.vcpu_affinity,
                          info)
        self.assertRaises(hypervisor.DomainGone, self.hv.set_nodeset, info,
                          [0])
        self.assertRaises(hypervisor.DomainGone, self.hv.enable_counters,
                          info)

    def test_closed_connection_then_reconnect(self):
        self.hv._conn.close()
        self.assertRaises(hypervisor.HypervisorUnavailable,
                          self.hv.free_memory_mb)
        # Within the backoff step calls fail fast, without a new attempt.
        error = self.assertRaises(hypervisor.HypervisorUnavailable,
                                  self.hv.free_memory_mb)
        self.assertIn('next attempt in 1.0 s', str(error))
        self._tick(1)
        self.assertEqual([2, 4], self.hv.free_memory_mb())
        self.sleep.assert_not_called()

    def test_reconnect_waits_without_holding_the_lock(self):
        self.hv._conn.close()
        self.assertRaises(hypervisor.HypervisorUnavailable,
                          self.hv.free_memory_mb)
        seen = []

        def other_call():
            try:
                self.hv.free_memory_mb()
                seen.append('answered')
            except hypervisor.HypervisorUnavailable:
                seen.append('failed fast')

        def sleep(seconds):
            # Another thread's call meanwhile must not wait for this one.
            thread = threading.Thread(target=other_call)
            thread.start()
            thread.join(5)
            seen.append('blocked' if thread.is_alive() else 'done')
            self._tick(seconds)
        self.hv._sleep = sleep
        self.hv.reconnect()
        self.assertEqual(['failed fast', 'done'], seen)
        self.assertEqual([2, 4], self.hv.free_memory_mb())

    def test_rpc_error_then_reconnect(self):
        dom = self._define()
        with mock.patch.object(
                libvirt.virConnect, 'listAllDomains', autospec=True,
                side_effect=_error(libvirt.VIR_ERR_SYSTEM_ERROR,
                                   libvirt.VIR_FROM_RPC)):
            self.assertRaises(hypervisor.HypervisorUnavailable,
                              self.hv.domains)
        self._tick(0.25)   # the agent's own backoff, shorter than ours
        self.hv.reconnect()
        self.sleep.assert_called_once_with(0.75)
        self.assertIn(dom.name(), [d.name for d in self.hv.domains()])

    def test_internal_error_on_live_connection(self):
        with mock.patch.object(
                libvirt.virConnect, 'getCellsFreeMemory', autospec=True,
                side_effect=_error(libvirt.VIR_ERR_INTERNAL_ERROR)):
            error = self.assertRaises(hypervisor.HypervisorError,
                                      self.hv.free_memory_mb)
        self.assertNotIsInstance(error, hypervisor.HypervisorUnavailable)
        self.assertEqual([2, 4], self.hv.free_memory_mb())
        self.sleep.assert_not_called()

    def test_reconnect_backoff(self):
        hv = libvirt_driver.LibvirtHypervisor(
            URI, reconnect_backoff=(1, 2, 4), sleep=self.sleep,
            clock=self._clock)
        self.addCleanup(hv.close)
        with mock.patch.object(libvirt, 'open', autospec=True,
                               side_effect=_error(libvirt.VIR_ERR_NO_CONNECT)
                               ) as open_:
            self.assertRaises(hypervisor.HypervisorUnavailable,
                              hv.free_memory_mb)
            self.assertRaises(hypervisor.HypervisorUnavailable,
                              hv.free_memory_mb)
            self.assertEqual(1, open_.call_count)
            for _ in range(4):
                self.assertRaises(hypervisor.HypervisorUnavailable,
                                  hv.reconnect)
            self.assertEqual(5, open_.call_count)
        self.assertEqual([mock.call(1), mock.call(2), mock.call(4),
                          mock.call(4)], self.sleep.call_args_list)
        self.sleep.reset_mock()
        self._tick(4)
        self.assertEqual([2, 4], hv.free_memory_mb())
        # A success resets the backoff.
        hv.reconnect()
        self.sleep.assert_not_called()
