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

from hypothesis import given
from hypothesis import strategies as st
import testtools

from nova_numa_overhead.overhead import estimator
from nova_numa_overhead.overhead import planner
from tests import base

GIB = 1024


def view(overheads_from_0=None, free=None, guests=None, n=4, matrix=None,
         distances=None):
    """A host whose overhead matrix is given, or only its row for node 0."""
    if matrix is None:
        row = overheads_from_0
        matrix = [list(row) for _ in row]
        n = len(row)
    else:
        n = len(matrix)
    return planner.HostView(
        free_mb=list(free or [64 * GIB] * n),
        total_mb=[128 * GIB] * n,
        guests=list(guests or [1] * n),
        overhead=matrix,
        distances=distances or [list(r) for r in
                                estimator.Topology.uniform(n).distances])


class TestSplitBinary(testtools.TestCase):

    def test_papers_worked_example(self):
        # Section 5.2: 2**8 GB over overheads 2, 4, 5 -> 2**7, 2**6, 2**6.
        amounts = planner.split_binary(2 ** 8 * GIB, [2, 4, 5],
                                       [10 ** 9] * 3)
        self.assertEqual([2 ** 7 * GIB, 2 ** 6 * GIB, 2 ** 6 * GIB],
                         amounts)

    def test_figure_9_ordering(self):
        # Overheads 4:2:5:7 of sockets 0-3: socket 1 gets the largest
        # share, socket 3 the smallest (the paper: ~25/50/15/10 %).
        amounts = planner.split_binary(4 * GIB, [4, 2, 5, 7],
                                       [10 ** 9] * 4)
        self.assertEqual(4 * GIB, sum(amounts))
        self.assertEqual(max(amounts), amounts[1])
        self.assertEqual(min(amounts), amounts[3])
        self.assertGreater(amounts[0], amounts[2])
        self.assertGreaterEqual(amounts[2], amounts[3])
        self.assertEqual([1024, 2048, 512, 512], amounts)

    def test_every_share_is_a_power_of_two_fraction(self):
        request = 6 * GIB
        for overheads in ([0, 1, 2, 3], [1, 1, 1], [0, 8], [3, 3, 9, 12],
                          [0, 0, 0, 0, 0]):
            amounts = planner.split_binary(request, overheads,
                                           [10 ** 9] * len(overheads))
            self.assertEqual(request, sum(amounts), overheads)
            for mb in amounts:
                if not mb:
                    continue
                parts = request / mb
                self.assertTrue(parts.is_integer(), (overheads, amounts))
                self.assertEqual(0, int(parts) & (int(parts) - 1),
                                 (overheads, amounts))

    def test_equal_overheads_get_equal_shares(self):
        self.assertEqual([4 * GIB, 4 * GIB, 0],
                         planner.split_binary(8 * GIB, [2, 2, 9],
                                              [10 ** 9] * 3))
        self.assertEqual([2 * GIB] * 4,
                         planner.split_binary(8 * GIB, [3, 3, 3, 3],
                                              [10 ** 9] * 4))

    def test_lower_overhead_never_gets_less(self):
        for overheads in ([0, 1, 2, 3], [5, 1, 3], [2, 2, 9]):
            amounts = planner.split_binary(8 * GIB, overheads,
                                           [10 ** 9] * len(overheads))
            pairs = sorted(zip(overheads, amounts))
            for (o1, a1), (o2, a2) in zip(pairs, pairs[1:]):
                self.assertGreaterEqual(a1, a2, (overheads, amounts))

    def test_never_more_than_free_memory(self):
        amounts = planner.split_binary(8 * GIB, [0, 4, 4],
                                       [1 * GIB, 8 * GIB, 8 * GIB])
        self.assertEqual(8 * GIB, sum(amounts))
        self.assertEqual(1 * GIB, amounts[0])

    def test_does_not_fit(self):
        self.assertIsNone(planner.split_binary(8 * GIB, [0, 1],
                                               [GIB, GIB]))
        self.assertIsNone(planner.split_binary(GIB, [], []))


class TestProportional(testtools.TestCase):

    def test_empty_local_node_first(self):
        v = view([0, 3, 3, 3], guests=[0, 0, 1, 1])
        p = planner.plan(v, 4 * GIB, local=0)
        self.assertEqual({0: 4 * GIB}, p.shares)

    def test_empty_remote_node_second_nearest_first(self):
        distances = [[10, 21, 16, 21], [21, 10, 21, 16],
                     [16, 21, 10, 21], [21, 16, 21, 10]]
        v = view([5, 3, 3, 3], guests=[2, 0, 0, 1], distances=distances)
        p = planner.plan(v, 4 * GIB, local=0)
        self.assertEqual({2: 4 * GIB}, p.shares)

    def test_empty_remote_node_must_be_two_levels_cheaper(self):
        v = view([4, 3, 3, 3], guests=[2, 0, 0, 1])
        p = planner.plan(v, 4 * GIB, local=0)
        self.assertNotEqual({1: 4 * GIB}, p.shares)
        self.assertIn(0, p.shares)

    def test_empty_node_too_small_is_skipped(self):
        v = view([0, 3, 3, 3], guests=[0, 1, 1, 1],
                 free=[GIB, 64 * GIB, 64 * GIB, 64 * GIB])
        p = planner.plan(v, 4 * GIB, local=0)
        self.assertGreater(len(p.shares), 1)
        self.assertLessEqual(p.shares.get(0, 0), GIB)

    def test_threshold_rises_until_the_candidates_hold_it(self):
        # Steps: overheads 1 and 2 (step 1), 3 (step 2), 5 (step 3) ...
        v = view([1, 9, 2, 5, 3, 12])
        # The local node holds it and no node under the step is cheaper.
        self.assertEqual([0], planner.plan(v, 8 * GIB, local=0).nodes)
        v = view([2, 9, 1, 5, 3, 12])
        self.assertEqual([0, 2], planner.plan(v, 8 * GIB, local=0).nodes)
        v = view([1, 9, 2, 5, 3, 12], free=[3 * GIB] * 6)
        self.assertEqual([0, 2, 4], planner.plan(v, 8 * GIB, local=0).nodes)

    def test_max_nodes_caps_the_candidates(self):
        v = view([1, 9, 2, 5, 3, 12], free=[5 * GIB] * 6)
        self.assertEqual([0, 2],
                         planner.plan(v, 8 * GIB, local=0, max_nodes=2).nodes)
        v = view([0, 0, 0, 0, 0, 0], free=[2 * GIB] * 6)
        self.assertEqual(4, len(planner.plan(v, 8 * GIB, local=0).nodes))

    def test_step_groups_prefer_nearer_nodes(self):
        # Overheads 3 and 4 are in the same step (3-4): the nearer node
        # goes first although its overhead is higher.
        distances = [[10, 21, 16], [21, 10, 21], [16, 21, 10]]
        v = view([2, 3, 4], distances=distances,
                 free=[2 * GIB, 64 * GIB, 64 * GIB])
        p = planner.plan(v, 4 * GIB, local=0, max_nodes=2)
        self.assertEqual([0, 2], p.nodes)

    def test_more_nodes_when_max_nodes_cannot_hold_it(self):
        v = view([0, 1, 2, 3], free=[GIB, GIB, GIB, 8 * GIB])
        p = planner.plan(v, 6 * GIB, local=0, max_nodes=2)
        self.assertEqual(6 * GIB, sum(p.shares.values()))
        for node, mb in p.shares.items():
            self.assertLessEqual(mb, v.free_mb[node])

    def test_does_not_fit(self):
        v = view([0, 1], free=[GIB, GIB])
        self.assertIsNone(planner.plan(v, 4 * GIB))

    def test_planned_overhead_is_share_weighted(self):
        v = view([2, 4, 5], free=[130 * GIB, 70 * GIB, 70 * GIB])
        p = planner.plan(v, 256 * GIB, local=0, max_nodes=3)
        self.assertEqual(0.5 * 2 + 0.25 * 4 + 0.25 * 5, p.overhead)
        self.assertEqual(5, p.worst)

    def test_unknown_local_node_takes_the_best(self):
        matrix = [[6, 9], [9, 1]]
        v = view(matrix=matrix)
        p = planner.plan(v, 4 * GIB, max_nodes=1)
        self.assertEqual(1, p.local)
        self.assertEqual({1: 4 * GIB}, p.shares)

    def test_memory_only_nodes_are_never_local(self):
        v = view(matrix=[[6, 9], [9, 1]])
        v.local_nodes = (0,)
        p = planner.plan(v, 4 * GIB, max_nodes=1)
        self.assertEqual(0, p.local)


class TestOtherPolicies(testtools.TestCase):

    def test_local_fills_nearest_first(self):
        v = view([0, 3, 3], free=[2 * GIB, 64 * GIB, 64 * GIB],
                 distances=[[10, 21, 16], [21, 10, 21], [16, 21, 10]])
        p = planner.plan(v, 4 * GIB, planner.LOCAL, local=0)
        self.assertEqual({0: 2 * GIB, 2: 2 * GIB}, p.shares)

    def test_none_plans_like_local(self):
        v = view([0, 3, 3])
        self.assertEqual(
            planner.plan(v, GIB, planner.LOCAL, local=0).shares,
            planner.plan(v, GIB, planner.NONE, local=0).shares)

    def test_spread_is_even_and_capped(self):
        v = view([0, 3, 3, 3], free=[GIB, 64 * GIB, 64 * GIB, 64 * GIB])
        p = planner.plan(v, 8 * GIB, planner.SPREAD, local=0)
        self.assertEqual(GIB, p.shares[0])
        self.assertEqual(8 * GIB, sum(p.shares.values()))
        self.assertLessEqual(max(p.shares.values()) -
                             min(p.shares[i] for i in (1, 2, 3)), 1)

    def test_bad_arguments(self):
        v = view([0, 1])
        self.assertRaises(ValueError, planner.plan, v, GIB, 'nope')
        self.assertRaises(ValueError, planner.plan, v, GIB, max_nodes=0)
        self.assertRaises(ValueError, planner.plan, v, 0)


@st.composite
def host_views(draw):
    """Any host the planner may see: 1 to 8 nodes, levels, free memory."""
    n = draw(st.integers(1, 8))
    nodes = st.lists(st.integers(0, 12), min_size=n, max_size=n)
    return planner.HostView(
        free_mb=draw(st.lists(st.sampled_from(
            [0, 300, 2048, 6000, 30000, 65536]), min_size=n, max_size=n)),
        total_mb=[65536] * n,
        guests=draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)),
        overhead=draw(st.lists(nodes, min_size=n, max_size=n)),
        distances=[list(r) for r in estimator.Topology.uniform(n).distances],
        local_nodes=tuple(draw(st.sets(st.integers(0, n - 1), min_size=1))))


class TestBuckets(testtools.TestCase):

    def test_bucket_index(self):
        self.assertEqual(256, planner.BUCKETS[planner.bucket_index(1)])
        self.assertEqual(2048, planner.BUCKETS[planner.bucket_index(2048)])
        self.assertEqual(3072, planner.BUCKETS[planner.bucket_index(2049)])
        self.assertEqual(len(planner.BUCKETS) - 1,
                         planner.bucket_index(10 ** 12))

    @base.fuzz(60)
    @given(host_views(), st.sampled_from(planner.POLICIES),
           st.integers(1, 8))
    def test_plan_buckets_is_plan_per_bucket(self, v, policy, max_nodes):
        planned = planner.plan_buckets(v, policy, max_nodes)
        fresh = dataclasses.replace(v)
        for k, mb in enumerate(planner.BUCKETS):
            plan = planner.plan(fresh, mb, policy, max_nodes)
            if k < len(planned):
                self.assertEqual(plan.overhead, planned[k])
            else:
                self.assertIsNone(plan)
                break

    @base.fuzz(60)
    @given(host_views(), st.sampled_from(planner.BUCKETS[:20]),
           st.sampled_from(planner.POLICIES), st.integers(1, 8))
    def test_best_local_node_is_the_best_of_all(self, v, mb, policy,
                                                max_nodes):
        # plan() stops trying local nodes once none can beat the best:
        # the result is still the best plan of every local node.
        plans = [planner.plan(dataclasses.replace(v), mb, policy, max_nodes,
                              local=node) for node in v.local_nodes]
        plans = [p for p in plans if p is not None]
        best = min(plans, key=lambda p: planner._rank(v, p), default=None)
        self.assertEqual(best, planner.plan(v, mb, policy, max_nodes))

    def test_a_changed_view_plans_afresh(self):
        # What the planner keeps per view (candidate order, step groups)
        # must not follow the view into a copy with other free memory.
        v = view([0, 1, 4, 4])
        self.assertEqual([0], planner.plan(v, 2 * GIB, local=0).nodes)
        free = [0, 0, 64 * GIB, 64 * GIB]
        changed = dataclasses.replace(v, free_mb=free)
        self.assertEqual([2, 3], planner.plan(changed, 8 * GIB,
                                              local=0).nodes)
        self.assertEqual(planner.plan(view([0, 1, 4, 4], free=free),
                                      8 * GIB, local=0),
                         planner.plan(changed, 8 * GIB, local=0))
