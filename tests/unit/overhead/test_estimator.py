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

from nova_numa_overhead.overhead import estimator


def obs(hit=0.9, loss=0.0, ipc=1.0, cpu=None, memory=None):
    return estimator.Observation(llc_hit_rate=hit, cycle_loss=loss, ipc=ipc,
                                 cpu=cpu or {0: 1.0},
                                 memory=memory or {0: 1.0})


class TestClassify(testtools.TestCase):

    def test_levels_count_reached_thresholds(self):
        t = (0.1, 0.2, 0.3)
        self.assertEqual(0, estimator.classify(0.05, t))
        self.assertEqual(1, estimator.classify(0.1, t))
        self.assertEqual(2, estimator.classify(0.25, t))
        self.assertEqual(3, estimator.classify(5, t))

    def test_thresholds_must_ascend(self):
        self.assertRaises(ValueError, estimator.Thresholds, llc=(0.5, 0.4))
        self.assertRaises(ValueError, estimator.Thresholds, mc=())
        self.assertRaises(ValueError, estimator.Thresholds, rml=(-1, 2))


class TestFigure4(testtools.TestCase):
    """overhead[L][i] as the paper's Figure 4 adds it up."""

    def test_overhead_matrix(self):
        levels = estimator.Levels(llc=[1, 2, 0], mc=[3, 0, 1],
                                  inter=[[0, 1, 2], [1, 0, 0], [0, 4, 0]],
                                  rml=[[0, 2, 3], [2, 0, 2], [3, 2, 0]])
        m = levels.overhead_matrix()
        # Local node: LLC(i) + MC(i).
        self.assertEqual([4, 2, 1], [m[0][0], m[1][1], m[2][2]])
        # Remote: MC(i) + LLC(L) + INTER(L, i) + RML(L, i).
        self.assertEqual(0 + 1 + 1 + 2, m[0][1])
        self.assertEqual(1 + 1 + 2 + 3, m[0][2])
        self.assertEqual(0 + 0 + 4 + 2, m[2][1])

    def test_extra_is_added_to_the_node(self):
        levels = estimator.Levels(llc=[0, 0], mc=[0, 0],
                                  inter=[[0, 0], [0, 0]],
                                  rml=[[0, 3], [3, 0]])
        m = levels.overhead_matrix(extra=[2, 0])
        self.assertEqual([[2, 3], [5, 0]], m)


class TestEstimate(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.topo = estimator.Topology.uniform(2)

    def test_idle_host_only_has_static_remote_latency(self):
        levels = estimator.static_levels(self.topo)
        self.assertEqual([0, 0], levels.llc)
        self.assertEqual([0, 0], levels.mc)
        self.assertEqual([[0, 0], [0, 0]], levels.inter)
        # SLIT 21/10 = 2.1 is level 2 with the default thresholds.
        self.assertEqual([[0, 2], [2, 0]], levels.rml)

    def test_llc_contention_from_hit_rate(self):
        # The paper's characterization: 0.48 with one guest, 0.10 with 8.
        one = estimator.estimate([obs(hit=0.48)], self.topo)
        eight = estimator.estimate([obs(hit=0.10)] * 8, self.topo)
        self.assertEqual(0, one.llc[0])
        self.assertEqual(4, eight.llc[0])
        self.assertEqual(0, eight.llc[1])

    def test_mc_congestion_from_local_cycle_loss(self):
        levels = estimator.estimate(
            [obs(loss=0.05), obs(loss=0.82, cpu={1: 1.0},
                                 memory={1: 1.0})], self.topo)
        self.assertEqual([0, 3], levels.mc)
        self.assertEqual([[0, 0], [0, 0]], levels.inter)

    def test_interconnect_from_remote_cycle_loss(self):
        levels = estimator.estimate(
            [obs(loss=0.84, cpu={0: 1.0}, memory={1: 1.0})], self.topo)
        self.assertEqual(2, levels.inter[0][1])
        self.assertEqual(0, levels.inter[1][0])
        self.assertEqual([0, 0], levels.mc)

    def test_remote_latency_from_ipc_ratio(self):
        levels = estimator.estimate(
            [obs(ipc=0.62, cpu={0: 1.0}, memory={0: 1.0}),
             obs(ipc=0.31, cpu={0: 1.0}, memory={1: 1.0})], self.topo)
        # 0.62 / 0.31 = 2.0: level 2; the other direction has no data and
        # falls back to SLIT (2.1: level 2).
        self.assertEqual(2, levels.rml[0][1])
        self.assertEqual(2, levels.rml[1][0])
        levels = estimator.estimate(
            [obs(ipc=0.62, cpu={0: 1.0}, memory={0: 1.0}),
             obs(ipc=0.2, cpu={0: 1.0}, memory={1: 1.0})], self.topo)
        self.assertEqual(4, levels.rml[0][1])
        levels = estimator.estimate(
            [obs(ipc=0.62, cpu={0: 1.0}, memory={0: 1.0}),
             obs(ipc=0.55, cpu={0: 1.0}, memory={1: 1.0})], self.topo)
        self.assertEqual(0, levels.rml[0][1])

    def test_small_weights_are_ignored(self):
        levels = estimator.estimate(
            [obs(hit=0.0, loss=0.9, cpu={0: 1.0, 1: 0.01},
                 memory={0: 0.99, 1: 0.01})], self.topo)
        self.assertEqual(0, levels.llc[1])
        self.assertEqual(0, levels.inter[0][1])

    def test_measured_matrix_replaces_slit(self):
        # vTRMS: an asymmetric measured latency matrix.
        topo = estimator.Topology(
            distances=((10, 16), (16, 10)),
            latency_ns=((100, 130), (260, 100)))
        levels = estimator.static_levels(topo)
        self.assertEqual(1, levels.rml[0][1])   # 1.3
        self.assertEqual(3, levels.rml[1][0])   # 2.6
        topo = estimator.Topology(
            distances=((10, 16), (16, 10)),
            bandwidth_mbps=((10000, 5000), (10000, 10000)))
        levels = estimator.static_levels(topo)
        self.assertEqual(2, levels.rml[0][1])   # 2.0
        self.assertEqual(0, levels.rml[1][0])   # 1.0
