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
"""The agent end to end on real processes standing in for guests.

The backend below is real everywhere the kernel is involved: topology and
free memory from sysfs, memory per node from the cgroup's memory.numa_stat,
the vCPU's node from /proc, the nodeset through cpuset.mems and the pages
through the agent's page picker (what the privileged helpers run once
they verified a domain's QEMU: these processes are none). Only the
hardware counters are scripted: under TCG there is no PMU, and they are
the workload signal (a memory-bound guest) the levels are computed from.
"""

import dataclasses
import os
import uuid as uuid_mod

from nova_numa_overhead.compute import agent as agent_mod
from nova_numa_overhead.compute import cgroups
from nova_numa_overhead.compute import hypervisor as hv_mod
from nova_numa_overhead.compute import kernel
from nova_numa_overhead.compute import numa_stat
from nova_numa_overhead.compute import optimizer
from nova_numa_overhead.compute import probe
from tests import base as tests_base
from tests.numa import base
from tests.numa import helpers
from tests.unit.compute import fakes

NODE_SYSFS = '/sys/devices/system/node'


def _node_file(node, name):
    with open(os.path.join(NODE_SYSFS, 'node%d' % node, name)) as f:
        return f.read()


class ProcessHypervisor(hv_mod.Hypervisor):
    """Processes as guests, on the running kernel."""

    def __init__(self):
        self.guests = {}
        self.counter = {}
        self.mover = helpers.page_mover()

    def add(self, name, pid, memory_mb, extra_specs):
        self.guests[name] = hv_mod.DomainInfo(
            name=name, uuid=str(uuid_mod.uuid4()), memory_mb=memory_mb,
            vcpus=1, extra_specs=extra_specs, pid=pid)
        self.counter[name] = hv_mod.DomainCounters(0, 0, 0, 0, 0)

    # Scripted counters, advanced like the unit tests' fake hypervisor's.
    run = fakes.FakeHypervisor.run

    def topology(self):
        cpus = probe.host_nodes()
        nodes = tuple(hv_mod.NodeInfo(
            n, tuple(cpus[n]), numa_stat.parse_node_meminfo(
                _node_file(n, 'meminfo'))['MemTotal'] // 1024)
            for n in sorted(cpus))
        distances = tuple(tuple(int(d) for d in _node_file(
            n, 'distance').split()) for n in sorted(cpus))
        return hv_mod.HostTopology(nodes=nodes, distances=distances)

    def free_memory_mb(self):
        return list(numa_stat.host_free_memory_mb().values())

    def domains(self):
        result = []
        for domain in self.guests.values():
            nodes = cgroups.memory_nodes(domain.pid)
            result.append(dataclasses.replace(domain, allowed_nodes=nodes))
        return result

    def enable_counters(self, domain):
        return True

    def counters(self, domains):
        return {d.name: self.counter[d.name] for d in domains}

    def vcpu_cpus(self, domain):
        with open('/proc/%d/stat' % domain.pid) as f:
            fields = f.read().rsplit(')', 1)[1].split()
        return [int(fields[36])]

    def memory_per_node(self, domain):
        return numa_stat.read_cgroup_numa_stat(domain.pid)

    def set_nodeset(self, domain, nodes):
        cgroups.set_memory_nodes(domain.pid, list(nodes))

    def move_pages(self, domain, moves, max_pages):
        return self.mover((domain.pid,), moves, max_pages)

    def pin_vcpus(self, domain, cpus):
        os.sched_setaffinity(domain.pid, set(cpus))

    def kernel_state(self):
        return kernel.read()


class FakePublisher:

    def publish(self, report):
        return True


class TestAgentOnProcesses(base.TestCase, tests_base.TestCase):

    def setUp(self):
        super().setUp()
        self.hv = ProcessHypervisor()
        self.flags(group='numa_overhead_agent', enforcement='pages',
                   reserve_mb=16, migrate_rate_mb_per_s=0)

    def guest(self, name, parts, cpu, extra_specs):
        fixture = self.useFixture(base.HelperFixture(
            parts, cgroup_name='agent-%s' % name))
        os.sched_setaffinity(fixture.helper.pid, {cpu})
        # Run it once there: the agent reads the CPU it last ran on.
        fixture.helper.touch([0])
        self.hv.add(name, fixture.helper.pid,
                    sum(mb for _n, mb in parts), extra_specs)
        return fixture.helper

    def test_placement_with_pages_enforcement(self):
        self.guest('a', [(0, 64)], 0, {'numa_overhead:policy': 'spread'})
        agent = agent_mod.Agent(self.conf, self.hv, FakePublisher(), 'vm')
        self.assertTrue(agent.cycle())
        decision = agent.decisions['a']
        self.assertEqual('moved', decision.action, decision)
        plan = sorted(decision.plan)
        self.assertGreater(len(plan), 1, decision)
        pid = self.hv.guests['a'].pid
        # All nodes: the cgroup allows them all.
        self.assertEqual(tuple(plan), cgroups.memory_nodes(pid))
        measured = self.hv.memory_per_node(self.hv.guests['a'])
        for node, mb in measured.items():
            if node not in plan:
                self.assertLess(mb, 1, measured)
        for node, share in decision.plan.items():
            self.assertGreaterEqual(measured[node], share - 4,
                                    (decision, measured))

    def test_steps_back_while_numad_runs(self):
        # A process named numad on the real kernel.
        numad = helpers.fake_numad(self)
        now = [1000.0]
        self.guest('a', [(0, 64)], 0, {'numa_overhead:policy': 'spread'})
        pid = self.hv.guests['a'].pid
        before = cgroups.memory_nodes(pid)
        agent = agent_mod.Agent(self.conf, self.hv, FakePublisher(), 'vm',
                                clock=lambda: now[0])
        self.assertTrue(agent.cycle())
        self.assertEqual((numad.pid,), agent.kernel.numad)
        self.assertIsNotNone(agent.kernel.numa_balancing)
        self.assertEqual('skipped', agent.decisions['a'].action)
        self.assertIn('numad (pid %d)' % numad.pid,
                      agent.decisions['a'].reason)
        self.assertEqual(before, cgroups.memory_nodes(pid))
        where = self.hv.memory_per_node(self.hv.guests['a'])
        # All on node 0 still (the cgroup counts a little besides the 64
        # MiB of the test's pages).
        self.assertEqual({0}, {n for n, mb in where.items() if mb})
        # numad gone: the agent acts again (the guest placed anew once it
        # starts again; here, placed as the agent would on a start).
        numad.kill()
        numad.wait()
        now[0] += agent_mod.KERNEL_CHECK
        self.assertTrue(agent.cycle())
        self.assertIsNone(agent.stepped_back)
        decision = agent.place(self.hv.domains()[0])
        self.assertEqual('moved', decision.action, decision)

    def test_rebalancer_moves_off_a_hot_node(self):
        self.flags(group='numa_overhead_agent', rebalance_threshold=3)
        hot = self.guest('hot', [(0, 64)], 0,
                         {'numa_overhead:policy': 'local'})
        agent = agent_mod.Agent(self.conf, self.hv, FakePublisher(), 'vm')
        for _ in range(3):
            # Memory-controller bound: cycle loss 0.9, hit rate 0.6.
            self.hv.run('hot', 300000, 1000000, 100000, 40000, 900000)
            agent.cycle()
        self.assertEqual({0: 64}, hot.nodes_mb())
        moves = agent.rebalance()
        self.assertTrue(moves)
        moved_away = sum(m.mb for m in moves if m.src == 0)
        self.assertGreater(moved_away, 0)
        where = hot.nodes_mb()
        # What the rebalancer moved is where it said, within the cgroup's
        # (widened) nodes.
        self.assertLess(where.get(0, 0), 64)
        allowed = cgroups.memory_nodes(hot.pid)
        self.assertEqual(set(), set(where) - set(allowed))
        for move in moves:
            self.assertGreater(where.get(move.dst, 0), 0, (moves, where))
        self.assertEqual({}, dict(agent.failures))

    def test_rebalancer_exchanges_with_a_full_node(self):
        self.flags(group='numa_overhead_agent', rebalance_threshold=3)
        hot = self.guest('hot', [(0, 64)], 0,
                         {'numa_overhead:policy': 'local'})
        cold = self.guest('cold', [(1, 64)], 1,
                          {'numa_overhead:policy': 'local'})
        agent = agent_mod.Agent(self.conf, self.hv, FakePublisher(), 'vm')
        for _ in range(3):
            # hot: memory-controller bound; cold: idle.
            self.hv.run('hot', 300000, 1000000, 100000, 40000, 900000)
            self.hv.run('cold', 1000000, 1000000, 1000, 10, 1000)
            agent.cycle()
        self.assertEqual({0: 64}, hot.nodes_mb())
        self.assertEqual({1: 64}, cold.nodes_mb())
        # Every node "full": no room above the reserve anywhere, so the
        # rebalancer can only swap pages with a guest on the target node.
        self.flags(group='numa_overhead_agent', reserve_mb=1 << 20)
        moves = agent.rebalance()
        reasons = {(m.guest, m.src, m.dst): m.reason for m in moves}
        self.assertEqual('exchange with cold', reasons.get(('hot', 0, 1)),
                         moves)
        self.assertEqual('exchange with hot', reasons.get(('cold', 1, 0)),
                         moves)
        hot_mb, cold_mb = hot.nodes_mb(), cold.nodes_mb()
        self.assertGreater(hot_mb.get(1, 0), 0, hot_mb)
        self.assertGreater(cold_mb.get(0, 0), 0, cold_mb)
        self.assertEqual({}, dict(agent.failures))

    def measured(self):
        """Guest 'a' (64 MiB on node 0, its vCPU there) and an agent that
        measured it for a loop window; no optimizer pass of its own (the
        tests make the moves). Returns (guest, agent, advance), advance()
        being one more second of the guest, sampled.
        """
        self.flags(group='numa_overhead_agent', optimize_interval=3600)
        clock = [1000.0]
        guest = self.guest('a', [(0, 64)], 0, {})
        agent = agent_mod.Agent(self.conf, self.hv, FakePublisher(), 'vm',
                                clock=lambda: clock[0],
                                sleep=lambda s: None)

        def advance():
            clock[0] += 1
            self.hv.run('a', 1000000, 2000000, 40000, 20000, 0)
            agent.cycle()
        for _ in range(agent.opts.loop_window + 1):
            advance()
        return guest, agent, advance

    def moved_and_undone(self, guest, agent, moved_mb):
        """The optimizer moves 'a', vCPU and memory, to node 1 (all its
        pages go there); it runs half as fast after it, and the verdict
        undoes it. Returns the undo the move was given.
        """
        opt = agent.optimizer
        node1 = tuple(agent.topology.nodes[1].cpus)
        self.assertTrue(opt.apply(optimizer.Action(
            'a', (1,), node1, 0.5, 0.1, moved_mb, ({1: 1.0}, {1: 1.0})),
            agent.clock()))
        self.assertEqual((1,), cgroups.memory_nodes(guest.pid))
        self.assertEqual({1: 64}, guest.nodes_mb())
        check = opt.checks['a']
        undo = check.undo
        history = opt.history['a']
        for i in range(agent.opts.loop_window):
            history.append(optimizer.Rates(check.settle + 1 + i, 500000.0,
                                           1000000.0, 20000.0, 10000.0))
        end = check.settle + agent.opts.loop_window
        self.assertEqual([('a', 'undone')], opt.verdicts(end))
        return undo

    def test_an_undone_move_brings_the_pages_back(self):
        # A guest Nova left free (no restriction of the agent's), its
        # memory on node 0: the optimizer moves it to node 1; the undo
        # brings its pages back to node 0, not only its vCPU (widening the
        # nodeset would have left them on node 1).
        guest, agent, _advance = self.measured()
        pid = guest.pid
        cgroups.set_memory_nodes(pid, list(range(agent.topology.size)))
        agent.restrictions['a'] = ((), ())
        self.assertEqual({0: 64}, guest.nodes_mb())
        node0 = tuple(agent.topology.nodes[0].cpus)
        self.assertEqual(((0,), node0),
                         self.moved_and_undone(guest, agent, 64.0))
        self.assertEqual((0,), cgroups.memory_nodes(pid))
        self.assertEqual({0: 64}, guest.nodes_mb())
        self.assertEqual(set(node0), os.sched_getaffinity(pid))

    def test_an_undone_move_to_novas_nodes_moves_the_pages_back(self):
        # A quarter of the guest's memory was on node 1 before the move
        # to node 1: its undo gives Nova's nodes (narrowing to 0 and 1
        # would move no page), which moves no page either; the agent's
        # move_pages brings three quarters back to node 0.
        guest, agent, advance = self.measured()
        pid = guest.pid
        every = tuple(range(agent.topology.size))
        # Nova's placement: free, 48 MiB on node 0 and 16 on node 1.
        cgroups.set_memory_nodes(pid, [1])
        cgroups.set_memory_nodes(pid, list(every))
        self.hv.move_pages(self.hv.guests['a'], [(1, 0, 48)], None)
        agent.restrictions['a'] = ((), ())
        advance()
        self.assertEqual({0: 48, 1: 16}, guest.nodes_mb())
        node0 = tuple(agent.topology.nodes[0].cpus)
        self.assertEqual(((), node0),
                         self.moved_and_undone(guest, agent, 48.0))
        self.assertEqual(every, cgroups.memory_nodes(pid))
        # Widening moved no page; the next cycle's step does.
        self.assertEqual({1: 64}, guest.nodes_mb())
        opt = agent.optimizer
        opt.bring_back()
        self.assertEqual({0: 48, 1: 16}, guest.nodes_mb())
        opt.bring_back()
        self.assertEqual({}, opt.returning)
        self.assertEqual(set(node0), os.sched_getaffinity(pid))
        self.assertEqual({}, dict(agent.failures))
