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

import dataclasses
import json
import logging
import math
import threading
from unittest import mock

import fixtures

from nova_numa_overhead.compute import agent as agent_mod
from nova_numa_overhead.compute import hypervisor as hv_mod
from nova_numa_overhead.compute import kernel as kernel_mod
from nova_numa_overhead.compute import placer as placer_mod
from nova_numa_overhead.compute import rebalancer
from nova_numa_overhead.overhead import planner
from nova_numa_overhead import report as report_mod
from nova_numa_overhead import version
from tests import base
from tests.unit.compute import fakes

GIB = 1024


class FakePublisher:

    def __init__(self):
        self.reports = []
        self.up = True

    def publish(self, report):
        if not self.up:
            return False
        self.reports.append(report_mod.from_dict(report.to_dict()))
        return True


class FakeNotifier:

    def __init__(self):
        self.events = []

    def info(self, ctxt, event_type, payload):
        self.events.append((event_type, payload))


class Clock:

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class AgentTestCase(base.TestCase):

    def setUp(self):
        super().setUp()
        self.hv = fakes.FakeHypervisor(nodes=4)
        self.publisher = FakePublisher()
        self.notifier = FakeNotifier()
        self.clock = Clock()
        self.slept = []
        # The placement mechanics are exercised on the paper's first
        # placement (memory may go remote); TestLocalPlacement checks the
        # default, local one.
        self.flags(group='numa_overhead_agent', enforcement='pages',
                   reserve_mb=1024, report_interval=60,
                   heartbeat_interval=30, migrate_rate_mb_per_s=0,
                   remote_placement=True)

    def make_agent(self):
        return agent_mod.Agent(self.conf, self.hv, self.publisher, 'cmp-1',
                               notifier=self.notifier, clock=self.clock,
                               sleep=self.slept.append)

    def wide(self, memory):
        """The decision for 'wide', started after a first cycle with
        ``memory`` (node -> MiB) and 16 vCPUs from node 1's first CPU: 8 on
        node 1, 8 on node 2.
        """
        agent = self.make_agent()
        agent.cycle()
        self.hv.add('wide', memory, vcpu_node=1, vcpus=16)
        self.clock.now += 1
        agent.cycle()
        return agent.decisions['wide']

    def busy(self, name, hit=0.1, loss=0.4, ipc=0.5):
        # Deltas giving these metrics over one interval.
        cycles = 1000000
        refs = 100000
        self.hv.run(name, int(ipc * cycles), cycles, refs,
                    int((1 - hit) * refs), int(loss * cycles))


class TestReporting(AgentTestCase):

    def test_first_cycle_reports_the_host(self):
        self.hv.add('a', {0: 4 * GIB}, vcpu_node=0)
        agent = self.make_agent()
        self.assertTrue(agent.cycle())
        report = self.publisher.reports[-1]
        self.assertEqual('cmp-1', report.host)
        self.assertEqual(4, report.size)
        self.assertEqual([1, 0, 0, 0], [n.guests for n in report.nodes])
        self.assertEqual(65536 - 4 * GIB, report.nodes[0].free_mb)
        self.assertEqual(8, report.nodes[0].cpus)
        self.assertEqual([[0, 2, 2, 2]], [list(report.rml[0])])
        # The installed package's version, as upgrade.rst says.
        self.assertEqual(version.version_string(), report.agent_version)

    def test_report_carries_the_plan_of_the_default_policy(self):
        # Plan at the edge (report format 1.1): what a scheduler would
        # plan from the report, for every bucket the host can hold.
        self.flags(default_policy='spread', default_max_nodes=2)
        self.hv.add('a', {0: 4 * GIB}, vcpu_node=0)
        agent = self.make_agent()
        agent.cycle()
        report = self.publisher.reports[-1]
        self.assertEqual(('spread', 2), report.planned[:2])
        self.assertEqual(planner.plan_buckets(report.view(), 'spread', 2),
                         list(report.planned.overhead))
        self.assertEqual(len([b for b in planner.BUCKETS
                              if b <= sum(agent.free_mb)]),
                         len(report.planned.overhead))

    def test_reports_on_change_and_heartbeat_only(self):
        self.hv.add('a', {0: 4 * GIB})
        agent = self.make_agent()
        agent.cycle()
        self.clock.now += 1
        agent.cycle()
        self.assertEqual(1, len(self.publisher.reports))
        # A guest starts: report at once.
        self.hv.add('b', {1: 2 * GIB}, vcpu_node=1)
        self.clock.now += 1
        agent.cycle()
        self.assertEqual(2, len(self.publisher.reports))
        # Levels change (b becomes memory-bound): report at once.
        for _ in range(3):
            self.busy('b', loss=0.9)
            self.clock.now += 1
            agent.cycle()
        self.assertEqual(3, len(self.publisher.reports))
        self.assertGreater(self.publisher.reports[-1].nodes[1].mc, 0)
        # Quiet: the next one comes with the heartbeat (30 s).
        self.clock.now += 29 - 3
        agent.cycle()
        self.assertEqual(3, len(self.publisher.reports))
        self.clock.now += 5
        agent.cycle()
        self.assertEqual(4, len(self.publisher.reports))
        # A guest stops: report at once.
        self.hv.remove('a')
        self.clock.now += 1
        agent.cycle()
        self.assertEqual(5, len(self.publisher.reports))
        seqs = [r.seq for r in self.publisher.reports]
        self.assertEqual(sorted(set(seqs)), seqs)

    def test_sync_reports_now(self):
        agent = self.make_agent()
        agent.cycle()
        agent.sync()
        self.assertEqual(2, len(self.publisher.reports))
        self.assertEqual(0.0, self.publisher.reports[-1].age)

    def test_a_report_says_how_old_its_figures_are(self):
        # Sampling fails for two hours: a sync answered meanwhile is not
        # fresh, so the schedulers' report_ttl applies to it.
        agent = self.make_agent()
        agent.cycle()
        self.hv.down = True
        self.clock.now += 3600
        agent.cycle()
        self.clock.now += 3600
        agent.sync()
        self.assertEqual(7200.0, self.publisher.reports[-1].age)

    def test_broker_down_retries_next_cycle(self):
        agent = self.make_agent()
        self.publisher.up = False
        agent.cycle()
        self.assertEqual([], self.publisher.reports)
        self.publisher.up = True
        self.clock.now += 1
        agent.cycle()
        self.assertEqual(1, len(self.publisher.reports))


class TestResilience(AgentTestCase):

    def test_connection_drop_mid_cycle_then_reconnect(self):
        self.hv.add('a', {0: 4 * GIB})
        agent = self.make_agent()
        agent.cycle()
        self.hv.down = True
        self.assertFalse(agent.cycle())
        self.assertFalse(agent.cycle())
        self.assertEqual([1, 2], self.slept)
        self.assertEqual(2, self.hv.reconnects)
        self.hv.down = False
        self.assertTrue(agent.cycle())
        self.assertIn('a', agent.domains)

    def test_domain_destroyed_between_listing_and_acting(self):
        self.hv.add('a', {0: 4 * GIB})
        self.hv.add('b', {1: 4 * GIB}, vcpu_node=1)
        agent = self.make_agent()
        self.hv.vanish_on = ('memory_per_node', 'a')
        self.assertTrue(agent.cycle())
        self.assertNotIn('a', agent.domains)
        self.assertIn('b', agent.domains)
        self.clock.now += 1
        self.assertTrue(agent.cycle())
        self.assertIn('a', agent.domains)

    def test_vanishing_during_placement_is_skipped(self):
        agent = self.make_agent()
        agent.cycle()
        self.hv.add('a', {0: 4 * GIB})
        self.hv.vanish_on = ('set_nodeset', 'a')
        self.assertTrue(agent.cycle())
        self.assertNotIn('a', agent.decisions)


class TestContainment(AgentTestCase):
    """One guest's failure, whatever it is, costs that guest one cycle."""

    def two_guests(self, agent):
        agent.cycle()
        self.hv.add('bad', {0: 4 * GIB}, vcpu_node=1)
        self.hv.add('good', {0: 4 * GIB}, vcpu_node=1)

    def test_permission_error_while_placing(self):
        # The privileged helper's PermissionError is no hypervisor error.
        agent = self.make_agent()
        self.two_guests(agent)
        self.hv.raise_on[('move_pages', 'bad')] = PermissionError(
            13, 'Permission denied', '/proc/77/pagemap')
        self.clock.now += 1
        self.assertTrue(agent.cycle())
        self.assertEqual('failed', agent.decisions['bad'].action)
        self.assertIn('EACCES', agent.decisions['bad'].reason)
        self.assertEqual('moved', agent.decisions['good'].action)
        self.assertEqual({'EACCES': 1}, agent.errors)
        self.assertEqual('failed', agent.outcomes['bad'].action)
        self.assertIn('Placement of bad failed, skipped this cycle '
                      '(EACCES: [Errno 13] Permission denied',
                      self.logger.output)

    def test_a_bug_is_contained_with_its_traceback(self):
        agent = self.make_agent()
        self.two_guests(agent)
        self.hv.raise_on[('set_nodeset', 'bad')] = KeyError('oops')
        self.clock.now += 1
        self.assertTrue(agent.cycle())
        self.assertEqual('failed', agent.decisions['bad'].action)
        self.assertEqual('moved', agent.decisions['good'].action)
        self.assertEqual({'KeyError': 1}, agent.errors)
        self.assertIn('Traceback', self.logger.output)

    def test_measuring_errors_are_counted_and_logged_once(self):
        agent = self.make_agent()
        self.two_guests(agent)
        self.hv.raise_on[('memory_per_node', 'bad')] = OSError(
            5, 'Input/output error')
        for _ in range(3):
            self.clock.now += 1
            self.assertTrue(agent.cycle())
        self.assertEqual({'EIO': 3}, agent.errors)
        self.assertEqual(1, self.logger.output.count(
            'Measuring of bad failed, skipped this cycle'))
        self.assertIn('good', agent.decisions)

    def test_rebalance_errors_are_contained(self):
        self.flags(group='numa_overhead_agent', rebalance_threshold=3)
        self.hv.add('hot', {0: 8 * GIB}, vcpu_node=0,
                    extra_specs={'numa_overhead:policy': 'local'})
        agent = self.make_agent()
        for _ in range(3):
            self.busy('hot', hit=0.6, loss=0.9, ipc=0.3)
            self.clock.now += 1
            agent.cycle()
        self.hv.raise_on[('move_pages', 'hot')] = PermissionError(
            13, 'Permission denied')
        self.assertTrue(agent.rebalance())
        self.assertEqual({'EACCES': 1}, agent.errors)
        self.assertIn('Rebalance of hot failed', self.logger.output)


class TestLocks(AgentTestCase):
    """Nothing slow happens under the agent's lock."""

    def lock_free_elsewhere(self, agent) -> bool:
        """Whether another thread can take the agent's lock right now."""
        result = []

        def probe():
            got = agent._lock.acquire(timeout=2)
            result.append(got)
            if got:
                agent._lock.release()
        thread = threading.Thread(target=probe)
        thread.start()
        thread.join()
        return result[0]

    def test_backoff_sleep_is_outside_the_lock(self):
        agent = self.make_agent()
        agent.cycle()
        free = []
        agent.sleep = lambda seconds: free.append(
            self.lock_free_elsewhere(agent))
        self.hv.down = True
        self.assertFalse(agent.cycle())
        self.assertEqual([True], free)

    def test_reports_are_handed_over_outside_the_lock(self):
        agent = self.make_agent()
        free = []
        publish = self.publisher.publish

        def checking_publish(report):
            free.append(self.lock_free_elsewhere(agent))
            return publish(report)
        self.publisher.publish = checking_publish
        agent.cycle()
        agent.sync()
        self.assertEqual([True, True], free)

    def test_a_refused_report_stays_due(self):
        agent = self.make_agent()
        self.publisher.up = False
        agent.cycle()
        self.assertTrue(agent.dirty)
        self.publisher.up = True
        self.clock.now += 1
        agent.cycle()
        self.assertFalse(agent.dirty)
        self.assertEqual(1, len(self.publisher.reports))


class TestHalfDone(AgentTestCase):
    """What the agent set on a guest before libvirt failed it half-way
    is known and given back; guests whose placement libvirt interrupted
    are placed later.
    """

    def fail_after_nodeset(self, exc):
        agent = self.make_agent()
        agent.cycle()
        self.hv.add('bad', {0: 4 * GIB}, vcpu_node=1)
        self.hv.raise_on[('move_pages', 'bad')] = exc
        self.clock.now += 1
        agent.cycle()
        self.hv.raise_on.clear()
        self.clock.now += 1
        agent.cycle()
        return agent

    def test_a_placement_failing_after_its_nodeset_keeps_it_known(self):
        agent = self.fail_after_nodeset(PermissionError(13, 'denied'))
        self.assertEqual('failed', agent.decisions['bad'].action)
        self.assertEqual((1,), self.hv.nodesets['bad'])
        self.assertEqual((1,), agent.restrictions['bad'][0])
        self.assertEqual((1,), self.hv.recorded['bad'].nodes)
        # Given back before a live migration.
        agent.on_lifecycle('migrating', 'bad')
        agent.handle_events()
        self.assertEqual([('bad', (), None)], self.hv.restored)

    def test_libvirt_lost_after_a_nodeset_then_numad(self):
        agent = self.fail_after_nodeset(hv_mod.HypervisorUnavailable('gone'))
        self.assertEqual((1,), agent.restrictions['bad'][0])
        self.hv.kernel = kernel_mod.KernelState(numad=(9,))
        self.clock.now += 100
        agent.cycle()
        self.assertIsNotNone(agent.stepped_back)
        self.assertEqual([('bad', (), None)], self.hv.restored)

    def test_guests_libvirt_lost_before_their_placement_are_placed(self):
        agent = self.make_agent()
        agent.cycle()
        self.hv.add('a', {0: 4 * GIB}, vcpu_node=1)
        self.hv.add('b', {0: 4 * GIB}, vcpu_node=1)
        self.hv.raise_on[('set_nodeset', 'a')] = \
            hv_mod.HypervisorUnavailable('libvirtd restarting')
        self.clock.now += 1
        self.assertFalse(agent.cycle())
        self.hv.raise_on.clear()
        self.clock.now += 1
        self.assertTrue(agent.cycle())
        self.assertEqual((1,), self.hv.nodesets['a'])
        self.assertEqual((1,), self.hv.nodesets['b'])
        self.assertIn('a', agent.decisions)
        self.assertIn('b', agent.decisions)

    def test_a_hard_reboot_libvirt_lost_before_placing_is_placed(self):
        agent = self.make_agent()
        self.hv.add('a', {0: 4 * GIB}, vcpu_node=1)
        agent.cycle()
        self.clock.now += 1
        agent.cycle()
        # A new QEMU: Nova's XML, no record of the agent's.
        self.hv.nodesets.pop('a', None)
        self.hv.recorded.pop('a', None)
        agent.decisions.clear()
        agent.on_lifecycle('started', 'a')
        with agent._events_lock:
            events, agent._events = agent._events, type(agent._events)()
            agent.pending.update(events)
            agent.fresh.update(events)
        self.hv.raise_on[('vcpu_cpus', 'a')] = \
            hv_mod.HypervisorUnavailable('gone')
        self.assertFalse(agent.cycle())
        self.hv.raise_on.clear()
        self.clock.now += 1
        agent.cycle()
        self.assertIn('a', agent.decisions)
        self.assertEqual((1,), self.hv.nodesets['a'])

    def test_a_host_call_failing_mid_cycle_loses_no_start(self):
        agent = self.make_agent()
        agent.cycle()
        self.hv.add('a', {0: 4 * GIB}, vcpu_node=1)
        self.hv.raise_on[('free_memory_mb', None)] = \
            hv_mod.HypervisorError('a hiccup')
        self.clock.now += 1
        # The service's loop logs it and goes on.
        self.assertRaises(hv_mod.HypervisorError, agent.cycle)
        self.assertNotIn('a', agent.decisions)
        self.hv.raise_on.clear()
        self.clock.now += 1
        agent.cycle()
        self.assertIn('a', agent.decisions)

    def test_a_rebalance_after_a_widening_does_not_narrow_again(self):
        self.hv = fakes.FakeHypervisor(nodes=4, memory_mb=16 * GIB)
        self.hv.add('g', {0: GIB}, vcpu_node=0, memory_mb=8 * GIB)
        agent = self.make_agent()
        agent.cycle()
        self.clock.now += 1
        agent.cycle()
        self.assertEqual((0,), agent.domains['g'].allowed_nodes)
        self.hv.add('late', {0: GIB}, vcpu_node=0, memory_mb=13 * GIB,
                    extra_specs={'numa_overhead:policy': 'none'})
        self.clock.now += 1
        agent.cycle()
        # Widened (no room left on node 0), then a rebalance move before
        # the next sample: the nodeset stays Nova's.
        self.assertEqual(((), ()), agent.restrictions['g'])
        with agent._lock:
            agent._apply(rebalancer.Move('g', 0, 2, 64, 'test'))
        self.assertEqual((0, 1, 2, 3), self.hv.nodesets['g'])


class TestPlacement(AgentTestCase):

    def test_floating_guest_is_restricted_and_moved(self):
        self.hv.add('busy1', {0: 8 * GIB}, vcpu_node=0)
        self.hv.add('busy2', {1: 8 * GIB}, vcpu_node=1)
        self.hv.add('busy3', {2: 8 * GIB}, vcpu_node=2)
        self.hv.add('busy4', {3: 8 * GIB}, vcpu_node=3)
        agent = self.make_agent()
        for _ in range(2):
            for name in ('busy1', 'busy2'):
                self.busy(name, hit=0.05, loss=0.45)
            self.clock.now += 1
            agent.cycle()
        # A new 8 GiB guest, first-touched on node 0 (the congested one).
        self.hv.add('new', {0: 8 * GIB}, vcpu_node=2)
        self.clock.now += 1
        agent.cycle()
        decision = agent.decisions['new']
        self.assertEqual('moved', decision.action)
        self.assertEqual(8 * GIB, sum(decision.plan.values()))
        # The congested node gets the smallest share, if any.
        self.assertEqual(min(decision.plan.values()),
                         decision.plan.get(0, 0) or min(
                             decision.plan.values()))
        self.assertLess(decision.plan.get(0, 0), decision.plan[2])
        self.assertEqual(tuple(sorted(decision.plan)),
                         self.hv.nodesets['new'])
        self.assertEqual({n: float(mb) for n, mb in decision.plan.items()},
                         {n: mb for n, mb in self.hv.memory['new'].items()
                          if mb})
        event, payload = self.notifier.events[-1]
        self.assertEqual('numa_overhead.placement', event)
        self.assertEqual('new', payload['guest'])
        self.assertIn('Placement of new: moved', self.logger.output)

    def test_pinned_guest_is_never_touched(self):
        agent = self.make_agent()
        agent.cycle()
        self.hv.add('pinned', {0: 4 * GIB}, pinned=True)
        self.clock.now += 1
        agent.cycle()
        self.assertEqual('skipped', agent.decisions['pinned'].action)
        self.assertIn('pinned', agent.decisions['pinned'].reason)
        self.assertEqual({}, self.hv.nodesets)
        self.assertEqual([], self.hv.moves)
        self.assertNotIn('pinned', self.hv.enabled)
        # It is still reported.
        self.assertEqual(1, self.publisher.reports[-1].nodes[0].guests)

    def test_opt_in_and_policy_none_and_odd_metadata(self):
        self.flags(group='numa_overhead_agent', managed_guests='opt_in')
        agent = self.make_agent()
        agent.cycle()
        self.hv.add('plain', {0: GIB})
        self.hv.add('optin', {0: GIB},
                    extra_specs={'numa_overhead:policy': 'spread'})
        self.hv.add('none', {0: GIB},
                    extra_specs={'numa_overhead:policy': 'none'})
        self.hv.add('odd', {0: GIB}, metadata_error='bad XML')
        self.hv.add('bad', {0: GIB},
                    extra_specs={'numa_overhead:policy': 'fastest'})
        self.clock.now += 1
        agent.cycle()
        actions = {n: d.action for n, d in agent.decisions.items()}
        self.assertEqual({'plain': 'skipped', 'optin': 'moved',
                          'none': 'skipped', 'odd': 'skipped',
                          'bad': 'skipped'}, actions)
        self.assertIn('invalid extra spec',
                      agent.decisions['bad'].reason)

    def test_never_restricts_beyond_free_memory_plus_reserve(self):
        self.flags(group='numa_overhead_agent', reserve_mb=4096)
        self.hv = fakes.FakeHypervisor(nodes=2, memory_mb=16 * GIB)
        self.hv.add('other', {0: 12 * GIB, 1: 12 * GIB}, vcpu_node=1)
        agent = self.make_agent()
        agent.cycle()
        # 4 GiB free per node. A 7 GiB guest fits in the 8 GiB the two
        # nodes have (its own 4 GiB counted as free), but not with the
        # 4 GiB reserve on top: no restriction.
        self.hv.add('big', {0: 2 * GIB, 1: 2 * GIB}, memory_mb=7 * GIB)
        self.clock.now += 1
        agent.cycle()
        decision = agent.decisions['big']
        self.assertEqual('skipped', decision.action)
        self.assertIn('plus reserve_mb 4096', decision.reason)
        self.assertNotIn('big', self.hv.nodesets)
        self.assertEqual([], [m for m in self.hv.moves if m[0] == 'big'])

    def test_room_counts_what_others_have_yet_to_touch(self):
        # Node 0 has 14 GiB free, but 'other' (12 GiB, 2 GiB touched, its
        # vCPUs on node 0) will take 10 GiB more of it: confined to node 0,
        # the new 8 GiB guest would be killed out of memory. It is never
        # confined to nodes whose room cannot hold it and the reserve.
        self.hv = fakes.FakeHypervisor(nodes=2, memory_mb=16 * GIB)
        self.hv.add('other', {0: 2 * GIB}, vcpu_node=0,
                    memory_mb=12 * GIB,
                    extra_specs={'numa_overhead:policy': 'none'})
        agent = self.make_agent()
        agent.cycle()
        self.hv.add('new', {0: GIB}, vcpu_node=0, memory_mb=8 * GIB)
        self.clock.now += 1
        agent.cycle()
        decision = agent.decisions['new']
        self.assertIn(decision.action, ('restricted', 'moved'),
                      decision.reason)
        nodes = self.hv.nodesets['new']
        self.assertNotEqual((0,), nodes)
        others = 10 * GIB if 0 in nodes else 0
        room = sum(self.hv.free[n] for n in nodes) + GIB - others
        self.assertGreaterEqual(room, 8 * GIB + 1024)
        self.assertLessEqual(decision.plan.get(0, 0), 4 * GIB)
        # The schedulers plan on the same room: node 0 has at most what
        # neither guest was given.
        report = self.publisher.reports[-1]
        self.assertLessEqual(report.nodes[0].free_mb,
                             16 * GIB - 12 * GIB - GIB)

    def test_left_where_it_is_when_no_nodes_have_room(self):
        # Both nodes are promised to guests that have yet to touch their
        # memory: the 4 GiB guest is not confined anywhere.
        self.hv = fakes.FakeHypervisor(nodes=2, memory_mb=16 * GIB)
        self.hv.add('a', {0: GIB}, vcpu_node=0, memory_mb=14 * GIB,
                    extra_specs={'numa_overhead:policy': 'none'})
        self.hv.add('b', {1: GIB}, vcpu_node=1, memory_mb=14 * GIB,
                    extra_specs={'numa_overhead:policy': 'none'})
        agent = self.make_agent()
        agent.cycle()
        self.hv.add('new', {0: 0}, vcpu_node=0, memory_mb=4 * GIB)
        self.clock.now += 1
        agent.cycle()
        decision = agent.decisions['new']
        self.assertEqual('skipped', decision.action)
        self.assertIn('left where it is', decision.reason)
        self.assertIn('yet to touch', decision.reason)
        self.assertNotIn('new', self.hv.nodesets)
        self.assertEqual([], [m for m in self.hv.moves if m[0] == 'new'])

    def test_confined_guest_widened_when_others_take_its_room(self):
        self.hv = fakes.FakeHypervisor(nodes=2, memory_mb=16 * GIB)
        self.hv.add('g', {0: GIB}, vcpu_node=0, memory_mb=8 * GIB)
        agent = self.make_agent()
        agent.cycle()
        self.assertEqual(('restricted', (0,)),
                         (agent.decisions['g'].action,
                          self.hv.nodesets.get('g')),
                         agent.decisions['g'].reason)
        # A guest the agent leaves alone starts on node 0 and will take
        # 12 GiB there: 'g' could not get its other 7 GiB on node 0.
        self.hv.add('late', {0: GIB}, vcpu_node=0, memory_mb=13 * GIB,
                    extra_specs={'numa_overhead:policy': 'none'})
        self.clock.now += 1
        agent.cycle()
        self.assertIn(('g', (), None), self.hv.restored)
        self.assertEqual((0, 1), self.hv.nodesets['g'])
        self.assertEqual(((), ()), agent.restrictions['g'])
        self.assertEqual('widened', agent.outcomes['g'].action)
        self.assertIn("Widened g to the nodes Nova allows",
                      self.logger.output)
        # Once is enough.
        restored = len(self.hv.restored)
        self.clock.now += 1
        agent.cycle()
        self.assertEqual(restored, len(self.hv.restored))

    def place_with_spare(self, spare_mb):
        """A 4 GiB guest Nova allows on node 0 only, where it already is;
        node 0 has ``reserve_mb + spare_mb`` MiB free besides it.
        """
        self.hv = fakes.FakeHypervisor(nodes=2, memory_mb=16 * GIB)
        self.hv.add('other', {0: 16 * GIB - 4 * GIB - 1024 - spare_mb})
        agent = self.make_agent()
        agent.cycle()
        self.hv.add('g', {0: 4 * GIB})
        self.hv.guests['g'] = dataclasses.replace(self.hv.guests['g'],
                                                  allowed_nodes=(0,))
        self.clock.now += 1
        agent.cycle()
        return agent.decisions['g']

    def test_room_counts_the_guest_once_fits_by_1_mib(self):
        # Needs 4096 + 1024 MiB; node 0 holds 4096 (its own) + 1025.
        decision = self.place_with_spare(1)
        self.assertEqual('restricted', decision.action, decision.reason)
        self.assertEqual((0,), self.hv.nodesets['g'])

    def test_room_counts_the_guest_once_exact_fit(self):
        decision = self.place_with_spare(0)
        self.assertEqual('restricted', decision.action, decision.reason)

    def test_room_counts_the_guest_once_misses_by_1_mib(self):
        # 5119 MiB of room for 5120: its own 4 GiB must not count twice.
        decision = self.place_with_spare(-1)
        self.assertEqual('skipped', decision.action)
        self.assertIn('room 5119 MiB', decision.reason)
        self.assertNotIn('g', self.hv.nodesets)

    def test_never_moves_outside_allowed_nodes(self):
        agent = self.make_agent()
        agent.cycle()
        self.hv.add('a', {0: 4 * GIB})
        self.hv.guests['a'] = dataclasses.replace(self.hv.guests['a'],
                                                  allowed_nodes=(0, 1))
        self.clock.now += 1
        agent.cycle()
        decision = agent.decisions['a']
        self.assertTrue(set(decision.plan).issubset({0, 1}))
        for _, src, dst, _ in self.hv.moves:
            self.assertIn(dst, (0, 1))

    def test_advisory_changes_nothing(self):
        self.flags(group='numa_overhead_agent', enforcement='advisory')
        agent = self.make_agent()
        agent.cycle()
        self.hv.add('a', {0: 4 * GIB}, vcpu_node=1)
        self.clock.now += 1
        agent.cycle()
        self.assertEqual('planned', agent.decisions['a'].action)
        self.assertEqual({}, self.hv.nodesets)
        self.assertEqual([], self.hv.moves)
        # Not even a record in the guest's metadata.
        self.assertEqual({}, self.hv.recorded)

    def test_steps_back_while_numad_runs(self):
        logs = self.useFixture(fixtures.FakeLogger(level=logging.INFO))
        self.hv.kernel = kernel_mod.KernelState(numa_balancing=1,
                                                numad=(812,))
        agent = self.make_agent()
        agent.cycle()
        self.assertIn('numad (pid 812)', agent.stepped_back)
        self.assertIn('Kernel: automatic NUMA balancing on', logs.output)
        self.assertIn('the agent steps back', logs.output)
        # A guest starting meanwhile is left to numad and the kernel.
        self.hv.add('a', {0: 4 * GIB}, vcpu_node=1)
        self.clock.now += 1
        agent.cycle()
        decision = agent.decisions['a']
        self.assertEqual('skipped', decision.action)
        self.assertIn('the agent steps back: numad (pid 812) runs',
                      decision.reason)
        self.assertEqual({}, self.hv.nodesets)
        self.assertEqual([], self.hv.moves)
        self.assertEqual([], agent.rebalance())
        self.assertEqual([], agent.colocate())
        self.assertEqual([], agent.protect())
        # Reports still go out.
        self.assertTrue(self.publisher.reports)
        # Read again only every KERNEL_CHECK seconds.
        reads = self.hv.kernel_reads
        self.hv.kernel = kernel_mod.KernelState(numa_balancing=1)
        self.clock.now += agent_mod.KERNEL_CHECK - 2
        agent.cycle()
        self.assertEqual(reads, self.hv.kernel_reads)
        self.assertIsNotNone(agent.stepped_back)
        # Whether numad runs unknown (/proc unreadable): as it was.
        self.hv.kernel = kernel_mod.KernelState(numa_balancing=1,
                                                numad=None)
        self.clock.now += 2
        agent.cycle()
        self.assertIsNotNone(agent.stepped_back)
        self.assertNotIn('numad no longer runs', logs.output)
        # numad stopped: the agent acts again, on the next guest.
        self.hv.kernel = kernel_mod.KernelState(numa_balancing=1)
        self.clock.now += agent_mod.KERNEL_CHECK
        agent.cycle()
        self.assertIsNone(agent.stepped_back)
        self.assertIn('numad no longer runs', logs.output)
        self.hv.add('b', {0: 4 * GIB}, vcpu_node=1)
        self.clock.now += 1
        agent.cycle()
        self.assertNotEqual('skipped', agent.decisions['b'].action)

    def test_numad_gets_the_guests_the_agent_confined_back_as_nova_had_them(
            self):
        # Both confined by their placement, 'a' pinned too (as the
        # optimizer does), 'c' opted out and left alone.
        self.hv.add('a', {0: 4 * GIB}, vcpu_node=0)
        self.hv.add('b', {1: 4 * GIB}, vcpu_node=1)
        self.hv.add('c', {2: 4 * GIB}, vcpu_node=2,
                    extra_specs={'numa_overhead:policy': 'none'})
        agent = self.make_agent()
        agent.cycle()
        self.assertEqual({'a': (0,), 'b': (1,)}, self.hv.nodesets)
        agent.restrictions['a'] = ((0,), (0, 1, 2))
        self.hv.kernel = kernel_mod.KernelState(numad=(9,))
        self.clock.now += agent_mod.KERNEL_CHECK
        agent.cycle()
        # Nodesets widened to Nova's nodes (every node), 'a' unpinned.
        self.assertEqual([('a', (), ()), ('b', (), None)],
                         self.hv.restored)
        self.assertEqual(((), ()), agent.restrictions['a'])
        self.assertEqual(((), ()), agent.restrictions['b'])
        self.assertEqual('restored', agent.outcomes['a'].action)
        self.assertIn('the agent steps back: numad (pid 9)',
                      agent.outcomes['a'].outcome)
        self.assertEqual((), self.hv.recorded['a'].nodes)
        # Once: nothing left to give back.
        self.clock.now += 1
        agent.cycle()
        self.assertEqual(2, len(self.hv.restored))

    def test_a_restarted_agent_hands_back_what_it_recorded(self):
        # The record of an earlier run of this agent: 'a' confined.
        self.hv.add('a', {0: 4 * GIB}, vcpu_node=0,
                    recorded=hv_mod.Recorded(host='cmp-1', nodes=(0,),
                                             cpus=(0, 1)))
        self.hv.kernel = kernel_mod.KernelState(numad=(9,))
        agent = self.make_agent()
        agent.cycle()
        self.assertEqual([('a', (), ())], self.hv.restored)
        self.assertEqual(((), ()), agent.restrictions['a'])
        self.assertEqual({'a': (0, 1, 2, 3)}, self.hv.nodesets)

    def test_enforcement_turned_down_hands_back_what_it_recorded(self):
        # An earlier run enforced ('a' confined and pinned); this one is
        # advisory or off: Nova's placement back, nothing left fenced in
        # (no protection from a filling node would come), once.
        for mode in ('advisory', 'off'):
            self.hv = fakes.FakeHypervisor()
            self.flags(group='numa_overhead_agent', enforcement=mode)
            self.hv.add('a', {0: 4 * GIB}, vcpu_node=0,
                        recorded=hv_mod.Recorded(host='cmp-1', nodes=(0,),
                                                 cpus=(0, 1)))
            agent = self.make_agent()
            agent.cycle()
            self.assertEqual([('a', (), ())], self.hv.restored, mode)
            self.assertEqual(((), ()), agent.restrictions['a'])
            # Its record says so: the next run (enforcing or not) does not
            # take the old restriction for one in force.
            self.assertEqual(((), ()), (self.hv.recorded['a'].nodes,
                                        self.hv.recorded['a'].cpus))
            self.clock.now += 1
            agent.cycle()
            self.assertEqual(1, len(self.hv.restored), mode)
            again = self.make_agent()
            again.cycle()
            self.assertEqual(1, len(self.hv.restored), mode)

    def test_not_enforcing_a_source_agents_record_is_left_alone(self):
        # Its cgroup restriction stayed on the source host; only an
        # enforcing agent touches what may have travelled in the XML.
        self.flags(group='numa_overhead_agent', enforcement='advisory')
        source = hv_mod.Recorded(host='cmp-src', nodes=(1,), cpus=(8, 9))
        self.hv.add('m', {1: 4 * GIB}, vcpu_node=1, recorded=source)
        agent = self.make_agent()
        agent.cycle()
        self.assertEqual([], self.hv.restored)

    def test_numad_drops_the_moves_awaiting_a_verdict(self):
        agent = self.make_agent()
        agent.cycle()
        opt = agent.optimizer
        opt.checks['a'] = object()
        opt.landing['a'] = object()
        opt.returning['b'] = object()
        self.hv.kernel = kernel_mod.KernelState(numad=(9,))
        self.clock.now += agent_mod.KERNEL_CHECK
        agent.cycle()
        self.assertEqual(({}, {}, {}), (opt.checks, opt.landing,
                                        opt.returning))
        self.assertEqual(1, opt.counts['expired'])
        # Stepped back, the optimizer only measures: no pass, no move.
        passes = []
        self.useFixture(fixtures.MockPatchObject(
            opt, 'step', side_effect=lambda now: passes.append(now)))
        for _ in range(3):
            self.clock.now += 10
            agent.cycle()
        self.assertEqual([], passes)
        # numad stopped: a pass again, after the host settles.
        self.hv.kernel = kernel_mod.KernelState()
        self.clock.now += agent_mod.KERNEL_CHECK
        agent.cycle()
        self.assertIsNone(agent.stepped_back)
        self.assertGreater(opt.settle_left(self.clock.now), 0)
        self.assertEqual(1, len(passes))

    def test_a_failed_kernel_read_keeps_the_agent_stepped_back(self):
        self.hv.kernel = kernel_mod.KernelState(numad=(9,))
        agent = self.make_agent()
        agent.cycle()
        self.assertIsNotNone(agent.stepped_back)
        self.hv.kernel = UnicodeDecodeError('utf-8', b'\xff', 0, 1, 'bad')
        self.clock.now += agent_mod.KERNEL_CHECK
        self.assertTrue(agent.cycle())
        self.assertIsNotNone(agent.stepped_back)
        self.assertEqual((9,), agent.kernel.numad)

    def test_numad_with_advisory_or_unknown_kernel_changes_nothing(self):
        self.flags(group='numa_overhead_agent', enforcement='advisory')
        self.hv.kernel = kernel_mod.KernelState(numad=(9,))
        agent = self.make_agent()
        agent.cycle()
        self.assertIsNone(agent.stepped_back)
        self.assertEqual((9,), agent.kernel.numad)
        # A kernel that cannot be read: unknown, the agent acts.
        self.flags(group='numa_overhead_agent', enforcement='pages')
        self.hv.kernel = OSError('permission denied')
        agent = self.make_agent()
        self.assertTrue(agent.cycle())
        self.assertIsNone(agent.kernel)
        self.assertIsNone(agent.stepped_back)

    def test_failed_moves_are_counted_per_errno(self):
        self.hv.move_failures = {'EBUSY': 3}
        self.hv.add('x', {0: 8 * GIB}, vcpu_node=0)
        self.hv.add('y', {1: 8 * GIB}, vcpu_node=1)
        self.hv.add('z', {2: 8 * GIB}, vcpu_node=2)
        self.hv.add('w', {3: 8 * GIB}, vcpu_node=3)
        agent = self.make_agent()
        agent.cycle()
        # First-touched on node 0, vCPUs on node 1: its memory moves.
        self.hv.add('a', {0: 4 * GIB}, vcpu_node=1)
        self.clock.now += 1
        agent.cycle()
        self.assertEqual({'EBUSY': 3}, agent.decisions['a'].failed)
        self.assertEqual({'EBUSY': 3}, agent.failures)

    def test_lifecycle_started_event_places_at_once(self):
        agent = self.make_agent()
        agent.cycle()
        self.hv.add('a', {0: 4 * GIB}, vcpu_node=0)
        agent.on_lifecycle('started', 'a')
        self.assertTrue(agent.wait_for_events(0))
        self.assertEqual(1, agent.handle_events())
        self.assertIn('a', agent.decisions)
        # A restart (hard reboot rewrites the XML) places it again.
        del agent.decisions['a']
        agent.on_lifecycle('started', 'a')
        agent.handle_events()
        self.assertIn('a', agent.decisions)
        self.assertFalse(agent.wait_for_events(0))
        self.assertEqual(0, agent.handle_events())

    def test_lifecycle_callback_only_queues(self):
        # It runs on libvirt's event thread: no hypervisor call, no
        # report, not even the agent's lock.
        agent = self.make_agent()
        agent.cycle()
        reports = len(self.publisher.reports)
        self.hv.add('a', {0: 4 * GIB}, vcpu_node=0)
        self.hv.down = True
        held = threading.Event()
        release = threading.Event()

        def hold_lock():
            with agent._lock:
                held.set()
                release.wait(10)
        holder = threading.Thread(target=hold_lock)
        holder.start()
        self.addCleanup(holder.join)
        self.addCleanup(release.set)
        held.wait(10)
        done = threading.Event()
        caller = threading.Thread(target=lambda: (
            agent.on_lifecycle('started', 'a'), done.set()))
        caller.start()
        self.assertTrue(done.wait(10))
        release.set()
        self.assertNotIn('a', agent.decisions)
        self.assertEqual(reports, len(self.publisher.reports))
        self.hv.down = False
        agent.handle_events()
        self.assertIn('a', agent.decisions)


class TestLocalPlacement(AgentTestCase):
    """The default first placement (``remote_placement = False``): a
    starting guest's memory on the nodes its vCPUs run on only.
    """

    def setUp(self):
        super().setUp()
        self.flags(group='numa_overhead_agent', remote_placement=False)

    def crowded(self, extra_specs=None):
        # Nodes 0 and 1 congested; the new guest first-touched on node 0,
        # its vCPUs on node 2.
        for node in range(4):
            self.hv.add('busy%d' % node, {node: 8 * GIB}, vcpu_node=node,
                        extra_specs=extra_specs)
        agent = self.make_agent()
        for _ in range(2):
            for name in ('busy0', 'busy1'):
                self.busy(name, hit=0.05, loss=0.45)
            self.clock.now += 1
            agent.cycle()
        self.hv.add('new', {0: 8 * GIB}, vcpu_node=2,
                    extra_specs=extra_specs)
        self.clock.now += 1
        agent.cycle()
        return agent.decisions['new']

    def test_memory_goes_where_its_vcpus_run(self):
        decision = self.crowded()
        self.assertIn(decision.action, ('restricted', 'moved'),
                      decision.reason)
        self.assertEqual({2: 8 * GIB}, decision.plan)
        self.assertEqual((2,), self.hv.nodesets['new'])
        self.assertEqual({2: 8.0 * GIB}, {
            n: mb for n, mb in self.hv.memory['new'].items() if mb})

    def test_vcpus_on_two_nodes_plan_over_both(self):
        decision = self.wide({0: 4 * GIB})
        self.assertIn(decision.action, ('restricted', 'moved'),
                      decision.reason)
        self.assertLessEqual(set(decision.plan), {1, 2})
        self.assertLessEqual(set(self.hv.nodesets['wide']), {1, 2})

    def beside(self, other_mb):
        """A 4 GiB guest starting with its vCPUs on node 1 of 16 GiB,
        where a guest the agent leaves alone has ``other_mb``.
        """
        self.hv = fakes.FakeHypervisor(nodes=2, memory_mb=16 * GIB)
        self.hv.add('a', {1: other_mb}, vcpu_node=1,
                    extra_specs={'numa_overhead:policy': 'none'})
        agent = self.make_agent()
        agent.cycle()
        self.hv.add('new', {1: GIB}, vcpu_node=1, memory_mb=4 * GIB)
        self.clock.now += 1
        agent.cycle()
        return agent.decisions['new']

    def test_left_where_it_is_when_its_nodes_are_full(self):
        decision = self.beside(14 * GIB)
        self.assertEqual('skipped', decision.action)
        self.assertIn('nodes its vCPUs run on', decision.reason)
        self.assertIn('left where it is', decision.reason)
        self.assertNotIn('new', self.hv.nodesets)
        self.assertEqual([], [m for m in self.hv.moves if m[0] == 'new'])
        # The paper's placement would have taken node 0.
        self.flags(group='numa_overhead_agent', remote_placement=True)
        agent = self.make_agent()
        agent.cycle()
        self.assertIn(agent.decisions['new'].action,
                      ('restricted', 'moved'))
        self.assertIn(0, self.hv.nodesets['new'])

    def two_nodes(self):
        """An agent that listed a host of two 16 GiB nodes."""
        self.hv = fakes.FakeHypervisor(nodes=2, memory_mb=16 * GIB)
        agent = self.make_agent()
        agent.cycle()
        return agent

    def every_cpu(self) -> tuple:
        return tuple(self.hv.topology().node_of_cpu())

    def start(self, agent, name='new', affinity=None, memory=None,
              memory_mb=4 * GIB, **kwargs):
        """``name`` starts (4 GiB) with its vCPUs on node 1 and ``memory``
        touched (1 GiB on node 1), its vCPUs' affinity ``affinity`` (CPUs;
        None: unknown); the agent's next cycle, its result.
        """
        self.hv.add(name, memory or {1: GIB}, vcpu_node=1,
                    memory_mb=memory_mb, **kwargs)
        if affinity is not None:
            self.hv.affinity[name] = affinity
        self.clock.now += 1
        return agent.cycle()

    def floating(self, affinity='every', **kwargs):
        """The decision for ``start`` on ``two_nodes`` ('every': the
        vCPUs may run on every CPU of the host).
        """
        agent = self.two_nodes()
        if affinity == 'every':
            affinity = self.every_cpu()
        self.start(agent, affinity=affinity, **kwargs)
        return agent.decisions['new']

    def test_a_floating_guest_already_local_is_left_to_the_kernel(self):
        # Its vCPUs may run on both nodes: confining its memory to node 1
        # would move nothing and keep it from vCPUs the kernel moves.
        decision = self.floating()
        self.assertEqual('skipped', decision.action)
        self.assertIn('policy proportional, max_nodes 4: its vCPUs may run '
                      'on nodes 0,1, beyond the plan\'s nodes 1,',
                      decision.reason)
        self.assertIn('not confined', decision.reason)
        self.assertNotIn('new', self.hv.nodesets)
        self.assertEqual([], [m for m in self.hv.moves if m[0] == 'new'])
        self.assertNotIn('new', self.make_agent().restrictions)

    def test_a_guest_confined_to_its_node_is_placed(self):
        # Its vCPUs may only run on node 1 (CPUs the topology does not
        # list do not count), or the hypervisor does not say: the
        # paper's placement, as before.
        node1 = fakes.FakeHypervisor(nodes=2).topology().nodes[1].cpus
        for affinity in (node1, None, (), (node1[0], 999)):
            decision = self.floating(affinity)
            self.assertIn(decision.action, ('restricted', 'moved'),
                          (affinity, decision.reason))
            self.assertEqual((1,), self.hv.nodesets['new'])

    def test_a_floating_guest_with_memory_elsewhere_is_placed(self):
        # Half of its memory on node 0: the plan moves it.
        decision = self.floating(memory={0: GIB, 1: GIB})
        self.assertEqual('moved', decision.action, decision.reason)
        self.assertEqual((1,), self.hv.nodesets['new'])
        # QEMU's own and what it touched before the agent saw it are not:
        # 5% of what it touched or 128 MiB, whichever is larger.
        decision = self.floating(memory={0: 100, 1: GIB})
        self.assertEqual('skipped', decision.action, decision.reason)
        self.assertIn('its memory is there already (100 MiB elsewhere, '
                      'within the slack)', decision.reason)
        decision = self.floating(memory={0: 100})
        self.assertEqual('skipped', decision.action, decision.reason)
        decision = self.floating(memory={0: 300, 1: 7 * GIB},
                                 memory_mb=8 * GIB)
        self.assertEqual('skipped', decision.action, decision.reason)
        # More than that elsewhere is moved, small as it is.
        decision = self.floating(memory={0: 150})
        self.assertEqual('moved', decision.action, decision.reason)

    def test_a_running_floating_guest_is_left_wherever_its_memory(self):
        # Found running when the agent starts, or resumed: its pages are
        # where the kernel put them, spread or not; the placement does not
        # gather them on the node its vCPUs happen to be on.
        self.hv = fakes.FakeHypervisor(nodes=2, memory_mb=16 * GIB)
        self.hv.add('old', {0: 2 * GIB, 1: 2 * GIB}, vcpu_node=1,
                    memory_mb=4 * GIB)
        self.hv.affinity['old'] = self.every_cpu()
        agent = self.make_agent()
        agent.cycle()
        decision = agent.decisions['old']
        self.assertEqual('skipped', decision.action, decision.reason)
        self.assertIn('and it was running already (found by the agent, or '
                      'resumed): not confined', decision.reason)
        self.assertNotIn('old', self.hv.nodesets)
        agent.on_lifecycle('resumed', 'old')
        agent.handle_events()
        self.assertIsNot(decision, agent.decisions['old'])
        self.assertEqual('skipped', agent.decisions['old'].action)
        self.assertEqual([], [m for m in self.hv.moves if m[0] == 'old'])
        # Started again (a new QEMU, its memory first touched on node 0):
        # placed as a guest just started.
        agent.on_lifecycle('started', 'old')
        agent.handle_events()
        self.assertEqual('moved', agent.decisions['old'].action)
        self.assertEqual((1,), self.hv.nodesets['old'])
        # Unknown affinity: the placement of a guest found running, as
        # before.
        self.hv = fakes.FakeHypervisor(nodes=2, memory_mb=16 * GIB)
        self.hv.add('old', {0: 2 * GIB, 1: 2 * GIB}, vcpu_node=1,
                    memory_mb=4 * GIB)
        agent = self.make_agent()
        agent.cycle()
        self.assertEqual('moved', agent.decisions['old'].action)

    def test_a_guest_started_again_is_placed_as_a_new_one(self):
        # Confined by the agent (its affinity unknown then), then Nova's
        # hard reboot: a new QEMU from Nova's XML, without the agent's
        # nodeset or record. The agent forgets its restriction and places
        # it as a guest just started; a resume keeps it.
        agent = self.two_nodes()
        self.start(agent)
        self.assertEqual(((1,), ()), agent.restrictions['new'])
        self.hv.affinity['new'] = self.every_cpu()
        agent.on_lifecycle('resumed', 'new')
        agent.handle_events()
        self.assertEqual(((1,), ()), agent.restrictions['new'])
        self.assertIn(agent.decisions['new'].action, ('restricted', 'moved'))
        self.hv.nodesets.pop('new')
        self.hv.recorded.pop('new')
        agent.on_lifecycle('started', 'new')
        agent.handle_events()
        self.assertEqual(((), ()), agent.restrictions['new'])
        decision = agent.decisions['new']
        self.assertEqual('skipped', decision.action, decision.reason)
        self.assertIn('its memory is there already', decision.reason)
        self.assertNotIn('new', self.hv.nodesets)
        # Its record is the new run's: Nova's placement, no restriction.
        self.assertEqual((), self.hv.recorded['new'].nodes)

    def test_a_new_qemu_without_its_started_event_is_a_new_run(self):
        # Libvirt was unreachable while Nova hard-rebooted the guest: no
        # 'started' event, but its domain id changed. The agent forgets
        # what it did to the old QEMU and places the new one afresh.
        agent = self.two_nodes()
        self.start(agent, run='5')
        self.assertEqual(((1,), ()), agent.restrictions['new'])
        self.hv.nodesets.pop('new')
        self.hv.recorded.pop('new')
        self.hv.guests['new'] = dataclasses.replace(
            self.hv.guests['new'], run='6')
        self.hv.affinity['new'] = self.every_cpu()
        self.clock.now += 1
        with mock.patch.object(agent.optimizer, 'restarted',
                               autospec=True) as restarted, \
                mock.patch.object(agent.collector, 'restarted',
                                  autospec=True) as counters:
            agent.cycle()
        restarted.assert_called_once_with('new', mock.ANY)
        counters.assert_called_once_with('new')
        self.assertEqual(((), ()), agent.restrictions['new'])
        # The same run listed again: nothing new.
        self.clock.now += 1
        with mock.patch.object(agent.optimizer, 'restarted',
                               autospec=True) as restarted:
            agent.cycle()
        restarted.assert_not_called()

    def test_the_rule_is_the_local_first_placements_only(self):
        # The paper's placement (remote_placement), and the flavor's own
        # policies, confine as before.
        self.flags(group='numa_overhead_agent', remote_placement=True)
        decision = self.floating()
        self.assertIn(decision.action, ('restricted', 'moved'),
                      decision.reason)
        self.flags(group='numa_overhead_agent', remote_placement=False)
        for policy in ('spread', 'local'):
            decision = self.floating(
                extra_specs={'numa_overhead:policy': policy})
            self.assertIn(decision.action, ('restricted', 'moved'),
                          (policy, decision.reason))

    def test_the_affinity_is_read_only_where_it_matters(self):
        # Not for the paper's placement, nor for a guest left alone.
        self.flags(group='numa_overhead_agent', remote_placement=True)
        agent = self.two_nodes()
        read = self.useFixture(fixtures.MockPatchObject(
            self.hv, 'vcpu_affinity', return_value=None)).mock
        self.hv.add('pinned', {1: GIB}, vcpu_node=1, pinned=True)
        self.start(agent)
        self.assertEqual([], read.call_args_list)
        self.flags(group='numa_overhead_agent', remote_placement=False)
        self.start(agent, 'spread',
                   extra_specs={'numa_overhead:policy': 'spread'})
        self.assertEqual([], read.call_args_list)
        # The local first placement of a guest the agent has not confined
        # (the first agent did confine 'new'): read once.
        self.flags(group='numa_overhead_agent', remote_placement=False)
        self.hv.add('fresh', {1: GIB}, vcpu_node=1, memory_mb=4 * GIB)
        agent = self.make_agent()
        agent.cycle()
        self.assertEqual(['fresh'],
                         [c.args[0].name for c in read.call_args_list])

    def test_a_guest_the_agent_confined_before_stays_confined(self):
        # Placed by an agent that could not read the affinity, then the
        # agent restarts: its nodeset is in force, it is placed as before
        # (not called unconfined with a nodeset still on).
        decision = self.floating(None)
        self.assertEqual((1,), self.hv.nodesets['new'])
        self.hv.affinity['new'] = self.every_cpu()
        agent = self.make_agent()
        agent.cycle()
        decision = agent.decisions['new']
        self.assertIn(decision.action, ('restricted', 'moved'),
                      decision.reason)
        self.assertEqual((1,), self.hv.nodesets['new'])

    def test_an_affinity_that_cannot_be_read_is_unknown(self):
        for bad in (hv_mod.HypervisorError('no'), TypeError('odd')):
            agent = self.two_nodes()
            self.useFixture(fixtures.MockPatchObject(
                self.hv, 'vcpu_affinity', side_effect=bad))
            self.start(agent)
            self.assertEqual((1,), self.hv.nodesets['new'])
        # Not a list of CPUs at all: unknown too.
        self.hv.add('other', {1: GIB}, vcpu_node=1, memory_mb=4 * GIB)
        self.useFixture(fixtures.MockPatchObject(
            self.hv, 'vcpu_affinity', return_value=42))
        self.assertIsNone(agent.vcpu_reach(self.hv.guests['other']))

    def test_an_unreadable_affinity_is_warned_once_per_kind(self):
        logger = self.useFixture(fixtures.FakeLogger(
            level=logging.DEBUG, format='%(levelname)s %(message)s'))
        agent = self.two_nodes()
        self.useFixture(fixtures.MockPatchObject(
            self.hv, 'vcpu_affinity',
            side_effect=hv_mod.HypervisorError('no maps')))
        for name in ('a', 'b'):
            self.start(agent, name)
            self.assertEqual((1,), self.hv.nodesets[name])
        lines = [line.split(' ')[0] for line in logger.output.splitlines()
                 if 'Could not read the vCPU affinity' in line]
        self.assertEqual(['WARNING', 'DEBUG'], lines)

    def test_a_guest_gone_or_libvirt_down_while_reading_it(self):
        agent = self.two_nodes()
        # Gone: no decision, nothing confined, the cycle goes on.
        self.hv.vanish_on = ('vcpu_affinity', 'new')
        self.assertTrue(self.start(agent, affinity=self.every_cpu()))
        self.assertNotIn('new', agent.decisions)
        self.assertNotIn('new', self.hv.nodesets)
        # libvirt down: the cycle stops there, as for any other call.
        self.useFixture(fixtures.MockPatchObject(
            self.hv, 'vcpu_affinity', side_effect=hv_mod.HypervisorUnavailable(
                'closed')))
        self.assertFalse(self.start(agent, 'other'))
        self.assertNotIn('other', agent.decisions)

    def test_advice_for_a_floating_guest_is_none(self):
        self.flags(group='numa_overhead_agent', enforcement='advisory')
        decision = self.floating()
        self.assertEqual('skipped', decision.action)
        self.assertIn('not confined', decision.reason)

    def test_a_flavor_policy_is_the_flavors(self):
        # numa_overhead:policy set by the flavor: its policy over every
        # node Nova allows, as the schedulers plan it.
        agent = self.make_agent()
        agent.cycle()
        self.hv.add('spread', {0: 4 * GIB}, vcpu_node=0,
                    extra_specs={'numa_overhead:policy': 'spread'})
        self.hv.add('default', {0: 4 * GIB}, vcpu_node=0)
        self.clock.now += 1
        agent.cycle()
        self.assertGreater(len(agent.decisions['spread'].plan), 1,
                           agent.decisions['spread'].reason)
        self.assertEqual({0}, set(agent.decisions['default'].plan),
                         agent.decisions['default'].reason)

    def test_an_opted_in_proportional_flavor_is_local_too(self):
        self.flags(group='numa_overhead_agent', managed_guests='opt_in')
        decision = self.crowded(
            extra_specs={'numa_overhead:policy': 'proportional'})
        self.assertEqual({2: 8 * GIB}, decision.plan, decision.reason)

    def test_reserve_on_its_vcpus_node(self):
        # Node 1 holds the 4 GiB guest but not reserve_mb on top: not
        # confined there, and not sent remote either.
        self.flags(group='numa_overhead_agent', reserve_mb=2048)
        decision = self.beside(11 * GIB)
        self.assertEqual('skipped', decision.action)
        self.assertIn('reserve_mb 2048', decision.reason)
        self.assertNotIn('new', self.hv.nodesets)

    def test_advisory_plans_locally_and_changes_nothing(self):
        self.flags(group='numa_overhead_agent', enforcement='advisory')
        decision = self.crowded()
        self.assertEqual('planned', decision.action)
        self.assertEqual({2: 8 * GIB}, decision.plan)
        self.assertEqual({}, self.hv.nodesets)

    def test_vcpus_where_nova_allows_no_memory(self):
        # Nova allows its memory on nodes 0-1; its vCPUs run on node 3.
        self.hv.add('odd', {0: GIB})
        domain = dataclasses.replace(self.hv.guests['odd'],
                                     allowed_nodes=(0, 1))
        view = planner.HostView(
            free_mb=[8 * GIB] * 4, total_mb=[16 * GIB] * 4, guests=[0] * 4,
            overhead=[[0] * 4 for _ in range(4)],
            distances=[[10 if i == j else 21 for j in range(4)]
                       for i in range(4)])
        local = placer_mod.Placer(self.hv, 'pages', 0, remote=False)
        decision = local.place(domain, view, {3: 1.0}, {0: GIB})
        self.assertEqual('skipped', decision.action)
        self.assertIn('no node Nova allows', decision.reason)
        self.assertEqual({}, self.hv.nodesets)
        paper = placer_mod.Placer(self.hv, 'advisory', 0, remote=True)
        decision = paper.place(domain, view, {3: 1.0}, {0: GIB})
        self.assertEqual('planned', decision.action, decision.reason)
        self.assertLessEqual(set(decision.plan), {0, 1})
        # Where its vCPUs run is not known yet: Nova's nodes, as before.
        decision = local.place(domain, view, {}, {0: GIB})
        self.assertIn(decision.action, ('restricted', 'moved'),
                      decision.reason)
        self.assertLessEqual(set(decision.plan), {0, 1})


class TestNovasIntent(AgentTestCase):
    """What Nova allowed survives agent restarts and live migrations."""

    def place_one(self, agent):
        agent.cycle()
        # First-touched on node 0, vCPUs on node 1.
        self.hv.add('a', {0: 4 * GIB}, vcpu_node=1)
        self.clock.now += 1
        agent.cycle()
        decision = agent.decisions['a']
        self.assertIn(decision.action, ('restricted', 'moved'))
        return decision

    def test_the_guest_keeps_a_record(self):
        agent = self.make_agent()
        decision = self.place_one(agent)
        recorded = self.hv.recorded['a']
        self.assertEqual('cmp-1', recorded.host)
        self.assertEqual(((), ()), (recorded.nova_nodes, recorded.nova_cpus))
        self.assertEqual(tuple(sorted(decision.plan)), recorded.nodes)
        self.assertEqual(decision.action, recorded.action)
        self.assertTrue(recorded.outcome.startswith('ok: '))

    def test_a_restarted_agent_knows_what_nova_allowed(self):
        decision = self.place_one(self.make_agent())
        restricted = tuple(sorted(decision.plan))
        self.assertEqual(restricted, self.hv.nodesets['a'])
        # A new agent run: the guest shows the old run's restriction.
        agent = self.make_agent()
        agent.cycle()
        self.assertEqual((), agent.nova_allowed['a'])
        self.assertEqual((restricted, ()), agent.restrictions['a'])
        domain = agent.domains['a']
        self.assertEqual(restricted, domain.allowed_nodes)
        self.assertEqual((), agent.as_nova_placed(domain).allowed_nodes)
        # So it may widen the restriction again.
        other = next(n for n in range(4) if n not in restricted)
        widened = agent._widen(domain, other)
        self.assertIn(other, widened.allowed_nodes)

    def test_a_live_migration_gets_novas_placement_back(self):
        agent = self.make_agent()
        decision = self.place_one(agent)
        self.assertNotEqual(tuple(range(4)), self.hv.nodesets['a'])
        agent.on_lifecycle('migrating', 'a')
        agent.handle_events()
        self.assertEqual([('a', (), None)], self.hv.restored)
        self.assertEqual((0, 1, 2, 3), self.hv.nodesets['a'])
        self.assertEqual('restored', agent.outcomes['a'].action)
        self.assertEqual(((), ()), agent.restrictions['a'])
        # Its record is not written meanwhile (the migration's job holds
        # the domain): a destination reads this host's restriction in it
        # and gives Nova's placement back there too.
        self.assertEqual(tuple(sorted(decision.plan)),
                         self.hv.recorded['a'].nodes)
        # Left alone while it leaves.
        self.assertEqual([], [g.name for g in agent.managed_guests()])
        # It failed and resumed here: placed again.
        del agent.decisions['a']
        agent.on_lifecycle('resumed', 'a')
        agent.handle_events()
        self.assertEqual(decision.plan, agent.decisions['a'].plan)
        self.assertEqual(['a'], [g.name for g in agent.managed_guests()])

    def test_a_migration_that_ends_without_an_event(self):
        # Failed or cancelled before the switchover, while the guest
        # runs: no lifecycle event, the job is gone.
        agent = self.make_agent()
        decision = self.place_one(agent)
        agent.on_lifecycle('migrating', 'a')
        agent.handle_events()
        del agent.decisions['a']
        for running in (True, None):
            # Still leaving, or the backend cannot tell: left alone.
            self.hv.jobs['a'] = running
            self.clock.now += 1
            agent.cycle()
            self.assertIn('a', agent.migrating)
            self.assertNotIn('a', agent.decisions)
        self.hv.raise_on[('migration_running', 'a')] = \
            hv_mod.HypervisorError('injected')
        agent.cycle()
        self.assertIn('a', agent.migrating)
        self.hv.raise_on[('migration_running', 'a')] = \
            hv_mod.HypervisorUnavailable('injected')
        # Libvirt lost then: the events queued meanwhile are kept.
        agent.on_lifecycle('resumed', 'b')
        agent.on_lifecycle('started', 'c')
        agent.handle_events()
        self.assertFalse(agent.cycle())
        self.assertIn('a', agent.migrating)
        self.assertEqual({'b', 'c'}, agent.pending)
        self.assertEqual({'c'}, agent.fresh)
        del self.hv.raise_on[('migration_running', 'a')]
        self.hv.jobs['a'] = False
        self.clock.now += 1
        agent.cycle()
        self.assertIn('a still runs here and its live migration is over',
                      self.logger.output)
        self.assertNotIn('a', agent.migrating)
        self.assertEqual(decision.plan, agent.decisions['a'].plan)
        self.assertEqual(['a'], [g.name for g in agent.managed_guests()])

    def test_vcpu_pins_are_given_back_too(self):
        self.flags(group='numa_overhead_agent', colocate_vcpus=True)
        agent = self.make_agent()
        TestColocation.crowd_node_0(self, agent)
        moved = agent.colocate()
        self.assertEqual(1, len(moved))
        name = moved[0]
        self.assertTrue(agent.restrictions[name][1])
        agent.on_lifecycle('migrating', name)
        agent.handle_events()
        self.assertEqual([(name, (), ())], self.hv.restored)
        self.assertEqual(tuple(range(32)), self.hv.pins[name])

    def arrive_restricted(self, restore_error=None):
        """An agent, and 'm' arriving by live migration with the source
        agent's vCPU pins and numatune in its XML (``restore_error``: what
        giving Nova's placement back raises).
        """
        agent = self.make_agent()
        agent.cycle()
        source = hv_mod.Recorded(host='cmp-src', nova_nodes=(), nova_cpus=(),
                                 nodes=(1,), cpus=(8, 9), action='moved',
                                 outcome='ok', at='2026-01-01T00:00:00Z')
        self.hv.add('m', {1: 4 * GIB}, vcpu_node=1, recorded=source)
        self.hv.nodesets['m'] = (1,)
        self.hv.pins['m'] = (8, 9)
        if restore_error is not None:
            self.hv.raise_on[('restore', 'm')] = restore_error
        self.clock.now += 1
        agent.on_lifecycle('started', 'm')
        agent.handle_events()
        return agent

    def test_arriving_with_the_sources_restriction(self):
        agent = self.arrive_restricted()
        self.assertEqual(('m', (), ()), self.hv.restored[0])
        self.assertEqual(tuple(range(32)), self.hv.pins['m'])
        self.assertEqual((), agent.nova_allowed['m'])
        recorded = self.hv.recorded['m']
        self.assertEqual('cmp-1', recorded.host)
        self.assertIn('m', agent.decisions)

    def test_arriving_while_numad_runs_gets_novas_placement_only(self):
        # Stepped back, the agent still hands a guest that came with the
        # source agent's restriction Nova's placement, and places nothing.
        self.hv.kernel = kernel_mod.KernelState(numad=(9,))
        agent = self.arrive_restricted()
        self.assertIsNotNone(agent.stepped_back)
        self.assertEqual([('m', (), ())], self.hv.restored)
        self.assertEqual(tuple(range(32)), self.hv.pins['m'])
        self.assertEqual('skipped', agent.decisions['m'].action)
        self.assertEqual((0, 1, 2, 3), self.hv.nodesets['m'])
        self.assertEqual([], self.hv.moves)

    def test_nodes_from_another_host_are_not_novas_here(self):
        agent = self.make_agent()
        source = hv_mod.Recorded(host='cmp-src', nova_nodes=(0, 1))
        self.hv.add('m', {1: 4 * GIB}, recorded=source)
        self.hv.guests['m'] = dataclasses.replace(
            self.hv.guests['m'], nova_nodes=(2, 3), nova_cpus=(16, 17))
        agent.cycle()
        self.assertEqual((2, 3), agent.nova_allowed['m'])
        self.assertEqual((16, 17), agent.nova_cpus['m'])

    def test_a_restore_on_arrival_that_fails_is_tried_again(self):
        agent = self.arrive_restricted(hv_mod.HypervisorError(
            'pinVcpu: device or resource busy'))
        self.assertIn('m', agent.unrestored)
        self.hv.raise_on.clear()
        self.clock.now += 1
        agent.cycle()
        self.assertNotIn('m', agent.unrestored)
        self.assertNotEqual((8, 9), self.hv.pins.get('m'))
        # Placed meanwhile (its nodeset the agent's): only the source's
        # pins were given back, the placement's nodeset kept.
        placed = agent.decisions['m']
        if placed.action in ('restricted', 'moved'):
            self.assertIn(('m', None, ()), self.hv.restored)
            self.assertEqual(tuple(sorted(placed.plan)),
                             agent.restrictions['m'][0])
            self.assertEqual(tuple(sorted(placed.plan)),
                             self.hv.nodesets['m'])
        else:
            self.assertIn(('m', (), ()), self.hv.restored)


class TestRebalancing(AgentTestCase):

    def test_memory_bound_guest_moves_off_a_hot_node(self):
        self.flags(group='numa_overhead_agent', rebalance_threshold=3,
                   enforcement='pages')
        self.hv.add('hot', {0: 8 * GIB}, vcpu_node=0,
                    extra_specs={'numa_overhead:policy': 'local'})
        self.hv.add('cool', {2: GIB}, vcpu_node=2)
        agent = self.make_agent()
        for _ in range(3):
            # Memory-controller bound (cycle loss 0.9: level 4), LLC hit
            # rate fine, 333 LLC references per 1000 instructions.
            self.busy('hot', hit=0.6, loss=0.9, ipc=0.3)
            self.clock.now += 1
            agent.cycle()
        # Placement restricted it to node 0; the moves widen that first.
        self.assertEqual((0,), self.hv.nodesets['hot'])
        moves = agent.rebalance()
        self.assertTrue(moves)
        self.assertTrue(all(m.src == 0 and m.dst != 0 for m in moves))
        self.assertIn(moves[0].dst, self.hv.nodesets['hot'])
        self.assertLessEqual(sum(m.mb for m in moves), 1024)
        self.assertLess(self.hv.memory['hot'][0], 8 * GIB)
        event, payload = self.notifier.events[-1]
        self.assertEqual('numa_overhead.rebalance', event)
        self.assertIn('Rebalance moved', self.logger.output)

    def test_cpu_bound_guest_is_left_alone(self):
        self.flags(group='numa_overhead_agent', rebalance_threshold=0)
        self.hv.add('cpu', {0: 8 * GIB}, vcpu_node=0)
        agent = self.make_agent()
        for _ in range(3):
            # 2 LLC references per 1000 instructions, IPC 2: friendly.
            self.hv.run('cpu', 2000000, 1000000, 4000, 100, 1000)
            self.clock.now += 1
            agent.cycle()
        self.assertEqual([], agent.rebalance())

    def test_rebalance_off_in_flavor(self):
        self.flags(group='numa_overhead_agent', rebalance_threshold=0)
        self.hv.add('hot', {0: 8 * GIB}, vcpu_node=0,
                    extra_specs={'numa_overhead:rebalance': 'false'})
        agent = self.make_agent()
        for _ in range(3):
            self.busy('hot')
            self.clock.now += 1
            agent.cycle()
        self.assertEqual([], agent.rebalance())


class TestRateLimit(base.TestCase):

    def test_token_bucket(self):
        clock = Clock()
        limit = agent_mod.RateLimit(100.0, clock)
        self.assertEqual(100.0, limit.take(150))
        self.assertEqual(0.0, limit.take(10))
        clock.now += 0.5
        self.assertEqual(50.0, limit.take(80))
        self.assertEqual(7, agent_mod.RateLimit(0, clock).take(7))


class TestPageSize(AgentTestCase):

    def test_the_page_budget_is_in_the_hosts_pages(self):
        agent = self.make_agent()
        self.assertEqual(10 * 256, agent.pages_allowed(10))
        # 64 KiB pages (arm64, ppc64le): 16 a MiB, and what they move
        # counts as much.
        self.useFixture(fixtures.MockPatchObject(placer_mod, 'PAGE_SIZE',
                                                 65536))
        self.assertEqual(10 * 16, agent.pages_allowed(10))
        self.assertEqual(1 / 16.0, placer_mod.page_mb())


class TestHypervisorErrors(base.TestCase):

    def test_domain_gone_is_a_hypervisor_error(self):
        self.assertTrue(issubclass(hv_mod.DomainGone, hv_mod.HypervisorError))


class TestMeasuredTopology(AgentTestCase):

    def test_probe_matrix_replaces_slit(self):
        from nova_numa_overhead.compute import probe
        path = self.useFixture(fixtures.TempDir()).join('topology.json')
        # AMD-like asymmetry: node 1 reads node 0's memory 2.6x slower,
        # node 0 reads node 1's only 1.3x slower.
        probe.save(probe.Matrix(latency_ns=[[100.0, 130.0], [260.0, 100.0]],
                                bandwidth_mbps=[[5e4, 2e4], [1e4, 4e4]],
                                nodes=[0, 1], measured_at='2026-11-22',
                                size_mb=256, bandwidth_streams=[8, 8]),
                   path)
        self.flags(group='numa_overhead_agent', topology_file=path)
        self.hv = fakes.FakeHypervisor(nodes=2)
        agent = self.make_agent()
        agent.cycle()
        self.assertEqual([[0, 1], [3, 0]], agent.levels.rml)
        # Measured by all 8 CPUs of each node: the cost model's
        # capacities, whatever node_bandwidth_mbps says.
        model = agent.optimizer.host_model()
        self.assertEqual((5e4, 4e4), model.bandwidth_mbps)
        self.assertEqual(((5e4, 2e4), (1e4, 4e4)), model.link_mbps)
        self.assertNotIn('as ratios', self.logger.output)

    def test_probe_matrix_with_a_memory_only_node(self):
        from nova_numa_overhead.compute import probe
        path = self.useFixture(fixtures.TempDir()).join('topology.json')
        # Node 1 has memory but no CPU: the probe cannot measure its row.
        probe.save(probe.Matrix(
            latency_ns=[[100.0, 260.0], [math.nan, math.nan]],
            bandwidth_mbps=[[1e4, 4e3], [math.nan, math.nan]],
            nodes=[0, 1], measured_at='2026-11-22', size_mb=256,
            bandwidth_streams=[8, None]), path)
        self.flags(group='numa_overhead_agent', topology_file=path)
        self.hv = fakes.FakeHypervisor(nodes=2)
        topology = self.hv._topology
        self.hv._topology = dataclasses.replace(topology, nodes=(
            topology.nodes[0], dataclasses.replace(topology.nodes[1],
                                                   cpus=())))
        agent = self.make_agent()
        agent.cycle()
        # Node 0's row is measured (2.6x: level 3); node 1's is SLIT's.
        self.assertEqual([[0, 3], [2, 0]], agent.levels.rml)
        self.assertNotIn('using SLIT', self.logger.output)
        self.assertNotIn('as ratios', self.logger.output)

    def write_v1(self, bandwidth):
        """A probe file from before concurrent streams (format 1)."""
        path = self.useFixture(fixtures.TempDir()).join('topology.json')
        with open(path, 'w') as f:
            json.dump({'version': 1, 'measured_at': '2026-11-22',
                       'size_mb': 256, 'nodes': [0, 1],
                       'latency_ns': [[100.0, 130.0], [260.0, 100.0]],
                       'bandwidth_mbps': bandwidth}, f)
        self.flags(group='numa_overhead_agent', topology_file=path)
        return path

    def test_single_stream_bandwidth_is_scaled_to_the_option(self):
        path = self.write_v1([[8000.0, 4000.0], [2000.0, 5000.0]])
        self.flags(group='numa_overhead_agent', node_bandwidth_mbps=40000)
        self.hv = fakes.FakeHypervisor(nodes=2)
        agent = self.make_agent()
        agent.cycle()
        agent.cycle()
        model = agent.optimizer.host_model()
        # Ratios: node 0's 8000 MB/s of one stream is the option's 40000.
        self.assertEqual((40000.0, 25000.0), model.bandwidth_mbps)
        self.assertEqual(20000.0, model.link_mbps[0][1])
        self.assertEqual(10000.0, model.link_mbps[1][0])
        # The levels use the latency, as before.
        self.assertEqual([[0, 1], [3, 0]], agent.levels.rml)
        line = ('The cost model takes the bandwidth matrix of %s as ratios, '
                'its largest local figure scaled to [numa_overhead_agent] '
                'node_bandwidth_mbps (40000 MB/s): CPU nodes 0, 1 were '
                'measured with fewer concurrent streams than they have '
                'CPUs (1 of 8, 1 of 8)' % path)
        self.assertEqual(1, self.logger.output.count(line))

    def test_no_word_on_bandwidth_with_the_optimizer_off(self):
        self.write_v1([[8000.0, 4000.0], [2000.0, 5000.0]])
        self.flags(group='numa_overhead_agent', optimize=False)
        self.hv = fakes.FakeHypervisor(nodes=2)
        agent = self.make_agent()
        agent.cycle()
        self.assertNotIn('as ratios', self.logger.output)
        # The latency still gives the levels.
        agent.cycle()
        self.assertEqual([[0, 1], [3, 0]], agent.levels.rml)

    def test_bad_or_missing_file_falls_back_to_slit(self):
        path = self.useFixture(fixtures.TempDir()).join('topology.json')
        with open(path, 'w') as f:
            f.write('{"version": 1, "nodes": [0]')
        self.hv = fakes.FakeHypervisor(nodes=2)
        for configured in (path, path + '.missing'):
            self.flags(group='numa_overhead_agent', topology_file=configured)
            agent = self.make_agent()
            agent.cycle()
            self.assertEqual([[0, 2], [2, 0]], agent.levels.rml)
        self.assertIn('using SLIT', self.logger.output)


class TestColocation(AgentTestCase):

    def crowd_node_0(self, agent):
        self.hv.add('a', {0: 4 * GIB}, vcpu_node=0)
        self.hv.add('b', {0: 4 * GIB}, vcpu_node=0)
        for _ in range(3):
            for name in ('a', 'b'):
                # Thrashing the LLC of node 0 and its controller.
                self.busy(name, hit=0.1, loss=0.9, ipc=0.3)
            self.clock.now += 1
            agent.cycle()

    def test_off_by_default(self):
        agent = self.make_agent()
        self.crowd_node_0(agent)
        self.assertEqual([], agent.colocate())
        self.assertEqual({}, self.hv.pins)

    def test_a_crowded_guest_moves_with_its_memory(self):
        self.flags(group='numa_overhead_agent', colocate_vcpus=True)
        agent = self.make_agent()
        self.crowd_node_0(agent)
        moved = agent.colocate()
        self.assertEqual(1, len(moved))
        name = moved[0]
        node = self.hv.pins[name][0] // 8
        self.assertNotEqual(0, node)
        self.assertEqual(tuple(range(node * 8, node * 8 + 8)),
                         self.hv.pins[name])
        self.assertEqual({node: 4 * GIB},
                         {n: mb for n, mb in self.hv.memory[name].items()
                          if mb})
        self.assertIn('vCPUs to node %d' % node,
                      agent.decisions[name].reason)

    def test_only_to_cpus_nova_allows(self):
        # Nova's <vcpu cpuset> (its shared set): node 0 and half of node
        # 2; the dedicated CPUs of pinned guests elsewhere are not the
        # floating guest's to take.
        self.flags(group='numa_overhead_agent', colocate_vcpus=True)
        shared = tuple(range(8)) + (16, 17, 18, 19)
        agent = self.make_agent()
        self.hv.add('a', {0: 4 * GIB}, vcpu_node=0)
        self.hv.add('b', {0: 4 * GIB}, vcpu_node=0)
        for name in ('a', 'b'):
            self.hv.guests[name] = dataclasses.replace(
                self.hv.guests[name], nova_cpus=shared)
        for _ in range(3):
            for name in ('a', 'b'):
                self.busy(name, hit=0.1, loss=0.9, ipc=0.3)
            self.clock.now += 1
            agent.cycle()
        moved = agent.colocate()
        self.assertEqual(1, len(moved))
        self.assertEqual((16, 17, 18, 19), self.hv.pins[moved[0]])

    def test_local_first_placement_moves_it_too(self):
        # The default first placement: the move plans over all the nodes
        # Nova allows, the memory then on the vCPUs' new node alone; once
        # there, nothing more to move (and nothing counted as moved).
        self.flags(group='numa_overhead_agent', colocate_vcpus=True,
                   remote_placement=False)
        agent = self.make_agent()
        self.crowd_node_0(agent)
        moved = agent.colocate()
        self.assertEqual(1, len(moved))
        name = moved[0]
        node = self.hv.pins[name][0] // 8
        self.assertNotEqual(0, node)
        self.assertEqual({node: 4 * GIB}, agent.decisions[name].plan)
        self.assertEqual((node,), self.hv.nodesets[name])
        pins = self.hv.pins[name]
        self.assertNotIn(name, agent.colocate())
        self.assertEqual(pins, self.hv.pins[name])

    def test_a_floating_guest_left_to_the_kernel_is_moved_all_the_same(
            self):
        # Its vCPUs floating, the first placement leaves it unconfined; a
        # colocation move takes vCPUs and memory to another node.
        self.flags(group='numa_overhead_agent', colocate_vcpus=True,
                   remote_placement=False)
        cpus = tuple(self.hv.topology().node_of_cpu())
        for name in ('a', 'b'):
            self.hv.affinity[name] = cpus
        agent = self.make_agent()
        self.crowd_node_0(agent)
        for name in ('a', 'b'):
            self.assertEqual('skipped', agent.decisions[name].action)
            self.assertNotIn(name, self.hv.nodesets)
        moved = agent.colocate()
        self.assertEqual(1, len(moved))
        name = moved[0]
        node = self.hv.pins[name][0] // 8
        self.assertNotEqual(0, node)
        self.assertEqual((node,), self.hv.nodesets[name])

    def test_local_move_needs_room_for_the_reserve(self):
        # Nodes 1-3 hold the 4 GiB guests but only node 3 holds 1 GiB of
        # reserve_mb on top: the local rule moves them there or nowhere.
        self.flags(group='numa_overhead_agent', colocate_vcpus=True,
                   remote_placement=False)
        agent = self.make_agent()
        for node, mb in ((1, 60 * GIB - 512), (2, 60 * GIB - 512),
                         (3, 32 * GIB)):
            self.hv.add('fill%d' % node, {node: mb}, vcpu_node=node,
                        extra_specs={'numa_overhead:policy': 'none'})
        self.crowd_node_0(agent)
        moved = agent.colocate()
        self.assertEqual(1, len(moved))
        self.assertEqual(3, self.hv.pins[moved[0]][0] // 8)
        self.assertEqual({3: 4 * GIB}, agent.decisions[moved[0]].plan)

    def test_no_local_move_without_room_for_the_reserve(self):
        # No other node holds a guest and reserve_mb: nothing planned,
        # nothing moved, its decision left as it was.
        self.flags(group='numa_overhead_agent', colocate_vcpus=True,
                   remote_placement=False)
        agent = self.make_agent()
        for node in (1, 2, 3):
            self.hv.add('fill%d' % node, {node: 60 * GIB - 512},
                        vcpu_node=node,
                        extra_specs={'numa_overhead:policy': 'none'})
        self.crowd_node_0(agent)
        before = {n: agent.decisions[n].reason for n in ('a', 'b')}
        self.assertEqual([], agent.colocate())
        self.assertEqual({}, self.hv.pins)
        self.assertEqual(before, {n: agent.decisions[n].reason
                                  for n in ('a', 'b')})

    def test_vcpus_over_two_nodes_stay_without_a_move(self):
        # No node has most of its vCPUs and none is a level better: the
        # local rule plans over the nodes they run on and pins nothing.
        self.flags(group='numa_overhead_agent', colocate_vcpus=True,
                   remote_placement=False)
        decision = self.wide({1: 4 * GIB})
        self.assertLessEqual(set(decision.plan), {1, 2}, decision.reason)
        self.assertEqual((), decision.cpus)
        self.assertNotIn('wide', self.hv.pins)


class TestFullNode(AgentTestCase):

    def test_full_host_places_nothing_and_keeps_running(self):
        self.hv = fakes.FakeHypervisor(nodes=2, memory_mb=8 * GIB)
        self.hv.add('a', {0: 8 * GIB})
        self.hv.add('b', {1: 8 * GIB}, vcpu_node=1)
        agent = self.make_agent()
        self.assertTrue(agent.cycle())
        self.hv.add('c', {0: 0, 1: 0}, memory_mb=2 * GIB)
        self.hv.free = [0, 0]
        self.clock.now += 1
        self.assertTrue(agent.cycle())
        self.assertEqual('skipped', agent.decisions['c'].action)
        self.assertEqual([], self.hv.moves)
        self.assertEqual([0, 0], [n.free_mb for n in
                                  self.publisher.reports[-1].nodes])
        self.assertEqual([], agent.rebalance())
