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
"""The oracle is an upper bound: no policy ever beats its search."""

import random
from unittest import mock

import testtools

from nova_numa_overhead.sim import model
from nova_numa_overhead.sim import oracle
from nova_numa_overhead.sim import presets
from nova_numa_overhead.sim import runner
from nova_numa_overhead.sim import scenarios

GIB = 1024
SCENARIOS = 200


def small_scenario(k: int) -> scenarios.Scenario:
    """A small random scenario: 2-3 nodes, 2-4 guests, a short run."""
    rng = random.Random(k)
    n = rng.choice((2, 2, 3))
    nodes = tuple(model.NodeSpec(
        cores=rng.choice((2, 4, 8)), threads=rng.choice((1, 2)),
        llc_mb=rng.uniform(4, 20), memory_mb=rng.choice((8, 16)) * GIB,
        mc_gbps=rng.uniform(5, 30), controllers=rng.choice((1, 2)))
        for _ in range(n))
    local = rng.uniform(80, 130)
    latency = tuple(tuple(local if a == b else local * rng.uniform(1.2, 2.0)
                          for b in range(n)) for a in range(n))
    link = tuple(tuple(0.0 if a == b else rng.uniform(4, 20)
                       for b in range(n)) for a in range(n))
    spec = model.HostSpec(name='small-%d' % k, nodes=nodes,
                          latency_ns=latency, link_gbps=link,
                          distances=tuple(tuple(10 if a == b else 20
                                                for b in range(n))
                                          for a in range(n)), ghz=2.0)
    guests = []
    for i in range(rng.randint(2, 4)):
        node = rng.randrange(n)
        guests.append(scenarios.GuestPlan(
            name='vm%d' % i, profile=rng.choice(sorted(presets.PROFILES)),
            vcpus=rng.choice((1, 2, 4)), memory_mb=rng.choice((1, 2, 4)) * GIB,
            vcpu_nodes=(node,), first_touch=(node,),
            floating=rng.random() < 0.5))
    return scenarios.Scenario(
        name='small-%d' % k, description='', host=spec,
        guests=tuple(guests), seed=k, duration=12, arrival_interval=1,
        measure=6, balancing=rng.random() < 0.8).validate()


class TestOracleBound(testtools.TestCase):

    def test_no_policy_beats_the_search(self):
        kinds = set()
        for k in range(SCENARIOS):
            s = small_scenario(k)
            results = runner.run(s)
            best = results['oracle']
            kinds.add(best.extra['kind'])
            self.assertEqual(0, best.extra['policy_best_seconds'], s.name)
            for name, res in results.items():
                self.assertLessEqual(
                    res.mean, best.extra['search_mean'] + 1e-4,
                    '%s beats the oracle on %s' % (name, s.name))
        self.assertIn(oracle.EXHAUSTIVE, kinds)

    def test_search_kinds(self):
        s = scenarios.get('mixed-16')
        self.assertEqual(oracle.BEST_KNOWN,
                         runner.run(s, ('nova-default', 'oracle'))
                         ['oracle'].extra['kind'])
        s = small_scenario(0)
        self.assertEqual(oracle.EXHAUSTIVE,
                         runner.run(s, ('nova-default', 'oracle'))
                         ['oracle'].extra['kind'])

    def test_capacity(self):
        # Three 40 GiB guests on a 2x64 GiB host: no node holds more than
        # it has, whatever the oracle would like.
        s = scenarios.Scenario(
            name='full', description='', host=presets.ibm_x3850(2),
            guests=tuple(scenarios.GuestPlan(
                name='vm%d' % i, profile='ycsb', vcpus=2,
                memory_mb=40 * GIB, vcpu_nodes=(0,), first_touch=(0,))
                for i in range(3)), duration=10, arrival_interval=1,
            measure=5).validate()
        timeline = runner.Timeline(s)
        segment = timeline.segments()[-1]
        plans = {p.name: p for p in s.guests}
        guests = {n: (plans[n].vcpus, plans[n].memory_mb,
                      presets.PROFILES[segment.guests[n]])
                  for n in segment.guests}
        problem = oracle.Problem(s.host, guests, timeline.weights())
        placed = problem.start({n: (problem.cands[0][0][0],
                                    problem.cands[0][1][0])
                                for n in guests})
        value, _, _ = problem.evaluate(placed[0][None], placed[1][None])
        self.assertEqual(float('-inf'), value[0])


class TestFairOracle(testtools.TestCase):
    """The fair oracle: the best placement known that keeps every guest at
    FAIR_FLOOR of its Nova-default throughput.
    """

    def test_keeps_every_guest_and_is_no_worse_than_nova(self):
        for k in range(40):
            s = small_scenario(k)
            results = runner.run(s)
            extra = results['oracle'].extra
            # Every guest at the floor of its Nova-default throughput...
            self.assertGreaterEqual(extra['fair_worst_guest'],
                                    oracle.FAIR_FLOOR - 1e-3, s.name)
            # ... and Nova's own placements are among its starts.
            self.assertGreaterEqual(extra['fair_mean'],
                                    results['nova-default'].mean * 0.99,
                                    s.name)

    def test_a_better_fair_placement_is_the_oracles(self):
        s = small_scenario(1)
        results = runner.run(s)
        del results['oracle']
        real = oracle._segment_best

        def weak(scenario, timeline, segment, results, rng, kinds,
                 floors=None):
            found = real(scenario, timeline, segment, results, rng, kinds,
                         floors)
            if floors is None:
                # The oracle's own search, made to miss by 10%.
                return {g: 0.9 * v for g, v in found.items()}
            return found

        with mock.patch.object(oracle, '_segment_best', weak):
            best = oracle.oracle(s, runner.Timeline(s), results)
        self.assertAlmostEqual(best.extra['fair_mean'],
                               best.extra['search_mean'])

    def test_the_oracle_takes_what_the_fair_search_found(self):
        for k in range(10):
            s = small_scenario(k)
            results = runner.run(s)
            best = results['oracle']
            # Never below the fair oracle: a placement it found is one
            # the oracle may take.
            self.assertLessEqual(best.extra['fair_mean'],
                                 best.extra['search_mean'] + 1e-9, s.name)
            without = {n: r for n, r in results.items()
                       if n not in ('oracle', 'nova-default')}
            alone = oracle.oracle(s, runner.Timeline(s), without)
            # Without Nova's default: no floor, no fair oracle.
            self.assertNotIn('fair_mean', alone.extra)
