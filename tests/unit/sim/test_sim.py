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
import os
import types
from unittest import mock

import fixtures
from nova.scheduler import filters
import testtools

from nova_numa_overhead.cmd import main as cli_main
from nova_numa_overhead.compute import hypervisor as hv_mod
from nova_numa_overhead.sim import backend
from nova_numa_overhead.sim import cli as sim_cli
from nova_numa_overhead.sim import cluster as sim_cluster
from nova_numa_overhead.sim import host as host_mod
from nova_numa_overhead.sim import model
from nova_numa_overhead.sim import policies
from nova_numa_overhead.sim import presets
from nova_numa_overhead.sim import report
from nova_numa_overhead.sim import runner
from nova_numa_overhead.sim import scenarios
from nova_numa_overhead.sim import sweep

GIB = 1024


def guest(name, node=0, memory_gb=4, profile='ycsb', vcpus=2, **kw):
    return host_mod.Guest(name=name, vcpus=vcpus, memory_mb=memory_gb * GIB,
                          profile=presets.PROFILES[profile], cpu={node: 1.0},
                          first_touch=(node,), **kw)


def two_nodes(memory_gb=16, controllers=1):
    nodes = tuple(model.NodeSpec(cores=4, llc_mb=8.0,
                                 memory_mb=memory_gb * GIB, mc_gbps=20.0,
                                 controllers=controllers) for _ in range(2))
    return model.HostSpec(name='two', nodes=nodes,
                          latency_ns=((90.0, 140.0), (140.0, 90.0)),
                          link_gbps=((0.0, 10.0), (10.0, 0.0)),
                          distances=((10, 21), (21, 10)), ghz=2.0)


class TestCapacity(testtools.TestCase):
    """A node never holds more than its memory."""

    def test_first_touch_spills_to_the_next_node(self):
        host = host_mod.Host(presets.ibm_x3850(4), balancing=False)
        for i in range(3):
            host.add(guest('g%d' % i, memory_gb=40), preallocate=True)
        free = host.free_mb()
        self.assertEqual(0, free[0])
        for g in host.guests.values():
            self.assertAlmostEqual(40 * GIB, g.allocated_mb, delta=1)
        used0 = sum(host.pages(g).get(0, 0) for g in host.guests.values())
        self.assertLessEqual(used0, 64 * GIB + 1)
        # The third guest spilled to the nodes after node 0.
        self.assertGreater(len(host.pages(host.guests['g2'])), 0)
        self.assertNotIn(0, host.pages(host.guests['g2']))

    def test_controllers_hold_a_quarter_each(self):
        host = host_mod.Host(presets.ibm_x3850(4), balancing=False)
        g = guest('g', memory_gb=20, first_ctrl={0: 0})
        host.add(g, preallocate=True)
        self.assertAlmostEqual(16 * GIB, g.ctrl_pages[0], delta=1)
        self.assertAlmostEqual(4 * GIB, sum(
            mb for c, mb in g.ctrl_pages.items() if c != 0), delta=1)

    def test_a_move_never_overfills(self):
        host = host_mod.Host(two_nodes(8), balancing=False)
        a = guest('a', node=0, memory_gb=6)
        b = guest('b', node=1, memory_gb=6)
        host.add(a, preallocate=True)
        host.add(b, preallocate=True)
        host.enqueue(a, 0, 1, 6 * GIB, host_mod.REMOTE)
        for t in range(10):
            host.step(t)
        self.assertLessEqual(host.ctrl_used()[1], 8 * GIB + 1)
        self.assertAlmostEqual(2 * GIB, host.pages(a)[1], delta=1)

    def test_physics_is_checked(self):
        host = host_mod.Host(two_nodes(8), balancing=False)
        g = guest('a', memory_gb=4)
        host.add(g, preallocate=True)
        g.ctrl_pages[0] = 9 * GIB      # a policy writing pages directly
        self.assertRaises(host_mod.PhysicsError, host.step, 1.0)

    def test_confined_to_nodes_too_small_is_killed(self):
        host = host_mod.Host(two_nodes(8), balancing=False)
        g = guest('a', memory_gb=12)
        host.add(g)
        host.restrict(g, (0,))
        for t in range(20):
            host.step(t)
        self.assertTrue(g.oom)
        self.assertEqual(1, host.oom_kills)
        self.assertEqual(0.0, host.throughput(host.solve())['a'])


class TestNumad(testtools.TestCase):
    """numad as numad.c runs it: one bind a pass, by affinity and
    migrate_pages, nothing confined.
    """

    def run_numad(self, host, seconds, guests=()):
        hv = backend.SimHypervisor(host, counters='perf')
        numad = policies.new('numad')
        numad.attach(hv)
        binds = []
        real = numad._bind

        def bind(guest, nodes, now):
            binds.append((now, guest.name, nodes))
            real(guest, nodes, now)
        numad._bind = bind
        for g in guests:
            hv.start(g)
        for t in range(seconds):
            numad.step(float(t))
            host.step(float(t))
            hv.advance(host.solve())
        return numad, binds

    def crowded(self):
        # Four 2-vCPU guests kept on node 0 of two 4-core nodes (their
        # affinity someone else's): node 1 idle.
        host = host_mod.Host(two_nodes(16), balancing=False)
        guests = [guest('g%d' % i, node=0, memory_gb=2) for i in range(4)]
        return host, guests

    def test_one_bind_a_pass_then_the_short_interval(self):
        host, guests = self.crowded()
        numad, binds = self.run_numad(host, 40, guests)
        self.assertTrue(binds)
        times = [t for t, _name, _nodes in binds]
        # Never two in one pass; 5 s after a bind the next pass.
        self.assertEqual(len(times), len(set(times)))
        self.assertEqual(numad.min_interval, times[1] - times[0])

    def test_its_memory_is_moved_not_confined(self):
        host, guests = self.crowded()
        numad, binds = self.run_numad(host, 40, guests)
        _t, name, _nodes = binds[0]
        nodes = [n for _t, other, n in binds if other == name][-1]
        g = host.guests[name]
        self.assertEqual((), g.allowed)
        self.assertEqual(nodes, g.first_touch)
        self.assertEqual({n: 1.0 / len(nodes) for n in nodes}, g.cpu)
        self.assertGreater(sum(host.pages(g).get(n, 0.0) for n in nodes),
                           0.9 * g.allocated_mb)

    def test_a_guest_bound_is_left_five_minutes(self):
        # (Unless it is on the busiest node and moving it evens the nodes
        # out: not here.)
        host, guests = self.crowded()
        self.useFixture(fixtures.MockPatchObject(
            policies.Numad, '_bypass', return_value=False))
        numad, binds = self.run_numad(host, 400, guests)
        last = {}
        for t, name, _nodes in binds:
            if name in last:
                self.assertGreaterEqual(t - last[name], numad.reevaluation)
            last[name] = t
        self.assertTrue(binds)

    def test_a_guest_outgrowing_its_nodes_spills_and_lives(self):
        # Bound to a node that then fills: its new pages go elsewhere
        # (numad confines nothing), where the old model killed it.
        host = host_mod.Host(two_nodes(8), balancing=False)
        hv = backend.SimHypervisor(host, counters='perf')
        numad = policies.new('numad')
        numad.attach(hv)
        g = guest('a', node=0, memory_gb=12)
        host.add(g)
        g.ctrl_pages[0] = 1.0 * GIB
        numad._bind(g, (1,), 0.0)
        for t in range(30):
            host.step(float(t))
        self.assertFalse(g.oom)
        self.assertAlmostEqual(12 * GIB, g.allocated_mb, delta=1)
        self.assertAlmostEqual(8 * GIB, host.pages(g)[1], delta=1)

    def test_migrate_pages_goes_node_by_node(self):
        # Pages on nodes 0, 1 and 2, bound to 2 and 3: node 0's (the
        # most) go to node 3 (the least of it), then node 1's to node 2.
        host = host_mod.Host(presets.ibm_x3850(4), balancing=False)
        numad = policies.new('numad')
        numad.attach(backend.SimHypervisor(host))
        g = guest('a', node=0, memory_gb=8)
        host.add(g)
        c = host.node_ctrls
        g.ctrl_pages = {c[0][0]: 4 * GIB, c[1][0]: 3 * GIB,
                        c[2][0]: 1 * GIB}
        numad._bind(g, (2, 3), 0.0)
        self.assertEqual([(0, 3, 4 * GIB), (1, 2, 3 * GIB)],
                         [(m[1], m[2], m[3]) for m in host.queue])


class TestVDARM(testtools.TestCase):

    def test_pages_on_their_way_are_not_moved_again(self):
        # 32 GiB on node 0 of four, evened: 24 GiB to move, once.
        host = host_mod.Host(presets.ibm_x3850(4), balancing=False)
        vdarm = policies.new('vdarm')
        vdarm.attach(backend.SimHypervisor(host))
        g = guest('a', node=0, memory_gb=32)
        host.add(g, preallocate=True)
        vdarm._even(g)
        vdarm._even(g)
        self.assertAlmostEqual(24 * GIB, host.pending_mb(g), delta=1)
        vdarm._gather(g)
        vdarm._gather(g)
        # Gathered back on node 0 where the queue will have left it: the
        # moves queued to the others, then as much back.
        self.assertAlmostEqual(48 * GIB, host.pending_mb(g), delta=1)


class TestSteadyEffects(testtools.TestCase):
    """What a move leads to in the simulator's physics, in steady state
    (the yardstick of the cost model's predictions).
    """

    def host(self, controllers=1):
        host = host_mod.Host(two_nodes(16, controllers), balancing=False)
        # 'a' runs on node 0 with its pages on node 1; 'b' beside it.
        a = guest('a', node=0)
        a.first_touch = (1,)
        host.add(a, preallocate=True)
        host.add(guest('b', node=0), preallocate=True)
        return host

    def effects(self, host, name, earlier=(), **move):
        return {n: round(v, 9) for n, v in host.steady_effects(
            host_mod.Move(name, **move), earlier).items()}

    def test_pages_home_speed_their_guest(self):
        effects = self.effects(self.host(), 'a', memory={0: 1.0})
        self.assertGreater(effects['a'], 1.05)
        # Its neighbour now shares node 0's controller with it.
        self.assertLess(effects['b'], 1.0)

    def test_the_vcpus_to_the_pages_too(self):
        effects = self.effects(self.host(), 'a', cpu={1: 1.0})
        # Local and its own cores: faster; 'b' has node 0 to itself.
        self.assertGreater(effects['a'], 1.05)
        self.assertGreater(effects['b'], 1.0)

    def test_no_change_changes_nothing_and_the_host_stays(self):
        host = self.host()
        a = host.guests['a']
        a.lost_ms = 500.0
        before = (host.solve().ips.tolist(), runner.snapshot(host))
        pages, cpu = dict(a.ctrl_pages), dict(a.cpu)
        self.assertEqual({'a': 1.0, 'b': 1.0}, self.effects(host, 'a'))
        self.effects(host, 'a', cpu={1: 1.0}, memory={1: 1.0})
        self.effects(host, 'a', floating=True, memory={0: 0.5, 1: 0.5},
                     earlier=[host_mod.Move('b', cpu={1: 1.0})])
        self.assertIs(a, host.guests['a'])
        self.assertEqual((pages, cpu, 500.0, False),
                         (a.ctrl_pages, a.cpu, a.lost_ms, a.floating))
        host._warm = None
        self.assertEqual(before, (host.solve().ips.tolist(),
                                  runner.snapshot(host)))

    def test_pages_a_node_keeps_stay_on_their_controllers(self):
        host = host_mod.Host(two_nodes(16, controllers=2),
                             balancing=False)
        # All of 'a' on node 0's first controller, 'b' on its second.
        host.add(guest('a', first_ctrl={0: 0}), preallocate=True)
        host.add(guest('b', first_ctrl={0: 1}), preallocate=True)
        # Its pages to node 0, where they are: nothing moves.
        self.assertEqual({'a': 1.0, 'b': 1.0},
                         self.effects(host, 'a', cpu={0: 1.0},
                                      memory={0: 1.0}))
        # Half of them to node 1, spread over its controllers; the half
        # that stays, on controller 0.
        shadow = []
        real = host_mod.Host.loads

        def loads(h):
            shadow.append(dict(h.guests['a'].ctrl_pages))
            return real(h)
        with mock.patch.object(host_mod.Host, 'loads', autospec=True,
                               side_effect=loads):
            self.effects(host, 'a', memory={0: 0.5, 1: 0.5})
        self.assertEqual({0: 4 * GIB}, shadow[0])
        self.assertEqual({0: 2 * GIB, 2: GIB, 3: GIB},
                         {c: round(mb) for c, mb in shadow[1].items()})

    def test_pages_a_node_has_no_room_for_stay(self):
        host = host_mod.Host(two_nodes(8), balancing=False)
        host.add(guest('a', node=0, memory_gb=4), preallocate=True)
        host.add(guest('b', node=1, memory_gb=6), preallocate=True)
        shadow = []
        real = host_mod.Host.loads

        def loads(h):
            shadow.append(h.pages(h.guests['a']))
            return real(h)
        with mock.patch.object(host_mod.Host, 'loads', autospec=True,
                               side_effect=loads):
            self.effects(host, 'a', memory={1: 1.0})
        # Node 1 has 2 GiB free: half of 'a' comes, half stays.
        self.assertEqual({0: 2 * GIB, 1: 2 * GIB},
                         {n: round(mb) for n, mb in shadow[1].items()})

    def test_earlier_moves_of_the_pass_on_both_sides(self):
        host = self.host()
        first = host_mod.Move('b', cpu={1: 1.0}, memory={1: 1.0})
        alone = self.effects(host, 'a', memory={0: 1.0})
        after = self.effects(host, 'a', earlier=[first], memory={0: 1.0})
        # With 'b' gone to node 1, 'a' has node 0's controller to itself
        # and leaves node 1's to 'b': the same move gains more, and
        # speeds 'b' instead of slowing it.
        self.assertGreater(after['a'], alone['a'])
        self.assertLess(alone['b'], 1.0)
        self.assertGreater(after['b'], 1.0)

    def test_vcpus_left_to_the_kernel_float(self):
        host = host_mod.Host(two_nodes(16), balancing=False)
        # Six vCPUs pinned to node 0's four cores, 'b' beside them.
        host.add(guest('a', vcpus=6), preallocate=True)
        host.add(guest('b', vcpus=2), preallocate=True)
        pinned = self.effects(host, 'a', memory={0: 0.5, 1: 0.5})
        floating = self.effects(host, 'a', floating=True,
                                memory={0: 0.5, 1: 0.5})
        # Floating, the kernel spreads them over both nodes' cores.
        self.assertGreater(floating['a'], 1.2)
        self.assertGreater(floating['a'], pinned['a'])
        self.assertGreater(floating['b'], 1.0)

    def test_floating_vcpus_as_the_kernel_balances_them(self):
        host = host_mod.Host(two_nodes(16), balancing=False)
        # Four floating vCPUs on node 0's four cores; 'a' pinned there
        # too would crowd them: the kernel moves them to node 1.
        host.add(guest('f', node=0, vcpus=4, floating=True),
                 preallocate=True)
        host.add(guest('a', node=1, vcpus=2), preallocate=True)
        shadow = []
        real = host_mod.Host._load_balance

        def balance(h):
            real(h)
            shadow.append(dict(h.guests['f'].cpu))
        with mock.patch.object(host_mod.Host, '_load_balance',
                               autospec=True, side_effect=balance):
            self.effects(host, 'a', cpu={0: 1.0}, memory={0: 1.0})
        # Before the move: 'f' stays; after: two of its vCPUs leave.
        self.assertEqual([{0: 1.0}, {0: 0.5, 1: 0.5}], shadow)
        self.assertEqual({0: 1.0}, host.guests['f'].cpu)

    def test_a_guest_that_does_not_run_is_left_out(self):
        host = self.host()
        host.guests['b'].oom = True
        self.assertEqual({'a'}, set(self.effects(host, 'a',
                                                 memory={0: 1.0})))


class TestSteadyOfOurMoves(testtools.TestCase):
    """Every move of the agent's optimizer beside its simulated steady
    state (OverheadAware._observe).
    """

    def test_each_move_with_the_earlier_ones_of_its_pass(self):
        calls = []
        real = host_mod.Host.steady_effects

        def steady(host, move, earlier=()):
            calls.append((move, [m.name for m in earlier]))
            return real(host, move, earlier)
        with mock.patch.object(host_mod.Host, 'steady_effects',
                               autospec=True, side_effect=steady):
            res = runner.run_policy(scenarios.get('vtrms-amd'),
                                    'overhead-aware')
        moved = res.extra['optimizer']['moved']
        self.assertGreater(moved, 1)
        self.assertEqual(moved, len(calls))
        self.assertEqual(moved, len(res.extra['steady']['guest']))
        self.assertTrue(res.extra['steady']['neighbours'])
        # Pinned with their memory (no guest here is larger than a node).
        for move, _earlier in calls:
            self.assertEqual((1, False), (len(move.cpu), move.floating))
            self.assertEqual(move.cpu, move.memory)
        # A second move of a pass is measured with the first one made.
        self.assertIn([calls[0][0].name], [e for _m, e in calls])
        for predicted, simulated in res.extra['steady']['guest']:
            self.assertGreater(predicted, 0)
            self.assertGreater(simulated, 0)

    def test_an_error_of_the_yardstick_fails_the_run(self):
        def broken(host, move, earlier=()):
            raise ValueError('yardstick')
        with mock.patch.object(host_mod.Host, 'steady_effects',
                               autospec=True, side_effect=broken):
            self.assertRaises(ValueError, runner.run_policy,
                              scenarios.get('vtrms-amd'), 'overhead-aware')

    def test_vcpus_alone_and_left_to_the_kernel(self):
        from nova_numa_overhead.compute import optimizer
        scenario = scenarios.get('remote-2')
        _host, hv = runner.new_host(scenario)
        policy = policies.new('overhead-aware')
        policy.attach(hv, scenario)
        every = tuple(hv.topology().node_of_cpu())
        node1 = tuple(hv.topology().nodes[1].cpus)
        seen = []

        def steady(move, earlier=()):
            seen.append((move, list(earlier)))
            return {'vm1': 1.2, 'vm2': 0.9}
        policy.host.steady_effects = steady
        effects = {'vm1': 1.1, 'vm2': 0.95, 'gone': 1.0}
        alone = optimizer.Action('vm1', (1,), node1, 0.1, 0.0, 0.0,
                                 ({1: 1.0}, {0: 1.0}), False, effects)
        kernel = optimizer.Action('vm1', (0, 1), every, 0.1, 0.0, 0.0,
                                  (None, {0: 0.5, 1: 0.5}), True, effects)
        policy._observe(alone)()
        policy._observe(kernel)()
        self.assertEqual(
            [(host_mod.Move('vm1', cpu={1: 1.0}), []),
             (host_mod.Move('vm1', memory={0: 0.5, 1: 0.5}, floating=True),
              ['vm1'])],
            [(m, [e.name for e in earlier]) for m, earlier in seen])
        # A guest the simulator does not run is left out.
        self.assertEqual({'guest': [(1.1, 1.2)] * 2,
                          'neighbours': [(0.95, 0.9)] * 2}, policy.steady)
        # A pass later, no earlier move.
        policy.clock[0] += 1
        policy._observe(alone)
        self.assertEqual([], seen[-1][1])


class TestMigration(testtools.TestCase):
    """Moves take time, load the memory and slow the guest."""

    def test_rate_and_cost(self):
        host = host_mod.Host(two_nodes(64), balancing=False)
        g = guest('a', memory_gb=8)
        host.add(g, preallocate=True)
        before = host.throughput(host.solve())['a']
        host.enqueue(g, 0, 1, 8 * GIB, host_mod.REMOTE)
        host.step(1.0)
        moved = host.pages(g).get(1, 0)
        self.assertAlmostEqual(host_mod.MIGRATE_MB_PER_S, moved, delta=1)
        self.assertGreater(g.lost_ms, 0)
        during = host.throughput(host.solve())['a']
        self.assertLess(during, before)
        for t in range(2, 8):
            host.step(t)
        self.assertAlmostEqual(8 * GIB, host.pages(g).get(1, 0), delta=1)
        self.assertAlmostEqual(8 * GIB, host.moved_mb, delta=1)

    def test_nodeset_change_is_rate_limited_by_the_kernel(self):
        host = host_mod.Host(two_nodes(64), balancing=False)
        hv = backend.SimHypervisor(host)
        g = guest('a', memory_gb=16)
        hv.start(g, preallocate=True)
        hv.set_nodeset(hv.domains()[0], (1,))
        host.step(1.0)
        self.assertLess(host.pages(g).get(1, 0), 16 * GIB)
        self.assertGreater(host.pages(g).get(0, 0), 0)

    def test_move_pages_respects_the_nodeset(self):
        host = host_mod.Host(two_nodes(64), balancing=False)
        hv = backend.SimHypervisor(host)
        hv.start(guest('a', memory_gb=4), preallocate=True)
        dom = hv.domains()[0]
        hv.set_nodeset(dom, (0,))
        result = hv.move_pages(hv.domains()[0], [(0, 1, 1024)], None)
        self.assertEqual(0, result.moved)
        self.assertIn('EACCES', result.failed)
        hv.set_nodeset(hv.domains()[0], (0, 1))
        result = hv.move_pages(hv.domains()[0], [(0, 1, 1024)], 256 * 100)
        self.assertEqual(256 * 100, result.moved)

    def test_move_pages_finds_no_page_already_on_its_way(self):
        # The kernel moves the pages outside a narrowed nodeset, queued;
        # move_pages(2) does not move them a second time.
        host = host_mod.Host(two_nodes(64), balancing=False)
        hv = backend.SimHypervisor(host)
        hv.start(guest('a', memory_gb=4), preallocate=True)
        dom = hv.domains()[0]
        hv.set_nodeset(dom, (0, 1))
        first = hv.move_pages(dom, [(0, 1, 3 * GIB)], None)
        self.assertEqual(3 * GIB * 256, first.moved)
        again = hv.move_pages(dom, [(0, 1, 3 * GIB)], None)
        self.assertEqual(GIB * 256, again.moved)
        self.assertEqual({}, again.failed)
        self.assertAlmostEqual(4 * GIB, host.pending_mb(), delta=1)


class TestKernel(testtools.TestCase):
    """Automatic NUMA balancing and the CPU scheduler."""

    def remote_guest(self, balancing=True, **kw):
        host = host_mod.Host(two_nodes(64), balancing=balancing)
        g = guest('a', node=0, memory_gb=8, **kw)
        g.first_touch = (1,)
        host.add(g, preallocate=True)
        return host, g

    def test_pages_come_home_at_the_scan_rate(self):
        host, g = self.remote_guest()
        host.step(0.0)
        self.assertLessEqual(host.pages(g).get(0, 0), host_mod.SCAN_MB + 1)
        for t in range(1, 200):
            host.step(float(t))
        self.assertGreater(host.pages(g).get(0, 0), 4 * GIB)
        self.assertGreater(host.moved_by[host_mod.KERNEL], 4 * GIB)

    def test_switched_off(self):
        host, g = self.remote_guest(balancing=False)
        for t in range(60):
            host.step(float(t))
        self.assertEqual({1}, set(host.pages(g)))

    def test_not_outside_the_cpuset_nor_interleaved(self):
        host, g = self.remote_guest(allowed=(1,))
        for t in range(60):
            host.step(float(t))
        self.assertEqual({1}, set(host.pages(g)))
        host, g = self.remote_guest(interleave=True)
        for t in range(60):
            host.step(float(t))
        self.assertEqual(0, host.moved_mb)

    def test_floating_vcpus_follow_memory_and_spread(self):
        host = host_mod.Host(two_nodes(64), balancing=True)
        g = guest('a', node=0, memory_gb=8, floating=True)
        g.first_touch = (1,)
        host.add(g, preallocate=True)
        host.step(0.0)
        self.assertEqual({1: 1.0}, g.cpu)
        # Six 2-vCPU guests crowded on node 0 (4 cores): some move.
        host = host_mod.Host(two_nodes(64), balancing=False)
        for i in range(6):
            host.add(guest('g%d' % i, node=0, floating=True),
                     preallocate=True)
        host.step(0.0)
        load = host.cpu_load()
        self.assertLessEqual(abs(load[0] - load[1]), 4)
        self.assertGreater(load[1], 0)

    def test_busy_nodes_are_evened(self):
        # Twenty 2-vCPU guests crowded on node 0 (40 vCPUs, 8 cores in
        # all): node 1 takes more than its idle cores, until neither has
        # IMBALANCE_PCT of the other's vCPUs per CPU.
        host = host_mod.Host(two_nodes(64), balancing=False)
        for i in range(20):
            host.add(guest('g%d' % i, node=0, memory_gb=1, floating=True),
                     preallocate=True)
        host.step(0.0)
        load = host.cpu_load()
        self.assertEqual(40.0, sum(load))
        self.assertLessEqual(max(load) * 100,
                             host_mod.IMBALANCE_PCT * min(load))
        # Guests kept on their node are not moved.
        host = host_mod.Host(two_nodes(64), balancing=False)
        for i in range(20):
            host.add(guest('g%d' % i, node=0, memory_gb=1),
                     preallocate=True)
        host.step(0.0)
        self.assertEqual([40.0, 0.0], host.cpu_load())

    def test_a_node_of_pinned_vcpus_gives_none(self):
        # Four 8-core nodes: node 0 the busiest with pinned vCPUs only,
        # node 1 crowded with floating ones: these still spread.
        host = host_mod.Host(presets.ibm_x3850(4), balancing=False)
        for i in range(10):
            host.add(guest('p%d' % i, node=0, memory_gb=1, vcpus=4),
                     preallocate=True)
        for i in range(10):
            host.add(guest('f%d' % i, node=1, memory_gb=1, vcpus=3,
                           floating=True), preallocate=True)
        host.step(0.0)
        load = host.cpu_load()
        self.assertEqual(40.0, load[0])
        self.assertEqual(30.0, sum(load[1:]))
        busy = load[1:]
        self.assertLessEqual(max(busy) * 100,
                             host_mod.IMBALANCE_PCT * min(busy))


class TestModel(testtools.TestCase):

    def test_controller_congestion_is_per_controller(self):
        spec = presets.ibm_x3850(4)
        host = host_mod.Host(spec, balancing=False)
        for i in range(4):
            host.add(guest('a%d' % i, first_ctrl={0: 0}), preallocate=True)
        one = host.solve()
        host = host_mod.Host(spec, balancing=False)
        for i in range(4):
            host.add(guest('a%d' % i, first_ctrl={0: i}), preallocate=True)
        spread = host.solve()
        self.assertGreater(one.ctrl_util.max(), spread.ctrl_util.max())
        self.assertLess(one.ips.sum(), spread.ips.sum())

    def test_footprint_grows_with_vcpus(self):
        host = host_mod.Host(presets.ibm_x3850(4), balancing=False)
        host.add(guest('small', vcpus=1), preallocate=True)
        small = host.solve().hit[0]
        host = host_mod.Host(presets.ibm_x3850(4), balancing=False)
        host.add(guest('big', vcpus=8), preallocate=True)
        self.assertLess(host.solve().hit[0], small)

    def test_solo_is_one(self):
        host = host_mod.Host(presets.ibm_x3850(4), balancing=False)
        host.add(guest('a'), preallocate=True)
        self.assertAlmostEqual(1.0, host.throughput(host.solve())['a'],
                               places=3)


class TestCounters(testtools.TestCase):

    def run_guest(self, counters, seed=0, seconds=5):
        host = host_mod.Host(presets.ibm_x3850(4), balancing=False)
        hv = backend.SimHypervisor(host, counters=counters, seed=seed)
        hv.start(guest('a'), preallocate=True)
        for t in range(seconds):
            host.step(float(t))
            hv.advance(host.solve())
        return hv.counters(hv.domains())['a']

    def test_what_a_typical_host_gives(self):
        c = self.run_guest(backend.PERF)
        self.assertGreater(c.instructions, 0)
        self.assertLessEqual(c.cache_misses, c.cache_references)
        self.assertEqual(0, c.stalled_cycles)
        self.assertGreater(self.run_guest(backend.PERF_STALLS)
                           .stalled_cycles, 0)

    def test_noise(self):
        a = self.run_guest(backend.PERF, seed=1)
        b = self.run_guest(backend.PERF, seed=2)
        self.assertNotEqual(a.cache_misses, b.cache_misses)
        self.assertAlmostEqual(1.0, a.cache_misses / b.cache_misses,
                               delta=0.1)

    def test_unknown_profile(self):
        host = host_mod.Host(presets.ibm_x3850(4))
        self.assertRaises(ValueError, backend.SimHypervisor, host,
                          counters='pmu-magic')


class TestScenarios(testtools.TestCase):

    def write(self, text):
        path = self.useFixture(fixtures.TempDir()).path + '/s.toml'
        with open(path, 'wb') as f:
            f.write(text if isinstance(text, bytes) else text.encode())
        return path

    def test_builtin_are_distinct(self):
        table = scenarios.builtin()
        self.assertNotIn('memory-4g', table)
        self.assertNotIn('sockets-4', table)
        seen = {}
        for name, factory in table.items():
            s = factory()
            key = (s.host, s.guests, s.hosts)
            self.assertNotIn(key, seen, '%s repeats %s' % (name,
                                                           seen.get(key)))
            seen[key] = name
        llc = scenarios.get('llc-2').guests
        mc = scenarios.get('mc-2').guests
        self.assertEqual([0, 1], [g.first_controller for g in llc])
        self.assertEqual([0, 0], [g.first_controller for g in mc])
        self.assertEqual({2}, {g.vcpus for g in llc})

    def test_todays_files_keep_working(self):
        s = scenarios.load(self.write(
            'name = "x"\nhost = "ibm-x3850-4s"\nseed = 3\n'
            '[[guests]]\nname = "db"\ncount = 2\nprofile = "ycsb"\n'
            'vcpus = 1\nmemory_gb = 4\nvcpu_node = 1\nfirst_touch = [2]\n'
            'extra_specs = {"numa_overhead:policy" = "proportional"}\n'))
        self.assertEqual(['db-1', 'db-2'], [g.name for g in s.guests])
        self.assertEqual((2,), s.guests[0].first_touch)
        s = scenarios.load(self.write(
            '[host]\nname = "two"\n'
            'nodes = [{cores = 8, llc_mb = 16, memory_gb = 64, '
            'mc_gbps = 20}, {cores = 8, llc_mb = 16, memory_gb = 64, '
            'mc_gbps = 20}]\nlatency_ns = [[90, 140], [150, 90]]\n'
            'link_gbps = [[0, 10], [8, 0]]\n'
            'distances = [[10, 21], [21, 10]]\n'
            '[[guests]]\nmemory_gb = 4\n'))
        self.assertEqual(2, s.host.size)

    def test_the_documented_outside_files_load(self):
        # The simulator guide's "Files written outside the generator".
        here = os.path.dirname(os.path.abspath(__file__))
        folder = os.path.join(here, '..', '..', '..', 'doc', 'source',
                              'user', 'scenarios')
        names = sorted(f for f in os.listdir(folder) if f.endswith('.toml'))
        self.assertEqual(6, len(names))
        for name in names:
            s = scenarios.load(os.path.join(folder, name))
            self.assertEqual(name[:-len('.toml')], s.name)
            self.assertTrue(s.description.startswith('Session 29'))

    def test_strict(self):
        cases = [
            ('[[guests]]\nmemry_gb = 4\n', "guests[0].memry_gb: unknown key"),
            ('[[guests]]\nmemory_gb = "4"\n',
             "guests[0].memory_gb: expected a number, got the string '4'"),
            ('[[guests]]\nextra_specs = {"numa_overhead:policy" = "x"}\n',
             'numa_overhead:policy'),
            ('[[guests]]\nextra_specs = {"numa_overhead:polcy" = "x"}\n',
             'unknown key numa_overhead:polcy'),
            ('[[guests]]\nprofile = "stream"\n', "unknown profile 'stream'"),
            ('[[guests]]\nvcpus = true\n', 'expected an integer'),
            ('sedd = 1\n[[guests]]\n', 'sedd: unknown key'),
            ('[[guests]]\nvcpu_node = 7\n', 'node out of range 0-3'),
            ('counters = "magic"\n[[guests]]\n', "unknown profile 'magic'"),
            ('host = "ibm-x3850-2s"\n[[guests]]\ncount = 3\n'
             'memory_gb = 64\n', 'overcommitted'),
            ('[[guests]]\nleave_at = 10\nphases = [{at = 20, '
             'profile = "ycsb"}]\n', "outside the guest's life"),
            ('name = "x"\n', 'guests: missing'),
            ('[[guests]\n', 'not valid TOML'),
            # Values a run could not use, or that would never end.
            ('[[guests]]\nmemory_gb = inf\n', 'must be a finite number'),
            ('[[guests]]\nmemory_gb = nan\n', 'must be a finite number'),
            ('[[guests]]\nvcpus = 1000000000\n', 'vcpus: must be from 1'),
            ('[[guests]]\ncount = 1000000\n', 'count: must be from 1'),
            ('[[guests]]\ncount = 600\nmemory_gb = 0.01\n[[guests]]\n'
             'count = 600\nmemory_gb = 0.01\n', 'more than 1000 guests'),
            ('duration = 1000000000\n[[guests]]\n', 'duration: must be'),
            ('hosts = 1000000\n[[guests]]\n', 'hosts: must be from 1'),
            ('[[guests]]\nmemory_gb = 1%s\n' % ('0' * 400),
             'must be a finite number'),
            ('[[guests]]\nphases = [{at = 5, profile = "ycsb"}, {at = 5, '
             'profile = "cpu-bound"}]\n', 'two phases at the same second'),
            ('[[guests]]\nvcpu_node = []\n', 'vcpu_node: at least one'),
            ('[[guests]]\nfirst_touch = []\nfirst_controller = 0\n',
             'first_controller: needs a first_touch node'),
            (b'\xff\xfe[[guests]]\n', 'not valid TOML'),
        ]
        host = ('[host]\nnodes = [{cores = 4, llc_mb = 8, memory_gb = %s, '
                'mc_gbps = 10%s}, {cores = 4, llc_mb = 8, memory_gb = 16, '
                'mc_gbps = 10}]\nlatency_ns = %s\nlink_gbps = %s\n'
                'distances = %s\nghz = %s\n[[guests]]\nmemory_gb = 1\n')
        good = ('16', '', '[[90, 140], [140, 90]]', '[[0, 8], [8, 0]]',
                '[[10, 21], [21, 10]]', '2.0')

        def with_host(i, value):
            values = list(good)
            values[i] = value
            return host % tuple(values)
        cases += [
            (with_host(2, '[[inf, 140], [140, 90]]'), 'latency_ns: values '
             'must be finite'),
            (with_host(2, '[[90, nan], [140, 90]]'), 'latency_ns: values '
             'must be finite'),
            (with_host(3, '[[0, nan], [8, 0]]'), 'link_gbps: values must '
             'be finite'),
            (with_host(5, 'inf'), 'ghz: must be a finite number'),
            (with_host(5, '1e300'), 'ghz: must be <= 10'),
            (with_host(4, '[[10, 0], [21, 10]]'), 'SLIT distances'),
            (with_host(4, '[[5, 21], [21, 10]]'), 'SLIT distances'),
            (with_host(4, '[[10, 1.5], [21, 10]]'), 'expected integers'),
            (with_host(1, ', controllers = 65'), 'controllers: must be '
             'from 1 to 64'),
            (with_host(0, '0.0001'), 'less than 1 MiB per controller'),
            (host.replace('nodes = [', 'nodes = [' + '{cores = 1, llc_mb = '
                          '1, memory_gb = 1, mc_gbps = 1}, ' * 64) % good,
             'nodes: from 1 to 64 nodes'),
        ]
        for text, want in cases:
            path = self.write(text)
            exc = self.assertRaises(ValueError, scenarios.load, path)
            self.assertIn(want, str(exc), text)
            self.assertIn(path, str(exc))
            self.assertNotIn('\n', str(exc))

    def test_departures_free_the_memory_they_held(self):
        s = scenarios.load(self.write(
            'host = "ibm-x3850-2s"\narrival_interval = 10\n'
            '[[guests]]\nname = "a"\nmemory_gb = 100\nleave_at = 5\n'
            '[[guests]]\nname = "b"\nmemory_gb = 100\nleave_at = 5\n'))
        self.assertEqual(2, len(s.guests))


class TestRunner(testtools.TestCase):

    def test_deterministic_for_a_seed(self):
        s = scenarios.get('remote-4')
        a = runner.run(s, ('nova-default', 'overhead-aware'))
        b = runner.run(s, ('nova-default', 'overhead-aware'))
        self.assertEqual(a['overhead-aware'].throughput,
                         b['overhead-aware'].throughput)

    def test_time_departures_and_phases(self):
        s = scenarios.Scenario(
            name='t', description='', host=two_nodes(32),
            guests=(scenarios.GuestPlan(
                name='a', profile='cpu-bound', vcpus=2, memory_mb=4 * GIB,
                vcpu_nodes=(0,), first_touch=(0,),
                phases=(scenarios.Phase(10, 'ycsb'),)),
                scenarios.GuestPlan(
                name='b', profile='ycsb', vcpus=2, memory_mb=4 * GIB,
                vcpu_nodes=(0,), first_touch=(0,), leave_at=8)),
            duration=20, arrival_interval=1, measure=21).validate()
        timeline = runner.Timeline(s)
        segments = timeline.segments()
        self.assertGreaterEqual(len(segments), 2)
        res = runner.run_policy(s, 'nova-default')
        self.assertEqual({'a', 'b'}, set(res.throughput))

    def test_every_policy_on_a_scenario(self):
        s = scenarios.get('interconnect-4')
        results = runner.run(s)
        self.assertEqual(set(runner.DEFAULT_POLICIES), set(results))
        for name, res in results.items():
            self.assertEqual(4, len(res.throughput), name)
        for name, res in results.items():
            self.assertLessEqual(res.mean,
                                 results['oracle'].mean + 1e-9, name)

    def test_unknown_policy(self):
        self.assertRaises(ValueError, runner.run, scenarios.get('llc-2'),
                          ('nova-default', 'magic'))


class TestClusterScheduler(testtools.TestCase):
    """The simulated nova-scheduler weighs as Nova does by default."""

    def hosts(self):
        out = {}
        for name in ('h1', 'h2'):
            out[name] = host_mod.Host(two_nodes(32))
        return out

    def add(self, host, name, vcpus, memory_mb):
        guest = host_mod.Guest(name=name, profile=presets.PROFILES['ycsb'],
                               vcpus=vcpus, memory_mb=memory_mb,
                               cpu={0: 1.0}, first_touch=(0,))
        host.add(guest)
        return guest

    def test_nova_default_weighers(self):
        from nova_numa_overhead.sim import cluster
        sched = cluster.Scheduler(None, False, 'numa-overhead-test')
        self.addCleanup(sched.close)
        # [filter_scheduler] weight_classes = all_weighers: of them, the
        # RAM and CPU weighers see the simulated hosts differ.
        self.assertEqual(['RAMWeigher', 'CPUWeigher'],
                         [type(w).__name__ for w in sched.weighers])
        hosts = self.hosts()
        # h1: more free memory, h2: far fewer vCPUs used; the CPU weigher
        # (free vCPUs at Nova's initial allocation ratio) decides.
        self.add(hosts['h1'], 'a', 8, 1024)
        self.add(hosts['h1'], 'b', 8, 1024)
        self.add(hosts['h2'], 'c', 1, 4096)
        states = {s.host: s for s in cluster._host_states(hosts)}
        # Nova's resource tracker: what the flavors claim, touched or not,
        # and the memory reserved for the host.
        total = 2 * 32 * GIB
        self.assertEqual(total, states['h1'].total_usable_ram_mb)
        self.assertEqual(total - 512 - 2048, states['h1'].free_ram_mb)
        self.assertEqual(total - 512 - 4096, states['h2'].free_ram_mb)
        self.assertEqual(16, states['h1'].vcpus_used)
        self.assertEqual(1, states['h2'].vcpus_used)
        self.assertEqual(sum(n.cpus for n in two_nodes(32).nodes),
                         states['h1'].vcpus_total)
        self.assertEqual(4.0, states['h1'].cpu_allocation_ratio)
        self.assertEqual('h2', sched.pick(list(states.values()), 1024, {},
                                          vcpus=2))

    def test_options_of_the_scheduler_side_last_one_run(self):
        from nova_numa_overhead.sim import cluster
        options = {'numa_overhead': {'weight_multiplier': 0.5},
                   'numa_overhead_agent': {'guest_floor': 0.5}}
        sched = cluster.Scheduler(None, True, 'numa-overhead-test', options)
        self.addCleanup(sched.close)
        self.assertEqual(0.5, sched.conf.numa_overhead.weight_multiplier)
        sched.close()
        # The process's configuration: the next run starts from the
        # defaults.
        self.assertEqual(0.0, sched.conf.numa_overhead.weight_multiplier)
        # The runs of the other policies have no weigher of ours to set.
        sched = cluster.Scheduler(None, False, 'numa-overhead-test', options)
        self.addCleanup(sched.close)
        self.assertEqual(0.0, sched.conf.numa_overhead.weight_multiplier)

    def small_cluster(self):
        scenario = scenarios.get('cluster')
        return dataclasses.replace(scenario, guests=scenario.guests[:6],
                                   hosts=2, duration=20, measure=10)

    def test_options_reach_a_clusters_agents_and_weigher(self):
        from nova_numa_overhead.scheduler import weighers
        seen = {'floor': [], 'multiplier': []}
        real_new = policies.new

        def new(name, options=None):
            made = real_new(name, options)
            real_attach = made.attach

            def attach(hv, scenario=None):
                real_attach(hv, scenario)
                if hasattr(made, 'conf'):
                    seen['floor'].append(
                        made.conf.numa_overhead_agent.guest_floor)
            made.attach = attach
            return made
        real_weigh = weighers.NUMAOverheadWeigher.weigh_objects

        def weigh(weigher, weighed_obj_list, spec_obj):
            seen['multiplier'].append(weigher.weight_multiplier(
                weighed_obj_list[0].obj))
            return real_weigh(weigher, weighed_obj_list, spec_obj)
        self.useFixture(fixtures.MonkeyPatch(
            'nova_numa_overhead.sim.policies.new', new))
        self.useFixture(fixtures.MonkeyPatch(
            'nova_numa_overhead.scheduler.weighers.NUMAOverheadWeigher.'
            'weigh_objects', weigh))
        results = sim_cluster.run(
            self.small_cluster(), ('nova-default', 'overhead-aware'),
            options={'numa_overhead': {'weight_multiplier': 0.25},
                     'numa_overhead_agent': {'guest_floor': 0.5}})
        self.assertEqual({'nova-default', 'overhead-aware'}, set(results))
        # Both hosts' agents; Nova's default has none.
        self.assertEqual([0.5, 0.5], seen['floor'])
        self.assertEqual({'guest', 'neighbours'},
                         set(results['overhead-aware'].extra['predictions']))
        self.assertNotIn('predictions', results['nova-default'].extra)
        # Every host's agent's predictions, together.
        merged = runner.predictions([
            types.SimpleNamespace(agent=types.SimpleNamespace(
                optimizer=types.SimpleNamespace(predictions={
                    'guest': [(1.1, 1.0)], 'neighbours': [(0.9, 1.0)]})))
            for _ in range(2)])
        self.assertEqual({'guest': [[1.1, 1.0]] * 2,
                          'neighbours': [[0.9, 1.0]] * 2}, merged)
        # And their moves against the simulated steady state.
        self.assertEqual({'guest', 'neighbours'},
                         set(results['overhead-aware'].extra['steady']))
        self.assertNotIn('steady', results['nova-default'].extra)
        merged = runner.steady([
            types.SimpleNamespace(steady={'guest': [(1.1, 1.2)],
                                          'neighbours': [(0.9, 0.95)]})
            for _ in range(2)])
        self.assertEqual({'guest': [[1.1, 1.2]] * 2,
                          'neighbours': [[0.9, 0.95]] * 2}, merged)
        self.assertTrue(seen['multiplier'])
        self.assertEqual({0.25}, set(seen['multiplier']))
        import nova.conf
        self.assertEqual(0.0, nova.conf.CONF.numa_overhead.weight_multiplier)

    def test_a_clusters_predictions_are_every_agents(self):
        calls = []
        real = runner.predictions
        self.useFixture(fixtures.MonkeyPatch(
            'nova_numa_overhead.sim.runner.predictions',
            lambda pols: calls.append(list(pols)) or real(pols)))
        sim_cluster.run(self.small_cluster(), ('overhead-aware',))
        self.assertEqual([2], [len(c) for c in calls])

    def test_options_do_not_outlive_a_failed_cluster_run(self):
        import nova.conf

        def broken(name, options=None):
            raise ValueError('an agent that cannot start')
        self.useFixture(fixtures.MonkeyPatch(
            'nova_numa_overhead.sim.policies.new', broken))
        self.assertRaises(
            ValueError, sim_cluster.run_policy, self.small_cluster(),
            'overhead-aware',
            options={'numa_overhead': {'weight_multiplier': 0.25}})
        self.assertEqual(0.0, nova.conf.CONF.numa_overhead.weight_multiplier)

    def test_placement_offers_only_hosts_that_hold_the_request(self):
        from nova_numa_overhead.sim import cluster
        sched = cluster.Scheduler(None, False, 'numa-overhead-test')
        self.addCleanup(sched.close)
        hosts = self.hosts()
        # 8 host CPUs at 4.0: 32 vCPUs each. h1: 30 used, 48 GiB claimed;
        # h2: 31 used, 1 GiB. The RAM weigher prefers h2 more than the
        # CPU weigher prefers h1, but 2 more vCPUs do not fit on h2.
        self.add(hosts['h1'], 'a', 8, 16 * GIB)
        self.add(hosts['h1'], 'b', 8, 16 * GIB)
        self.add(hosts['h1'], 'c', 14, 16 * GIB)
        self.add(hosts['h2'], 'd', 31, 1 * GIB)
        states = cluster._host_states(hosts)
        self.assertEqual('h1', sched.pick(states, 4 * GIB, {}, vcpus=2))
        self.assertEqual('h2', sched.pick(states, 4 * GIB, {}, vcpus=1))
        # Neither holds 17 GiB and 2 vCPUs: Nova would fail the build; the
        # simulation lets the weighers choose among every host.
        self.assertEqual('h2', sched.pick(states, 17 * GIB, {}, vcpus=2))
        # The plugin's filter gets what placement offers, as in Nova.
        seen = []

        class Everything(filters.BaseHostFilter):
            def host_passes(self, host_state, spec_obj):
                seen.append(host_state.host)
                return True
        sched.filters = [Everything()]
        self.assertEqual('h1', sched.pick(states, 4 * GIB, {}, vcpus=2))
        self.assertEqual(['h1'], seen)

    def test_the_reports_of_second_0_are_waited_for(self):
        # An agent that reported at second 0 has last_report 0.0: its
        # report was not waited for, and whether it was in the store at
        # the next arrival depended on the listener thread's timing.
        import threading
        import types

        cluster = sim_cluster

        class Sent:
            def publish(self, report):
                return True

        class Store:
            def __init__(self):
                self.entries = {}

            def get(self, host):
                return self.entries.get(host)

        publisher = cluster._Publisher(Sent())
        agent = types.SimpleNamespace(seq=1, last_report=0.0)
        pols = {'h1': types.SimpleNamespace(agent=agent,
                                            publisher=publisher)}
        store = Store()
        cluster._wait_for_reports(store, pols, timeout=0.05)
        self.assertTrue(publisher.publish(types.SimpleNamespace(seq=1)))
        self.assertEqual(1, publisher.sent)
        self.assertRaises(cluster.ClusterError, cluster._wait_for_reports,
                          store, pols, timeout=0.05)
        entry = types.SimpleNamespace(report=types.SimpleNamespace(seq=1))
        timer = threading.Timer(0.05, store.entries.__setitem__,
                                ('h1', entry))
        timer.start()
        self.addCleanup(timer.cancel)
        cluster._wait_for_reports(store, pols, timeout=5)
        self.assertIs(entry, store.get('h1'))

    def test_a_report_not_sent_stops_the_run(self):
        import types

        class Down:
            def publish(self, report):
                return False

        publisher = sim_cluster._Publisher(Down())
        self.assertFalse(publisher.publish(types.SimpleNamespace(seq=4)))
        self.assertFalse(publisher.publish(types.SimpleNamespace(seq=5)))
        pols = {'h1': types.SimpleNamespace(publisher=publisher)}
        error = self.assertRaises(sim_cluster.ClusterError,
                                  sim_cluster._wait_for_reports, None, pols)
        self.assertEqual('report 4 of h1 could not be sent', str(error))


class TestNoHarm(testtools.TestCase):
    """The default configuration never gets a guest killed out of memory
    by confining it (issue 10). Before the room check counted what guests
    have yet to touch, each of these lost guests: the built-ins whose
    memory is nearly full, and scenarios of the tuning sweep (seed 101).
    """

    def assertNoKills(self, scenario):
        result = runner.run_policy(scenario, policies.DEFAULT)
        self.assertEqual(0, result.oom_kills, scenario.description)
        self.assertTrue(all(v > 0 for v in result.throughput.values()),
                        result.throughput)

    def test_builtins_nearly_full(self):
        for name in ('memory-16g', 'memory-32g'):
            self.assertNoKills(scenarios.get(name))

    def test_sweep_scenarios(self):
        for index in (20, 36, 42):
            scenario = sweep.generate(101, index)
            self.assertEqual(1, scenario.hosts)
            self.assertNoKills(scenario)


class TestOursAsShipped(testtools.TestCase):
    """The simulator runs the agent as the docs recommend, nothing else."""

    def test_configuration(self):
        from oslo_config import cfg

        from nova_numa_overhead import conf as plugin_conf
        from nova_numa_overhead.conf import agent as agent_conf
        host = host_mod.Host(presets.ibm_x3850(4))
        policy = policies.OverheadAware()
        policy.attach(backend.SimHypervisor(host))
        defaults = plugin_conf.register_opts(cfg.ConfigOpts())
        defaults([])
        for group in ('numa_overhead', 'numa_overhead_agent'):
            for name in defaults[group]:
                want = agent_conf.PRODUCTION.get(name, defaults[group][name]) \
                    if group == 'numa_overhead_agent' else \
                    defaults[group][name]
                self.assertEqual(want, policy.conf[group][name],
                                 '[%s] %s' % (group, name))

    def test_first_placement_local_paper_method_remote(self):
        host = host_mod.Host(presets.ibm_x3850(4))
        ours = policies.OverheadAware()
        ours.attach(backend.SimHypervisor(host))
        self.assertFalse(ours.conf.numa_overhead_agent.remote_placement)
        self.assertFalse(ours.agent.placer.remote)
        paper = policies.PaperMethod()
        paper.attach(backend.SimHypervisor(host_mod.Host(
            presets.ibm_x3850(4))))
        self.assertTrue(paper.conf.numa_overhead_agent.remote_placement)
        self.assertTrue(paper.agent.placer.remote)
        self.assertFalse(paper.conf.numa_overhead_agent.optimize)

    def test_the_docs_recommend_it(self):
        from nova_numa_overhead.conf import agent as agent_conf
        path = os.path.join(os.path.dirname(__file__), '..', '..', '..',
                            'doc', 'source', 'admin', 'deployment.rst')
        with open(path) as f:
            text = f.read()
        block = text.split('.. production-configuration-start')[1].split(
            '.. production-configuration-end')[0]
        lines = [line.strip() for line in block.splitlines()
                 if '=' in line and not line.strip().startswith('#')]
        self.assertEqual(sorted('%s = %s' % kv for kv in
                                agent_conf.PRODUCTION.items()),
                         sorted(lines))


class TestCommand(testtools.TestCase):

    def run_cli(self, *argv):
        out = self.useFixture(fixtures.StringStream('stdout'))
        err = self.useFixture(fixtures.StringStream('stderr'))
        self.useFixture(fixtures.MonkeyPatch('sys.stdout', out.stream))
        self.useFixture(fixtures.MonkeyPatch('sys.stderr', err.stream))
        rc = cli_main.main(list(argv))
        out.stream.flush()
        err.stream.flush()
        return rc, out.getDetails()['stdout'].as_text(), \
            err.getDetails()['stderr'].as_text()

    def test_table_fits_80_columns_and_json(self):
        rc, out, _ = self.run_cli('simulate', '--scenario', 'remote-2',
                                  '--quiet')
        self.assertEqual(0, rc)
        self.assertLessEqual(max(len(line) for line in out.splitlines()), 80)
        self.assertIn('default configuration (ours)', out)
        rc, out, _ = self.run_cli('simulate', '--scenario', 'remote-2',
                                  '--quiet', '--format', 'json')
        data = json.loads(out)
        self.assertEqual('overhead-aware', data['default'])
        for name, p in data['policies'].items():
            for key in ('mean_throughput', 'vs_nova_default', 'normalised',
                        'moved_mb'):
                self.assertIn(key, p, name)
        self.assertIn('memory_mb', data['guests']['vm1'])
        self.assertIsNotNone(data['fraction_of_oracle'])
        self.assertIn(data['oracle']['kind'], ('exhaustive', 'best-known'))
        # What the optimizer predicted beside what was measured, for ours
        # only (no move judged here).
        self.assertEqual({'guest': [], 'neighbours': []},
                         data['predictions'])
        self.assertEqual({'judged': 0}, data['calibration']['guest'])
        self.assertNotIn('predictions', data['agent'])
        self.assertNotIn('steady', data['agent'])
        self.assertEqual(set(data['steady']),
                         set(data['steady_calibration']))

    def test_bad_scenario_is_one_line(self):
        path = self.useFixture(fixtures.TempDir()).path + '/bad.toml'
        with open(path, 'w') as f:
            f.write('[[guests]]\nmemry_gb = 4\n')
        rc, out, err = self.run_cli('simulate', '--scenario-file', path)
        self.assertEqual(2, rc)
        self.assertEqual(1, len(err.strip().splitlines()))
        self.assertIn('memry_gb', err)
        self.assertNotIn('Traceback', err)

    def test_lost_report_is_one_line(self):
        def lost(*args, **kwargs):
            raise sim_cluster.ClusterError(
                'report 1 of host-1 did not reach the scheduler in 60 s')
        self.useFixture(fixtures.MonkeyPatch(
            'nova_numa_overhead.sim.cluster.run', lost))
        rc, out, err = self.run_cli('simulate', '--scenario', 'cluster',
                                    '--quiet')
        self.assertEqual(1, rc)
        self.assertEqual('', out)
        self.assertEqual(['nova-numa-overhead simulate: report 1 of host-1 '
                          'did not reach the scheduler in 60 s'],
                         err.strip().splitlines())

    def test_sweep_json(self):
        rc, out, _ = self.run_cli('simulate', '--sweep', '2', '--seed', '5',
                                  '--quiet', '--format', 'json',
                                  '--workers', '1', '--policies',
                                  'nova-default,overhead-aware,oracle')
        self.assertEqual(0, rc)
        data = json.loads(out)
        self.assertEqual(2, len(data['scenarios']))
        row = data['scenarios'][0]
        self.assertEqual('sweep-5-0', row['name'])
        self.assertIn('guests', row['scenario'])
        self.assertEqual('overhead-aware', row['default'])
        # The cost model's predictions at the verdicts, over the sweep.
        for kind in ('guest', 'neighbours'):
            pairs = [p for r in data['scenarios']
                     for p in r['predictions'][kind]]
            self.assertTrue(pairs, kind)
            for predicted, measured in pairs:
                self.assertGreater(predicted, 0)
                self.assertGreater(measured, 0)
            self.assertEqual(len(pairs),
                             data['summary']['calibration'][kind]['judged'])
            # And every move's, beside the simulated steady state.
            steady = [p for r in data['scenarios']
                      for p in r['steady'][kind]]
            self.assertGreaterEqual(len(steady), len(pairs), kind)
            self.assertEqual(
                len(steady),
                data['summary']['steady_calibration'][kind]['judged'])
        rc, out, _ = self.run_cli('simulate', '--sweep', '2', '--seed', '5',
                                  '--quiet', '--workers', '1', '--policies',
                                  'nova-default,overhead-aware')
        self.assertEqual(0, rc)
        self.assertIn('cost model at the verdicts: moved guests %d,' % len(
            [p for r in data['scenarios'] for p in r['predictions']['guest']]
        ), out)
        self.assertIn('cost model against the simulated steady state of '
                      'its moves: moved guests %d,' % len(
                          [p for r in data['scenarios']
                           for p in r['steady']['guest']]),
                      ' '.join(out.split()))
        text = out[out.index('cost model'):]
        self.assertLessEqual(max(len(line) for line in text.splitlines()),
                             80)

    def test_set_an_option_of_ours(self):
        seen = []
        real = policies.production_conf

        def conf(overrides=None):
            made = real(overrides)
            seen.append((made.numa_overhead_agent.guest_floor,
                         made.numa_overhead_agent.optimize))
            return made
        self.useFixture(fixtures.MonkeyPatch(
            'nova_numa_overhead.sim.policies.production_conf', conf))
        rc, out, err = self.run_cli(
            'simulate', '--scenario', 'remote-2', '--quiet', '--format',
            'json', '--policies', 'nova-default,overhead-aware,liu-li',
            '--set', 'numa_overhead_agent.guest_floor=0.5',
            '--set', 'numa_overhead_agent.optimize=true')
        self.assertEqual(0, rc, err)
        data = json.loads(out)
        self.assertEqual({'numa_overhead_agent': {
            'guest_floor': 0.5, 'optimize': True}}, data['options'])
        # Checked once (the agent's own checks), then ours and liu-li
        # read it; liu-li's own overrides still win.
        self.assertEqual([(0.5, True), (0.5, True), (0.5, False)], seen)
        self.assertIn('overhead-aware', data['policies'])

    def test_bad_command_lines_are_one_line(self):
        cases = [
            (('--scenario', 'remote-2', '--policies', ''),
             "--policies '': expected comma-separated policy names"),
            (('--scenario', 'remote-2', '--policies', 'numad,'),
             'expected comma-separated policy names'),
            (('--sweep', '2', '--workers', '100000'),
             '--workers from 1 to 256'),
            (('--all', '--policies', 'nova-default,numad'),
             '--policies must name both'),
        ]
        for args, want in cases:
            rc, out, err = self.run_cli('simulate', '--quiet', *args)
            self.assertEqual(2, rc, args)
            self.assertIn(want, err)
            self.assertEqual(1, len(err.strip().splitlines()), err)

    def test_another_seed_is_checked_again(self):
        # Two 100 GB guests on 128 GB, one leaving a second after it
        # arrives: they fit only in the file's order (seed 1: b first).
        path = self.useFixture(fixtures.TempDir()).path + '/s.toml'
        with open(path, 'w') as f:
            f.write('host = "ibm-x3850-2s"\nseed = 1\n'
                    '[[guests]]\nname = "a"\nmemory_gb = 100\n'
                    '[[guests]]\nname = "b"\nmemory_gb = 100\n'
                    'leave_at = 1\n')
        scenario = scenarios.load(path)
        self.assertEqual(['b', 'a'], [p.name for _, p in scenario.arrivals()])
        rc, out, err = self.run_cli('simulate', '--quiet', '--scenario-file',
                                    path, '--seed', '5')
        self.assertEqual(2, rc)
        self.assertIn('overcommitted', err)

    def test_set_options_no_policy_reads_are_warned_of(self):
        rc, out, err = self.run_cli(
            'simulate', '--scenario', 'remote-2', '--quiet', '--policies',
            'nova-default,numad', '--set',
            'numa_overhead_agent.guest_floor=0.5', '--set',
            'numa_overhead.weight_multiplier=1.0')
        self.assertEqual(0, rc, err)
        lines = err.strip().splitlines()
        self.assertEqual(2, len(lines), err)
        self.assertIn('numa_overhead_agent options set (guest_floor)',
                      lines[0])
        self.assertIn('numa_overhead options set (weight_multiplier): '
                      'only overhead-aware in a cluster does', lines[1])
        # Read: liu-li reads the agent's; a sweep may hold clusters.
        rc, out, err = self.run_cli(
            'simulate', '--scenario', 'remote-2', '--quiet', '--policies',
            'nova-default,liu-li', '--set',
            'numa_overhead_agent.guest_floor=0.5')
        self.assertEqual(0, rc, err)
        self.assertEqual('', err)
        self.assertEqual([], sim_cli.unread(
            {'numa_overhead': {'weight_multiplier': 1.0}},
            ('nova-default', 'overhead-aware')))
        self.assertEqual(['numa_overhead'], sim_cli.unread(
            {'numa_overhead': {'weight_multiplier': 1.0}},
            ('nova-default', 'liu-li')))
        self.assertEqual(['numa_overhead'], sim_cli.unread(
            {'numa_overhead': {'weight_multiplier': 1.0}}, None,
            clusters=False))
        self.assertEqual([], sim_cli.unread(
            {'numa_overhead_agent': {'guest_floor': 0.5}}, None))

    def test_set_applies_to_every_scenario_of_a_sweep(self):
        jobs = []
        self.useFixture(fixtures.MonkeyPatch(
            'nova_numa_overhead.sim.sweep.run_jobs',
            lambda js, workers, progress: jobs.extend(js) or {
                'scenarios': []}))
        self.useFixture(fixtures.MonkeyPatch(
            'nova_numa_overhead.sim.sweep.distribution', lambda data: {}))
        rc, out, err = self.run_cli(
            'simulate', '--sweep', '3', '--quiet', '--format', 'json',
            '--set', 'numa_overhead.weight_multiplier=1.0')
        self.assertEqual(0, rc, err)
        options = {'numa_overhead': {'weight_multiplier': 1.0}}
        self.assertEqual([options] * 3, [job[3] for job in jobs])
        self.assertEqual(options, json.loads(out)['options'])

    def test_a_sweep_job_runs_with_its_options(self):
        calls = []
        self.useFixture(fixtures.MonkeyPatch(
            'nova_numa_overhead.sim.cli.simulate',
            lambda scenario, policies, options=None: calls.append(
                options) or {}))
        self.useFixture(fixtures.MonkeyPatch(
            'nova_numa_overhead.sim.report.summary',
            lambda scenario, results: {'scenario': scenario.name}))
        options = {'numa_overhead_agent': {'guest_floor': 0.5}}
        row = sweep._run_one(('sweep', (5, 0), None, options))
        self.assertEqual('sweep-5-0', row['name'])
        self.assertEqual([options], calls)

    def test_set_twice_or_with_list_is_one_line(self):
        for argv in (('--scenario', 'remote-2', '--set',
                      'numa_overhead_agent.guest_floor=0.5', '--set',
                      'numa_overhead_agent.guest_floor=0.6'),
                     ('--list', '--set', 'numa_overhead_agent.x=1')):
            rc, out, err = self.run_cli('simulate', '--quiet', *argv)
            self.assertEqual(2, rc)
            self.assertEqual('', out)
            self.assertEqual(1, len(err.strip().splitlines()), err)

    def test_bad_set_is_one_line(self):
        for item, text in (
                ('numa_overhead_agent.guest_floor=2', 'guest_floor=2: '),
                ('numa_overhead_agent.guest_floor=x', 'guest_floor=x: '),
                ('numa_overhead_agent.nope=1',
                 'no option numa_overhead_agent.nope'),
                ('numa_overhead_agent.guest_floor=',
                 'numa_overhead_agent.guest_floor: no value'),
                ('numa_overhead_agent.llc_thresholds=3,2,1',
                 'llc thresholds must be strictly ascending'),
                ('numa_overhead.transport_url=fake://',
                 'set by the simulator (--transport-url)'),
                ('numa_overhead.report_ttl=5', 'set by the simulator'),
                ('numa_overhead_agent.topology_file=/etc/passwd',
                 'set by the simulator'),
                ('libvirt.x=1', "group 'libvirt'"),
                ('guest_floor=0.9', 'expected GROUP.OPTION=VALUE'),
                ('numa_overhead_agent.guest_floor',
                 'expected GROUP.OPTION=VALUE')):
            for mode in (('--scenario', 'remote-2'), ('--sweep', '2')):
                rc, out, err = self.run_cli('simulate', *mode, '--quiet',
                                            '--set', item)
                self.assertEqual(2, rc, item)
                self.assertEqual('', out)
                lines = err.strip().splitlines()
                self.assertEqual(1, len(lines), err)
                self.assertIn(text, lines[0])
                self.assertTrue(lines[0].startswith(
                    'nova-numa-overhead simulate: --set'), lines[0])


class TestReport(testtools.TestCase):

    def test_headline_is_the_default_configuration(self):
        s = scenarios.get('remote-2')
        results = runner.run(s, ('nova-default', 'numad', 'overhead-aware'))
        data = report.summary(s, results)
        self.assertEqual('overhead-aware', data['default'])
        self.assertEqual('numad', data['best_other'])
        text = report.table(data)
        self.assertIn('vs the best other (numad)', text)

    def test_progress_without_a_terminal(self):
        stream = self.useFixture(fixtures.StringStream('p')).stream
        progress = report.Progress('x', stream=stream)
        progress.start(100)
        for _ in range(100):
            progress.tick()
        progress.done()

    def test_plot(self):
        s = scenarios.get('remote-2')
        data = report.summary(s, runner.run(s))
        path = self.useFixture(fixtures.TempDir()).path + '/f.png'
        report.plot(data, path)
        self.assertGreater(os.path.getsize(path), 1000)


class TestHypervisorInterface(testtools.TestCase):

    def test_gone_and_pinned(self):
        host = host_mod.Host(presets.ibm_x3850(4))
        hv = backend.SimHypervisor(host)
        hv.start(guest('p', pinned=True), preallocate=True)
        dom = hv.domains()[0]
        self.assertTrue(dom.pinned)
        self.assertRaises(hv_mod.HypervisorError, hv.set_nodeset, dom, [1])
        hv.stop('p')
        self.assertRaises(hv_mod.DomainGone, hv.memory_per_node, dom)

    def test_the_real_agent_places_on_the_model(self):
        s = dataclasses.replace(scenarios.get('remote-4'), balancing=False)
        res = runner.run(s, ('nova-default', 'overhead-aware'))
        self.assertGreater(res['overhead-aware'].mean,
                           res['nova-default'].mean)
