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

import array
import collections
import dataclasses
import math
import time
from unittest import mock

from nova_numa_overhead.compute import hypervisor as hv_mod
from nova_numa_overhead.compute import optimizer
from nova_numa_overhead.overhead import cost
from tests.unit.compute import fakes
from tests.unit.compute import test_agent

GIB = 1024
IPS = 500000000
NODE0_CPUS = tuple(range(8))
NODE1_CPUS = tuple(range(8, 16))


class OptimizerTestCase(test_agent.AgentTestCase):
    """Two nodes of 8 CPUs; the optimizer's own passes are kept out of the
    agent's cycle (``optimize_interval``) unless a test wants them.
    """

    def setUp(self):
        super().setUp()
        self.hv = fakes.FakeHypervisor(nodes=2, memory_mb=64 * GIB)
        self.flags(group='numa_overhead_agent', enforcement='nodeset',
                   optimize=True, optimize_interval=3600, loop_window=3,
                   payback_horizon=120, gain_margin=2.0, min_gain=0.05,
                   undo_threshold=0.03, migrate_rate_mb_per_s=0)

    def remote(self, name='a', memory_mb=4 * GIB, node0_cpus_only=False,
               **kwargs):
        """A guest whose vCPUs run on node 0 and whose memory is on 1."""
        self.hv.add(name, {1: memory_mb}, vcpu_node=0, **kwargs)
        if node0_cpus_only:
            self.hv.guests[name] = dataclasses.replace(
                self.hv.guests[name], nova_cpus=NODE0_CPUS)

    def work(self, name, ips=IPS, refs=0.04, misses=0.02):
        """One second of a guest: memory-intensive by default (CPI 2,
        40 LLC references per 1,000 instructions, half missing).
        """
        self.hv.run(name, int(ips), int(2 * ips), int(refs * ips),
                    int(misses * ips), 0)

    def start(self, cycles=5):
        """An agent that measured its guests for ``cycles`` seconds."""
        return self.sample(self.make_agent(), cycles)

    def sample(self, agent, cycles, **ips):
        """``cycles`` more seconds; guests at ``ips[name]`` or IPS."""
        for _ in range(cycles):
            self.clock.now += 1
            for name in self.hv.guests:
                self.work(name, ips=ips.get(name, IPS))
            agent.cycle()
        return agent

    def progress(self, agent, name, ips, after, samples=3, rpi=0.04):
        """``samples`` seconds of ``name`` at ``ips`` after ``after``
        (``rpi`` LLC references per instruction).
        """
        rates = agent.optimizer.history.setdefault(
            name, optimizer.Progress(agent.opts.loop_window))
        for i in range(samples):
            rates.append(optimizer.Rates(after + 1 + i, ips, 2.0 * ips,
                                         rpi * ips, 0.02 * ips))
        return after + samples

    def undo(self, agent, now):
        """A move of 'a' checked at ``now`` that made it slower."""
        opt = agent.optimizer
        opt.checks['a'] = optimizer.Check(
            'a', now - 10, now - 5, IPS, {}, ((0,), NODE0_CPUS), 0.5, (1,),
            0.0)
        self.progress(agent, 'a', 0.5 * IPS, now - 5)
        self.assertEqual([('a', 'undone')], opt.verdicts(now))
        return opt.backoff['a']

    def set_memory(self, name, memory):
        for node, mb in self.hv.memory[name].items():
            self.hv.free[node] += mb
        self.hv.memory[name] = dict(memory)
        for node, mb in memory.items():
            self.hv.free[node] -= mb

    def steps_until_done(self, opt, table):
        """Cycles of ``opt.bring_back`` until ``table`` (returning or
        landing) is empty, a second each; their count.
        """
        steps = 0
        while table:
            self.clock.now += 1
            opt.bring_back()
            steps += 1
            self.assertLess(steps, 10)
        return steps

    def to_node1(self, name='a', gain=0.5):
        return optimizer.Action(name, (1,), NODE1_CPUS, gain, 0.0, 0.0,
                                ({1: 1.0}, {1: 1.0}))


class TestPlan(OptimizerTestCase):

    def test_the_llc_room_follows_its_size(self):
        # The topology's LLC sizes reach the cost model; unknown, the
        # per-core rule.
        self.assertEqual((8 * cost.LLC_VCPUS_PER_CORE,) * 2,
                         self.make_agent().optimizer.host_model().llc_room)
        self.hv = fakes.FakeHypervisor(nodes=2, memory_mb=64 * GIB,
                                       llc_mb=9.0)
        self.assertEqual((9.0 / cost.WORKING_SET_MB,) * 2,
                         self.make_agent().optimizer.host_model().llc_room)

    def test_cheap_move_with_a_big_gain_is_planned(self):
        # Its memory is on node 1: its vCPUs go there, no page moves.
        self.remote()
        agent = self.start()
        actions = agent.optimizer.plan(self.clock.now)
        self.assertEqual(1, len(actions))
        action = actions[0]
        self.assertEqual(('a', (1,), NODE1_CPUS),
                         (action.guest, action.nodes, action.cpus))
        self.assertEqual(0.0, action.moved_mb)
        self.assertEqual(0.0, action.cost)
        self.assertGreater(action.gain, 0.05)

    def with_neighbour(self, floor):
        """'a' could join 'b' (memory-intensive, not movable) on node 1;
        node 0 has no room for its memory.
        """
        if floor is not None:
            self.flags(group='numa_overhead_agent', guest_floor=floor)
        self.remote()
        self.hv.add('b', {1: 4 * GIB}, vcpu_node=1,
                    extra_specs={'numa_overhead:rebalance': 'false'})
        self.hv.add('c', {0: 60 * GIB}, vcpu_node=0, pinned=True)
        agent = self.start()
        return agent, agent.optimizer.plan(self.clock.now)

    def test_a_move_that_slows_a_neighbour_is_made_without_a_floor(self):
        agent, actions = self.with_neighbour(0.0)
        self.assertEqual([('a', (1,))],
                         [(a.guest, a.nodes) for a in actions])
        effects = actions[0].effects
        self.assertGreater(effects['a'], 1.0)
        self.assertLess(effects['b'], 1.0)
        # Once made, both guests' standing follows the prediction.
        self.assertTrue(agent.optimizer.apply(actions[0], self.clock.now))
        self.assertAlmostEqual(effects['b'], agent.optimizer.standing['b'])
        self.assertAlmostEqual(effects['a'], agent.optimizer.standing['a'])

    def test_the_floor_is_on_by_default(self):
        self.assertEqual(0.97, self.conf.numa_overhead_agent.guest_floor)
        # Left at its default, the floor refuses the move that slows 'b'
        # (made without a floor: see above).
        agent, actions = self.with_neighbour(None)
        self.assertEqual([], [a for a in actions if a.nodes == (1,)])
        # 0.95 of its speed: below the default, not below the former 0.93.
        self.assertTrue(agent.optimizer._below_floor({'b': 0.95}))
        self.flags(group='numa_overhead_agent', guest_floor=0.93)
        self.assertFalse(agent.optimizer._below_floor({'b': 0.95}))

    def test_no_move_that_slows_a_guest_below_the_floor(self):
        agent, actions = self.with_neighbour(0.0)
        floor = actions[0].effects['b'] + 0.001
        agent, actions = self.with_neighbour(floor)
        self.assertEqual([], [a for a in actions if a.nodes == (1,)])
        # Slowed earlier by the optimizer, the floor comes sooner.
        agent, _ = self.with_neighbour(0.0)
        opt = agent.optimizer
        effects = {'b': 0.97}
        self.assertFalse(opt._below_floor(effects))
        # The default: 0.97 is at the floor, not below it.
        self.flags(group='numa_overhead_agent', guest_floor=0.97)
        self.assertFalse(opt._below_floor(effects))
        self.assertTrue(opt._below_floor({'b': 0.96}))
        self.flags(group='numa_overhead_agent', guest_floor=0.9)
        self.assertFalse(opt._below_floor(effects))
        opt.standing['b'] = 0.92
        self.assertTrue(opt._below_floor(effects))
        # Gains never count against it.
        self.assertFalse(opt._below_floor({'b': 1.5}))
        # At 1.0, a guest the optimizer's moves were predicted to speed
        # up may be slowed back to its speed before them, not below.
        self.flags(group='numa_overhead_agent', guest_floor=1.0)
        opt.standing['b'] = 1.05
        self.assertFalse(opt._below_floor({'b': 0.96}))
        self.assertTrue(opt._below_floor({'b': 0.95}))

    def test_an_undone_move_no_longer_counts_against_the_floor(self):
        agent, actions = self.with_neighbour(0.0)
        opt = agent.optimizer
        self.assertTrue(opt.apply(actions[0], self.clock.now))
        self.assertLess(opt.standing['b'], 1.0)
        check = opt.checks['a']
        self.assertEqual(actions[0].effects, check.effects)
        end = self.progress(agent, 'a', 0.5 * IPS, check.settle)
        self.assertEqual([('a', 'undone')], opt.verdicts(end))
        self.assertAlmostEqual(1.0, opt.standing['a'])
        self.assertAlmostEqual(1.0, opt.standing['b'])

    def test_memory_move_that_pays_back_is_planned(self):
        # Nova allows it node 0's CPUs only: its memory must come.
        self.remote(node0_cpus_only=True)
        agent = self.start()
        actions = agent.optimizer.plan(self.clock.now)
        self.assertEqual([('a', (0,), NODE0_CPUS, 4 * GIB)],
                         [(a.guest, a.nodes, a.cpus, a.moved_mb)
                          for a in actions])
        # 4 GiB at MOVE_COST guest-seconds per MiB (a fixed price).
        self.assertAlmostEqual(8.0, actions[0].cost)

    def refused(self, **flags):
        """The plan for 'a', whose memory must come to node 0, with
        ``flags``.
        """
        self.flags(group='numa_overhead_agent', **flags)
        self.remote(node0_cpus_only=True)
        agent = self.start()
        return agent.optimizer.plan(self.clock.now)

    def test_move_not_paid_back_within_the_horizon_is_refused(self):
        self.assertEqual([], self.refused(payback_horizon=1))

    def test_the_rate_does_not_price_a_move(self):
        # 4 GiB at 1 MiB/s or at 100 GiB/s: the same pages, the same
        # price (MOVE_COST per MiB).
        for rate in (1, 100 * GIB):
            self.hv = fakes.FakeHypervisor(nodes=2, memory_mb=64 * GIB)
            actions = self.refused(migrate_rate_mb_per_s=rate)
            self.assertEqual([8.0], [a.cost for a in actions])

    def two_far_guests(self, rate):
        """The plan of one pass for 'a' (vCPUs on node 0, 4 GiB on node
        1) and 'b' (vCPUs on node 2, 4 GiB on node 3), Nova allowing each
        its vCPUs' node only: both memories must come, at ``rate``
        MiB/s.
        """
        self.flags(group='numa_overhead_agent', optimize_interval=3600,
                   migrate_rate_mb_per_s=rate)
        self.hv = fakes.FakeHypervisor(nodes=4, memory_mb=64 * GIB)
        self.remote('a', node0_cpus_only=True)
        self.hv.add('b', {3: 4 * GIB}, vcpu_node=2)
        self.hv.guests['b'] = dataclasses.replace(
            self.hv.guests['b'], nova_cpus=tuple(range(16, 24)))
        agent = self.start()
        return agent, agent.optimizer.plan(self.clock.now)

    def test_the_rate_paces_the_moves_of_a_pass(self):
        # 3 MiB/s over the hour between passes: 10,800 MiB, room for
        # both 4 GiB.
        _agent, actions = self.two_far_guests(3)
        self.assertEqual([((0,), 4 * GIB), ((2,), 4 * GIB)],
                         sorted((a.nodes, a.moved_mb) for a in actions))
        # 2 MiB/s: 7,200 MiB, one 4 GiB move and not the second.
        agent, actions = self.two_far_guests(2)
        self.assertEqual([4 * GIB], [a.moved_mb for a in actions])
        self.assertEqual(2.0, agent.optimizer._rate())
        # And its verdict waits for its pages at that rate.
        now = self.clock.now
        self.assertTrue(agent.optimizer.apply(actions[0], now))
        check = agent.optimizer.checks[actions[0].guest]
        self.assertEqual(now + 4 * GIB / 2.0 + 1.0, check.settle)
        # 1 MiB/s: 3,600 MiB; the first move of a pass may be larger (one
        # guest at a time).
        _agent, actions = self.two_far_guests(1)
        self.assertEqual([4 * GIB], [a.moved_mb for a in actions])

    def test_without_a_rate_the_fallback_paces(self):
        agent, actions = self.two_far_guests(0)
        self.assertEqual(2048.0, agent.optimizer._rate())
        self.assertEqual(2, len(actions))

    def test_move_below_the_gain_margin_is_refused(self):
        self.assertEqual([], self.refused(gain_margin=10000.0))

    def test_move_below_min_gain_is_refused(self):
        self.assertEqual([], self.refused(min_gain=100.0))

    def test_no_move_where_memory_and_reserve_do_not_fit(self):
        # Node 0 has 4 GiB free: not the guest's 4 GiB and reserve_mb.
        self.hv = fakes.FakeHypervisor(nodes=2, memory_mb=8 * GIB)
        self.hv.add('filler', {0: 4 * GIB}, vcpu_node=1,
                    extra_specs={'numa_overhead:policy': 'none'})
        self.remote(node0_cpus_only=True)
        agent = self.start()
        self.assertEqual([], agent.optimizer.plan(self.clock.now))

    def test_room_counts_the_moves_planned_in_the_same_pass(self):
        # Node 0 has 5 GiB free: room for one 3 GiB guest and the reserve,
        # not for two.
        self.hv = fakes.FakeHypervisor(nodes=2, memory_mb=16 * GIB)
        self.hv.add('filler', {0: 11 * GIB}, vcpu_node=1,
                    extra_specs={'numa_overhead:policy': 'none'})
        self.remote('a', memory_mb=3 * GIB, node0_cpus_only=True)
        self.remote('b', memory_mb=3 * GIB, node0_cpus_only=True)
        agent = self.start()
        actions = agent.optimizer.plan(self.clock.now)
        self.assertEqual(1, len(actions))
        # Nova's CPUs on both nodes: pinned to node 0 (not left to the
        # kernel), the second could join the first but for its room.
        for other in (True, False):
            self.hv = fakes.FakeHypervisor(nodes=2, memory_mb=16 * GIB)
            self.hv.add('filler', {0: (11 if other else 5) * GIB},
                        vcpu_node=1,
                        extra_specs={'numa_overhead:policy': 'none'})
            self.remote('a', memory_mb=3 * GIB)
            self.remote('b', memory_mb=3 * GIB)
            agent = self.start()
            actions = agent.optimizer.plan(self.clock.now)
            self.assertEqual([(0,)] * (1 if other else 2),
                             [a.nodes for a in actions])

    def test_vcpus_alone_to_their_memory_where_it_cannot_all_move(self):
        # Node 1 holds its memory, but neither node has room for a joint
        # move (its memory plus the reserve, besides the fillers'): its
        # vCPUs go to node 1 alone, no page moves.
        self.hv = fakes.FakeHypervisor(nodes=2, memory_mb=16 * GIB)
        for node in (0, 1):
            self.hv.add('filler%d' % node, {node: 12 * GIB},
                        vcpu_node=node,
                        extra_specs={'numa_overhead:policy': 'none'})
        self.remote('a')
        agent = self.make_agent()
        for _ in range(5):
            self.clock.now += 1
            self.work('a')
            for node in (0, 1):
                # Busy cores, hardly any memory traffic.
                self.work('filler%d' % node, refs=0.0001, misses=0.00001)
            agent.cycle()
        actions = agent.optimizer.plan(self.clock.now)
        self.assertEqual([('a', (1,), NODE1_CPUS, 0.0, False)],
                         [(a.guest, a.nodes, a.cpus, a.moved_mb,
                           a.with_memory) for a in actions])
        nodesets = dict(self.hv.nodesets)
        self.assertTrue(agent.optimizer.apply(actions[0], self.clock.now))
        self.assertEqual(NODE1_CPUS, self.hv.pins['a'])
        self.assertEqual(nodesets, self.hv.nodesets)

    def test_no_vcpus_alone_away_from_their_memory(self):
        # Its memory is where its vCPUs run: moving them alone would
        # make it remote.
        self.hv.add('a', {0: 4 * GIB}, vcpu_node=0)
        self.hv.add('b', {0: 4 * GIB}, vcpu_node=0)
        agent = self.start()
        for action in agent.optimizer.plan(self.clock.now):
            self.assertTrue(action.with_memory)

    def test_measured_bandwidth_is_the_guests_traffic(self):
        self.remote('a')
        agent = self.make_agent()
        sent = [0]

        def bandwidth(domains):
            sent[0] += 3 * 10 ** 9
            return {'a': {0: (0, sent[0])}}

        self.hv.memory_bandwidth = bandwidth
        self.sample(agent, 5)
        [load] = agent.optimizer.loads()
        self.assertAlmostEqual(3000.0, load.traffic_mbps)

    def test_no_node_with_fewer_of_novas_cpus_than_vcpus(self):
        # Nova allows it all of node 0's CPUs and two of node 1's: node 1
        # alone would pin its four vCPUs to two CPUs.
        self.hv.add('a', {1: 4 * GIB}, vcpu_node=0, vcpus=4)
        self.hv.guests['a'] = dataclasses.replace(
            self.hv.guests['a'], nova_cpus=NODE0_CPUS + (8, 9))
        agent = self.start()
        sets = agent.optimizer.candidates(agent.domains['a'],
                                          agent.optimizer.host_model())
        self.assertIn((0,), sets)
        self.assertNotIn((1,), sets)
        self.assertIn((0, 1), sets)

    def test_sets_as_large_as_the_memory_needs(self):
        # Four nodes of 16 GiB: a 1-vCPU guest of 40 GiB (with the 1 GiB
        # reserve: 3 nodes) gets sets of 3 nodes (2 never have room); one
        # of 4 GiB only single nodes.
        self.hv = fakes.FakeHypervisor(nodes=4, memory_mb=16 * GIB)
        self.hv.add('big', {1: 16 * GIB, 2: 16 * GIB, 3: 8 * GIB},
                    vcpu_node=0, vcpus=1)
        self.hv.add('small', {1: 4 * GIB}, vcpu_node=0, vcpus=1)
        agent = self.start()
        opt = agent.optimizer
        sets = opt.candidates(agent.domains['big'], opt.host_model())
        self.assertEqual({1, 3}, {len(s) for s in sets})
        self.assertIn((0, 1, 2), sets)
        self.assertEqual([(0,), (1,), (2,), (3,)], opt.candidates(
            agent.domains['small'], opt.host_model()))

    def test_nodes_as_near_go_by_their_room(self):
        # Four equidistant nodes: the pair seeded at each node takes the
        # other node with the most room (node 3, then node 2), not the
        # lowest-numbered one.
        self.hv = fakes.FakeHypervisor(nodes=4, memory_mb=16 * GIB)
        self.hv.add('a', {0: GIB}, vcpu_node=0, vcpus=2)
        self.hv.add('b', {0: 8 * GIB}, vcpu_node=0, vcpus=1)
        self.hv.add('c', {1: 8 * GIB}, vcpu_node=1, vcpus=1)
        self.hv.add('d', {2: 4 * GIB}, vcpu_node=2, vcpus=1)
        agent = self.start()
        opt = agent.optimizer
        free = dict(enumerate(agent.host_view(without='a').free_mb))
        self.assertEqual(max(free.values()), free[3])
        sets = opt.candidates(agent.domains['a'], opt.host_model(), free)
        self.assertEqual({(0, 3), (1, 3), (2, 3)},
                         {s for s in sets if len(s) == 2})
        # Without the room: by number.
        self.assertEqual({(0, 1), (0, 2), (0, 3)}, {
            s for s in opt.candidates(agent.domains['a'], opt.host_model())
            if len(s) == 2})

    def test_several_nodes_must_gain_spread_margin_more(self):
        # 'a' on node 0 could go to node 1 alone or to nodes 2 and 3: the
        # pair ranks by its net gain divided by 1 + SPREAD_MARGIN.
        self.hv = fakes.FakeHypervisor(nodes=4, memory_mb=16 * GIB)
        self.hv.add('a', {0: 1 * GIB}, vcpu_node=0, vcpus=2)
        agent = self.start()
        opt = agent.optimizer

        def plan(pair_gain, order=((1,), (2, 3))):
            def predict(changes, iterations=10):
                _cpu, memory = changes['a']
                return {'a': 1.0 + (pair_gain if len(memory) > 1 else 0.5)}
            with mock.patch.object(opt, 'candidates', autospec=True,
                                   return_value=order), \
                    mock.patch.object(cost.Model, 'predict', autospec=True,
                                      side_effect=lambda self, c, **kw:
                                      predict(c)):
                return [(a.nodes, round(a.score, 3))
                        for a in opt.plan(self.clock.now)]

        # Net of the cost of 1 GiB (2 guest-seconds over 120 s).
        net = 2.0 / 120.0
        margin = 1.0 + optimizer.SPREAD_MARGIN
        # 50% more than one node: not enough.
        self.assertEqual([((1,), round(0.5 - net, 3))], plan(0.75))
        self.assertEqual([((2, 3), round((1.2 - net) / margin, 3))],
                         plan(1.2))
        # Whichever comes first.
        self.assertEqual([((1,), round(0.5 - net, 3))],
                         plan(0.75, order=((2, 3), (1,))))
        self.assertEqual([((2, 3), round((1.2 - net) / margin, 3))],
                         plan(1.2, order=((2, 3), (1,))))
        # The margin ranks; the bar stays: a pair alone just above
        # min_gain (0.05) is taken.
        self.assertEqual([((2, 3), round((0.06 - net) / margin, 3))],
                         plan(0.06, order=((2, 3),)))

    def test_neighbours_gains_count_at_neighbour_gain(self):
        # 'a' to node 1: itself +0.02, its neighbour 'n' +0.1, another
        # 'm' -0.01. The decision weighs n's gain at NEIGHBOUR_GAIN, m's
        # loss in full; the verdict measures against the model's own net.
        self.hv.add('a', {0: 1 * GIB}, vcpu_node=0, vcpus=2)
        self.hv.add('n', {0: 1 * GIB}, vcpu_node=0, vcpus=2)
        self.hv.add('m', {1: 1 * GIB}, vcpu_node=1, vcpus=2)
        agent = self.start()
        opt = agent.optimizer

        def predict(model, changes, iterations=10):
            if set(changes) != {'a'}:
                return {}
            return {'a': 1.02, 'n': 1.1, 'm': 0.99}
        with mock.patch.object(opt, 'candidates', autospec=True,
                               return_value=[(1,)]), \
                mock.patch.object(cost.Model, 'predict', autospec=True,
                                  side_effect=predict), \
                mock.patch.object(opt, 'movable', autospec=True,
                                  return_value=[agent.domains['a']]):
            actions = opt.plan(self.clock.now)
        self.assertEqual(1, len(actions))
        action = actions[0]
        self.assertAlmostEqual(
            0.02 + 0.1 * optimizer.NEIGHBOUR_GAIN - 0.01, action.gain)
        self.assertAlmostEqual(0.02 + 0.1 - 0.01, action.net)
        self.assertTrue(opt.apply(action, self.clock.now))
        self.assertAlmostEqual(action.net, opt.checks['a'].predicted)

    def test_vcpus_alone_onto_several_nodes_rank_by_the_margin_too(self):
        # 'b' runs on node 0, its memory on nodes 1, 2 and 3; no node has
        # room for a joint move (reserve_mb): its vCPUs alone could go to
        # node 1 or to nodes 2 and 3.
        self.flags(group='numa_overhead_agent', reserve_mb=100 * GIB)
        self.hv = fakes.FakeHypervisor(nodes=4, memory_mb=16 * GIB)
        self.hv.add('b', {1: GIB, 2: GIB, 3: GIB}, vcpu_node=0, vcpus=2)
        agent = self.start()
        opt = agent.optimizer

        def plan(pair_gain):
            def predict(changes):
                cpu, _memory = changes['b']
                return {'b': 1.0 + (pair_gain if len(cpu) > 1 else 0.5)}
            with mock.patch.object(opt, 'candidates', autospec=True,
                                   return_value=[(2, 3), (1,)]), \
                    mock.patch.object(cost.Model, 'predict', autospec=True,
                                      side_effect=lambda self, c, **kw:
                                      predict(c)):
                return [(a.nodes, a.with_memory, round(a.score, 3))
                        for a in opt.plan(self.clock.now)]

        margin = 1.0 + optimizer.SPREAD_MARGIN
        self.assertEqual([((1,), False, 0.5)], plan(0.75))
        self.assertEqual([((2, 3), False, round(1.2 / margin, 3))],
                         plan(1.2))

    def test_every_cpu_nova_allows_leaves_the_vcpus_where_they_run(self):
        # 12 vCPUs on 8-CPU nodes: both nodes, every CPU of the host, are
        # a candidate. vCPUs pinned to every CPU Nova allows are not
        # pinned: predicted where they run (not split evenly), and only
        # its pages can change, with enforcement = pages.
        self.hv.add('wide', {1: 4 * GIB}, vcpu_node=0, vcpus=12)
        seen = []
        real = cost.Model.predict

        def predict(model, changes, *args, **kwargs):
            seen.append(changes['wide'])
            return real(model, changes, *args, **kwargs)

        def plan(agent):
            seen.clear()
            with mock.patch.object(cost.Model, 'predict', predict):
                return agent.optimizer.plan(self.clock.now)

        even = {0: 0.5, 1: 0.5}
        agent = self.start()
        now_cpu = agent.optimizer.loads()[0].cpu
        self.assertNotEqual(even, now_cpu)
        # nodeset: widening the nodeset to every node moves no page.
        actions = plan(agent)
        self.assertTrue(seen)
        self.assertNotIn(even, [cpu for cpu, _memory in seen])
        self.assertNotIn(even, [memory for _cpu, memory in seen])
        self.assertNotIn((0, 1), [a.nodes for a in actions])
        # pages: its memory evened, its vCPUs where they run.
        self.flags(group='numa_overhead_agent', enforcement='pages')
        agent = self.start()
        plan(agent)
        # (None: its vCPUs left to the kernel.)
        self.assertIn((None, even), seen)
        self.assertNotIn(even, [cpu for cpu, _memory in seen])
        # Nova's CPUs for it: 12 of the 16, over both nodes: all of them
        # is no pinning either.
        self.flags(group='numa_overhead_agent', enforcement='nodeset')
        self.hv.guests['wide'] = dataclasses.replace(
            self.hv.guests['wide'], nova_cpus=NODE0_CPUS + NODE1_CPUS[:4])
        agent = self.start()
        plan(agent)
        self.assertNotIn(even, [cpu for cpu, _memory in seen])
        self.assertNotIn(even, [memory for _cpu, memory in seen])

    def test_nothing_to_plan_before_guests_are_measured(self):
        self.remote()
        agent = self.start(cycles=2)
        self.assertEqual([], agent.optimizer.plan(self.clock.now))

    def beside_a_new_guest(self):
        """'a' would gain on node 1 (its memory is there), where 'b' has
        just started: placed, no progress measured yet.
        """
        self.remote()
        agent = self.start()
        self.hv.add('b', {1: 1 * GIB}, vcpu_node=1)
        self.clock.now += 1
        self.work('a')
        agent.cycle()
        self.assertIn('b', agent.collector.guests)
        # The host settling is another rule (TestSettle): not this one.
        self.flags(group='numa_overhead_agent', settle_windows=0)
        return agent

    def onto_node1(self, opt):
        """The guests the next pass would move onto node 1 (memory
        staying where it is there, its other choice).
        """
        return [a.guest for a in opt.plan(self.clock.now) if 1 in a.nodes]

    def test_no_move_onto_the_nodes_of_a_guest_not_measured_yet(self):
        agent = self.beside_a_new_guest()
        opt = agent.optimizer
        self.assertEqual({1}, opt.unseen({'a'}, self.clock.now))
        self.assertEqual([], self.onto_node1(opt))
        # Measured, it is one more guest of the model: node 1 is open
        # again, and the moves are weighed with it there.
        self.sample(agent, 4)
        measured = {g.name for g in opt.loads()}
        self.assertEqual({'a', 'b'}, measured)
        self.assertEqual(set(), opt.unseen(measured, self.clock.now))
        actions = opt.plan(self.clock.now)
        self.assertEqual(['a'], [a.guest for a in actions])
        self.assertIn('b', actions[0].effects)

    def test_a_guest_never_measured_keeps_its_nodes_for_a_while_only(self):
        agent = self.beside_a_new_guest()
        opt = agent.optimizer
        # Its counters never come.
        del self.hv.counter['b']
        for _ in range(int(optimizer.UNSEEN_WAIT)):
            self.clock.now += 1
            self.work('a')
            agent.cycle()
        self.assertEqual({1}, opt.unseen({'a'}, self.clock.now))
        self.assertEqual([], self.onto_node1(opt))
        self.clock.now += 1
        self.work('a')
        agent.cycle()
        self.assertEqual(set(), opt.unseen({'a'}, self.clock.now))
        self.assertEqual(['a'], self.onto_node1(opt))

    def test_a_guest_started_again_is_unseen_again(self):
        agent = self.beside_a_new_guest()
        opt = agent.optimizer
        # No counters for longer than the wait (an incoming live
        # migration, paused), then it resumes and runs.
        counter = self.hv.counter.pop('b')
        for _ in range(int(optimizer.UNSEEN_WAIT) + 10):
            self.clock.now += 1
            self.work('a')
            agent.cycle()
        self.assertEqual(set(), opt.unseen({'a'}, self.clock.now))
        self.hv.counter['b'] = counter
        agent.on_lifecycle('resumed', 'b')
        self.clock.now += 1
        self.work('a')
        agent.handle_events()
        self.assertEqual({1}, opt.unseen({'a'}, self.clock.now))
        self.assertEqual([], self.onto_node1(opt))
        # Its progress before counts no more: seen after its new samples.
        self.assertNotIn('b', opt.history)
        self.sample(agent, 4)
        measured = {g.name for g in opt.loads()}
        self.assertEqual({'a', 'b'}, measured)
        self.assertEqual(set(), opt.unseen(measured, self.clock.now))

    def test_memory_alone_keeps_its_node(self):
        self.remote()
        agent = self.start()
        # vCPUs on node 0, pages on node 1 (and a few on node 0).
        self.hv.add('b', {0: 16, 1: 1 * GIB}, vcpu_node=0)
        self.clock.now += 1
        self.work('a')
        agent.cycle()
        self.assertEqual({0, 1}, agent.optimizer.unseen({'a'},
                                                        self.clock.now))
        self.hv.memory['b'] = {0: 1 * GIB, 1: 16}
        self.clock.now += 1
        self.work('a')
        agent.cycle()
        # Under MIN_SHIFT of its pages: not a node it holds.
        self.assertEqual({0}, agent.optimizer.unseen({'a'}, self.clock.now))

    def test_a_pinned_guest_is_never_waited_for(self):
        self.remote()
        agent = self.start()
        # No perf events for it: the agent never samples it.
        self.hv.add('b', {1: 1 * GIB}, vcpu_node=1, pinned=True)
        self.clock.now += 1
        self.work('a')
        agent.cycle()
        self.assertNotIn('b', self.hv.enabled)
        self.assertEqual(set(), agent.optimizer.unseen({'a'},
                                                       self.clock.now))

    def test_the_wait_covers_the_samples_it_needs(self):
        self.flags(group='numa_overhead_agent', sample_interval=30)
        agent = self.beside_a_new_guest()
        # Three samples 30 s apart take longer than UNSEEN_WAIT.
        later = self.clock.now + optimizer.UNSEEN_WAIT + 30
        self.assertEqual({1}, agent.optimizer.unseen({'a'}, later))
        self.assertEqual(set(), agent.optimizer.unseen(
            {'a'}, self.clock.now + 4 * 30 + 1))

    def test_an_idle_guest_is_seen(self):
        agent = self.beside_a_new_guest()
        for _ in range(4):
            self.clock.now += 1
            self.work('a')
            agent.cycle()
        # Measured, doing nothing: no guest of the model, but seen.
        self.assertNotIn('b', {g.name for g in agent.optimizer.loads()})
        self.assertEqual(set(), agent.optimizer.unseen({'a'},
                                                       self.clock.now))
        self.assertEqual(['a'], self.onto_node1(agent.optimizer))

    def test_the_agent_cycle_moves_once_a_pass_is_due(self):
        self.flags(group='numa_overhead_agent', optimize_interval=5)
        self.remote()
        agent = self.start(cycles=3)
        self.assertEqual({}, self.hv.pins)
        self.sample(agent, 5)
        self.assertEqual(NODE1_CPUS, self.hv.pins['a'])
        self.assertEqual((1,), self.hv.nodesets['a'])
        self.assertEqual(((1,), NODE1_CPUS), agent.restrictions['a'])
        self.assertEqual('optimized', agent.outcomes['a'].action)
        self.assertEqual(1, agent.optimizer.status()['moved'])
        self.assertIn('numa_overhead.optimize',
                      [e for e, _payload in self.notifier.events])

    def test_optimize_off_moves_nothing(self):
        self.flags(group='numa_overhead_agent', optimize_interval=1,
                   optimize=False)
        self.remote()
        agent = self.start(cycles=8)
        self.assertEqual({}, self.hv.pins)
        self.assertEqual(0, agent.optimizer.status()['moved'])


class TestReach(OptimizerTestCase):
    """Which guests' vCPUs the cost model lets the kernel balance."""

    def reach(self, agent):
        return {g.name: g.reach for g in agent.optimizer.loads()}

    def test_an_affinity_over_several_nodes_floats(self):
        self.remote()
        self.hv.affinity['a'] = NODE0_CPUS + NODE1_CPUS
        self.assertEqual({'a': (0, 1)}, self.reach(self.start()))

    def test_one_node_or_an_unknown_affinity_stays(self):
        self.remote()
        self.hv.add('b', {0: 4 * GIB}, vcpu_node=0)
        self.hv.affinity['a'] = NODE0_CPUS
        self.assertEqual({'a': (), 'b': ()}, self.reach(self.start()))

    def test_pinned_by_nova_stays(self):
        self.hv.add('a', {0: 4 * GIB}, vcpu_node=0, pinned=True)
        self.hv.affinity['a'] = NODE0_CPUS + NODE1_CPUS
        self.assertEqual({'a': ()}, self.reach(self.start()))

    def test_pinned_by_the_agent_stays_unless_to_every_cpu(self):
        self.remote()
        agent = self.start()
        self.hv.affinity['a'] = NODE0_CPUS + NODE1_CPUS
        agent.restrictions['a'] = ((), NODE1_CPUS)
        self.assertEqual({'a': ()}, self.reach(agent))
        # Its own pin to every CPU Nova allows is no pin.
        agent.restrictions['a'] = ((1,), NODE0_CPUS + NODE1_CPUS)
        self.assertEqual({'a': (0, 1)}, self.reach(agent))

    def test_floating_neighbours_make_room_for_a_move(self):
        # 'a' runs on node 0, its memory on node 1, and node 0 has no room
        # for its memory: its vCPUs may only join 'f' (8 vCPUs) on node
        # 1's 8 CPUs. Kept where they are, f's vCPUs would be crowded
        # below guest_floor: no move. Floating, the kernel moves two of
        # them to node 0's idle CPUs, and the move is made.
        self.remote()
        self.hv.add('f', {1: 4 * GIB}, vcpu_node=1, vcpus=8)
        self.hv.add('c', {0: 60 * GIB}, vcpu_node=0, pinned=True)
        agent = self.start()
        self.assertEqual([], agent.optimizer.plan(self.clock.now))
        self.hv.affinity['f'] = NODE0_CPUS + NODE1_CPUS
        actions = agent.optimizer.plan(self.clock.now)
        self.assertEqual([('a', (1,), 0.0)],
                         [(a.guest, a.nodes, a.moved_mb) for a in actions])
        self.assertGreater(actions[0].effects['f'],
                           self.conf.numa_overhead_agent.guest_floor)

    def test_a_guest_gone_while_read_is_left_out(self):
        self.remote()
        self.hv.add('b', {0: 4 * GIB}, vcpu_node=0)
        agent = self.start()
        self.hv.vanish_on = ('vcpu_affinity', 'a')
        self.assertEqual({'b': ()}, self.reach(agent))

    def release(self, agent):
        return {g.name: g.release for g in agent.optimizer.loads()}

    def test_a_pinned_guest_would_float_over_what_nova_allows(self):
        # Pinned to node 0 now (by whoever): a move leaving its vCPUs to
        # the kernel lets them go over every node Nova allows.
        self.remote()
        self.hv.add('b', {0: 4 * GIB}, vcpu_node=0)
        self.hv.add('c', {0: 4 * GIB}, vcpu_node=0, pinned=True)
        self.hv.affinity['a'] = NODE0_CPUS
        agent = self.start()
        self.assertEqual({'a': (0, 1), 'b': (0, 1), 'c': ()},
                         self.release(agent))
        # Nova allows node 1's CPUs only (and one the host does not
        # have): nowhere else to go.
        agent.nova_cpus['a'] = NODE1_CPUS + (999,)
        self.assertEqual((), self.release(agent)['a'])
        # Floating already: its reach says where, not its release.
        self.hv.affinity['b'] = NODE0_CPUS + NODE1_CPUS
        self.assertEqual(((0, 1), ()), [(g.reach, g.release) for g in
                                        agent.optimizer.loads()
                                        if g.name == 'b'][0])

    def test_unpinning_onto_a_full_node_slows_its_guests(self):
        # 'a' (2 vCPUs) on node 0 with 'b' (8), its memory on node 1;
        # node 1's 8 CPUs full with 'f' (8 vCPUs, running there: no
        # affinity over several nodes, so it stays): a move leaving a's
        # vCPUs to the kernel, its memory on both nodes, would have them
        # share node 1's cores with 'f'; the model sees f slower (it
        # saw no change before: the vCPUs stayed on node 0).
        self.remote()
        self.hv.add('f', {1: 4 * GIB}, vcpu_node=1, vcpus=8)
        self.hv.add('b', {0: 4 * GIB}, vcpu_node=0, vcpus=8)
        agent = self.start()
        model = cost.Model(agent.optimizer.host_model(),
                           agent.optimizer.loads())
        self.assertEqual((0, 1), model.release['a'])
        ratios = model.predict({'a': (None, {0: 0.5, 1: 0.5})})
        self.assertLess(ratios['f'], 0.9)
        self.assertGreater(ratios['b'], 1.1)


class TestMovable(OptimizerTestCase):

    def names(self, agent, now=None):
        now = self.clock.now if now is None else now
        return sorted(d.name for d in agent.optimizer.movable(now))

    def test_pinned_and_non_rebalancing_guests_are_never_movable(self):
        self.remote('floating')
        self.remote('pinned', pinned=True)
        self.remote('stays', extra_specs={'numa_overhead:rebalance': 'false'})
        self.remote('none', extra_specs={'numa_overhead:policy': 'none'})
        self.remote('other', nova=False)
        agent = self.start()
        self.assertEqual(['floating'], self.names(agent))
        actions = agent.optimizer.plan(self.clock.now)
        self.assertEqual(['floating'], [a.guest for a in actions])

    def test_opt_in_guests_only(self):
        self.flags(group='numa_overhead_agent', managed_guests='opt_in')
        self.remote('plain')
        self.remote('optin',
                    extra_specs={'numa_overhead:policy': 'proportional'})
        agent = self.start(cycles=1)
        self.assertEqual(['optin'], self.names(agent))

    def test_leaving_and_waiting_guests_are_not_movable(self):
        self.remote('a')
        self.remote('b')
        self.remote('c')
        agent = self.start(cycles=1)
        agent.migrating.add('a')
        agent.optimizer.checks['b'] = optimizer.Check(
            'b', self.clock.now, self.clock.now + 1, IPS, {}, ((), ()), 0.5,
            (1,), 0.0)
        self.assertEqual(['c'], self.names(agent))

    def test_held_guests_wait(self):
        self.remote('a')
        agent = self.start(cycles=1)
        agent.optimizer.held['a'] = self.clock.now + 30
        self.assertEqual([], self.names(agent))
        self.assertEqual(['a'], self.names(agent, self.clock.now + 30))

    def test_a_guest_whose_workload_just_changed_waits_a_window(self):
        self.remote('a')
        agent = self.start(cycles=3)
        opt = agent.optimizer
        window = agent.opts.loop_window
        self.assertEqual(['a'], self.names(agent))
        # CPU-bound now (2 LLC references per 1,000 instructions, from
        # 40): its rates mix two workloads until a whole window shows
        # the new one.
        end = self.progress(agent, 'a', IPS, self.clock.now, samples=2,
                            rpi=0.002)
        self.assertTrue(opt.shifting('a'))
        self.assertEqual([], self.names(agent, end))
        self.assertEqual([], opt.plan(end))
        end = self.progress(agent, 'a', IPS, end, samples=window - 3,
                            rpi=0.002)
        self.assertTrue(opt.shifting('a'))
        end = self.progress(agent, 'a', IPS, end, samples=1, rpi=0.002)
        self.assertFalse(opt.shifting('a'))
        self.assertEqual(['a'], self.names(agent, end))
        self.assertEqual(0, opt.status()['shifting'])

    def test_a_phase_inside_the_window_counts(self):
        # A -> B -> A: the last sample and the oldest agree, one between
        # them is another workload.
        self.flags(group='numa_overhead_agent', loop_window=5)
        self.remote()
        agent = self.start(cycles=6)
        opt = agent.optimizer
        end = self.progress(agent, 'a', IPS, self.clock.now, samples=1,
                            rpi=0.002)
        end = self.progress(agent, 'a', IPS, end, samples=3)
        self.assertTrue(opt.shifting('a', end))
        self.clock.now = end
        self.assertEqual(1, opt.status()['shifting'])
        # Samples without instructions tell nothing either way.
        self.progress(agent, 'a', 0.0, end, samples=1)
        self.assertFalse(opt.shifting('a', end))

    def test_a_workload_that_keeps_changing_is_held_for_a_while(self):
        # Faster than the window, for SHIFT_MAX: then taken as a steady
        # mixed workload, which the optimizer may move.
        self.remote()
        agent = self.start(cycles=3)
        opt = agent.optimizer
        now = self.clock.now
        end = now
        held = []
        while end - now < optimizer.SHIFT_MAX + 5:
            rpi = 0.002 if int(end - now) % 4 < 2 else 0.04
            end = self.progress(agent, 'a', IPS, end, samples=1, rpi=rpi)
            held.append(opt.shifting('a', end))
        self.assertTrue(all(held[1:int(optimizer.SHIFT_MAX) - 1]))
        self.assertFalse(held[-1])
        self.clock.now = end
        self.assertEqual(0, opt.status()['shifting'])

    def test_a_workload_within_its_class_is_not_another_phase(self):
        self.remote('a')
        agent = self.start(cycles=3)
        # Twice the LLC references, still memory-intensive: its cache
        # shared, not another workload.
        end = self.progress(agent, 'a', IPS, self.clock.now, samples=1,
                            rpi=0.08)
        self.assertFalse(agent.optimizer.shifting('a'))
        self.assertEqual(['a'], self.names(agent, end))
        self.assertFalse(agent.optimizer.shifting('unknown'))


class TestClosedLoop(OptimizerTestCase):

    def moved(self, neighbour=False):
        """'a' moved to node 1 (undo: node 0); with 'b' on node 1."""
        self.remote('a')
        if neighbour:
            self.hv.add('b', {1: 4 * GIB}, vcpu_node=1,
                        extra_specs={'numa_overhead:rebalance': 'false'})
        agent = self.start()
        now = self.clock.now
        self.assertTrue(agent.optimizer.apply(self.to_node1(), now))
        self.assertEqual(NODE1_CPUS, self.hv.pins['a'])
        self.assertEqual((1,), self.hv.nodesets['a'])
        return agent, now

    def test_apply_waits_for_a_verdict(self):
        agent, now = self.moved(neighbour=True)
        check = agent.optimizer.checks['a']
        self.assertEqual(IPS, check.before)
        self.assertEqual({'b': IPS}, check.neighbours)
        # Where the placer had confined it, and the CPUs it ran on.
        # The placer's restriction, and the CPUs of the node it ran on.
        self.assertEqual(((0,), NODE0_CPUS), check.undo)
        self.assertEqual(now + 1.0, check.settle)
        self.assertEqual(((1,), NODE1_CPUS), agent.restrictions['a'])
        self.assertEqual('optimized', agent.outcomes['a'].action)

    def test_the_observer_sees_each_move_before_it_is_made(self):
        self.remote('a')
        agent = self.start()
        seen = []

        def observer(action):
            seen.append(('before', action.guest, self.hv.pins.get('a')))
            return lambda: seen.append(('made', self.hv.pins.get('a')))
        agent.optimizer.observer = observer
        self.assertTrue(agent.optimizer.apply(self.to_node1(),
                                              self.clock.now))
        # Before its vCPUs went to node 1, and once they had.
        self.assertEqual([('before', 'a', None), ('made', NODE1_CPUS)],
                         seen)

    def test_the_observer_is_not_told_of_a_move_not_made(self):
        self.remote('a')
        agent = self.start()
        made = []
        agent.optimizer.observer = lambda action: lambda: made.append(1)
        with mock.patch.object(self.hv, 'pin_vcpus', autospec=True,
                               side_effect=hv_mod.HypervisorError('no')):
            self.assertFalse(agent.optimizer.apply(self.to_node1(),
                                                   self.clock.now))
        self.flags(group='numa_overhead_agent', enforcement='advisory')
        self.assertFalse(agent.optimizer.apply(self.to_node1(),
                                               self.clock.now))
        self.assertEqual([], made)

    def test_a_guest_measured_fewer_samples_than_the_window_is_unjudged(self):
        # The pass saw it (3 samples), the loop has no window before it.
        self.flags(group='numa_overhead_agent', loop_window=8)
        self.remote('a')
        agent = self.start(cycles=5)
        opt = agent.optimizer
        self.assertIsNone(opt._mean('a'))
        self.assertEqual(['a'], [g.name for g in opt.loads()])
        with mock.patch.object(optimizer.LOG, 'info', autospec=True) as info:
            self.assertTrue(opt.apply(self.to_node1(), self.clock.now))
        self.assertIn('not judged: measured fewer than 8 samples',
                      info.call_args[0][1]['reason'])
        self.assertNotIn('a', opt.checks)
        self.assertGreater(opt.held['a'], self.clock.now)
        self.assertEqual(1, opt.status()['unjudged'])
        self.assertEqual(0, opt.status()['workload_changed'])
        event, payload = self.notifier.events[-1]
        self.assertEqual('numa_overhead.optimize', event)
        self.assertFalse(payload['judged'])

    def test_settle_time_follows_the_pages_to_move(self):
        self.flags(group='numa_overhead_agent', migrate_rate_mb_per_s=512)
        self.remote('a')
        agent = self.start()
        action = dataclasses.replace(self.to_node1(), moved_mb=2048.0)
        agent.optimizer.apply(action, 200.0)
        self.assertEqual(200.0 + 4.0 + 1.0, agent.optimizer.checks['a'].settle)

    def test_no_verdict_before_the_window_after_settling(self):
        agent, now = self.moved()
        opt = agent.optimizer
        settle = opt.checks['a'].settle
        # Samples taken while the pages were in flight do not count.
        self.progress(agent, 'a', IPS / 2, now - 1, samples=2)
        self.assertEqual([], opt.verdicts(settle - 0.5))
        self.progress(agent, 'a', IPS / 2, settle, samples=2)
        self.assertEqual([], opt.verdicts(settle + 2))
        self.assertIn('a', opt.checks)
        self.assertEqual(1, opt.status()['waiting'])
        self.progress(agent, 'a', IPS / 2, settle + 2, samples=1)
        self.assertEqual([('a', 'undone')], opt.verdicts(settle + 3))
        self.assertEqual({}, opt.checks)

    def test_slower_guest_is_put_back(self):
        agent, now = self.moved()
        opt = agent.optimizer
        settle = opt.checks['a'].settle
        # 10% slower: beyond undo_threshold (3%).
        end = self.progress(agent, 'a', 0.9 * IPS, settle)
        self.assertEqual([('a', 'undone')], opt.verdicts(end))
        # Its vCPUs back on the node they ran on, its memory confined to
        # the placer's node again.
        self.assertEqual(NODE0_CPUS, self.hv.pins['a'])
        self.assertEqual((0,), self.hv.nodesets['a'])
        self.assertEqual(((0,), NODE0_CPUS), agent.restrictions['a'])
        self.assertEqual(1, opt.counts['undone'])
        self.assertEqual(0, opt.counts['kept'])
        self.assertEqual('undone', agent.outcomes['a'].action)
        self.assertIn('left alone 60 s', agent.outcomes['a'].outcome)
        self.assertEqual((1, end + 60.0), opt.backoff['a'])
        self.assertEqual(((0,), NODE0_CPUS),
                         (self.hv.recorded['a'].nodes,
                          self.hv.recorded['a'].cpus))
        event, payload = self.notifier.events[-1]
        self.assertEqual('numa_overhead.optimize.undone', event)
        self.assertEqual(60.0, payload['backoff_s'])
        self.assertAlmostEqual(0.9, payload['progress'])

    def test_a_guest_whose_workload_changed_is_not_judged(self):
        agent, now = self.moved()
        opt = agent.optimizer
        self.assertAlmostEqual(0.04, opt.checks['a'].rpi['a'])
        settle = opt.checks['a'].settle
        # Half as fast, but another phase: CPU-bound now (2 LLC
        # references per 1,000 instructions, from 40). Not the move's
        # doing: no undo, no backoff.
        end = self.progress(agent, 'a', 0.5 * IPS, settle, rpi=0.002)
        with mock.patch.object(optimizer.LOG, 'info', autospec=True) as info:
            self.assertEqual([('a', 'unjudged')], opt.verdicts(end))
        self.assertIn('its workload changed', info.call_args[0][1]['text'])
        self.assertEqual(NODE1_CPUS, self.hv.pins['a'])
        status = opt.status()
        self.assertEqual(1, status['unjudged'])
        self.assertEqual(1, status['workload_changed'])
        self.assertEqual(0, opt.counts['undone'])
        self.assertNotIn('a', opt.backoff)
        self.assertEqual(end + optimizer.HOLD, opt.held['a'])
        self.assertEqual(1.0, opt.trust)
        self.assertIn('not judged: its workload changed',
                      self.hv.recorded['a'].outcome)
        event, payload = self.notifier.events[-1]
        self.assertEqual('numa_overhead.optimize.unjudged', event)
        self.assertAlmostEqual(0.002, payload['rpi_after'])
        self.assertAlmostEqual(0.5, payload['progress'])

    def test_moves_in_a_row_without_a_verdict_hold_longer(self):
        agent, now = self.moved()
        opt = agent.optimizer
        holds = []
        for i in range(3):
            if i:
                self.assertTrue(opt.apply(self.to_node1(), now))
            settle = opt.checks['a'].settle
            rpi = 0.002 if i % 2 == 0 else 0.04
            end = self.progress(agent, 'a', 0.5 * IPS, settle, rpi=rpi)
            self.assertEqual([('a', 'unjudged')], opt.verdicts(end))
            holds.append(opt.held['a'] - end)
            now = end + 1
        self.assertEqual([optimizer.HOLD, 2 * optimizer.HOLD,
                          4 * optimizer.HOLD], holds)
        # A verdict ends the run.
        self.assertTrue(opt.apply(self.to_node1(), now))
        # (Still CPU-bound, as after the last move.)
        end = self.progress(agent, 'a', 1.2 * IPS, opt.checks['a'].settle,
                            rpi=0.002)
        self.assertEqual([('a', 'kept')], opt.verdicts(end))
        self.assertNotIn('a', opt.unjudged_run)

    def test_workload_changes(self):
        def mean(rpi):
            return optimizer.Rates(0.0, IPS, 2 * IPS, rpi * IPS, 0.0)
        changed = optimizer._changed
        # Across the memory-intensive threshold by PHASE or more.
        self.assertEqual((0.04, 0.002), changed(0.04, mean(0.002)))
        self.assertEqual((0.001, 0.01), changed(0.001, mean(0.01)))
        # Within one class, however far (cache sharing moves references
        # a little; a memory-intensive workload stays one).
        self.assertIsNone(changed(0.02, mean(0.08)))
        self.assertIsNone(changed(0.0001, mean(0.0025)))
        # Across the threshold but by less than PHASE: noise near it.
        self.assertIsNone(changed(0.0025, mean(0.0035)))
        # Unknown: no value before, a zero (a missing event), no progress.
        self.assertIsNone(changed(None, mean(0.002)))
        self.assertIsNone(changed(0.04, mean(0.0)))
        self.assertIsNone(changed(0.0, mean(0.04)))
        self.assertIsNone(changed(0.04, optimizer.Rates(0.0, 0.0, 0.0,
                                                        0.0, 0.0)))

    def test_a_neighbour_whose_workload_changed_is_left_out(self):
        # 'a' 5% faster, 'b' at half speed. 'b' CPU-bound now (another
        # phase): left out, the move is judged on 'a' alone; still
        # memory-intensive (more LLC references: its cache shared): the
        # move's doing.
        for rpi, verdict in ((0.002, 'kept'), (0.08, 'undone')):
            self.hv = fakes.FakeHypervisor(nodes=2, memory_mb=64 * GIB)
            agent, now = self.moved(neighbour=True)
            opt = agent.optimizer
            settle = opt.checks['a'].settle
            self.progress(agent, 'a', 1.05 * IPS, settle)
            end = self.progress(agent, 'b', 0.5 * IPS, settle, rpi=rpi)
            self.assertEqual([('a', verdict)], opt.verdicts(end), rpi)

    def host_changed(self, change, own, neighbour):
        """'a' moved next to 'b', then ``change`` ('start': 'c' starts on
        the host; 'leave': 'b' leaves; 'restart': 'b' starts again;
        None), then 'a' at ``own`` and 'b' at ``neighbour`` of their
        speed before: the verdict.
        """
        self.hv = fakes.FakeHypervisor(nodes=2, memory_mb=64 * GIB)
        agent, now = self.moved(neighbour=True)
        opt = agent.optimizer
        self.assertFalse(opt.checks['a'].host_changed)
        if change == 'start':
            self.hv.add('c', {0: 4 * GIB}, vcpu_node=0)
        elif change == 'leave':
            self.hv.remove('b')
        if change == 'restart':
            agent.on_lifecycle('started', 'b')
            agent.handle_events()
        else:
            agent.cycle()
        self.assertEqual(bool(change), opt.checks['a'].host_changed)
        settle = opt.checks['a'].settle
        self.progress(agent, 'a', own * IPS, settle)
        end = self.progress(agent, 'b', neighbour * IPS, settle)
        with mock.patch.object(optimizer.LOG, 'info', autospec=True) as info:
            verdicts = opt.verdicts(end)
        return opt, verdicts, info.call_args[0][1]['text']

    def test_a_guest_starting_or_leaving_leaves_the_neighbours_out(self):
        # 'a' 5% faster, 'b' at half speed: undone when nothing else
        # changed on the host.
        opt, verdicts, text = self.host_changed(None, 1.05, 0.5)
        self.assertEqual([('a', 'undone')], verdicts)
        self.assertEqual(0, opt.status()['host_changed'])
        self.assertIn('its neighbours -50.0%', text)
        for change in ('start', 'leave', 'restart'):
            opt, verdicts, text = self.host_changed(change, 1.05, 0.5)
            # A guest started (or again) or left meanwhile: 'b's loss is
            # not taken for the move's, which is judged on 'a' alone.
            self.assertEqual([('a', 'kept')], verdicts, change)
            self.assertEqual(1, opt.status()['host_changed'])
            self.assertIn('progress +5.0% (predicted +0.0%), its '
                          'neighbours not judged (guests started or left)',
                          text)
            event, payload = self.notifier.events[-1]
            self.assertEqual('numa_overhead.optimize.kept', event)
            self.assertIsNone(payload['neighbours'])

    def test_verdicts_keep_the_predictions_beside_the_measurements(self):
        # 'a' predicted +20%, measured +5%; 'b' predicted -2%, measured
        # -50% (undone either way: what was predicted is kept).
        self.hv = fakes.FakeHypervisor(nodes=2, memory_mb=64 * GIB)
        agent, now = self.moved(neighbour=True)
        opt = agent.optimizer
        # What the model said, not scaled by the trust.
        opt.trust = opt.checks['a'].trust = 0.5
        opt.checks['a'].effects = {'a': 1.2, 'b': 0.98}
        settle = opt.checks['a'].settle
        self.progress(agent, 'a', 1.05 * IPS, settle)
        end = self.progress(agent, 'b', 0.5 * IPS, settle)
        with mock.patch.object(optimizer.LOG, 'info', autospec=True) as info:
            self.assertEqual([('a', 'undone')], opt.verdicts(end))
        self.assertIn('progress +5.0% (predicted +20.0%), its neighbours '
                      '-50.0% (move\'s predicted gain 0.500, trust-scaled)',
                      info.call_args[0][1]['text'])
        self.assertEqual([(1.2, 1.05)], list(opt.predictions['guest']))
        self.assertEqual([(0.98, 0.5)], list(opt.predictions['neighbours']))
        calibration = opt.calibration()
        self.assertEqual(1, calibration['guest']['judged'])
        self.assertAlmostEqual(100 * (1.05 / 1.2 - 1),
                               calibration['guest']['median'], places=2)
        self.assertEqual(1, calibration['guest']['below'])
        self.assertEqual({'judged': 1, 'below': 1},
                         calibration['guest']['predicted_gain'])
        self.assertEqual({'judged': 1, 'below': 1},
                         calibration['neighbours']['predicted_loss'])

    def test_a_verdict_across_a_host_change_is_left_out_of_calibration(
            self):
        opt, verdicts, text = self.host_changed('start', 1.05, 0.5)
        self.assertEqual([('a', 'kept')], verdicts)
        self.assertEqual({'guest': [], 'neighbours': []},
                         {k: list(v) for k, v in opt.predictions.items()})
        self.assertEqual({'judged': 0}, opt.calibration()['neighbours'])

    def test_a_guest_another_move_changed_is_left_out_of_calibration(self):
        # 'b' was also predicted to change by a move of 'c' inside the
        # window: its measured change is partly that move's.
        self.hv = fakes.FakeHypervisor(nodes=2, memory_mb=64 * GIB)
        agent, now = self.moved(neighbour=True)
        opt = agent.optimizer
        opt.checks['a'].effects = {'a': 1.2, 'b': 0.98}
        opt._touch('c', {'b': 1.1, 'c': 1.3, 'a': 1.001}, now)
        settle = opt.checks['a'].settle
        self.progress(agent, 'a', 1.05 * IPS, settle)
        end = self.progress(agent, 'b', 1.1 * IPS, settle)
        self.assertEqual([('a', 'kept')], opt.verdicts(end))
        self.assertEqual([(1.2, 1.05)], list(opt.predictions['guest']))
        self.assertEqual([], list(opt.predictions['neighbours']))
        # What no verdict to come looks back to is dropped (a cycle).
        opt.checks.clear()
        opt._touch('d', {'b': 1.2}, now + 1000)
        opt._forget_changes(now + 1000)
        self.assertEqual([(now + 1000, 'd')], list(opt.changed_by['b']))
        # Forgotten when it leaves.
        del self.hv.guests['b']
        self.clock.now += 1
        agent.cycle()
        self.assertNotIn('b', opt.changed_by)
        # A move long before the window does not count.
        opt.changed_by = {'b': collections.deque([(now - 100, 'c')])}
        check = optimizer.Check('a', now, now, IPS, {}, ((0,), NODE0_CPUS),
                                0.5, (1,), 0.0, effects={'b': 0.98})
        opt._calibrate(check, 1.0, {'b': 0.9}, now + 10)
        self.assertEqual([(0.98, 0.9)], list(opt.predictions['neighbours']))

    def test_an_undone_move_keeps_its_overlaps_out_of_calibration(self):
        # As above, but 'b' at half speed: undone. The undo does not
        # forget the other move before the verdict is recorded.
        self.hv = fakes.FakeHypervisor(nodes=2, memory_mb=64 * GIB)
        agent, now = self.moved(neighbour=True)
        opt = agent.optimizer
        opt.checks['a'].effects = {'a': 1.2, 'b': 0.98}
        opt._touch('c', {'b': 1.1, 'a': 1.1}, now)
        settle = opt.checks['a'].settle
        self.progress(agent, 'a', 1.05 * IPS, settle)
        end = self.progress(agent, 'b', 0.5 * IPS, settle)
        self.assertEqual([('a', 'undone')], opt.verdicts(end))
        self.assertEqual({'guest': [], 'neighbours': []},
                         {k: list(v) for k, v in opt.predictions.items()})

    def test_an_unjudged_move_is_left_out_of_calibration(self):
        agent, now = self.moved()
        opt = agent.optimizer
        settle = opt.checks['a'].settle
        # Another phase: 2 LLC references per 1,000 instructions, from 40.
        end = self.progress(agent, 'a', 1.2 * IPS, settle, rpi=0.002)
        self.assertEqual([('a', 'unjudged')], opt.verdicts(end))
        self.assertEqual([], list(opt.predictions['guest']))

    def test_calibration_keeps_the_latest_verdicts(self):
        opt = self.make_agent().optimizer
        with mock.patch.object(optimizer.LOG, 'info', autospec=True) as info:
            for i in range(optimizer.CALIBRATION + 10):
                opt._calibrate(optimizer.Check(
                    'a', 0.0, 0.0, IPS, {}, ((0,), NODE0_CPUS), 0.5, (1,),
                    0.0, effects={'a': 1.1}), 1.0 + i, {}, 0.0)
        pairs = list(opt.predictions['guest'])
        self.assertEqual(optimizer.CALIBRATION, len(pairs))
        self.assertEqual((1.1, 11.0), pairs[0])
        # A log line every CALIBRATION_LOG verdicts.
        self.assertEqual(
            (optimizer.CALIBRATION + 10) // optimizer.CALIBRATION_LOG,
            info.call_count)
        args = info.call_args_list[0][0]
        self.assertIn('Cost model at the last', args[0])
        self.assertEqual(optimizer.CALIBRATION_LOG, args[1]['n'])
        self.assertIn('moved guests 50, measured speed relative to '
                      'predicted: median', args[1]['text'])
        self.assertEqual('', optimizer.calibration_text(
            optimizer.Optimizer(self.make_agent()).calibration()))

    def test_calibration_summary(self):
        summary = optimizer.calibration_summary(
            [(1.0, 1.0), (1.1, 1.0), (0.9, 0.95), (1.0, 0.96), (2.0, 1.0),
             (0.0, 1.0)])
        # No predicted speed: left out.
        self.assertEqual(5, summary['judged'])
        # Measured speed vs predicted: 0, -9.1%, +5.6%, -4%, -50%.
        self.assertEqual(-4.0, summary['median'])
        self.assertEqual(-33.64, summary['p10'])
        self.assertEqual(3.33, summary['p90'])
        self.assertEqual(3, summary['below'])
        self.assertEqual(1, summary['above'])
        self.assertEqual({'judged': 2, 'below': 2},
                         summary['predicted_gain'])
        self.assertEqual({'judged': 1, 'below': 0},
                         summary['predicted_loss'])
        self.assertEqual({'judged': 0}, optimizer.calibration_summary([]))

    def test_after_a_host_change_the_guest_itself_decides(self):
        # 'a' 5% slower, 'b' 10% faster: kept on their sum when nothing
        # else changed; on 'a' alone, beyond undo_threshold: undone.
        opt, verdicts, text = self.host_changed(None, 0.95, 1.1)
        self.assertEqual([('a', 'kept')], verdicts)
        opt, verdicts, text = self.host_changed('start', 0.95, 1.1)
        self.assertEqual([('a', 'undone')], verdicts)
        self.assertIn('progress -5.0% (predicted +0.0%), its neighbours '
                      'not judged', text)
        # Within undo_threshold: kept.
        opt, verdicts, text = self.host_changed('start', 0.98, 0.5)
        self.assertEqual([('a', 'kept')], verdicts)

    def host_changed_trust(self, effects, own):
        """Trust and unpaid count after a verdict on 'a' alone ('a' at
        ``own``, its move predicted ``effects``, 0.5 in all, for 4 GiB).
        """
        self.hv = fakes.FakeHypervisor(nodes=2, memory_mb=64 * GIB)
        agent, now = self.moved(neighbour=True)
        opt = agent.optimizer
        check = opt.checks['a']
        check.effects = effects
        check.predicted = 0.5
        check.moved_mb = 4 * GIB
        opt.host_changed(self.clock.now)
        end = self.progress(agent, 'a', own * IPS, check.settle)
        opt.verdicts(end)
        return opt

    def test_after_a_host_change_trust_learns_from_the_guest_alone(self):
        # Half of its predicted +20% came true (the neighbours' share of
        # the gain is not measured).
        opt = self.host_changed_trust({'a': 1.2, 'b': 1.3}, 1.1)
        self.assertAlmostEqual(
            (1 - optimizer.TRUST_WEIGHT) + optimizer.TRUST_WEIGHT * 0.5,
            opt.trust)
        # Moved for its neighbours' sake: nothing to learn from it alone.
        opt = self.host_changed_trust({'a': 1.0, 'b': 1.5}, 0.99)
        self.assertEqual(1.0, opt.trust)
        # Whether it paid for its pages is not known without them: not
        # counted as unpaid (-1% for 4 GiB would be, judged on all).
        self.assertEqual(0, opt.status()['unpaid'])

    def test_a_kept_move_that_did_not_pay_for_its_pages_is_unpaid(self):
        # 'a' kept at +2%: 2.4 guest-seconds over the 120 s horizon. 1 GiB
        # (2 s at MOVE_COST) paid for, 4 GiB (8 s) did not, at any rate.
        for rate, moved, unpaid in ((1, GIB, 0), (100 * GIB, GIB, 0),
                                    (1, 4 * GIB, 1), (100 * GIB, 4 * GIB, 1)):
            self.flags(group='numa_overhead_agent',
                       migrate_rate_mb_per_s=rate)
            self.hv = fakes.FakeHypervisor(nodes=2, memory_mb=64 * GIB)
            agent, _now = self.moved()
            opt = agent.optimizer
            check = opt.checks['a']
            check.moved_mb = moved
            end = self.progress(agent, 'a', 1.02 * IPS, check.settle)
            self.assertEqual([('a', 'kept')], opt.verdicts(end))
            self.assertEqual(unpaid, opt.status()['unpaid'],
                             (rate, moved))

    def test_faster_guest_keeps_its_move(self):
        agent, now = self.moved()
        opt = agent.optimizer
        settle = opt.checks['a'].settle
        end = self.progress(agent, 'a', 1.2 * IPS, settle)
        self.assertEqual([('a', 'kept')], opt.verdicts(end))
        self.assertEqual(NODE1_CPUS, self.hv.pins['a'])
        self.assertEqual((1,), self.hv.nodesets['a'])
        self.assertEqual(1, opt.counts['kept'])
        self.assertEqual(0, opt.counts['undone'])
        self.assertEqual('optimized', agent.outcomes['a'].action)
        self.assertIn('kept: progress +20.0%', agent.outcomes['a'].outcome)
        self.assertNotIn('a', opt.backoff)
        # Left where it is for a while before it is considered again.
        self.assertEqual([], opt.movable(end + optimizer.HOLD - 1))
        self.assertEqual(['a'], [d.name for d in
                                 opt.movable(end + optimizer.HOLD)])

    def test_moves_and_verdicts_are_in_the_guests_record(self):
        agent, now = self.moved()
        opt = agent.optimizer
        recorded = self.hv.recorded['a']
        self.assertEqual((1, 0, 0), (recorded.moved, recorded.kept,
                                     recorded.undone))
        end = self.progress(agent, 'a', 0.5 * IPS, opt.checks['a'].settle)
        opt.verdicts(end)
        recorded = self.hv.recorded['a']
        self.assertEqual((1, 0, 1), (recorded.moved, recorded.kept,
                                     recorded.undone))
        self.assertEqual({'moved': 1, 'kept': 0, 'undone': 1},
                         opt.guest_counts('a'))
        # A restarted agent goes on from the record.
        again = self.start()
        self.assertEqual({'moved': 1, 'kept': 0, 'undone': 1},
                         again.optimizer.guest_counts('a'))
        self.assertEqual(0, again.optimizer.counts['moved'])

    def test_loss_within_the_threshold_is_kept(self):
        agent, now = self.moved()
        opt = agent.optimizer
        end = self.progress(agent, 'a', 0.98 * IPS, opt.checks['a'].settle)
        self.assertEqual([('a', 'kept')], opt.verdicts(end))

    def test_slower_neighbours_put_it_back(self):
        agent, now = self.moved(neighbour=True)
        opt = agent.optimizer
        settle = opt.checks['a'].settle
        # It gained 10%, its neighbour lost 20%: a net loss.
        self.progress(agent, 'a', 1.1 * IPS, settle)
        end = self.progress(agent, 'b', 0.8 * IPS, settle)
        self.assertEqual([('a', 'undone')], opt.verdicts(end))
        self.assertEqual(NODE0_CPUS, self.hv.pins['a'])
        self.assertEqual(1, opt.counts['undone'])

    def test_fewer_instructions_on_its_nodes_put_it_back(self):
        agent, now = self.moved(neighbour=True)
        opt = agent.optimizer
        settle = opt.checks['a'].settle
        # It ran at a tenth of its neighbour and doubled; the neighbour
        # lost 40%: relative changes sum to +60%, the nodes' instructions
        # per second fell by a third.
        opt.checks['a'].before = 0.1 * IPS
        self.progress(agent, 'a', 0.2 * IPS, settle)
        end = self.progress(agent, 'b', 0.6 * IPS, settle)
        self.assertEqual([('a', 'undone')], opt.verdicts(end))

    def test_net_gain_with_a_slower_neighbour_is_kept(self):
        agent, now = self.moved(neighbour=True)
        opt = agent.optimizer
        settle = opt.checks['a'].settle
        # It gained 30%, its neighbour lost 10%: the host gained.
        self.progress(agent, 'a', 1.3 * IPS, settle)
        end = self.progress(agent, 'b', 0.9 * IPS, settle)
        self.assertEqual([('a', 'kept')], opt.verdicts(end))
        self.assertEqual(NODE1_CPUS, self.hv.pins['a'])

    def test_a_guest_predicted_to_gain_that_lost_is_put_back(self):
        # It lost 5% (within 3 x undo_threshold), its neighbour gained
        # 30%: the sum would keep it. Predicted to gain 10%, the model
        # misjudged the guest it moved: undone.
        for predicted, verdict in ((1.1, 'undone'), (0.95, 'kept'),
                                   (1.0, 'kept')):
            self.hv = fakes.FakeHypervisor(nodes=2, memory_mb=64 * GIB)
            agent, now = self.moved(neighbour=True)
            opt = agent.optimizer
            check = opt.checks['a']
            # Predicted to lose as much (or not to change): moved for its
            # neighbour's sake, the sum decides.
            check.effects = {'a': predicted, 'b': 1.3}
            self.progress(agent, 'a', 0.95 * IPS, check.settle)
            end = self.progress(agent, 'b', 1.3 * IPS, check.settle)
            self.assertEqual([('a', verdict)], opt.verdicts(end),
                             predicted)
            self.assertEqual(int(verdict == 'undone'),
                             opt.status()['misjudged'])
        # What its pass was predicted to do to it counts: expected to
        # lose 5% with the other moves of its pass, it is kept.
        self.hv = fakes.FakeHypervisor(nodes=2, memory_mb=64 * GIB)
        agent, now = self.moved(neighbour=True)
        opt = agent.optimizer
        check = opt.checks['a']
        check.effects = {'a': 1.1, 'b': 1.3}
        check.expected = 0.95
        self.progress(agent, 'a', 0.95 * IPS, check.settle)
        end = self.progress(agent, 'b', 1.3 * IPS, check.settle)
        self.assertEqual([('a', 'kept')], opt.verdicts(end))
        # Within the threshold, predicted to gain: kept.
        self.hv = fakes.FakeHypervisor(nodes=2, memory_mb=64 * GIB)
        agent, now = self.moved(neighbour=True)
        opt = agent.optimizer
        check = opt.checks['a']
        check.effects = {'a': 1.1, 'b': 1.3}
        self.progress(agent, 'a', 0.98 * IPS, check.settle)
        end = self.progress(agent, 'b', 1.3 * IPS, check.settle)
        self.assertEqual([('a', 'kept')], opt.verdicts(end))

    def test_a_misjudged_guest_at_the_threshold_is_kept(self):
        # Predicted to gain, it lost exactly undo_threshold: not beyond
        # it, the sum decides (its neighbour gained).
        agent, now = self.moved(neighbour=True)
        opt = agent.optimizer
        check = opt.checks['a']
        check.effects = {'a': 1.1, 'b': 1.3}
        threshold = opt.opts.undo_threshold
        self.progress(agent, 'a', (1.0 - threshold) * IPS, check.settle)
        end = self.progress(agent, 'b', 1.3 * IPS, check.settle)
        self.assertEqual([('a', 'kept')], opt.verdicts(end))
        self.assertEqual(0, opt.status()['misjudged'])

    def test_a_misjudged_guest_across_a_host_change_is_undone(self):
        # Judged on its own progress (a guest started since): its loss
        # beyond the threshold undoes it whatever it was predicted, and
        # it is not counted misjudged (its own change alone decided).
        agent, now = self.moved(neighbour=True)
        opt = agent.optimizer
        check = opt.checks['a']
        check.effects = {'a': 1.1, 'b': 1.3}
        opt.host_changed(now)
        self.progress(agent, 'a', 0.95 * IPS, check.settle)
        end = self.progress(agent, 'b', 1.3 * IPS, check.settle)
        self.assertEqual([('a', 'undone')], opt.verdicts(end))
        self.assertEqual(0, opt.status()['misjudged'])
        self.assertEqual(1, opt.counts['host_changed'])

    def test_kept_through_the_agent_cycle(self):
        agent, now = self.moved()
        # The guest runs 20% faster from now on; the agent samples it.
        self.sample(agent, 5, a=1.2 * IPS)
        self.assertEqual(1, agent.optimizer.counts['kept'])
        self.assertIn('a', agent.optimizer.held)
        self.assertEqual(NODE1_CPUS, self.hv.pins['a'])
        self.assertEqual({}, agent.optimizer.checks)

    def test_undone_through_the_agent_cycle(self):
        agent, now = self.moved()
        self.sample(agent, 5, a=0.5 * IPS)
        self.assertEqual(1, agent.optimizer.counts['undone'])
        self.assertEqual(NODE0_CPUS, self.hv.pins['a'])
        self.assertEqual((0,), self.hv.nodesets['a'])

    def test_undo_of_a_guest_nova_and_the_agent_left_free(self):
        # No restriction before the move: back to the CPUs it ran on,
        # and its memory back on the node that held it (widening the
        # nodeset to Nova's would leave the pages on node 1, away from
        # the vCPUs).
        self.hv.add('a', {0: 4 * GIB}, vcpu_node=0)
        agent = self.start()
        agent.restrictions['a'] = ((), ())
        opt = agent.optimizer
        opt.apply(self.to_node1(), self.clock.now)
        self.assertEqual(((0,), NODE0_CPUS), opt.checks['a'].undo)
        end = self.progress(agent, 'a', 0.5 * IPS, opt.checks['a'].settle)
        self.assertEqual([('a', 'undone')], opt.verdicts(end))
        self.assertEqual(NODE0_CPUS, self.hv.pins['a'])
        self.assertEqual((0,), self.hv.nodesets['a'])
        self.assertEqual(((0,), NODE0_CPUS), agent.restrictions['a'])

    def test_undo_without_room_where_it_was_gives_novas_nodes(self):
        # Its old node filled up meanwhile: Nova's nodes, as before, not
        # the move's node with the vCPUs sent back.
        self.hv.add('a', {0: 4 * GIB}, vcpu_node=0)
        agent = self.start()
        agent.restrictions['a'] = ((), ())
        opt = agent.optimizer
        opt.apply(self.to_node1(), self.clock.now)
        self.hv.add('big', {0: self.hv.free[0]}, vcpu_node=0)
        self.sample(agent, 1)
        end = self.progress(agent, 'a', 0.5 * IPS, opt.checks['a'].settle)
        self.assertEqual([('a', 'undone')], opt.verdicts(end))
        self.assertEqual((0, 1), self.hv.nodesets['a'])
        self.assertEqual(((), NODE0_CPUS), agent.restrictions['a'])

    def undo_nodes(self, memory, nodes=(1,), nova=()):
        """The nodes an undo of a move of 'a' (memory ``memory``, vCPUs
        on node 0, free) to ``nodes`` confines its memory to.
        """
        self.hv = fakes.FakeHypervisor(nodes=3, memory_mb=64 * GIB)
        self.hv.add('a', memory, vcpu_node=0)
        agent = self.start()
        agent.restrictions['a'] = ((), ())
        agent.nova_allowed['a'] = nova
        cpus = tuple(c for n in nodes for c in range(8 * n, 8 * n + 8))
        agent.optimizer.apply(optimizer.Action(
            'a', nodes, cpus, 0.5, 0.0, 0.0,
            (cost.even(nodes), cost.even(nodes))), self.clock.now)
        return agent.optimizer.checks['a'].undo[0]

    def test_undo_stays_within_novas_nodes(self):
        self.assertEqual((0,), self.undo_nodes({0: 3 * GIB, 2: GIB},
                                               nova=(0, 1)))
        self.assertEqual((0, 2), self.undo_nodes({0: 3 * GIB, 2: GIB}))

    def test_undo_leaves_out_nodes_with_little_of_its_memory(self):
        # 2% of it on node 2: not worth a node of its nodeset.
        self.assertEqual((0,), self.undo_nodes({0: 4000, 2: 96}))

    def test_undo_of_a_move_onto_a_node_that_held_it_gives_novas(self):
        # Narrowing to nodes the move kept would move no page back: Nova's
        # nodes, as before (the kernel's balancing may bring them).
        self.assertEqual((), self.undo_nodes({1: 4 * GIB}))
        self.assertEqual((), self.undo_nodes({0: 3 * GIB, 1: GIB}))

    def test_undo_of_a_planned_vcpu_move_gives_novas_nodes(self):
        # The plan's move of a guest whose memory is on node 1 takes its
        # vCPUs there (memory included, none to move): its undo gives
        # Nova's nodes back, not a confinement to node 1.
        self.remote('a')
        agent = self.start()
        agent.restrictions['a'] = ((), ())
        opt = agent.optimizer
        [action] = opt.plan(self.clock.now)
        self.assertTrue(opt.apply(action, self.clock.now))
        self.assertEqual(((), NODE0_CPUS), opt.checks['a'].undo)

    def test_undo_of_a_vcpu_move_leaves_the_nodeset_to_nova(self):
        # Its pages did not move: nothing to bring back, Nova's nodes.
        self.remote('a')
        agent = self.start()
        agent.restrictions['a'] = ((), ())
        opt = agent.optimizer
        action = self.to_node1()
        action.with_memory = False
        opt.apply(action, self.clock.now)
        self.assertEqual(((), NODE0_CPUS), opt.checks['a'].undo)
        end = self.progress(agent, 'a', 0.5 * IPS, opt.checks['a'].settle)
        self.assertEqual([('a', 'undone')], opt.verdicts(end))
        self.assertEqual(NODE0_CPUS, self.hv.pins['a'])
        self.assertEqual((0, 1), self.hv.nodesets['a'])
        self.assertEqual(((), NODE0_CPUS), agent.restrictions['a'])

    def undone_with_pages(self, memory, room0=None):
        """'a' (vCPUs on node 0, ``memory``, free) moved to node 1 and
        undone, with ``enforcement = pages``; ``room0``: MiB left free on
        node 0 after the move (another guest took the rest).
        """
        self.flags(group='numa_overhead_agent', enforcement='pages')
        self.hv.add('a', {0: 4 * GIB}, vcpu_node=0)
        agent = self.start()
        # Where Nova's placement (not the placer's) left its memory.
        self.set_memory('a', memory)
        agent = self.sample(agent, 1)
        agent.restrictions['a'] = ((), ())
        opt = agent.optimizer
        self.assertTrue(opt.apply(self.to_node1(), self.clock.now))
        # The move brought its pages to node 1 (the fake's kernel leaves
        # those outside the new nodeset: the agent moves them).
        self.assertEqual(sum(memory.values()), self.hv.memory['a'][1])
        if room0 is not None:
            self.hv.add('big', {0: self.hv.free[0] - room0}, vcpu_node=0)
            self.sample(agent, 1)
        self.hv.moves.clear()
        end = self.progress(agent, 'a', 0.5 * IPS, opt.checks['a'].settle)
        self.assertEqual([('a', 'undone')], opt.verdicts(end))
        self.assertEqual(NODE0_CPUS, self.hv.pins['a'])
        return agent

    def test_undo_to_novas_nodes_moves_the_pages_back(self):
        # A quarter of it was on node 1 before: the undo gives Nova's
        # nodes (narrowing to 0 and 1 would move no page), which moves no
        # page; its pages then go back to the shares they had.
        agent = self.undone_with_pages({0: 3 * GIB, 1: GIB})
        opt = agent.optimizer
        self.assertEqual((0, 1), self.hv.nodesets['a'])
        self.assertEqual(((), NODE0_CPUS), agent.restrictions['a'])
        self.assertEqual([], self.hv.moves)
        self.assertEqual({0: 0.75, 1: 0.25}, opt.returning['a'].shares)
        self.assertEqual(1, opt.status()['returning'])
        opt.bring_back()
        self.assertEqual([('a', 1, 0, 3 * GIB)], self.hv.moves)
        memory = self.hv.memory['a']
        self.assertAlmostEqual(3 * GIB, memory[0], delta=1)
        self.assertAlmostEqual(GIB, memory[1], delta=1)
        # There: done.
        opt.bring_back()
        self.assertEqual({}, opt.returning)
        self.assertEqual(1, len(self.hv.moves))

    def test_pages_go_back_at_the_page_rate(self):
        agent = self.undone_with_pages({0: 3 * GIB, 1: GIB})
        # 1 GiB/s from now on (the move itself was not limited).
        agent.rate = type(agent.rate)(1024.0, agent.clock)
        opt = agent.optimizer
        self.assertEqual(3, self.steps_until_done(opt, opt.returning))
        self.assertEqual([1024] * 3, [m[3] for m in self.hv.moves])
        self.assertAlmostEqual(3 * GIB, self.hv.memory['a'][0], delta=1)

    def test_pages_go_back_through_the_agent_cycle(self):
        agent = self.undone_with_pages({0: 3 * GIB, 1: GIB})
        self.sample(agent, 2)
        self.assertAlmostEqual(3 * GIB, self.hv.memory['a'][0], delta=1)
        self.assertEqual({}, agent.optimizer.returning)

    def test_undo_to_held_nodes_leaves_the_pages_to_the_kernel(self):
        # Narrowing the nodeset to node 0 again makes the kernel move the
        # pages outside it (the fake's does not): no move_pages for them.
        agent = self.undone_with_pages({0: 4 * GIB})
        self.assertEqual((0,), self.hv.nodesets['a'])
        self.assertEqual({}, agent.optimizer.returning)
        agent.optimizer.bring_back()
        self.assertEqual([], self.hv.moves)

    def test_pages_go_back_as_far_as_there_is_room(self):
        # 2 GiB left on node 0, reserve_mb (1 GiB) kept free: 1 GiB back.
        self.flags(group='numa_overhead_agent', reserve_mb=GIB)
        agent = self.undone_with_pages({0: 3 * GIB, 1: GIB}, room0=2 * GIB)
        self.assertEqual((0, 1), self.hv.nodesets['a'])
        opt = agent.optimizer
        opt.bring_back()
        self.assertAlmostEqual(GIB, self.hv.memory['a'][0], delta=1)
        self.assertEqual(GIB, self.hv.free[0])
        opt.bring_back()
        self.assertEqual({}, opt.returning)
        self.assertEqual(1, len(self.hv.moves))

    def stranded(self, room0, undos=0, enforcement='pages', confined=(),
                 left=None, reserve=GIB):
        """'a' (vCPUs on node 0, its 4 GiB there; confined by the agent to
        ``confined`` nodes, else free) moved to node 1, ``left``: node ->
        MiB of its pages still where they were after (none), ``room0``
        MiB left free on node 0 after (another guest took the rest), and
        slower since: its verdict.
        """
        self.flags(group='numa_overhead_agent', enforcement=enforcement,
                   reserve_mb=reserve)
        self.hv.add('a', {0: 4 * GIB}, vcpu_node=0)
        agent = self.start()
        agent.restrictions['a'] = (tuple(confined), ())
        opt = agent.optimizer
        self.assertTrue(opt.apply(self.to_node1(), self.clock.now))
        # Where its pages are after the move (the kernel moved them where
        # the nodeset narrowed).
        memory = dict(left or {})
        memory[1] = 4 * GIB - sum(memory.values())
        self.set_memory('a', memory)
        self.hv.add('big', {0: self.hv.free[0] - room0}, vcpu_node=0)
        self.sample(agent, 1)
        self.hv.moves.clear()
        end = self.progress(agent, 'a', 0.5 * IPS, opt.checks['a'].settle)
        if undos:
            # Undone that many times before, and back since.
            opt.backoff['a'] = (undos, 0.0)
        return agent, opt.verdicts(end), end

    def test_an_undo_that_would_strand_the_vcpus_is_not_made(self):
        # Room for 1 GiB of its 4 on node 0 (2 GiB free, reserve_mb
        # kept): back there, its vCPUs would run away from 3 GiB of its
        # pages. The move stays, the guest is left alone as after an undo.
        agent, verdicts, end = self.stranded(room0=2 * GIB)
        opt = agent.optimizer
        self.assertEqual([('a', 'kept')], verdicts)
        self.assertEqual(NODE1_CPUS, self.hv.pins['a'])
        self.assertEqual((1,), self.hv.nodesets['a'])
        self.assertEqual([], self.hv.moves)
        self.assertEqual({}, opt.returning)
        status = opt.status()
        self.assertEqual((1, 1, 0), (status['kept'], status['stranded'],
                                     status['undone']))
        self.assertEqual({'moved': 1, 'kept': 1, 'undone': 0},
                         opt.guest_counts('a'))
        self.assertEqual((1, end + 60.0), opt.backoff['a'])
        self.assertNotIn('a', [d.name for d in opt.movable(end + 59)])
        self.assertIn('a', [d.name for d in opt.movable(end + 61)])
        # Its record keeps the backoff: a restarted agent leaves it too.
        record = self.hv.recorded['a']
        self.assertEqual(1, record.backoff_undos)
        self.assertTrue(record.backoff_until)
        self.assertIn('not undone: 1024 of the 4096 MiB it had where it '
                      'ran would come back', agent.outcomes['a'].outcome)
        event, payload = self.notifier.events[-1]
        self.assertEqual('numa_overhead.optimize.kept', event)
        self.assertTrue(payload['stranded'])
        self.assertEqual(60.0, payload['backoff_s'])

    def test_a_kept_move_is_not_stranded(self):
        agent, now = self.moved()
        end = self.progress(agent, 'a', 1.2 * IPS, agent.optimizer.checks[
            'a'].settle)
        self.assertEqual([('a', 'kept')], agent.optimizer.verdicts(end))
        event, payload = self.notifier.events[-1]
        self.assertFalse(payload['stranded'])
        self.assertNotIn('backoff_s', payload)

    def test_an_undo_that_brings_back_half_its_pages_is_made(self):
        agent, verdicts, _end = self.stranded(room0=3 * GIB)
        self.assertEqual([('a', 'undone')], verdicts)
        self.assertEqual(NODE0_CPUS, self.hv.pins['a'])
        self.assertEqual(0, agent.optimizer.status()['stranded'])
        # Its pages go back as far as node 0 has room.
        self.assertIn('a', agent.optimizer.returning)

    def test_an_undo_bringing_back_less_than_half_is_not_made(self):
        # 45% of it: 1843 MiB of room on node 0 besides reserve_mb.
        agent, verdicts, _end = self.stranded(room0=GIB + 1843)
        self.assertEqual([('a', 'kept')], verdicts)

    def test_pages_still_where_they_were_count_as_back(self):
        # 3 GiB of its 4 never left node 0 (no room besides reserve_mb
        # there now): an undo puts the vCPUs next to them.
        agent, verdicts, _end = self.stranded(room0=0, left={0: 3 * GIB},
                                              reserve=2 * GIB)
        self.assertEqual([('a', 'undone')], verdicts)

    def test_without_page_moves_an_undo_to_novas_nodes_strands(self):
        # enforcement = nodeset: room for 3 GiB on node 0, but an undo
        # without room for all of it (and reserve_mb) gives Nova's nodes
        # back, and widening a nodeset moves no page.
        agent, verdicts, _end = self.stranded(room0=3 * GIB,
                                              enforcement='nodeset')
        self.assertEqual([('a', 'kept')], verdicts)
        self.assertEqual(1, agent.optimizer.status()['stranded'])

    def test_an_undo_narrowing_to_nodes_with_room_is_made(self):
        # Room for all of it on node 0: the undo narrows the nodeset
        # there and the kernel brings the pages back.
        agent, verdicts, _end = self.stranded(room0=6 * GIB,
                                              enforcement='nodeset')
        self.assertEqual([('a', 'undone')], verdicts)
        self.assertEqual((0,), self.hv.nodesets['a'])

    def test_an_undo_left_on_the_moves_nodes_strands(self):
        # The agent had confined it to node 0; no room there for it now:
        # the undo would leave its nodeset on node 1, its pages there.
        agent, verdicts, _end = self.stranded(room0=3 * GIB, confined=(0,))
        self.assertEqual([('a', 'kept')], verdicts)
        self.assertEqual((1,), self.hv.nodesets['a'])

    def test_room_on_nodes_nova_does_not_allow_does_not_count(self):
        self.flags(group='numa_overhead_agent', enforcement='pages',
                   reserve_mb=GIB)
        self.hv = fakes.FakeHypervisor(nodes=3, memory_mb=64 * GIB)
        self.hv.add('a', {0: 4 * GIB}, vcpu_node=0)
        agent = self.start()
        # Where Nova's placement (not the placer's) left its memory.
        self.set_memory('a', {0: 2 * GIB, 2: 2 * GIB})
        self.sample(agent, 1)
        agent.restrictions['a'] = ((), ())
        agent.nova_allowed['a'] = (0, 1)
        opt = agent.optimizer
        self.assertTrue(opt.apply(self.to_node1(), self.clock.now))
        self.set_memory('a', {1: 4 * GIB})
        self.hv.add('big', {0: self.hv.free[0]}, vcpu_node=0)
        self.sample(agent, 1)
        end = self.progress(agent, 'a', 0.5 * IPS, opt.checks['a'].settle)
        # Node 2 has room for its 2 GiB there, but pages go back within
        # Nova's nodes only.
        self.assertEqual([('a', 'kept')], opt.verdicts(end))

    def test_a_stranded_move_after_an_undo_backs_off_longer(self):
        agent, verdicts, end = self.stranded(room0=2 * GIB, undos=1)
        self.assertEqual([('a', 'kept')], verdicts)
        self.assertEqual((2, end + 120.0), agent.optimizer.backoff['a'])

    def test_a_failed_page_move_ends_the_return_not_the_undo(self):
        agent = self.undone_with_pages({0: 3 * GIB, 1: GIB})
        self.hv.raise_on[('move_pages', 'a')] = hv_mod.HypervisorError('no')
        agent.optimizer.bring_back()
        self.assertEqual({}, agent.optimizer.returning)
        self.assertEqual(((), NODE0_CPUS), agent.restrictions['a'])
        self.assertEqual(1, agent.optimizer.counts['undone'])
        self.assertEqual(1, agent.errors['HypervisorError'])
        self.assertIn('Moving pages back of a failed', self.logger.output)

    def test_a_lost_connection_keeps_the_return_for_later(self):
        agent = self.undone_with_pages({0: 3 * GIB, 1: GIB})
        self.hv.raise_on[('move_pages', 'a')] = \
            hv_mod.HypervisorUnavailable('gone')
        self.assertRaises(hv_mod.HypervisorUnavailable,
                          agent.optimizer.bring_back)
        self.assertIn('a', agent.optimizer.returning)
        del self.hv.raise_on[('move_pages', 'a')]
        agent.optimizer.bring_back()
        self.assertAlmostEqual(3 * GIB, self.hv.memory['a'][0], delta=1)

    def test_a_new_move_restart_or_departure_ends_the_return(self):
        agent = self.undone_with_pages({0: 3 * GIB, 1: GIB})
        opt = agent.optimizer
        opt.backoff.clear()
        opt.apply(self.to_node1(), self.clock.now)
        self.assertEqual({}, opt.returning)
        opt.returning['a'] = optimizer.Return({0: 0.75, 1: 0.25})
        opt.restarted('a', self.clock.now)
        self.assertEqual({}, opt.returning)
        # The move's check is the old run's: no verdict.
        self.assertEqual({}, opt.checks)
        self.assertEqual(1, opt.counts['expired'])
        opt.returning['a'] = optimizer.Return({0: 0.75, 1: 0.25})
        self.hv.remove('a')
        self.sample(agent, 1)
        self.assertEqual({}, opt.returning)

    def test_a_return_that_gets_no_nearer_ends(self):
        # Something (the kernel's balancing, the guest) moves the pages
        # away as fast as they come back: the agent does not chase them.
        agent = self.undone_with_pages({0: 3 * GIB, 1: GIB})
        agent.rate = type(agent.rate)(1024.0, agent.clock)
        opt = agent.optimizer
        opt.bring_back()
        self.assertEqual(GIB, self.hv.memory['a'][0])
        for step in range(optimizer.RETURN_STALLS):
            self.set_memory('a', {1: 4 * GIB})
            self.clock.now += 1
            opt.bring_back()
        self.assertEqual({}, opt.returning)
        self.assertEqual(optimizer.RETURN_STALLS, len(self.hv.moves))
        self.assertIn('Pages of a moved back after its undo: no nearer '
                      'in 3 steps (3072 MiB)', self.logger.output)

    def test_a_return_ends_in_a_log_line(self):
        agent = self.undone_with_pages({0: 3 * GIB, 1: GIB})
        self.assertIn('its pages go back to nodes 0,1', self.logger.output)
        agent.optimizer.bring_back()
        agent.optimizer.bring_back()
        self.assertIn('Pages of a moved back after its undo: there, as far '
                      'as its nodes have room (3072 MiB)', self.logger.output)

    def test_a_live_migration_ends_the_return(self):
        agent = self.undone_with_pages({0: 3 * GIB, 1: GIB})
        agent.migrating.add('a')
        agent.optimizer.bring_back()
        self.assertEqual({}, agent.optimizer.returning)
        self.assertEqual([], self.hv.moves)

    def test_a_failed_move_leaves_the_return(self):
        agent = self.undone_with_pages({0: 3 * GIB, 1: GIB})
        opt = agent.optimizer
        opt.backoff.clear()
        self.hv.raise_on[('pin_vcpus', 'a')] = hv_mod.HypervisorError('no')
        self.assertFalse(opt.apply(self.to_node1(), self.clock.now))
        self.assertIn('a', opt.returning)

    def test_the_pass_moves_before_pages_go_back(self):
        # Its moves take the page budget first.
        agent = self.undone_with_pages({0: 3 * GIB, 1: GIB})
        opt = agent.optimizer
        calls = []
        action = self.to_node1('b')
        with mock.patch.object(opt, 'due', autospec=True,
                               return_value=True), \
                mock.patch.object(opt, 'plan', autospec=True,
                                  return_value=[action]), \
                mock.patch.object(opt, 'apply', autospec=True,
                                  side_effect=lambda *a: calls.append(
                                      'apply')), \
                mock.patch.object(opt, 'bring_back', autospec=True,
                                  side_effect=lambda: calls.append(
                                      'bring_back')):
            self.assertEqual([action], opt.step(self.clock.now))
        self.assertEqual(['apply', 'bring_back'], calls)

    def test_undo_moves_no_page_with_enforcement_nodeset(self):
        self.hv.add('a', {0: 3 * GIB, 1: GIB}, vcpu_node=0)
        agent = self.start()
        agent.restrictions['a'] = ((), ())
        opt = agent.optimizer
        opt.apply(self.to_node1(), self.clock.now)
        end = self.progress(agent, 'a', 0.5 * IPS, opt.checks['a'].settle)
        self.assertEqual([('a', 'undone')], opt.verdicts(end))
        self.assertEqual([], self.hv.moves)

    def test_undo_of_a_vcpu_move_moves_no_page(self):
        self.flags(group='numa_overhead_agent', enforcement='pages')
        self.hv.add('a', {0: 3 * GIB, 1: GIB}, vcpu_node=0)
        agent = self.start()
        agent.restrictions['a'] = ((), ())
        opt = agent.optimizer
        action = self.to_node1()
        action.with_memory = False
        self.hv.moves.clear()
        opt.apply(action, self.clock.now)
        self.assertEqual({}, opt.checks['a'].memory_before)
        end = self.progress(agent, 'a', 0.5 * IPS, opt.checks['a'].settle)
        self.assertEqual([('a', 'undone')], opt.verdicts(end))
        self.assertEqual({}, opt.returning)
        self.assertEqual([], self.hv.moves)

    def test_failed_undo_is_counted(self):
        agent, now = self.moved()
        opt = agent.optimizer
        end = self.progress(agent, 'a', 0.5 * IPS, opt.checks['a'].settle)
        self.hv.raise_on[('pin_vcpus', 'a')] = hv_mod.HypervisorError('no')
        self.assertEqual([('a', 'undo failed')], opt.verdicts(end))
        self.assertEqual(0, opt.counts['undone'])
        self.assertEqual(1, opt.status()['failed'])
        self.assertEqual(NODE1_CPUS, self.hv.pins['a'])


class TestContained(OptimizerTestCase):
    """A failure of the optimizer never stops the agent."""

    def test_a_failing_pass_stops_neither_sampling_nor_reports(self):
        self.remote('a')
        agent = self.make_agent()

        def broken(now):
            raise ZeroDivisionError('bug')

        agent.optimizer.step = broken
        self.sample(agent, 3)
        self.assertTrue(self.publisher.reports)
        self.assertEqual(3, agent.errors['ZeroDivisionError'])
        # Logged once with its traceback, at debug after that.
        self.assertEqual(1, self.logger.output.count(
            'Optimizer pass failed, skipped'))

    def test_a_failing_judge_leaves_the_placers_plan(self):
        self.remote('a')
        agent = self.start()

        def broken(*args):
            raise KeyError('bug')

        agent.optimizer.judge = broken
        decision = agent.place(agent.domains['a'])
        self.assertNotEqual('failed', decision.action)
        self.assertIn('Judging the placement of a failed',
                      self.logger.output)

    def test_nodes_the_topology_does_not_know_are_left_out(self):
        self.remote('a')
        agent = self.start()
        state = agent.collector.guests['a']
        memory = dict(state.memory_mb)
        memory[7] = 512.0
        state.memory_mb = memory
        [load] = agent.optimizer.loads()
        self.assertNotIn(7, load.memory)
        agent.optimizer.plan(self.clock.now)

    def test_a_failed_move_is_not_tried_at_every_pass(self):
        self.remote('a')
        agent = self.start()
        self.hv.raise_on[('set_nodeset', 'a')] = hv_mod.HypervisorError('no')
        opt = agent.optimizer
        self.assertFalse(opt.apply(self.to_node1(), self.clock.now))
        self.assertEqual(1, opt.counts['failed'])
        self.assertNotIn('a', [d.name for d in opt.movable(self.clock.now)])

    def test_a_lost_connection_keeps_the_undo_for_later(self):
        agent, now = self.moved()
        opt = agent.optimizer
        end = self.progress(agent, 'a', 0.5 * IPS, opt.checks['a'].settle)
        self.verdicts_losing_libvirt(opt, 'pin_vcpus', end)
        self.assertIn('a', opt.checks)
        # Judged again once libvirt is back: its predictions kept, the
        # trust learned, once.
        self.assertEqual([], list(opt.predictions['guest']))
        self.assertEqual(1.0, opt.trust)
        self.assertEqual([('a', 'undone')], opt.verdicts(end))
        self.assertEqual(1, len(opt.predictions['guest']))
        trust = opt.trust
        self.assertLess(trust, 1.0)
        self.assertEqual([], opt.verdicts(end))
        self.assertEqual(trust, opt.trust)

    def test_a_record_lost_after_the_undo_does_not_undo_it_again(self):
        agent, actions = TestPlan.with_neighbour(self, 0.0)
        opt = agent.optimizer
        self.assertTrue(opt.apply(actions[0], self.clock.now))
        self.assertLess(opt.standing['b'], 1.0)
        end = self.progress(agent, 'a', 0.5 * IPS, opt.checks['a'].settle)
        # The undo is made; libvirt is lost as its record is written.
        self.record_lost(opt, end)
        self.assertEqual(1, opt.counts['undone'])
        self.assertEqual(1, opt.backoff['a'][0])
        self.assertAlmostEqual(1.0, opt.standing['b'])
        # Libvirt back: nothing judged again, the record written at the
        # next step.
        self.assertEqual([], opt.verdicts(end + 1))
        opt.step(end + 1)
        self.assertEqual(set(), opt.unwritten)
        self.assertEqual(1, self.hv.recorded['a'].undone)
        self.assertEqual(1, self.hv.recorded['a'].backoff_undos)
        self.assertEqual(1, opt.counts['undone'])

    def test_a_record_lost_after_a_kept_move_keeps_the_lesson(self):
        agent, now = self.moved()
        opt = agent.optimizer
        # It gained, less than predicted: kept, and the trust learns.
        end = self.progress(agent, 'a', 1.1 * IPS, opt.checks['a'].settle)
        self.record_lost(opt, end)
        self.assertEqual(1, opt.counts['kept'])

    def verdicts_losing_libvirt(self, opt, method, end):
        """The verdicts at ``end`` with libvirt lost at ``method`` on
        'a' (back after).
        """
        self.hv.raise_on[(method, 'a')] = hv_mod.HypervisorUnavailable(
            'gone')
        self.assertRaises(hv_mod.HypervisorUnavailable, opt.verdicts, end)
        del self.hv.raise_on[(method, 'a')]

    def record_lost(self, opt, end):
        """A verdict made whose record libvirt lost: final, learned
        once, its record to write again.
        """
        self.verdicts_losing_libvirt(opt, 'record', end)
        self.assertEqual({}, opt.checks)
        self.assertLess(opt.trust, 1.0)
        self.assertEqual(1, len(opt.predictions['guest']))
        self.assertEqual({'a'}, opt.unwritten)

    def test_a_verdict_waits_for_a_window_longer_than_expire(self):
        self.remote('a')
        agent = self.start()
        # 5 samples 40 s apart: 200 s, more than EXPIRE.
        self.flags(group='numa_overhead_agent', loop_window=5,
                   sample_interval=40)
        opt = agent.optimizer
        now = self.clock.now
        opt.history['a'] = optimizer.Progress(5)
        for i in range(5):
            opt.history['a'].append(optimizer.Rates(
                now - 200 + 40 * i, IPS, 2 * IPS, 0.04 * IPS, 0.02 * IPS))
        self.assertTrue(opt.apply(self.to_node1(), now))
        out = []
        for k in range(1, 8):
            opt.history['a'].append(optimizer.Rates(
                now + 40 * k, 0.3 * IPS, 2 * IPS, 0.04 * IPS, 0.02 * IPS))
            out += opt.verdicts(now + 40 * k)
            if 'a' not in opt.checks:
                break
        self.assertEqual([('a', 'undone')], out)
        self.assertEqual(0, opt.counts['expired'])

    def test_a_move_failing_halfway_puts_its_vcpus_back(self):
        self.remote('a')
        agent = self.start()
        opt = agent.optimizer
        before = agent.restrictions['a']
        self.assertEqual((), before[1])
        self.hv.raise_on[('set_nodeset', 'a')] = hv_mod.HypervisorError('no')
        self.assertFalse(opt.apply(self.to_node1(), self.clock.now))
        del self.hv.raise_on[('set_nodeset', 'a')]
        self.assertEqual(1, opt.counts['failed'])
        # The vCPUs were pinned before the nodeset failed: not the move
        # chosen (its memory stays), so they float over Nova's CPUs (every
        # CPU here) again.
        self.assertEqual(tuple(sorted(self.hv.topology().node_of_cpu())),
                         tuple(self.hv.pins.get('a')))
        self.assertEqual(before, agent.restrictions['a'])

    def test_a_move_failing_halfway_twice_leaves_its_pins_on_record(self):
        self.remote('a')
        agent = self.start()
        opt = agent.optimizer
        self.hv.raise_on[('set_nodeset', 'a')] = hv_mod.HypervisorError('no')
        self.hv.raise_on[('restore', 'a')] = hv_mod.HypervisorError('no')
        self.assertFalse(opt.apply(self.to_node1(), self.clock.now))
        self.hv.raise_on.clear()
        # Putting them back failed too: the agent knows where they are,
        # and gives Nova's CPUs back before a migration.
        self.assertEqual(NODE1_CPUS, self.hv.pins['a'])
        self.assertEqual(tuple(NODE1_CPUS), agent.restrictions['a'][1])
        agent.leave_for_migration('a')
        self.assertNotEqual(NODE1_CPUS, self.hv.pins.get('a'))

    def test_failed_moves_in_a_row_wait_longer_each(self):
        self.remote('a')
        agent = self.start()
        opt = agent.optimizer
        self.hv.raise_on[('set_nodeset', 'a')] = hv_mod.HypervisorError('no')
        waits = []
        now = self.clock.now
        for _ in range(3):
            self.assertFalse(opt.apply(self.to_node1(), now))
            waits.append(opt.held['a'] - now)
            now = opt.held['a']
        self.assertEqual([optimizer.BACKOFF_BASE, 2 * optimizer.BACKOFF_BASE,
                          4 * optimizer.BACKOFF_BASE], waits)
        # A move made clears the count.
        del self.hv.raise_on[('set_nodeset', 'a')]
        self.assertTrue(opt.apply(self.to_node1(), now))
        self.assertNotIn('a', opt.failures)

    def moved(self):
        self.remote('a')
        agent = self.start()
        now = self.clock.now
        self.assertTrue(agent.optimizer.apply(self.to_node1(), now))
        return agent, now

    def test_a_paused_guest_is_not_judged_slower(self):
        # Paused by its user while its verdict waits: its vCPUs do not
        # run, which says nothing of the move.
        agent, now = self.moved()
        opt = agent.optimizer
        self.clock.now = opt.checks['a'].settle
        self.sample(agent, 2 * agent.opts.loop_window, a=0)
        self.assertEqual(0, opt.counts['undone'])
        self.assertEqual(1.0, opt.trust)
        self.assertIn('a', opt.checks)

    def test_a_move_after_a_pause_is_judged(self):
        # A sample where the guest did not run, in the window before a
        # move: the window looks past it (the ring keeps twice
        # loop_window samples), and the move gets its verdict.
        self.remote('a')
        agent = self.start()
        self.sample(agent, 1, a=0)
        self.sample(agent, 1)
        opt = agent.optimizer
        self.assertTrue(opt.apply(self.to_node1(), self.clock.now))
        self.assertIn('a', opt.checks)
        self.assertEqual(0, opt.counts['unjudged'])

    def test_a_migrating_guest_is_not_judged(self):
        agent, now = self.moved()
        opt = agent.optimizer
        agent.leave_for_migration('a')
        pins = dict(self.hv.pins)
        end = self.progress(agent, 'a', 0.5 * IPS, opt.checks['a'].settle)
        self.assertEqual([], opt.verdicts(end))
        self.assertEqual({}, opt.checks)
        self.assertEqual(pins, self.hv.pins)
        # Counted: no verdict came.
        self.assertEqual(1, opt.status()['expired'])

    def test_a_guest_gone_before_its_verdict_is_counted(self):
        agent, now = self.moved()
        opt = agent.optimizer
        self.hv.remove('a')
        self.sample(agent, 1)
        self.assertEqual(({}, 1), (opt.checks, opt.status()['expired']))

    def test_a_verdict_without_progress_expires(self):
        agent, now = self.moved()
        opt = agent.optimizer
        settle = opt.checks['a'].settle
        self.assertEqual([], opt.verdicts(settle + optimizer.EXPIRE + 1))
        self.assertEqual({}, opt.checks)
        self.assertEqual(1, opt.status()['expired'])

    def test_advice_is_logged_once(self):
        self.flags(group='numa_overhead_agent', enforcement='advisory')
        self.remote('a')
        agent = self.start()
        opt = agent.optimizer
        with mock.patch.object(optimizer, 'LOG', autospec=True) as log:
            for i in range(3):
                opt.apply(self.to_node1(), self.clock.now + 100 * i)
        self.assertEqual(3, opt.counts['advised'])
        # At INFO once, at DEBUG after that.
        self.assertEqual(1, log.info.call_count)
        self.assertEqual(2, log.debug.call_count)


class TestBudget(OptimizerTestCase):

    def test_an_overdrawn_budget_ends_the_pass(self):
        # 'a' gains by moving its vCPUs to its memory (no page moves): a
        # pass whose budget is spent may make it, one whose first move
        # overdrew the budget makes no other move (a choice, measured).
        self.remote()
        agent = self.start()
        opt = agent.optimizer
        model = cost.Model(opt.host_model(), opt.loads())
        domain = agent.domains['a']
        found = []
        for budget in (0.0, -1.0):
            opt._left = optimizer.PREDICTIONS
            found.append(opt._best_for(domain, model, model.host, {}, 120.0,
                                       budget, None, {}, set(), set()))
        self.assertIsNotNone(found[0])
        self.assertEqual(0.0, found[0].moved_mb)
        self.assertIsNone(found[1])

    def test_holds_of_unjudged_moves_stop_doubling(self):
        opt = self.make_agent().optimizer
        opt.unjudged_run['a'] = 2000
        self.assertEqual(optimizer.BACKOFF_MAX, opt._hold_unjudged('a'))
        self.assertEqual(optimizer.BACKOFF_UNDOS_MAX, opt.unjudged_run['a'])

    def test_a_pass_stops_at_its_budget_and_the_next_goes_on(self):
        for name in ('a', 'b', 'c'):
            self.remote(name)
        agent = self.start()
        opt = agent.optimizer
        with mock.patch.object(optimizer, 'PREDICTIONS', 1):
            first = opt.plan(self.clock.now)
            second = opt.plan(self.clock.now)
        self.assertEqual(2, opt.counts['budget'])
        # Each pass reached one guest, a different one.
        self.assertEqual(1, len(first))
        self.assertEqual(1, len(second))
        self.assertNotEqual(first[0].guest, second[0].guest)
        # Without the limit one pass plans more than one move.
        self.assertGreater(len(opt.plan(self.clock.now)), 1)


class TestJudge(OptimizerTestCase):
    """The placer's plans in predicted time."""

    def test_unmeasured_guest_keeps_the_placers_rule(self):
        self.hv.add('a', {0: 4 * GIB}, vcpu_node=0)
        agent = self.make_agent()
        self.assertIsNone(agent.optimizer.judge(
            'a', {0: 1.0}, {0: 4 * GIB}, {1: 4 * GIB}))

    def test_memory_away_from_its_vcpus_is_refused(self):
        self.hv.add('a', {0: 4 * GIB}, vcpu_node=0)
        agent = self.start()
        why = agent.optimizer.judge('a', {0: 1.0}, {0: 4 * GIB},
                                    {1: 4 * GIB})
        self.assertIn('does not pay it back', why)
        self.assertEqual(1, agent.optimizer.status()['refused'])

    def test_memory_to_its_vcpus_passes(self):
        self.remote('a')
        agent = self.start()
        self.assertIsNone(agent.optimizer.judge(
            'a', {0: 1.0}, {1: 4 * GIB}, {0: 4 * GIB}))

    def test_a_pinned_guests_vcpus_stay_where_they_run(self):
        # The placer moves memory only: a guest pinned to node 0 (with a
        # release over both nodes) is judged with its vCPUs there, not
        # left to the kernel.
        self.remote('a')
        agent = self.start()
        calls = []
        real = cost.Model.gain

        def gain(model, changes):
            calls.append((dict(model.release), changes))
            return real(model, changes)
        with mock.patch.object(cost.Model, 'gain', autospec=True,
                               side_effect=gain):
            agent.optimizer.judge('a', {0: 1.0}, {1: 4 * GIB},
                                  {0: 4 * GIB})
        release, changes = calls[0]
        self.assertEqual((0, 1), release['a'])
        self.assertEqual(({0: 1.0}, {0: 1.0}), changes['a'])

    def test_a_plan_is_priced_by_the_mib_it_moves_not_the_rate(self):
        # 4 GiB to its vCPUs: 8 guest-seconds, twice (gain_margin) 16 over
        # the 120 s horizon: a gain of 0.14 pays, 0.13 does not, at any
        # rate.
        for rate in (1, 100 * GIB):
            self.flags(group='numa_overhead_agent',
                       migrate_rate_mb_per_s=rate)
            self.hv = fakes.FakeHypervisor(nodes=2, memory_mb=64 * GIB)
            self.remote('a')
            agent = self.start()
            for gain, passes in ((0.14, True), (0.13, False)):
                with mock.patch.object(cost.Model, 'gain', autospec=True,
                                       return_value=gain):
                    why = agent.optimizer.judge(
                        'a', {0: 1.0}, {1: 4 * GIB}, {0: 4 * GIB})
                self.assertEqual(passes, why is None, (rate, gain, why))

    def test_the_placer_leaves_a_refused_plan_alone(self):
        self.hv.add('a', {0: 4 * GIB}, vcpu_node=0)
        agent = self.start()
        domain = agent.domains['a']
        agent.placer.judge = lambda *args: 'predicted slower'
        decision = agent.placer.place(
            domain, agent.host_view(without='a'), {0: 1.0}, {0: 4 * GIB})
        self.assertEqual('skipped', decision.action)
        self.assertEqual('predicted slower: left where it is',
                         decision.reason)


class TestTrust(OptimizerTestCase):

    def test_moves_that_do_not_come_true_lower_the_trust(self):
        self.remote('a')
        agent = self.start(cycles=1)
        opt = agent.optimizer
        self.assertEqual(1.0, opt.trust)
        # Predicted +0.5; it lost half: nothing of it came true.
        self.undo(agent, self.clock.now + 100)
        self.assertAlmostEqual(1.0 - optimizer.TRUST_WEIGHT, opt.trust)
        for i in range(30):
            self.undo(agent, self.clock.now + 200 * (i + 2))
        self.assertEqual(optimizer.TRUST_MIN, opt.trust)

    def test_a_low_trust_recovers_when_no_verdict_comes(self):
        self.remote('a')
        agent = self.start(cycles=1)
        opt = agent.optimizer
        verdict = self.clock.now + 100
        self.undo(agent, verdict)
        low = opt.trust
        self.assertLess(low, 1.0)
        # What the verdict taught, when (the verdict's time) and at what
        # wall-clock time: what the state file keeps.
        self.assertEqual(verdict, opt.trust_since)
        self.assertEqual(low, opt.export_state()['trust'])
        self.assertAlmostEqual(time.time(), opt.export_state()['learned_at'],
                               delta=60)
        # An hour without a verdict: nothing yet.
        opt._recover_trust(verdict + optimizer.TRUST_IDLE)
        self.assertEqual(low, opt.trust)
        self.assertNotIn('No verdict has taught', self.logger.output)
        # Then half the way back every TRUST_HALF_LIFE, step by step as
        # at once; what the verdict taught stays what is saved (nothing
        # to write while it recovers).
        half = verdict + optimizer.TRUST_IDLE + optimizer.TRUST_HALF_LIFE
        for t in range(int(verdict + optimizer.TRUST_IDLE),
                       int(half) + 1, 600):
            opt._recover_trust(t)
        self.assertAlmostEqual(1.0 - (1.0 - low) / 2, opt.trust)
        self.assertEqual(low, opt.export_state()['trust'])
        self.assertEqual(1, self.logger.output.count(
            'No verdict has taught the trust in the cost model for over '
            '3600 s: it goes back from %.2f towards 1.0' % low))
        other = self.make_agent().optimizer
        other.import_state(opt.export_state(), idle=0.0)
        other.trust_since = verdict
        other._recover_trust(half)
        self.assertAlmostEqual(opt.trust, other.trust)
        # A verdict learns from the trust it has recovered to, and starts
        # the hour again.
        recovered = opt.trust
        self.clock.now = verdict = half + 100
        self.undo(agent, verdict)
        self.assertAlmostEqual((1 - optimizer.TRUST_WEIGHT) * recovered,
                               opt.trust)
        low = opt.trust
        opt._recover_trust(verdict + optimizer.TRUST_IDLE - 1)
        self.assertEqual(low, opt.trust)
        opt._recover_trust(verdict + optimizer.TRUST_IDLE + 600)
        self.assertLess(low, opt.trust)
        self.assertEqual(3, self.logger.output.count('No verdict has taught'))

    def test_the_trust_does_not_recover_while_a_verdict_is_awaited(self):
        self.remote('a')
        agent = self.start(cycles=1)
        opt = agent.optimizer
        verdict = self.clock.now + 100
        self.undo(agent, verdict)
        low = opt.trust
        start = verdict + optimizer.TRUST_IDLE
        opt._recover_trust(start)
        # A move chosen on the recovering trust waits for its verdict for
        # a whole half-life: the trust stays where it was.
        opt._recover_trust(start + 600)
        waiting = opt.trust
        self.assertLess(low, waiting)
        opt.checks['a'] = optimizer.Check(
            'a', start + 600, start + 605, IPS, {}, ((0,), NODE0_CPUS), 0.5,
            (1,), 0.0)
        for t in range(600, int(optimizer.TRUST_HALF_LIFE) + 601, 300):
            opt._recover_trust(start + 600 + t)
        self.assertEqual(waiting, opt.trust)
        # No verdict after all (expired, unjudged): it goes on from there,
        # the wait not counted.
        del opt.checks['a']
        opt._recover_trust(start + 600 + optimizer.TRUST_HALF_LIFE + 900)
        other = self.make_agent().optimizer
        other.import_state(opt.export_state(), idle=0.0)
        other.trust_since = verdict
        other._recover_trust(start + 600 + 300)
        self.assertAlmostEqual(other.trust, opt.trust)

    def test_a_full_trust_has_nothing_to_recover(self):
        agent = self.start(cycles=1)
        opt = agent.optimizer
        opt._recover_trust(self.clock.now)
        opt._recover_trust(self.clock.now + 100 * optimizer.TRUST_HALF_LIFE)
        self.assertEqual(1.0, opt.trust)
        self.assertIsNone(opt.export_state()['learned_at'])
        self.assertNotIn('No verdict has taught', self.logger.output)
        # A saved state read with a time that is no time: none counted.
        state = dict(opt.export_state(), trust=0.5)
        for idle in (math.nan, -5.0):
            opt.import_state(state, idle=idle)
            self.assertEqual(0.5, opt.trust)
            self.assertEqual(agent.clock(), opt.trust_since)
        opt.import_state(state, idle=math.inf)
        self.assertEqual(1.0, opt.trust)

    def test_predicted_gains_are_scaled_by_the_trust(self):
        self.remote()
        agent = self.start()
        gain = agent.optimizer.plan(self.clock.now)[0].gain
        agent.optimizer.trust = 0.5
        self.assertAlmostEqual(gain / 2,
                               agent.optimizer.plan(self.clock.now)[0].gain)
        # Scaled below min_gain: no move.
        agent.optimizer.trust = 0.01
        self.assertEqual([], agent.optimizer.plan(self.clock.now))

    def test_moves_of_one_pass_may_join_the_same_node(self):
        # 'a' and 'c' would both gain on node 1: one pass sends both
        # (the second predicted with the first), unless one of them
        # leaves its vCPUs to the kernel.
        seen = []

        def predict(changes):
            seen.append(sorted(changes))
            out = {g: 1.5 for g in changes}
            if len(changes) == 2:
                # Together, 'c' takes 2% of what 'a' would gain alone.
                out['a'] = 1.47
            return out

        def plan(nova_cpus=None):
            self.hv = fakes.FakeHypervisor(nodes=2, memory_mb=16 * GIB)
            for name in ('a', 'c'):
                self.hv.add(name, {0: GIB}, vcpu_node=0, vcpus=2)
                self.hv.guests[name] = dataclasses.replace(
                    self.hv.guests[name],
                    nova_cpus=(nova_cpus or {}).get(name, ()))
            agent = self.start()
            seen.clear()
            with mock.patch.object(agent.optimizer, 'candidates',
                                   autospec=True, return_value=((1,),)), \
                    mock.patch.object(cost.Model, 'predict', autospec=True,
                                      side_effect=lambda self, c, **kw:
                                      predict(c)):
                self.agent = agent
                return agent.optimizer.plan(self.clock.now)

        actions = plan()
        self.assertEqual([((1,), False), ((1,), False)],
                         [(a.nodes, a.predicted[0] is None)
                          for a in actions])
        # The second predicted with the first; each expects its own
        # guest's speed with the whole pass.
        self.assertIn(['a', 'c'], seen)
        self.assertEqual({'a': 1.47, 'c': 1.5},
                         {a.guest: round(a.expected, 6) for a in actions})
        # Their verdicts know it.
        opt = self.agent.optimizer
        for action in actions:
            self.assertTrue(opt.apply(action, self.clock.now))
        self.assertEqual({'a': 1.47, 'c': 1.5},
                         {n: round(c.expected, 6)
                          for n, c in opt.checks.items()})
        # Nova allows them node 1's CPUs alone: pinned to all of them is
        # left to the kernel, and that move keeps node 1 for the pass.
        actions = plan({'a': NODE1_CPUS, 'c': NODE1_CPUS})
        self.assertEqual([((1,), True)], [(a.nodes, a.predicted[0] is None)
                                          for a in actions])
        # One of them alone: it does not join the other either, first or
        # second.
        for kernel in ('a', 'c'):
            actions = plan({kernel: NODE1_CPUS})
            self.assertEqual(1, len(actions), kernel)

    def test_no_second_move_onto_a_node_awaiting_a_verdict(self):
        self.remote('a')
        self.remote('c')
        agent = self.start()
        opt = agent.optimizer
        # One of them moved (the moves of one pass may join the same
        # nodes: test_moves_of_one_pass_may_join_the_same_node).
        first = opt.plan(self.clock.now)[0]
        self.assertTrue(opt.apply(first, self.clock.now))
        for action in opt.plan(self.clock.now):
            self.assertFalse(set(action.nodes) & set(first.nodes))
        # Its verdict in, those nodes are open again.
        opt.checks.clear()
        self.assertTrue(any(set(action.nodes) & set(first.nodes)
                            for action in opt.plan(self.clock.now)))


class TestBackoff(OptimizerTestCase):

    def test_waits_double_up_to_the_maximum(self):
        self.remote('a')
        agent = self.start(cycles=1)
        waits = []
        now = 1000.0
        for undos in range(1, 9):
            count, until = self.undo(agent, now)
            self.assertEqual(undos, count)
            waits.append(until - now)
            now = until
        self.assertEqual([60, 120, 240, 480, 960, 1920, 3600, 3600], waits)
        self.assertEqual(optimizer.BACKOFF_MAX, waits[-1])

    def test_backed_off_guest_is_not_movable_until_the_wait_passes(self):
        self.remote('a')
        agent = self.start(cycles=1)
        opt = agent.optimizer
        _count, until = self.undo(agent, 1000.0)
        self.assertEqual(1060.0, until)
        self.assertEqual([], opt.movable(1000.0))
        self.assertEqual([], opt.movable(1059.0))
        self.assertEqual(['a'], [d.name for d in opt.movable(1060.0)])
        _count, until = self.undo(agent, 1060.0)
        self.assertEqual([], opt.movable(1060.0 + 119.0))
        self.assertEqual(['a'], [d.name for d in opt.movable(1180.0)])

    def test_a_kept_move_halves_the_next_wait(self):
        self.remote('a')
        agent = self.start(cycles=1)
        opt = agent.optimizer
        self.undo(agent, 1000.0)
        self.undo(agent, 1060.0)
        self.assertEqual(2, opt.backoff['a'][0])
        opt.checks['a'] = optimizer.Check(
            'a', 1170.0, 1175.0, IPS, {}, ((0,), NODE0_CPUS), 0.5, (1,),
            0.0)
        self.progress(agent, 'a', IPS, 1175.0)
        self.assertEqual([('a', 'kept')], opt.verdicts(1180.0))
        self.assertEqual((1, 0.0), opt.backoff['a'])
        _count, until = self.undo(agent, 2000.0)
        self.assertEqual(120.0, until - 2000.0)

    def restarted(self, recorded=None):
        """A second agent on the same host, 'a' recorded by the first as
        ``recorded`` (a :class:`hv_mod.Recorded` of keyword changes).
        """
        if recorded is not None:
            self.hv.recorded['a'] = dataclasses.replace(
                self.hv.recorded['a'], **recorded)
        return self.start(cycles=1)

    def test_the_backoff_is_in_the_guests_record(self):
        self.remote('a')
        agent = self.start(cycles=1)
        now = self.clock.now
        wall = 1_800_000_000.0
        with mock.patch.object(optimizer.time, 'time', autospec=True,
                               return_value=wall):
            self.undo(agent, now)
        recorded = self.hv.recorded['a']
        self.assertEqual(1, recorded.backoff_undos)
        self.assertEqual(hv_mod.format_utc(wall + 60.0),
                         recorded.backoff_until)

    def test_a_restarted_agent_keeps_backing_off(self):
        self.remote('a')
        agent = self.start(cycles=1)
        start = self.clock.now
        with mock.patch.object(optimizer.time, 'time', autospec=True,
                               side_effect=lambda:
                               1_800_000_000.0 + self.clock.now):
            self.undo(agent, start)
            self.undo(agent, start + 60.0)
            # Left alone until start + 180; the agent restarts at 80.
            self.clock.now += 80.0
            again = self.restarted()
        opt = again.optimizer
        self.assertEqual((2, start + 180.0), opt.backoff['a'])
        self.assertEqual([], opt.movable(start + 179.0))
        self.assertEqual(['a'], [d.name for d in
                                 opt.movable(start + 180.0)])
        # The next undo waits 240 s, not 60 s.
        _count, until = self.undo(again, start + 300.0)
        self.assertEqual(240.0, until - (start + 300.0))

    def test_a_past_backoff_keeps_its_undos_only(self):
        self.remote('a')
        self.start(cycles=1)
        again = self.restarted({'backoff_undos': 3,
                                'backoff_until': '2000-01-01T00:00:00Z'})
        undos, until = again.optimizer.backoff['a']
        self.assertEqual(3, undos)
        self.assertLessEqual(until, self.clock.now)

    def test_the_wait_of_many_undos_does_not_overflow(self):
        self.remote('a')
        agent = self.start(cycles=1)
        agent.optimizer.backoff['a'] = (10 ** 4, 0.0)
        _count, until = self.undo(agent, 1000.0)
        self.assertEqual(1000.0 + optimizer.BACKOFF_MAX, until)

    def test_a_recorded_backoff_is_bounded(self):
        # A clock set back, or a hand-edited record: an hour at most, and
        # an undo count that cannot overflow the next wait.
        self.remote('a')
        self.start(cycles=1)
        again = self.restarted({'backoff_undos': 10 ** 9,
                                'backoff_until': '2999-01-01T00:00:00Z'})
        opt = again.optimizer
        undos, until = opt.backoff['a']
        self.assertEqual(optimizer.BACKOFF_UNDOS_MAX, undos)
        self.assertEqual(self.clock.now + optimizer.BACKOFF_MAX, until)
        _count, until = self.undo(again, self.clock.now + 7200.0)
        self.assertEqual(optimizer.BACKOFF_MAX,
                         until - (self.clock.now + 7200.0))

    def test_a_move_waiting_for_its_verdict_is_recorded_as_a_wait(self):
        # A restarted agent cannot judge it: it leaves the guest alone as
        # long as the verdict would have taken.
        self.remote('a')
        agent = self.start()
        now = self.clock.now
        with mock.patch.object(optimizer.time, 'time', autospec=True,
                               return_value=1_800_000_000.0):
            agent.optimizer.apply(self.to_node1(), now)
        check = agent.optimizer.checks['a']
        left = check.settle + 3 - now
        self.assertEqual(
            hv_mod.format_utc(1_800_000_000.0 + left),
            self.hv.recorded['a'].backoff_until)
        self.assertEqual(0, self.hv.recorded['a'].backoff_undos)


class TestEnforcement(OptimizerTestCase):

    def test_advisory_moves_nothing(self):
        self.flags(group='numa_overhead_agent', enforcement='advisory')
        self.remote('a')
        agent = self.start()
        opt = agent.optimizer
        actions = opt.plan(self.clock.now)
        self.assertEqual(['a'], [a.guest for a in actions])
        self.assertFalse(opt.apply(actions[0], self.clock.now))
        self.assertEqual(1, opt.counts['advised'])
        self.assertEqual(0, opt.counts['moved'])
        self.assertEqual({}, self.hv.pins)
        self.assertEqual({}, self.hv.nodesets)
        self.assertEqual({}, opt.checks)
        self.assertIn('Would move a, vCPUs and memory, to nodes 1',
                      self.logger.output)
        # Not advised again at once.
        self.assertEqual([], opt.movable(self.clock.now))

    def test_advisory_through_the_agent_cycle(self):
        self.flags(group='numa_overhead_agent', enforcement='advisory',
                   optimize_interval=1)
        self.remote('a')
        agent = self.start(cycles=6)
        self.assertEqual({}, self.hv.pins)
        # Advice comes once a minute, whatever optimize_interval says.
        self.assertEqual(0, agent.optimizer.status()['advised'])
        self.sample(agent, int(optimizer.ADVICE_INTERVAL))
        self.assertEqual({}, self.hv.pins)
        self.assertEqual(1, agent.optimizer.status()['advised'])

    def test_enforcement_off_never_plans(self):
        self.flags(group='numa_overhead_agent', enforcement='off',
                   optimize_interval=1)
        self.remote('a')
        agent = self.start(cycles=6)
        self.assertFalse(agent.optimizer.due(self.clock.now + 3600))
        self.assertEqual({}, self.hv.pins)
        status = agent.optimizer.status()
        self.assertEqual(1.0, status.pop('trust'))
        self.assertEqual(0, sum(status.values()))

    def test_pages_enforcement_moves_too(self):
        self.flags(group='numa_overhead_agent', enforcement='pages')
        self.remote('a')
        agent = self.start()
        self.assertTrue(agent.optimizer.apply(self.to_node1(),
                                              self.clock.now))
        self.assertEqual(NODE1_CPUS, self.hv.pins['a'])

    def test_failed_move_is_counted(self):
        self.remote('a')
        agent = self.start()
        self.hv.raise_on[('pin_vcpus', 'a')] = hv_mod.HypervisorError('no')
        opt = agent.optimizer
        self.assertFalse(opt.apply(self.to_node1(), self.clock.now))
        self.assertEqual(1, opt.counts['failed'])
        self.assertEqual({}, opt.checks)
        self.assertEqual('failed', agent.outcomes['a'].action)


class TestLanding(OptimizerTestCase):
    """A joint move onto nodes that hold some of the guest's pages: the
    nodeset moves none of them; the agent evens them, a step each cycle
    within the page budget, and judges the move once they have landed.
    """

    def moved(self, rate=1024.0):
        """'a' (vCPUs and 4 GiB on node 0) moved to nodes 0 and 1, its
        pages at ``rate`` MiB/s.
        """
        self.flags(group='numa_overhead_agent', enforcement='pages')
        self.hv.add('a', {0: 4 * GIB}, vcpu_node=0)
        agent = self.start()
        agent.restrictions['a'] = ((), ())
        agent.rate = type(agent.rate)(rate, agent.clock)
        self.hv.moves.clear()
        both = {0: 0.5, 1: 0.5}
        action = optimizer.Action('a', (0, 1), NODE0_CPUS + NODE1_CPUS,
                                  0.5, 4.0, 2 * GIB, (both, both))
        self.assertTrue(agent.optimizer.apply(action, self.clock.now))
        return agent

    def test_the_pages_land_a_step_each_cycle(self):
        agent = self.moved()
        opt = agent.optimizer
        self.assertEqual((0, 1), self.hv.nodesets['a'])
        # A second's budget now, the rest a step each cycle.
        self.assertEqual([('a', 0, 1, GIB)], self.hv.moves)
        self.assertEqual({0: 0.5, 1: 0.5}, opt.landing['a'].shares)
        self.assertEqual(1, opt.status()['landing'])
        self.assertEqual(1, self.steps_until_done(opt, opt.landing))
        self.assertEqual([GIB, GIB], [m[3] for m in self.hv.moves])
        self.assertEqual({0: 2 * GIB, 1: 2 * GIB}, self.hv.memory['a'])

    def test_the_verdict_waits_for_the_pages(self):
        agent = self.moved(rate=512.0)
        opt = agent.optimizer
        check = opt.checks['a']
        # Measured slower while its pages are on their way: not judged.
        end = self.progress(agent, 'a', 0.5 * IPS, check.settle)
        self.assertEqual([], opt.verdicts(end))
        self.assertIn('a', opt.checks)
        self.clock.now = end
        while opt.landing:
            self.clock.now += 1
            opt.bring_back()
        # Judged from when they have landed: the samples before do not
        # count.
        self.assertEqual(self.clock.now + 1.0, check.settle)
        self.assertEqual([], opt.verdicts(self.clock.now + 1))
        end = self.progress(agent, 'a', 1.5 * IPS, check.settle)
        self.assertEqual([('a', 'kept')], opt.verdicts(end))

    def test_a_step_without_budget_is_no_stall(self):
        agent = self.moved()
        opt = agent.optimizer
        land = opt.landing['a']
        for _ in range(2 * optimizer.RETURN_STALLS):
            # The pass's moves took this cycle's budget.
            agent.rate.take(float('inf'))
            opt.bring_back()
        self.assertIn('a', opt.landing)
        self.assertEqual(0, land.stalls)
        self.assertEqual(1, len(self.hv.moves))

    def test_pages_that_get_no_nearer_end_it(self):
        agent = self.moved()
        opt = agent.optimizer
        # Something moves them back as fast as they go.
        for _ in range(optimizer.RETURN_STALLS + 1):
            self.set_memory('a', {0: 3 * GIB, 1: GIB})
            self.clock.now += 1
            opt.bring_back()
        self.assertEqual({}, opt.landing)
        self.assertIn('a', opt.checks)

    def test_pages_the_kernel_left_outside_move_too(self):
        # Node 1 alone: the kernel moves the pages outside the nodeset
        # (the fake's leaves them); those it left the agent moves, and
        # while some are outside a step that gets no nearer is no stall.
        self.flags(group='numa_overhead_agent', enforcement='pages')
        self.remote('a')
        self.set_memory('a', {0: 4 * GIB})
        agent = self.start()
        agent.restrictions['a'] = ((), ())
        agent.rate = type(agent.rate)(1024.0, agent.clock)
        self.hv.moves.clear()
        opt = agent.optimizer
        self.assertTrue(opt.apply(self.to_node1(), self.clock.now))
        self.assertEqual((1,), self.hv.nodesets['a'])
        self.assertEqual([('a', 0, 1, GIB)], self.hv.moves)
        land = opt.landing['a']
        for _ in range(optimizer.RETURN_STALLS + 1):
            # The kernel's balancing takes them back as fast.
            self.set_memory('a', {0: 3 * GIB, 1: GIB})
            self.clock.now += 1
            opt.bring_back()
        self.assertIn('a', opt.landing)
        self.assertEqual(0, land.stalls)

    def test_a_landing_ends_in_time(self):
        # Starved of page budget: it ends at its deadline (its pages at the
        # page rate twice over, and EXPIRE), and the verdict comes.
        agent = self.moved()
        opt = agent.optimizer
        land = opt.landing['a']
        self.assertEqual(self.clock.now + 2 * 4 * GIB / opt._rate() +
                         optimizer.EXPIRE, land.until)
        _undos, until = opt.backoff_record('a')
        self.assertTrue(until)
        while self.clock.now <= land.until:
            agent.rate.take(float('inf'))
            opt.bring_back()
            self.assertIn('a', opt.landing)
            self.clock.now += 10
        opt.bring_back()
        self.assertEqual({}, opt.landing)
        self.assertEqual(self.clock.now + 1.0, opt.checks['a'].settle)

    def test_a_failed_step_is_tried_again(self):
        # A libvirt hiccup: the landing goes on at the next cycle.
        agent = self.moved()
        opt = agent.optimizer
        land = opt.landing['a']
        self.hv.raise_on[('move_pages', 'a')] = hv_mod.HypervisorError('x')
        self.clock.now += 1
        opt.bring_back()
        self.assertIs(land, opt.landing['a'])
        self.assertEqual(1, land.failures)
        del self.hv.raise_on[('move_pages', 'a')]
        self.assertEqual(1, self.steps_until_done(opt, opt.landing))
        self.assertEqual(0, land.failures)
        self.assertEqual({0: 2 * GIB, 1: 2 * GIB}, self.hv.memory['a'])

    def test_a_first_step_that_fails_or_reads_nothing_still_lands(self):
        # The vCPUs and the nodeset are set: the move stands and its
        # pages are tried again next cycle.
        for kind in ('error', 'unread'):
            self.hv = fakes.FakeHypervisor(nodes=2, memory_mb=64 * GIB)
            self.flags(group='numa_overhead_agent', enforcement='pages')
            self.hv.add('a', {0: 4 * GIB}, vcpu_node=0)
            agent = self.start()
            agent.restrictions['a'] = ((), ())
            opt = agent.optimizer
            both = {0: 0.5, 1: 0.5}
            action = optimizer.Action('a', (0, 1), NODE0_CPUS + NODE1_CPUS,
                                      0.5, 4.0, 2 * GIB, (both, both))
            if kind == 'error':
                self.hv.raise_on[('move_pages', 'a')] = \
                    hv_mod.HypervisorError('x')
                self.assertTrue(opt.apply(action, self.clock.now))
                del self.hv.raise_on[('move_pages', 'a')]
            else:
                with mock.patch.object(agent.placer, 'memory_now',
                                       autospec=True,
                                       return_value={}):
                    self.assertTrue(opt.apply(action, self.clock.now))
            self.assertEqual(1, opt.landing['a'].failures, kind)
            self.assertEqual(0, opt.counts['failed'], kind)
            self.assertIn('a', opt.checks, kind)
            self.assertEqual(1, self.steps_until_done(opt, opt.landing))
            self.assertEqual({0: 2 * GIB, 1: 2 * GIB}, self.hv.memory['a'])

    def test_a_failed_step_gives_its_budget_back(self):
        agent = self.moved()
        self.hv.raise_on[('move_pages', 'a')] = hv_mod.HypervisorError('x')
        self.clock.now += 1
        agent.optimizer.bring_back()
        self.assertAlmostEqual(1024.0, agent.rate.take(float('inf')),
                               delta=1)

    def test_failing_steps_or_no_memory_read_end_it(self):
        for kind in ('error', 'unread'):
            self.hv = fakes.FakeHypervisor(nodes=2, memory_mb=64 * GIB)
            agent = self.moved()
            opt = agent.optimizer
            if kind == 'error':
                self.hv.raise_on[('move_pages', 'a')] = \
                    hv_mod.HypervisorError('x')
            with mock.patch.object(agent.placer, 'memory_now',
                                   autospec=True,
                                   side_effect=agent.placer.memory_now
                                   if kind == 'error' else
                                   lambda domain, pending: {}):
                for _ in range(optimizer.RETURN_STALLS - 1):
                    self.clock.now += 1
                    opt.bring_back()
                    self.assertIn('a', opt.landing, kind)
                self.clock.now += 1
                opt.bring_back()
            self.assertEqual({}, opt.landing, kind)
            # Judged from then on.
            self.assertEqual(self.clock.now + 1.0, opt.checks['a'].settle)

    def test_a_vcpu_move_keeps_the_landing(self):
        agent = self.moved()
        opt = agent.optimizer
        opt.checks.clear()
        action = self.to_node1()
        action.with_memory = False
        self.assertTrue(opt.apply(action, self.clock.now))
        self.assertIn('a', opt.landing)

    def test_budget_a_step_did_not_use_goes_back(self):
        agent = self.moved(rate=4096.0)
        # The first step moved 2 GiB of the 4 GiB it was allowed.
        self.assertEqual([('a', 0, 1, 2 * GIB)], self.hv.moves)
        self.assertAlmostEqual(2 * GIB, agent.rate.take(float('inf')),
                               delta=1)

    def test_a_new_move_a_restart_or_a_migration_ends_it(self):
        for end in ('move', 'restart', 'migration'):
            self.hv = fakes.FakeHypervisor(nodes=2, memory_mb=64 * GIB)
            agent = self.moved()
            opt = agent.optimizer
            now = self.clock.now
            if end == 'move':
                self.assertTrue(opt.apply(self.to_node1(), now))
                # The new move's own landing replaces it.
                self.assertEqual({1: 1.0}, opt.landing.pop('a').shares)
            elif end == 'restart':
                opt.restarted('a', now)
            else:
                agent.leave_for_migration('a')
                opt.bring_back()
            self.assertEqual({}, opt.landing, end)

    def test_with_enforcement_nodeset_nothing_lands(self):
        self.flags(group='numa_overhead_agent', enforcement='nodeset')
        self.hv.add('a', {0: 4 * GIB}, vcpu_node=0)
        agent = self.start()
        agent.restrictions['a'] = ((), ())
        self.hv.moves.clear()
        both = {0: 0.5, 1: 0.5}
        action = optimizer.Action('a', (0, 1), NODE0_CPUS + NODE1_CPUS,
                                  0.5, 4.0, 2 * GIB, (both, both))
        self.assertTrue(agent.optimizer.apply(action, self.clock.now))
        self.assertEqual([], self.hv.moves)
        self.assertEqual({}, agent.optimizer.landing)


class TestSettle(OptimizerTestCase):

    def test_no_move_until_the_host_settles(self):
        # 'a' would gain on node 1 (its memory is there); 'c' starts on
        # node 0: no pass moves anything for two loop_window periods.
        self.remote()
        agent = self.start()
        opt = agent.optimizer
        self.assertIsNone(opt.changed_at)
        self.assertEqual(['a'], [a.guest for a in opt.plan(
            self.clock.now)])
        self.hv.add('c', {0: 1 * GIB}, vcpu_node=0)
        self.sample(agent, 1)
        changed = self.clock.now
        self.assertEqual(changed, opt.changed_at)
        self.assertEqual(2, self.conf.numa_overhead_agent.settle_windows)
        quiet = 2 * 3   # settle_windows x loop_window, 1 s samples
        self.sample(agent, quiet - 1)
        self.assertGreater(opt.settle_left(self.clock.now), 0)
        self.assertEqual(1, opt.status()['settling_s'])
        with mock.patch.object(optimizer.LOG, 'debug',
                               autospec=True) as debug:
            self.assertEqual([], opt.plan(self.clock.now))
        self.assertIn('the host settles', debug.call_args[0][0])
        self.assertEqual(1, debug.call_args[0][1])
        self.sample(agent, 1)
        self.assertEqual(0, opt.settle_left(self.clock.now))
        self.assertEqual(['a'], [a.guest for a in opt.plan(
            self.clock.now)])
        # Another guest starting starts it again.
        self.hv.add('d', {0: 1 * GIB}, vcpu_node=0)
        self.sample(agent, 1)
        self.assertEqual(self.clock.now, opt.changed_at)
        self.assertEqual([], opt.plan(self.clock.now))

    def test_a_guest_leaving_waits_for_the_models_samples(self):
        # No newcomer mixes the other guests' rates: the pass waits only
        # until the model's three samples are past the guest that left,
        # and a move whose window before it still holds it is judged on
        # its guest alone.
        self.flags(group='numa_overhead_agent', loop_window=5,
                   optimize_interval=1000)
        self.remote()
        self.hv.add('c', {0: 1 * GIB}, vcpu_node=0)
        agent = self.start(cycles=6)
        opt = agent.optimizer
        self.hv.remove('c')
        with mock.patch.object(opt, 'host_changed',
                               wraps=opt.host_changed) as changed:
            self.sample(agent, 1)
        changed.assert_called_once_with(self.clock.now, started=False)
        self.assertIsNone(opt.changed_at)
        self.assertEqual(3, opt.settle_left(self.clock.now))
        self.assertEqual([], opt.plan(self.clock.now))
        self.sample(agent, 3)
        self.assertEqual(0, opt.settle_left(self.clock.now))
        actions = opt.plan(self.clock.now)
        self.assertEqual(['a'], [a.guest for a in actions])
        self.assertTrue(opt.apply(actions[0], self.clock.now))
        self.assertTrue(opt.checks['a'].host_changed)
        # A whole window later, a move is judged with its neighbours.
        del opt.checks['a']
        self.sample(agent, 2)
        self.assertTrue(opt.apply(actions[0], self.clock.now))
        self.assertFalse(opt.checks['a'].host_changed)
        # settle_windows = 0: no wait at all.
        self.flags(group='numa_overhead_agent', settle_windows=0)
        opt.left_at = self.clock.now
        self.assertEqual(0, opt.settle_left(self.clock.now))

    def test_a_pass_due_while_settling_runs_once_settled(self):
        # Passes every 5 s; 'c' starts at a pass: the pass waits, and runs
        # at the first cycle the host has settled, not 5 s later.
        self.flags(group='numa_overhead_agent', optimize_interval=5)
        self.remote()
        agent = self.start(cycles=1)
        opt = agent.optimizer
        self.hv.add('c', {0: 1 * GIB}, vcpu_node=0)
        self.sample(agent, 1)
        changed = self.clock.now
        while opt.settle_left(self.clock.now):
            self.assertEqual({}, self.hv.pins)
            self.sample(agent, 1)
        self.assertEqual(changed + 6, self.clock.now)
        self.assertEqual(NODE1_CPUS, self.hv.pins['a'])
        self.assertEqual(0, opt.status()['settling_s'])

    def test_settle_windows_zero_moves_at_once(self):
        self.flags(group='numa_overhead_agent', settle_windows=0)
        self.remote()
        agent = self.start()
        self.hv.add('c', {0: 1 * GIB}, vcpu_node=0)
        self.sample(agent, 1)
        self.assertEqual(self.clock.now, agent.optimizer.changed_at)
        self.assertEqual(0, agent.optimizer.settle_left(self.clock.now))
        self.assertEqual(['a'], [a.guest for a in agent.optimizer.plan(
            self.clock.now)])

    def test_the_guests_found_at_start_are_no_change(self):
        self.remote()
        agent = self.start(cycles=1)
        self.assertIsNone(agent.optimizer.changed_at)
        self.assertEqual(0, agent.optimizer.settle_left(self.clock.now))

    def outage_after(self, cycles):
        """The hypervisor down for one cycle after ``cycles`` sampled,
        then back with the same guests: no change for the optimizer.
        """
        self.remote()
        agent = self.start(cycles=cycles)
        self.hv.down = True
        self.clock.now += 1
        self.assertFalse(agent.cycle())
        self.hv.down = False
        self.sample(agent, 2)
        self.assertIsNone(agent.optimizer.changed_at)

    def test_a_first_listing_that_fails_is_no_change(self):
        # Down at the agent's first cycle: the guests it lists once it is
        # back are still the ones found at start.
        self.outage_after(0)

    def test_an_outage_with_the_same_guests_is_no_change(self):
        self.outage_after(2)

    def test_a_guest_resuming_through_an_event_starts_the_wait(self):
        # As at the end of an incoming live migration, or a failed
        # outgoing one ('resumed' on the source).
        self.remote()
        agent = self.start(cycles=2)
        agent.on_lifecycle('resumed', 'a')
        self.clock.now += 1
        agent.handle_events()
        self.assertEqual(self.clock.now, agent.optimizer.changed_at)
        self.assertGreater(agent.optimizer.settle_left(self.clock.now), 0)

    def test_no_advice_while_the_host_settles(self):
        self.flags(group='numa_overhead_agent', enforcement='advisory',
                   optimize_interval=1)
        # 'c' starts the second before advice is due: the advice waits
        # for the host to settle, then comes at once.
        self.remote()
        agent = self.start(cycles=1)
        opt = agent.optimizer
        self.sample(agent, int(opt.next_pass - self.clock.now) - 1)
        self.hv.add('c', {0: 1 * GIB}, vcpu_node=0)
        self.sample(agent, 1)
        self.assertTrue(opt.due(self.clock.now))
        while opt.settle_left(self.clock.now):
            self.assertEqual(0, opt.status()['advised'])
            self.sample(agent, 1)
        self.assertEqual(1, opt.status()['advised'])
        self.assertEqual({}, self.hv.pins)


class TestStatus(OptimizerTestCase):

    def test_counts(self):
        self.remote('a')
        self.remote('b')
        self.remote('c')
        agent = self.start()
        opt = agent.optimizer
        now = self.clock.now
        self.assertEqual({'moved': 0, 'kept': 0, 'undone': 0, 'advised': 0,
                          'unpaid': 0, 'refused': 0, 'expired': 0,
                          'unjudged': 0, 'workload_changed': 0,
                          'host_changed': 0, 'stranded': 0,
                          'failed': 0, 'waiting': 0,
                          'backing_off': 0, 'returning': 0, 'landing': 0,
                          'shifting': 0,
                          'trust': 1.0,
                          'learned_miss_cost': 0, 'settling_s': 0,
                          'misjudged': 0},
                         opt.status())
        # 'b' moves later: the verdict on 'a' comes first.
        self.assertTrue(opt.apply(self.to_node1('a'), now))
        self.assertTrue(opt.apply(self.to_node1('b'), now + 100))
        self.hv.raise_on[('pin_vcpus', 'c')] = hv_mod.HypervisorError('no')
        self.assertFalse(opt.apply(self.to_node1('c'), now))
        self.assertEqual({'moved': 2, 'kept': 0, 'undone': 0, 'advised': 0,
                          'unpaid': 0, 'refused': 0, 'expired': 0,
                          'unjudged': 0, 'workload_changed': 0,
                          'host_changed': 0, 'stranded': 0,
                          'failed': 1, 'waiting': 2,
                          'backing_off': 0, 'returning': 0, 'landing': 0,
                          'shifting': 0,
                          'trust': 1.0,
                          'learned_miss_cost': 0, 'settling_s': 0,
                          'misjudged': 0},
                         opt.status())
        self.progress(agent, 'a', 1.2 * IPS, now + 1)
        self.assertEqual([('a', 'kept')], opt.verdicts(now + 4))
        end = self.progress(agent, 'b', 0.5 * IPS, now + 101)
        self.assertEqual([('b', 'undone')], opt.verdicts(end))
        # 'b' lost what it was to gain: its move did not pay.
        status = opt.status()
        self.assertLess(status.pop('trust'), 1.0)
        self.assertEqual({'moved': 2, 'kept': 1, 'undone': 1, 'advised': 0,
                          'unpaid': 1, 'refused': 0, 'expired': 0,
                          'unjudged': 0, 'workload_changed': 0,
                          'host_changed': 0, 'stranded': 0,
                          'failed': 1, 'waiting': 0,
                          'backing_off': 1, 'returning': 0, 'landing': 0,
                          'shifting': 0,
                          'learned_miss_cost': 0, 'settling_s': 0,
                          'misjudged': 0}, status)

    def test_backing_off_ends_with_the_wait(self):
        self.remote('a')
        agent = self.start(cycles=1)
        self.undo(agent, self.clock.now)
        self.assertEqual(1, agent.optimizer.status()['backing_off'])
        self.clock.now += optimizer.BACKOFF_BASE + 1
        self.assertEqual(0, agent.optimizer.status()['backing_off'])


class TestProgress(OptimizerTestCase):

    def test_last_samples_oldest_first(self):
        progress = optimizer.Progress()
        self.assertEqual([], list(progress))
        total = optimizer.HISTORY + 5
        for i in range(total):
            progress.append(optimizer.Rates(float(i), 1.0 * i, 2.0 * i,
                                            3.0, 4.0))
        self.assertEqual(optimizer.HISTORY, len(progress))
        rates = list(progress)
        self.assertEqual([float(i) for i in range(5, total)],
                         [r.at for r in rates])
        self.assertEqual(optimizer.Rates(float(total - 1), total - 1.0,
                                         2.0 * (total - 1), 3.0, 4.0),
                         rates[-1])

    def test_mean_of_the_last_window(self):
        self.remote()
        agent = self.start(cycles=8)
        opt = agent.optimizer
        self.assertIsInstance(opt.history['a'], optimizer.Progress)
        # 7 samples, of which it keeps the last twice loop_window (3).
        self.assertEqual(6, len(opt.history['a']))
        self.progress(agent, 'a', 3 * IPS, self.clock.now)
        self.assertEqual(3 * IPS, opt._mean('a').ips)

    def test_mean_since(self):
        progress = optimizer.Progress()
        for i in range(optimizer.HISTORY + 3):
            progress.append(optimizer.Rates(float(i), float(i), 2.0 * i,
                                            0.0, 1.0))
        last = optimizer.HISTORY + 2
        mean = progress.mean(None, 3)
        self.assertEqual((float(last), last - 1.0, 2.0 * (last - 1), 1.0),
                         (mean.at, mean.ips, mean.cps, mean.mps))
        # Three samples after last - 3: the last three.
        self.assertEqual(last - 1.0, progress.mean(last - 3.0, 3).ips)
        # Only two after last - 2.
        self.assertIsNone(progress.mean(last - 2.0, 3))
        self.assertIsNone(progress.mean(None, optimizer.HISTORY + 1))
        # The same as the mean over the samples as objects.
        rates = [r for r in progress if r.at > 10.0][-5:]
        self.assertEqual(sum(r.cps for r in rates) / 5,
                         progress.mean(10.0, 5).cps)


class TestLearnedStalls(OptimizerTestCase):
    """Without the stalled-cycles event, what an LLC miss costs a guest
    that is not memory-intensive is learned from its own samples.
    """

    CORE = 0.55          # CPI without misses
    PER_MISS = 250.0     # cycles a miss costs it (no overlap)

    def samples(self, agent, misses, refs=0.002, per_miss=None,
                jitter=None):
        """One second per misses-per-instruction value of ``misses``;
        ``jitter``: CPI off the line by these amounts in turn.
        """
        per_miss = self.PER_MISS if per_miss is None else per_miss
        for i, m in enumerate(misses):
            self.clock.now += 1
            cpi = self.CORE + per_miss * m
            if jitter:
                cpi += jitter[i % len(jitter)]
            self.hv.run('a', IPS, int(cpi * IPS), int(refs * IPS),
                        int(m * IPS), 0)
            agent.cycle()
        return agent

    def load(self, agent):
        return {g.name: g for g in agent.optimizer.loads()}['a']

    def learned_now(self, agent):
        """Cycles per miss the samples 'a' has now would teach."""
        opt = agent.optimizer
        kept = opt.per_miss.pop('a', None)
        opt.loads()
        now = opt.per_miss.pop('a', None)
        if kept is not None:
            opt.per_miss['a'] = kept
        return now

    def learned(self, agent):
        """Cycles per miss learned for 'a' at a pass (None: not)."""
        agent.optimizer.loads()
        return agent.optimizer.per_miss.get('a')

    def test_cycles_per_miss_learned_as_neighbours_come_and_go(self):
        self.remote()
        agent = self.samples(self.make_agent(),
                             [0.0004, 0.0004, 0.0004, 0.0004, 0.0004,
                              0.0010, 0.0010, 0.0010, 0.0010, 0.0010,
                              0.0008, 0.0008, 0.0008])
        self.assertAlmostEqual(self.PER_MISS, self.learned(agent),
                               delta=5.0)
        # The last three samples: 0.0008 misses per instruction, CPI 0.75.
        self.assertAlmostEqual(self.PER_MISS * 0.0008 / 0.75,
                               self.load(agent).stall, places=2)

    def test_kept_when_the_samples_stop_varying(self):
        self.remote()
        agent = self.samples(self.make_agent(),
                             [0.0004] * 6 + [0.0010] * 6)
        learned = self.learned(agent)
        self.assertIsNotNone(learned)
        # Samples alike until the earlier ones weigh next to nothing: no
        # spread to learn from, what was learned stays.
        self.samples(agent, [0.0010] * (5 * optimizer.STALL_POINTS))
        self.assertIsNone(self.learned_now(agent))
        self.assertEqual(learned, self.learned(agent))
        self.assertAlmostEqual(learned * 0.0010 / 0.80,
                               self.load(agent).stall, places=2)

    def test_not_learned_without_spread(self):
        # Misses per instruction within 5%: CPI does not show their cost.
        self.remote()
        agent = self.samples(self.make_agent(),
                             [0.00100, 0.00105, 0.00095] * 5)
        self.assertIsNone(self.learned(agent))
        self.assertIsNone(self.load(agent).stall)

    def test_not_learned_when_cpi_does_not_follow_the_misses(self):
        # CPI moves as much for another reason (other vCPUs on its cores).
        self.remote()
        agent = self.samples(self.make_agent(),
                             [0.0004, 0.0010] * 6, per_miss=0.0,
                             jitter=[0.3, 0.3, 0.0, 0.0])
        self.assertIsNone(self.learned(agent))

    def test_not_for_memory_intensive_guests(self):
        # 20 LLC references per 1,000 instructions: the model's own rules
        # (MISS_CYCLES, a CPI above a core's) stand, and its samples are
        # not fitted (their misses rise with the controllers' queueing).
        self.remote()
        agent = self.samples(self.make_agent(),
                             [0.004] * 6 + [0.010] * 6 + [0.008] * 3,
                             refs=0.02, per_miss=100.0)
        self.assertIsNone(self.learned(agent))
        self.assertIsNone(self.load(agent).stall)
        self.assertNotIn('a', agent.optimizer.points)

    def test_learned_while_light_applies_only_while_light(self):
        self.remote()
        agent = self.samples(self.make_agent(),
                             [0.0004] * 6 + [0.0010] * 6)
        learned = self.learned(agent)
        self.assertIsNotNone(learned)
        # A memory-intensive phase: its samples are left out of the fit,
        # and the learned cost does not apply to it.
        self.samples(agent, [0.004, 0.012] * 10, refs=0.02, per_miss=20.0)
        self.assertEqual(learned, self.learned(agent))
        self.assertIsNone(self.load(agent).stall)

    def test_never_below_miss_cycles(self):
        self.remote()
        agent = self.samples(self.make_agent(),
                             [0.0004] * 6 + [0.0010] * 6, per_miss=10.0)
        self.assertEqual(optimizer.cost.MISS_CYCLES, self.learned(agent))

    def test_forgotten_when_the_cpi_stops_following(self):
        self.remote()
        agent = self.samples(self.make_agent(),
                             [0.0004] * 6 + [0.0010] * 6)
        with mock.patch.object(optimizer.LOG, 'info',
                               autospec=True) as info:
            self.assertIsNotNone(self.learned(agent))
        self.assertIn('Learned from the samples of', info.call_args[0][0])
        self.assertEqual(1, agent.optimizer.status()['learned_miss_cost'])
        # Misses per instruction still vary, CPI no longer with them.
        self.samples(agent, [0.0004, 0.0010] * optimizer.STALL_POINTS,
                     per_miss=0.0, jitter=[0.3, 0.3, 0.0, 0.0])
        with mock.patch.object(optimizer.LOG, 'info',
                               autospec=True) as info:
            self.assertIsNone(self.learned(agent))
        self.assertIn('Forgot what an LLC miss costs', info.call_args[0][0])
        self.assertIsNone(self.load(agent).stall)
        self.assertEqual(0, agent.optimizer.status()['learned_miss_cost'])

    def test_learned_and_forgotten_at_different_fits(self):
        # CPI following the misses by 0.75: not enough to learn, enough
        # to keep what was learned (a guest near one threshold would
        # learn and forget in turn).
        agent = self.make_agent()
        opt = agent.optimizer
        x = [0.0004, 0.0010] * 10
        opt.points['a'] = self.sums(x, [0.066, 0.066, -0.066, -0.066],
                                    (optimizer.STALL_FORGET,
                                     optimizer.STALL_FIT))
        mean = optimizer.Rates(0.0, IPS, 0.75 * IPS, 0.002 * IPS,
                               0.0007 * IPS)
        self.assertIsNone(opt._learned_stall('a', mean))
        self.assertNotIn('a', opt.per_miss)
        opt.per_miss['a'] = 300.0
        self.assertIsNotNone(opt._learned_stall('a', mean))
        self.assertAlmostEqual(self.PER_MISS, opt.per_miss['a'], delta=5.0)
        # Following them by 0.65: forgotten.
        opt.points['a'] = self.sums(x, [0.088, 0.088, -0.088, -0.088],
                                    (0.6, optimizer.STALL_FORGET))
        self.assertIsNone(opt._learned_stall('a', mean))
        self.assertNotIn('a', opt.per_miss)

    def sums(self, x, noise, between):
        """Fit sums of CPIs on ``x`` off the line by ``noise`` in turn,
        their correlation asserted ``between``.
        """
        y = [self.CORE + self.PER_MISS * v + noise[i % len(noise)]
             for i, v in enumerate(x)]
        n = len(x)
        mx, my = sum(x) / n, sum(y) / n
        r = (sum((a - mx) * (b - my) for a, b in zip(x, y)) /
             math.sqrt(sum((a - mx) ** 2 for a in x) *
                       sum((b - my) ** 2 for b in y)))
        self.assertTrue(between[0] < r < between[1], r)
        return array.array('d', [
            n, sum(x), sum(y), sum(a * a for a in x),
            sum(b * b for b in y), sum(a * b for a, b in zip(x, y))])

    def test_bad_counters_are_left_out(self):
        self.remote()
        agent = self.make_agent()
        self.samples(agent, [0.0004] * 6 + [0.0010] * 6)
        sums = list(agent.optimizer.points['a'])
        # An LLC misses counter that went backwards (reset, multiplexing
        # gone wrong): the sample is not fitted.
        self.clock.now += 1
        self.hv.run('a', IPS, int(0.8 * IPS), int(0.002 * IPS),
                    -int(0.001 * IPS), 0)
        agent.cycle()
        self.assertEqual(sums, list(agent.optimizer.points['a']))

    def test_off(self):
        self.flags(group='numa_overhead_agent', learn_miss_cost=False)
        self.remote()
        agent = self.samples(self.make_agent(),
                             [0.0004] * 6 + [0.0010] * 6)
        with mock.patch.object(optimizer.LOG, 'info',
                               autospec=True) as info:
            self.assertIsNone(self.load(agent).stall)
        info.assert_not_called()
        self.assertEqual(0, agent.optimizer.status()['learned_miss_cost'])

    def test_forgotten_when_it_leaves(self):
        self.remote()
        agent = self.samples(self.make_agent(),
                             [0.0004] * 6 + [0.0010] * 6)
        self.assertIsNotNone(self.learned(agent))
        del self.hv.guests['a']
        self.clock.now += 1
        agent.cycle()
        self.assertNotIn('a', agent.optimizer.points)
        self.assertNotIn('a', agent.optimizer.per_miss)

    def test_capped(self):
        self.remote()
        agent = self.samples(self.make_agent(),
                             [0.0002] * 5 + [0.0004] * 5 + [0.0003] * 3,
                             per_miss=5000.0)
        self.assertEqual(optimizer.STALL_MAX_CYCLES, self.learned(agent))

    def test_the_stall_counter_comes_first(self):
        self.remote()
        agent = self.make_agent()
        for i, m in enumerate([0.0004] * 6 + [0.0010] * 6):
            self.clock.now += 1
            cpi = self.CORE + self.PER_MISS * m
            # A tenth of its cycles stalled, as the event reads it.
            self.hv.run('a', IPS, int(cpi * IPS), int(0.002 * IPS),
                        int(m * IPS), int(0.1 * cpi * IPS))
            agent.cycle()
        self.assertAlmostEqual(0.1, self.load(agent).stall, places=2)

    def test_forgotten_when_it_starts_again(self):
        self.remote()
        agent = self.samples(self.make_agent(),
                             [0.0004] * 6 + [0.0010] * 6)
        self.assertIsNotNone(self.learned(agent))
        agent.optimizer.restarted('a', self.clock.now)
        self.assertNotIn('a', agent.optimizer.per_miss)
        self.assertNotIn('a', agent.optimizer.points)

    def test_a_thrashed_light_guest_is_moved_off_the_thrasher(self):
        # 'a' (light, 2 vCPUs) shares node 0 (8 CPUs) with 'b', 4 vCPUs
        # streaming through the LLC; node 1 is idle. Without the stalled-cycles
        # event the model charged a miss MISS_CYCLES and saw too little
        # gain to pay for moving 'a'; its own samples show a miss costs it
        # PER_MISS. (512 MiB: a move costs 1 guest-second, min_gain is
        # the bar.)
        self.hv.add('a', {0: 512}, vcpu_node=0)
        self.hv.add('b', {0: 8 * GIB}, vcpu_node=0, vcpus=4,
                    extra_specs={'numa_overhead:rebalance': 'false'})
        agent = self.make_agent()
        misses = [0.0001] * 5 + [0.0008] * 8

        def run(learn):
            agent.optimizer.per_miss.clear()
            agent.optimizer.points.clear()
            for m in misses:
                self.clock.now += 1
                self.hv.run('a', IPS, int((self.CORE + self.PER_MISS * m) *
                                          IPS), int(0.002 * IPS),
                            int(m * IPS), 0)
                self.work('b', ips=4 * IPS)
                agent.cycle()
            if not learn:
                agent.optimizer.per_miss.clear()
                agent.optimizer.points.clear()
            return [a.guest for a in agent.optimizer.plan(self.clock.now)]

        self.assertEqual([], run(learn=False))
        self.assertEqual(['a'], run(learn=True))
