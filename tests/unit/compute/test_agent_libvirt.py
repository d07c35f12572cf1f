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
"""The agent on libvirt's test driver: placement through the real API."""

from unittest import mock

from nova_numa_overhead.compute import agent as agent_mod
from tests.unit.compute import test_agent
from tests.unit.compute import test_libvirt_driver


class TestAgentOnLibvirt(test_libvirt_driver.LibvirtDriverTestCase):

    def setUp(self):
        super().setUp()
        self.flags(group='numa_overhead_agent', enforcement='nodeset',
                   reserve_mb=64, remote_placement=True)
        # The test driver reports free memory in KiB where the API promises
        # bytes (2 and 4 MiB here): give the cells realistic free memory,
        # with room for the 6 GiB its "test" domain has yet to touch (8 GiB
        # configured, 2 GiB on the nodes).
        mock.patch.object(self.hv, 'free_memory_mb', autospec=True,
                          return_value=[4608, 6144]).start()
        self.addCleanup(mock.patch.stopall)
        self.publisher = test_agent.FakePublisher()
        self.agent = agent_mod.Agent(self.conf, self.hv, self.publisher,
                                     'cmp-libvirt')

    def nodeset(self, dom):
        return dom.numaParameters()['numa_nodeset']

    def test_topology_and_report(self):
        self.assertTrue(self.agent.cycle())
        report = self.publisher.reports[-1]
        self.assertEqual(2, report.size)
        self.assertEqual(16, sum(n.cpus for n in report.nodes))
        # Room: free memory minus the 6 GiB the "test" domain has yet to
        # touch, from its vCPUs' node on.
        self.assertEqual([2048, 0], [n.free_mb for n in report.nodes])

    def test_floating_guest_is_restricted_pinned_one_is_not(self):
        self.agent.cycle()
        floating = self._define(memory_mb=512,
                                extra_specs={'hw:cpu_policy': 'shared'})
        pinned = self._define(memory_mb=512, pinned=True,
                              extra_specs={'hw:cpu_policy': 'dedicated'})
        pinned_before = self.nodeset(pinned)
        self.agent.cycle()
        decision = self.agent.decisions[floating.name()]
        self.assertEqual('restricted', decision.action, decision.reason)
        expected = ','.join(str(n) for n in sorted(decision.plan))
        self.assertEqual(expected, self.nodeset(floating).replace('-', ','))
        skipped = self.agent.decisions[pinned.name()]
        self.assertEqual('skipped', skipped.action)
        self.assertIn('pinned', skipped.reason)
        self.assertEqual(pinned_before, self.nodeset(pinned))

    def test_started_event_places_the_guest(self):
        self.hv.register_lifecycle(self.agent.on_lifecycle)
        self.agent.cycle()
        dom = self._define(memory_mb=256)
        # libvirt's thread queued it; the service's event thread acts.
        self._wait_for(lambda: self.agent.wait_for_events(0))
        self.agent.handle_events()
        self.assertIn(dom.name(), self.agent.decisions)
        self.assertEqual('restricted',
                         self.agent.decisions[dom.name()].action)
        self.assertIn(dom.name(), self.agent.domains)

    def test_destroyed_guest_disappears_from_the_report(self):
        dom = self._define(memory_mb=256)
        self.agent.cycle()
        self.assertIn(dom.name(), self.agent.domains)
        dom.destroy()
        self.agent.cycle()
        self.assertNotIn(dom.name(), self.agent.domains)

    def test_a_restarted_agent_knows_what_nova_allowed(self):
        # On libvirt the restriction shows in the guest's live XML as a
        # numatune nodeset: a new agent run must not take it for Nova's.
        self.agent.cycle()
        dom = self._define(memory_mb=512)
        self.agent.cycle()
        decision = self.agent.decisions[dom.name()]
        self.assertEqual('restricted', decision.action, decision.reason)
        restricted = tuple(sorted(decision.plan))
        agent = agent_mod.Agent(self.conf, self.hv, self.publisher,
                                'cmp-libvirt')
        agent.cycle()
        domain = agent.domains[dom.name()]
        self.assertEqual(restricted, domain.nova_nodes)
        self.assertEqual('cmp-libvirt', domain.recorded.host)
        self.assertEqual(restricted, domain.recorded.nodes)
        self.assertEqual((), agent.nova_allowed[dom.name()])
        self.assertEqual((), agent.as_nova_placed(domain).allowed_nodes)
