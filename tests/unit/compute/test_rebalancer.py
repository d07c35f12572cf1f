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

import testtools

from nova_numa_overhead.compute import rebalancer
from nova_numa_overhead.overhead import classifier


def guest(name, memory, action=classifier.SPREAD, local=0, entries=256):
    fifo = rebalancer.SwapFifo(entries)
    fifo.refill(memory)
    return rebalancer.GuestView(name=name, memory_mb=dict(memory),
                                local=local, action=action, fifo=fifo)


# Seen from node 0: node 0 hot (8), node 1 warm (5), node 2 cool (2).
OVERHEAD = [[8, 5, 2], [9, 4, 3], [9, 5, 1]]


class TestSwapFifo(testtools.TestCase):

    def test_bounded_per_node(self):
        fifo = rebalancer.SwapFifo(entries=4)
        fifo.refill({0: 10 * rebalancer.CHUNK_MB, 1: 100})
        self.assertEqual(4, len(fifo.entries_of(0)))
        self.assertEqual([64, 36], fifo.entries_of(1))
        self.assertEqual(6, len(fifo))

    def test_first_in_first_out_and_cold_first(self):
        fifo = rebalancer.SwapFifo(entries=8)
        cold = [rebalancer.Chunk(0, 16, address=0x1000)]
        fifo.refill({0: 256}, cold={0: cold})
        taken = fifo.pop(0, 100)
        self.assertEqual(0x1000, taken[0].address)
        self.assertEqual([16, 64, 20], [c.mb for c in taken])

    def test_pop_takes_no_more_than_asked(self):
        fifo = rebalancer.SwapFifo(entries=8)
        cold = [rebalancer.Chunk(0, 64, address=0x100000)]
        fifo.refill({0: 256}, cold={0: cold})
        self.assertEqual([rebalancer.Chunk(0, 10, address=0x100000)],
                         fifo.pop(0, 10))
        # The rest of the chunk stays first in line.
        rest = rebalancer.Chunk(0, 54, address=0x100000 + (10 << 20))
        self.assertEqual([rest, rebalancer.Chunk(0, 6)], fifo.pop(0, 60))
        self.assertEqual([64, 64, 58], fifo.entries_of(0))

    def test_refill_drops_nodes_the_guest_left(self):
        fifo = rebalancer.SwapFifo(entries=8)
        fifo.refill({0: 256, 1: 64})
        fifo.refill({0: 256})
        self.assertEqual([], fifo.entries_of(1))


class TestTriggerRule(testtools.TestCase):

    def test_hot_node_moves_to_a_node_two_levels_lower(self):
        moves = rebalancer.plan_moves(
            [guest('g', {0: 512})], OVERHEAD, [0, 4096, 4096], threshold=6,
            budget_mb=10000)
        self.assertEqual([('g', 0, 2, 512)],
                         [(m.guest, m.src, m.dst, m.mb) for m in moves])
        self.assertIn('node 0 at level 8 > 6, node 2 at 2', moves[0].reason)

    def test_below_threshold_nothing_moves(self):
        self.assertEqual([], rebalancer.plan_moves(
            [guest('g', {0: 512})], OVERHEAD, [0, 4096, 4096], threshold=8,
            budget_mb=10000))

    def test_less_than_two_levels_lower_nothing_moves(self):
        overhead = [[8, 7, 7], [8, 7, 7], [8, 7, 7]]
        self.assertEqual([], rebalancer.plan_moves(
            [guest('g', {0: 512})], overhead, [0, 4096, 4096], threshold=6,
            budget_mb=10000))

    def test_budget_bounds_the_period(self):
        moves = rebalancer.plan_moves(
            [guest('g', {0: 4096})], OVERHEAD, [0, 8192, 8192], threshold=6,
            budget_mb=256)
        self.assertEqual(256, sum(m.mb for m in moves))

    def test_left_alone_and_gather(self):
        moves = rebalancer.plan_moves(
            [guest('cpu', {0: 512}, action=classifier.LEAVE),
             guest('lat', {0: 128, 2: 256}, action=classifier.GATHER,
                   local=0)],
            OVERHEAD, [4096, 4096, 4096], threshold=6, budget_mb=10000)
        self.assertEqual([('lat', 2, 0, 256)],
                         [(m.guest, m.src, m.dst, m.mb) for m in moves])
        self.assertEqual('gather near vCPUs', moves[0].reason)

    def test_reserve_is_kept_on_the_target(self):
        moves = rebalancer.plan_moves(
            [guest('g', {0: 512})], OVERHEAD, [0, 0, 250], threshold=6,
            budget_mb=10000, reserve_mb=200)
        # 50 MiB above the reserve: less than a chunk, no crumbs moved.
        self.assertEqual([], moves)
        moves = rebalancer.plan_moves(
            [guest('g', {0: 512})], OVERHEAD, [0, 0, 300], threshold=6,
            budget_mb=10000, reserve_mb=200)
        self.assertEqual([('g', 0, 2, 100)],
                         [(m.guest, m.src, m.dst, m.mb) for m in moves])

    def test_gather_stays_within_room_and_budget(self):
        def gather(memory, room, budget_mb):
            g = guest('g', memory, action=classifier.GATHER, local=0)
            moves = rebalancer.plan_moves(
                [g], [[0, 0], [0, 0]], [512 + room, 4096], threshold=0,
                budget_mb=budget_mb, reserve_mb=512)
            return [(m.guest, m.src, m.dst, m.mb) for m in moves]

        self.assertEqual([('g', 1, 0, 5)], gather({0: 1024, 1: 1024},
                                                  room=100, budget_mb=5))
        self.assertEqual([('g', 1, 0, 100)], gather({0: 1024, 1: 1024},
                                                    room=100, budget_mb=1000))
        # No crumbs into the last 10 MiB of room, unless that is all the
        # guest has left away from its vCPUs.
        self.assertEqual([], gather({0: 1024, 1: 1024}, room=10,
                                    budget_mb=1000))
        self.assertEqual([('g', 1, 0, 8)], gather({0: 1024, 1: 8}, room=10,
                                                  budget_mb=1000))

    def test_spread_stays_within_the_budget(self):
        moves = rebalancer.plan_moves(
            [guest('g', {0: 4096})], OVERHEAD, [0, 8192, 8192], threshold=6,
            budget_mb=100)
        self.assertEqual(100, sum(m.mb for m in moves))

    def test_a_node_with_room_is_preferred_to_a_full_one(self):
        # Nodes 1 and 2 at the same level; node 1 is full (or a gap in
        # the node ids, without memory): the memory goes to node 2.
        overhead = [[6, 4, 4]] * 3
        moves = rebalancer.plan_moves(
            [guest('hot', {0: 8192})], overhead, [0, 0, 60000], threshold=4,
            budget_mb=1024)
        self.assertEqual([('hot', 0, 2, 1024)],
                         [(m.guest, m.src, m.dst, m.mb) for m in moves])


class TestExchange(testtools.TestCase):

    @staticmethod
    def exchange(hot_mb=128, other_mb=128, budget_mb=10000, **kwargs):
        """Every node full: 'hot' (node 0) and 'other' (node 2, its
        ``kwargs``) as the rebalancer exchanges them; (guest, src, dst,
        MiB) of each move, and the moves.
        """
        hot = guest('hot', {0: hot_mb})
        other = guest('other', {2: other_mb}, local=2, **kwargs)
        moves = rebalancer.plan_moves([hot, other], OVERHEAD, [0, 0, 0],
                                      threshold=6, budget_mb=budget_mb)
        return {(m.guest, m.src, m.dst, m.mb) for m in moves}, moves

    def test_full_target_exchanges_with_another_guest(self):
        done, moves = self.exchange()
        self.assertEqual({('hot', 0, 2, 128), ('other', 2, 0, 128)}, done)
        self.assertTrue(all('exchange with' in m.reason for m in moves))

    def test_a_leave_guest_is_an_exchange_partner(self):
        # Not moved for its own sake, but the hot node costs it least.
        done, _moves = self.exchange(action=classifier.LEAVE)
        self.assertEqual({('hot', 0, 2, 128), ('other', 2, 0, 128)}, done)

    def test_exchange_moves_as_much_each_way(self):
        # The partner has 8 MiB on the full node: 8 MiB go each way.
        done, _moves = self.exchange(other_mb=8)
        self.assertEqual({('hot', 0, 2, 8), ('other', 2, 0, 8)}, done)

    def test_exchange_stays_within_the_budget(self):
        done, _moves = self.exchange(256, 256, budget_mb=100)
        self.assertEqual({('hot', 0, 2, 50), ('other', 2, 0, 50)}, done)

    def test_a_node_without_memory_is_not_a_target(self):
        # Node 1 (no memory: memoryless, or a gap in the node ids) ties
        # with node 2 and has the lower id; every node is full, so the
        # exchange happens on node 2.
        overhead = [[6, 4, 4]] * 3
        hot = guest('hot', {0: 128})
        other = guest('other', {2: 128}, local=2)
        moves = rebalancer.plan_moves(
            [hot, other], overhead, [0, 0, 0], threshold=4, budget_mb=10000,
            total_mb=[4096, 0, 4096])
        self.assertEqual(
            {('hot', 0, 2, 128), ('other', 2, 0, 128)},
            {(m.guest, m.src, m.dst, m.mb) for m in moves})

    def test_no_partner_no_move(self):
        self.assertEqual([], rebalancer.plan_moves(
            [guest('hot', {0: 128})], OVERHEAD, [0, 0, 0], threshold=6,
            budget_mb=10000))


class TestClassifier(testtools.TestCase):

    def test_vprobe_bounds(self):
        self.assertEqual((classifier.FRIENDLY, 2.0),
                         classifier.llc_type(2000, 1000000))
        self.assertEqual(classifier.FITTING,
                         classifier.llc_type(10000, 1000000)[0])
        self.assertEqual(classifier.THRASHING,
                         classifier.llc_type(25000, 1000000)[0])
        self.assertEqual(classifier.FRIENDLY, classifier.llc_type(5, 0)[0])

    def test_vdarm_classes_and_actions(self):
        # CPI < 1: insensitive, left alone.
        c = classifier.classify(2e9, 1e9, 1e7, 1e6, 1.0)
        self.assertEqual((0, classifier.LEAVE), (c.vdarm_class, c.action))
        # CPI 2, little bandwidth: latency-sensitive, gathered.
        c = classifier.classify(1e9, 2e9, 1e7, 1e6, 1.0)
        self.assertEqual((1, classifier.GATHER), (c.vdarm_class, c.action))
        # CPI 2, 0.5e9 misses/s x 64 B = 32 GB/s > 20 GB/s: congested.
        c = classifier.classify(1e9, 2e9, 1e7, 5e8, 1.0)
        self.assertEqual((2, classifier.SPREAD), (c.vdarm_class, c.action))
        self.assertLess(c.sensitivity, 0)
        # LLC friendly stays alone whatever its CPI.
        c = classifier.classify(1e9, 3e9, 1e6, 1e5, 1.0)
        self.assertEqual(classifier.LEAVE, c.action)
