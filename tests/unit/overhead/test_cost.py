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
import math
import random

import testtools

from nova_numa_overhead.overhead import cost

SLIT2 = ((10, 21), (21, 10))
SLIT3 = ((10, 21, 21), (21, 10, 21), (21, 21, 10))
LOCAL0 = ({0: 1.0}, {0: 1.0})
LOCAL1 = ({1: 1.0}, {1: 1.0})


def host(nodes=2, cpus=8, bandwidth_mbps=20000.0, **kwargs):
    distances = SLIT2 if nodes == 2 else SLIT3
    return cost.HostModel.build([cpus] * nodes, distances, bandwidth_mbps,
                                **kwargs)


def guest(name, cpu, memory, vcpus=2, ips=1e9, cpi=2.0, rpi=0.02,
          mpi=0.01, stall=None):
    """A guest; by default memory-intensive (20 LLC references per 1,000
    instructions, half of them missing, a CPI of 2).
    """
    return cost.GuestLoad(name=name, vcpus=vcpus, cpu=dict(cpu),
                          memory=dict(memory), ips=ips, cpi=cpi, rpi=rpi,
                          mpi=mpi, stall=stall)


def core_bound(name, cpu, memory, vcpus):
    """A guest that barely touches memory: only its CPU share matters."""
    return guest(name, cpu, memory, vcpus=vcpus, cpi=0.8, rpi=0.0001,
                 mpi=0.00001)


class TestHostModel(testtools.TestCase):

    def test_slit_distances_become_latency_ratios(self):
        model = host()
        self.assertEqual(2, model.size)
        self.assertEqual(((1.0, 2.1), (2.1, 1.0)), model.latency)
        self.assertEqual((20000.0, 20000.0), model.bandwidth_mbps)
        # No measured matrix: a link carries LINK_FRACTION of the slower
        # controller.
        link = 20000.0 * cost.LINK_FRACTION
        self.assertEqual(((link, link), (link, link)), model.link_mbps)
        self.assertEqual((8.0, 8.0), model.cores)
        self.assertEqual((8.0, 8.0), model.threads)

    def test_cores_and_hardware_threads(self):
        model = cost.HostModel.build([16, 4], SLIT2, 20000.0, cores=[8, 8])
        self.assertEqual((8.0, 8.0), model.cores)
        # Never fewer threads than cores.
        self.assertEqual((16.0, 8.0), model.threads)

    def test_measured_latency_overrides_slit(self):
        model = host(latency_ns=((80.0, 130.0), (140.0, 100.0)))
        self.assertEqual((1.0, 130.0 / 80.0), model.latency[0])
        self.assertEqual((1.4, 1.0), model.latency[1])

    def test_unmeasured_latency_falls_back_to_slit_scaled(self):
        # A cell measured as 0 (or missing) is SLIT times the local
        # latency of its row: the same ratio as without the matrix.
        model = host(latency_ns=((80.0, 0.0), (None, 100.0)))
        self.assertAlmostEqual(2.1, model.latency[0][1])
        self.assertAlmostEqual(2.1, model.latency[1][0])
        self.assertEqual(1.0, model.latency[0][0])
        self.assertEqual(1.0, model.latency[1][1])

    def test_unmeasured_local_latency_from_its_row_through_slit(self):
        # A failed local cell: the row stays in ns (its local latency
        # is the remote cell's through SLIT), not a ratio of 140.
        for cell in (0.0, float('nan'), None):
            model = host(latency_ns=((cell, 140.0), (140.0, 90.0)))
            self.assertAlmostEqual(2.1, model.latency[0][1])
            self.assertAlmostEqual(140.0 / 90.0, model.latency[1][0])

    def test_measured_bandwidth_overrides_the_option_and_links(self):
        # Measured by all 8 CPUs of node 0: capacities.
        model = host(matrix_mbps=((30000.0, 9000.0), (0.0, 0.0)),
                     matrix_streams=(8, None))
        # The diagonal is the controllers' bandwidth; an unmeasured one
        # keeps the option.
        self.assertEqual((30000.0, 20000.0), model.bandwidth_mbps)
        # Off the diagonal, the link; unmeasured, a fraction of the slower
        # controller.
        self.assertEqual(9000.0, model.link_mbps[0][1])
        self.assertEqual(20000.0 * cost.LINK_FRACTION, model.link_mbps[1][0])

    def test_all_cpus_measured_bandwidth_is_absolute(self):
        matrix = ((60000.0, 15000.0), (12000.0, 50000.0))
        model = host(matrix_mbps=matrix, matrix_streams=(8, 8))
        self.assertEqual((60000.0, 50000.0), model.bandwidth_mbps)
        self.assertEqual(((60000.0, 15000.0), (12000.0, 50000.0)),
                         model.link_mbps)
        # More streams than the host has CPUs now (CPUs offlined since):
        # still all of them.
        self.assertEqual(model, host(matrix_mbps=matrix,
                                     matrix_streams=(16, 8)))

    def test_single_stream_bandwidth_is_ratios_scaled_to_the_option(self):
        # One stream per cell (an old probe file: no stream counts) moves
        # a fraction of a controller: only the ratios are kept, the
        # largest local figure becoming the option's 20000 MB/s.
        matrix = ((8000.0, 4000.0), (2000.0, 5000.0))
        model = host(matrix_mbps=matrix)
        self.assertEqual((20000.0, 12500.0), model.bandwidth_mbps)
        self.assertEqual(((20000.0, 10000.0), (5000.0, 12500.0)),
                         model.link_mbps)
        self.assertEqual(model, host(matrix_mbps=matrix,
                                     matrix_streams=(1, 1)))
        # Node 1 measured by all its CPUs, node 0 by 4 of 8: the matrix
        # is still one measurement, taken as ratios as a whole.
        self.assertEqual(model, host(matrix_mbps=matrix,
                                     matrix_streams=(4, 8)))
        # The latency is not touched.
        self.assertEqual(host(latency_ns=((80.0, 130.0), (140.0, 100.0))
                              ).latency,
                         host(latency_ns=((80.0, 130.0), (140.0, 100.0)),
                              matrix_mbps=matrix).latency)

    def test_ratios_scale_by_the_largest_local_figure(self):
        # A remote cell above every local one (it happens: noise, some
        # interconnects) does not set the scale: the diagonal does, and
        # every cell is scaled by the same factor (20000 / 8000).
        model = host(matrix_mbps=((8000.0, 9000.0), (2000.0, 5000.0)),
                     matrix_streams=(1, 1))
        self.assertEqual((20000.0, 12500.0), model.bandwidth_mbps)
        self.assertEqual(((20000.0, 22500.0), (5000.0, 12500.0)),
                         model.link_mbps)

    def test_unmeasured_cells_are_the_option_and_slit(self):
        nan, inf = math.nan, math.inf
        latency = ((80.0, nan, 120.0), (inf, 100.0, -5.0), None)
        bandwidth = ((30000.0, nan, 9000.0), (8000.0, nan, 0.0), None)
        streams = (8, 8, None)
        model = host(nodes=3, latency_ns=latency, matrix_mbps=bandwidth,
                     matrix_streams=streams)
        # As if those cells held nothing (0.0): no NaN anywhere.
        zeros = host(nodes=3, matrix_streams=streams,
                     latency_ns=((80.0, 0.0, 120.0), (0.0, 100.0, 0.0),
                                 None),
                     matrix_mbps=((30000.0, 0.0, 9000.0),
                                  (8000.0, 0.0, 0.0), None))
        self.assertEqual(zeros, model)
        for rows in (model.latency, model.link_mbps):
            self.assertTrue(all(math.isfinite(v) and v > 0
                                for row in rows for v in row), rows)
        # Node 1's controller unmeasured: the option.
        self.assertEqual((30000.0, 20000.0, 20000.0), model.bandwidth_mbps)
        self.assertEqual(20000.0 * cost.LINK_FRACTION, model.link_mbps[0][1])
        self.assertEqual(2.1, model.latency[0][1])
        # Ratios (one stream each): scaled by the measured diagonal only.
        model = host(nodes=3, latency_ns=latency, matrix_mbps=bandwidth,
                     matrix_streams=(1, 1, None))
        self.assertEqual((20000.0, 20000.0, 20000.0), model.bandwidth_mbps)
        self.assertEqual(6000.0, model.link_mbps[0][2])
        self.assertTrue(all(math.isfinite(v) for row in model.link_mbps
                            for v in row))

    def test_partial_rows(self):
        matrix = ((8000.0, 4000.0), None, (2000.0, 5000.0))
        self.assertEqual((0, 2), cost.partial_rows([8, 0, 8], matrix, None))
        self.assertEqual((2,), cost.partial_rows([8, 0, 8], matrix,
                                                 (8, None, 2)))
        self.assertEqual((), cost.partial_rows([8, 0, 1], matrix,
                                               (8, None, None)))

    def test_llc_room_from_its_size(self):
        # Known: the working sets of WORKING_SET_MB that the LLC holds;
        # unknown (None or 0): LLC_VCPUS_PER_CORE per core.
        model = host(llc_mb=[9.0, None])
        self.assertEqual((9.0 / cost.WORKING_SET_MB,
                          8 * cost.LLC_VCPUS_PER_CORE), model.llc_room)
        self.assertEqual((8 * cost.LLC_VCPUS_PER_CORE,) * 2,
                         host(llc_mb=[0.0, 0.0]).llc_room)
        # The papers' x3850 (18 MB, 8 cores): the same room either way.
        x3850 = cost.HostModel.build([16], ((10,),), 20000.0, cores=[8],
                                     llc_mb=[18.0])
        self.assertAlmostEqual(8 * cost.LLC_VCPUS_PER_CORE,
                               x3850.llc_room[0])

    def test_cpu_less_node_row_falls_back_to_slit(self):
        model = cost.HostModel.build(
            [8, 0], SLIT2, 20000.0, latency_ns=((80.0, 160.0), None),
            matrix_mbps=((30000.0, 9000.0), None), matrix_streams=(8, None))
        self.assertEqual(((1.0, 2.0), (2.1, 1.0)), model.latency)
        self.assertEqual((30000.0, 20000.0), model.bandwidth_mbps)


class TestGuestLoad(testtools.TestCase):

    def test_memory_intensive_from_llc_references(self):
        self.assertTrue(guest('g', {0: 1.0}, {0: 1.0}, rpi=0.003).intensive)
        self.assertFalse(
            guest('g', {0: 1.0}, {0: 1.0}, rpi=0.0029).intensive)

    def test_traffic_is_misses_times_cache_lines(self):
        g = guest('g', {0: 1.0}, {0: 1.0}, ips=1e9, mpi=0.01)
        self.assertAlmostEqual(640.0, g.traffic_mbps)

    def test_measured_traffic_wins(self):
        # resctrl counts prefetches and write-backs the misses do not.
        g = cost.GuestLoad(name='g', vcpus=2, cpu={0: 1.0},
                           memory={0: 1.0}, ips=1e9, cpi=2.0, rpi=0.02,
                           mpi=0.01, measured_mbps=900.0)
        self.assertEqual(900.0, g.traffic_mbps)


class TestPredict(testtools.TestCase):

    def test_no_change_predicts_no_change(self):
        model = cost.Model(host(), [guest('a', {0: 1.0}, {1: 1.0}),
                                    guest('b', {1: 1.0}, {1: 1.0})])
        ratios = model.predict({'a': ({0: 1.0}, {1: 1.0})})
        self.assertEqual({'a', 'b'}, set(ratios))
        for ratio in ratios.values():
            self.assertAlmostEqual(1.0, ratio)

    def test_memory_to_the_cpu_node_speeds_an_intensive_guest_up(self):
        model = cost.Model(host(), [guest('a', {0: 1.0}, {1: 1.0})])
        self.assertGreater(model.predict({'a': LOCAL0})['a'], 1.1)

    def test_memory_away_from_the_cpu_node_slows_it_down(self):
        model = cost.Model(host(), [guest('a', {0: 1.0}, {0: 1.0})])
        self.assertLess(model.predict({'a': ({0: 1.0}, {1: 1.0})})['a'],
                        0.9)

    def test_leaving_an_overcommitted_node_speeds_everyone_up(self):
        # 16 vCPUs on 8 hardware threads: each runs half of the time.
        model = cost.Model(host(), [
            core_bound('a', {0: 1.0}, {0: 1.0}, vcpus=8),
            core_bound('b', {0: 1.0}, {0: 1.0}, vcpus=8)])
        ratios = model.predict({'a': LOCAL1})
        self.assertGreater(ratios['a'], 1.5)
        # The guest left behind gets its node to itself.
        self.assertGreater(ratios['b'], 1.5)

    def test_vcpus_alone_off_an_overcommitted_node(self):
        model = cost.Model(host(), [
            core_bound('a', {0: 1.0}, {0: 1.0}, vcpus=8),
            core_bound('b', {0: 1.0}, {0: 1.0}, vcpus=8)])
        ratios = model.predict({'a': ({1: 1.0}, {0: 1.0})})
        self.assertGreater(ratios['a'], 1.5)
        self.assertGreater(ratios['b'], 1.5)

    def test_a_small_llc_gives_more_to_leaving_it(self):
        # A guest that barely misses alone, its hit rate now low beside a
        # memory-intensive neighbour of 8 vCPUs: on 8 MB of LLC for 16
        # cores (1.4 working sets fit) leaving gains far more than the
        # per-core rule (6.4 fit) says.
        def ratio(llc_mb):
            model = cost.Model(host(cpus=16, llc_mb=llc_mb), [
                guest('big', {0: 1.0}, {0: 1.0}, vcpus=8),
                guest('small', {0: 1.0}, {0: 1.0}, vcpus=2, cpi=1.0,
                      rpi=0.002, mpi=0.0017, stall=0.5)])
            return model.predict({'small': LOCAL1})['small']
        self.assertGreater(ratio([8.0, 8.0]), 1.5)
        self.assertLess(ratio(None), 1.2)

    def test_joining_a_node_with_busy_cpus_slows_its_guests(self):
        # Node 0's 8 threads are taken; node 1 is the newcomer's alone.
        model = cost.Model(host(), [
            core_bound('a', {0: 1.0}, {0: 1.0}, vcpus=8),
            core_bound('b', {1: 1.0}, {1: 1.0}, vcpus=4)])
        ratios = model.predict({'b': LOCAL0})
        self.assertLess(ratios['a'], 0.9)
        self.assertLess(ratios['b'], 0.9)

    def test_joining_a_node_with_busy_memory_slows_its_guests(self):
        # Node 0's controller runs at 75% of its bandwidth: 3,000 MB/s
        # more queue everyone's misses there.
        model = cost.Model(host(), [
            guest('a', {0: 1.0}, {0: 1.0}, ips=15e9 / 0.64),
            guest('b', {1: 1.0}, {1: 1.0}, ips=3e9 / 0.64)])
        ratios = model.predict({'b': LOCAL0})
        self.assertLess(ratios['a'], 0.9)
        self.assertLess(ratios['b'], 1.0)

    def test_only_guests_on_touched_nodes_are_reported(self):
        model = cost.Model(host(nodes=3), [
            guest('a', {0: 1.0}, {1: 1.0}),
            guest('b', {1: 1.0}, {1: 1.0}),
            guest('c', {2: 1.0}, {2: 1.0})])
        ratios = model.predict({'a': LOCAL0})
        self.assertEqual({'a', 'b'}, set(ratios))
        self.assertEqual(sum(r - 1.0 for r in ratios.values()),
                         model.gain({'a': LOCAL0}))

    def test_gain_is_the_sum_of_relative_changes(self):
        model = cost.Model(host(), [
            core_bound('a', {0: 1.0}, {0: 1.0}, vcpus=8),
            core_bound('b', {0: 1.0}, {0: 1.0}, vcpus=8),
            guest('c', {1: 1.0}, {0: 1.0})])
        changes = {'a': LOCAL1}
        ratios = model.predict(changes)
        self.assertEqual(3, len(ratios))
        self.assertAlmostEqual(sum(r - 1.0 for r in ratios.values()),
                               model.gain(changes))

    def test_prediction_is_the_full_ratio(self):
        model = cost.Model(host(), [
            core_bound('a', {0: 1.0}, {0: 1.0}, vcpus=8),
            core_bound('b', {0: 1.0}, {0: 1.0}, vcpus=8)])
        # Alone on 8 threads instead of sharing them: twice as fast.
        self.assertAlmostEqual(2.0, model.predict({'a': LOCAL1})['a'],
                               places=3)


class TestCarrying(testtools.TestCase):

    def test_a_controller_carries_at_least_what_it_is_seen_to(self):
        # 30,000 MB/s measured on node 0 against a 20,000 MB/s option:
        # the option is wrong, not the controller past saturation.
        model = cost.Model(host(), [
            guest('a', {0: 1.0}, {0: 1.0}, ips=30e9 / 0.64)])
        self.assertAlmostEqual(30000.0 / cost.RHO_SEEN,
                               model.host.bandwidth_mbps[0])
        self.assertEqual(20000.0, model.host.bandwidth_mbps[1])

    def test_light_traffic_keeps_the_option(self):
        model = cost.Model(host(), [guest('a', {0: 1.0}, {0: 1.0})])
        self.assertEqual((20000.0, 20000.0), model.host.bandwidth_mbps)


class TestStall(testtools.TestCase):

    def test_estimated_stall_predicts_a_gain(self):
        # No stalled-cycles event: the CPI of 2 against CORE_CPI says the
        # guest is memory-bound.
        model = cost.Model(host(), [guest('a', {0: 1.0}, {1: 1.0},
                                          stall=None)])
        self.assertGreater(model.gain({'a': LOCAL0}), 0.1)

    def test_estimated_stall_from_misses_alone(self):
        # Not memory-intensive by its references, yet its misses stall it.
        model = cost.Model(host(), [guest('a', {0: 1.0}, {1: 1.0},
                                          cpi=1.0, rpi=0.002, mpi=0.002,
                                          stall=None)])
        self.assertGreater(model.gain({'a': LOCAL0}), 0.05)

    def test_measured_stall_of_zero_predicts_no_gain(self):
        model = cost.Model(host(), [guest('a', {0: 1.0}, {1: 1.0},
                                          stall=0.0)])
        self.assertAlmostEqual(0.0, model.gain({'a': LOCAL0}), places=6)

    def test_more_stall_more_gain(self):
        gains = [cost.Model(host(), [guest('a', {0: 1.0}, {1: 1.0},
                                           stall=s)]).gain({'a': LOCAL0})
                 for s in (0.1, 0.3, 0.6)]
        self.assertEqual(sorted(gains), gains)
        self.assertGreater(gains[0], 0.0)


class TestHitRate(testtools.TestCase):

    def test_a_high_hit_rate_does_not_inflate_the_memory_part(self):
        # Its memory moved to a node 2.1 times as far: the measured
        # stall (0.4) slowed by 2.1, whatever its hit rate, and also
        # where the host counts no LLC reference (a missing event).
        expected = 1.0 / (0.6 + 0.4 * 2.1)
        for rpi, mpi in ((0.01, 0.0005), (0.01, 0.00001), (0.01, 0.0),
                         (0.0, 0.0)):
            model = cost.Model(host(cpus=4), [guest(
                'a', {0: 1.0}, {0: 1.0}, rpi=rpi, mpi=mpi, stall=0.4)])
            self.assertAlmostEqual(
                expected, model.predict({'a': ({0: 1.0}, {1: 1.0})})['a'],
                places=3, msg='rpi %s mpi %s' % (rpi, mpi))

    def test_no_llc_events_no_llc_sensitivity(self):
        # Counted without cache events, a guest is not predicted to
        # collapse when a memory-intensive one crowds its LLC.
        model = cost.Model(host(), [
            guest('x', {0: 1.0}, {0: 1.0}, cpi=1.5, rpi=0.0, mpi=0.0,
                  stall=0.3),
            guest('i', {0: 1.0}, {0: 1.0}, cpi=1.5, stall=0.5),
            guest('y', {1: 1.0}, {1: 1.0}, vcpus=4, cpi=1.5, stall=0.5)])
        ratios = model.predict({'y': ({0: 1.0}, {1: 1.0})})
        self.assertGreater(ratios['x'], 0.8)
        self.assertLess(ratios['i'], ratios['x'])

    def test_a_crowded_llc_multiplies_misses_by_a_bounded_factor(self):
        # Near-perfect hit rates count as HIT_CAP: crowding raises the
        # misses at most 1 / (1 - HIT_CAP) times.
        model = cost.Model(host(cpus=2), [
            guest('a', {0: 1.0}, {0: 1.0}, rpi=0.01, mpi=0.0, stall=0.3),
            guest('b', {1: 1.0}, {1: 1.0}, vcpus=4, stall=0.5)])
        ratio = model.predict({'b': ({0: 1.0}, {1: 1.0})})['a']
        bound = 1.0 / (0.7 + 0.3 / (1.0 - cost.HIT_CAP) * 2.5)
        self.assertGreater(ratio, bound)
        self.assertLess(ratio, 1.0)

    def test_nothing_moved_nothing_predicted_with_a_crowded_llc(self):
        # Memory-intensive guests the kernel would spread (settled is not
        # now): the misses are compared with the settled ones, so a change
        # to where a guest is settled predicts no change.
        guests = [dataclasses.replace(guest(name, {0: 1.0}, {0: 1.0},
                                            vcpus=6, stall=0.5, ips=3e9),
                                      reach=(0, 1)) for name in 'ab']
        guests.append(guest('c', {1: 1.0}, {1: 1.0}, vcpus=1, stall=0.5,
                            ips=3e9))
        model = cost.Model(host(bandwidth_mbps=8000.0), guests)
        self.assertNotEqual(model.now, model.settled)
        for name in 'abc':
            for ratio in model.predict({name: model.settled[name]}).values():
                self.assertAlmostEqual(1.0, ratio, places=6)


class TestLatencyMatrix(testtools.TestCase):

    def gain(self, **kwargs):
        model = cost.Model(host(bandwidth_mbps=100000.0, **kwargs),
                           [guest('a', {0: 1.0}, {1: 1.0})])
        return model.gain({'a': LOCAL0})

    def test_cheap_remote_node_gains_nothing(self):
        # Measured: node 1's memory is as fast from node 0 as node 0's.
        flat = ((100.0, 101.0), (101.0, 100.0))
        self.assertAlmostEqual(0.0, self.gain(latency_ns=flat), delta=0.03)

    def test_slit_remote_node_gains(self):
        self.assertGreater(self.gain(), 0.3)


class TestHelpers(testtools.TestCase):

    def test_even(self):
        self.assertEqual({0: 0.5, 1: 0.5}, cost.even([1, 0]))
        self.assertEqual({2: 1.0}, cost.even((2,)))
        self.assertEqual([0, 1, 3], list(cost.even({3, 1, 0})))

    def test_moved_fraction(self):
        self.assertEqual(1.0, cost.moved_fraction({1: 1.0}, {0: 1.0}))
        self.assertEqual(0.5, cost.moved_fraction({0: 0.5, 1: 0.5},
                                                  {0: 1.0}))
        self.assertEqual(0.5, cost.moved_fraction({0: 1.0},
                                                  {0: 0.5, 1: 0.5}))
        self.assertEqual(0.0, cost.moved_fraction({0: 0.5, 1: 0.5},
                                                  {1: 0.5, 0: 0.5}))
        self.assertEqual(0.0, cost.moved_fraction({}, {0: 1.0}))


def floating(name, cpu, memory, vcpus, reach=(0, 1), **kwargs):
    g = core_bound(name, cpu, memory, vcpus)
    return dataclasses.replace(g, reach=tuple(reach), **kwargs)


def unpinnable(vcpus):
    """'a' and 'b' pinned to node 0, 'c' to node 1, ``vcpus`` each; 'a'
    would float over both nodes were it left to the kernel.
    """
    return [dataclasses.replace(core_bound('a', {0: 1.0}, {0: 1.0}, vcpus),
                                release=(0, 1)),
            core_bound('b', {0: 1.0}, {0: 1.0}, vcpus),
            core_bound('c', {1: 1.0}, {1: 1.0}, vcpus)]


def load_of(model, placement):
    return [sum(model.guests[g].vcpus * cpu.get(n, 0.0)
                for g, (cpu, _m) in placement.items())
            for n in range(model.host.size)]


class TestKernelBalance(testtools.TestCase):
    """Floating vCPUs move as the kernel's load balancer moves them."""

    def test_an_idle_core_takes_a_crowded_floating_vcpu(self):
        # 10 vCPUs on node 0's 8 cores, node 1 idle.
        model = cost.Model(host(), [
            floating('a', {0: 1.0}, {0: 1.0}, vcpus=6),
            floating('b', {0: 1.0}, {0: 1.0}, vcpus=4)])
        settled = model.settled
        self.assertEqual([8.0, 2.0], load_of(model, settled))
        # The guest of least memory on the busy node gives first (a tie:
        # by name).
        self.assertEqual({0: 1.0}, settled['b'][0])
        self.assertEqual({0: 4 / 6, 1: 2 / 6}, settled['a'][0])

    def test_the_nearest_idle_node_takes_them(self):
        # Three nodes, node 2 nearer node 0 than node 1 is.
        distances = ((10, 30, 20), (30, 10, 30), (20, 30, 10))
        model = cost.Model(
            cost.HostModel.build([8] * 3, distances, 20000.0),
            [floating('a', {0: 1.0}, {0: 1.0}, vcpus=10,
                      reach=(0, 1, 2))])
        self.assertEqual({0: 0.8, 2: 0.2}, model.settled['a'][0])

    def test_an_idle_core_not_an_idle_thread(self):
        # 8 cores of 16 threads per node: a node with a core free takes
        # vCPUs from one whose cores are all busy (as the simulated
        # kernel; the kernel counts threads).
        model = cost.Model(host(cpus=16, cores=[8, 8]), [
            floating('a', {0: 1.0}, {0: 1.0}, vcpus=14)])
        self.assertEqual([8.0, 6.0], load_of(model, model.settled))

    def test_busy_nodes_even_out_within_imbalance_pct(self):
        # 24 vCPUs on node 0, 10 on node 1, no idle core anywhere.
        model = cost.Model(host(), [
            floating('a', {0: 1.0}, {0: 1.0}, vcpus=24),
            floating('b', {1: 1.0}, {1: 1.0}, vcpus=10)])
        on0, on1 = load_of(model, model.settled)
        self.assertLessEqual(on0 * 100, cost.IMBALANCE_PCT * on1 + 1e-6)
        # And not one vCPU further (no overshoot).
        self.assertGreater((on0 + 1) * 100, cost.IMBALANCE_PCT * (on1 - 1))
        self.assertEqual([18.0, 16.0], [on0, on1])

    def test_no_move_that_overshoots(self):
        # 11 and 9 vCPUs on 8-thread nodes: 137.5% is past 117%, but a
        # vCPU moved would leave 10 and 10... and 11 -> 10 vs 9 -> 10 is
        # no overshoot; 10 and 9 (125%) moved would give 9 and 10: kept.
        model = cost.Model(host(), [
            floating('a', {0: 1.0}, {0: 1.0}, vcpus=10),
            floating('b', {1: 1.0}, {1: 1.0}, vcpus=9)])
        self.assertEqual([10.0, 9.0], load_of(model, model.settled))

    def test_settled_is_balanced_again_unchanged(self):
        # Random hosts and guests: balancing the settled placement moves
        # nothing (else a change would be credited with it).
        rng = random.Random(7)
        for _ in range(200):
            nodes = rng.choice((2, 3))
            guests = []
            for i in range(rng.randrange(1, 8)):
                node = rng.randrange(nodes)
                vcpus = rng.randrange(1, 12)
                reach = tuple(sorted(rng.sample(range(nodes),
                                                rng.randrange(1, nodes + 1))))
                guests.append(floating('g%d' % i, {node: 1.0}, {node: 1.0},
                                       vcpus=vcpus, reach=reach))
            model = cost.Model(host(nodes=nodes, cpus=rng.choice((4, 8))),
                               guests)
            self.assertEqual(model.settled, model.balance(model.settled))

    def test_settled_now_predicts_no_change(self):
        model = cost.Model(host(), [
            floating('a', {0: 1.0}, {0: 1.0}, vcpus=6),
            floating('b', {0: 1.0}, {0: 1.0}, vcpus=4)])
        for change in ((None, {0: 1.0}), model.settled['a']):
            ratios = model.predict({'a': change})
            for ratio in ratios.values():
                self.assertAlmostEqual(1.0, ratio)

    def test_pinning_next_to_floating_guests_moves_them_away(self):
        # Node 0: a floating guest of 8 vCPUs; node 1: 4. Pinning a
        # guest of 4 vCPUs from node 1 to node 0 crowds node 0 only until
        # the kernel moves floating vCPUs to node 1's idle cores.
        guests = [floating('f', {0: 1.0}, {0: 1.0}, vcpus=8),
                  floating('g', {1: 1.0}, {1: 1.0}, vcpus=4),
                  core_bound('p', {1: 1.0}, {1: 1.0}, vcpus=4)]
        model = cost.Model(host(), guests)
        ratios = model.predict({'p': LOCAL0})
        # 16 vCPUs on 16 cores in the end: nobody waits for a core.
        for name in ('f', 'g', 'p'):
            self.assertAlmostEqual(1.0, ratios[name], places=3)
        # Without the balancer (nothing floats), node 0 is crowded.
        fixed = cost.Model(host(), [dataclasses.replace(g, reach=())
                                    for g in guests])
        crowded = fixed.predict({'p': LOCAL0})
        self.assertAlmostEqual(8 / 12, crowded['f'], places=2)
        self.assertAlmostEqual(8 / 12, crowded['p'], places=2)

    def test_a_pin_stays_even_where_the_guest_runs_now(self):
        # 'a' floats on node 0 with 'b'; 'c' is pinned onto node 0 too.
        # With 'a' pinned to node 0 (where it runs), 'b' leaves for node
        # 1; with 'a' left to the kernel, 'a' leaves (least memory there).
        model = cost.Model(host(), [
            floating('a', {0: 1.0}, {1: 1.0}, vcpus=4),
            floating('b', {0: 1.0}, {0: 1.0}, vcpus=4),
            core_bound('c', {1: 1.0}, {1: 1.0}, vcpus=4)])
        pinned = model.predict({'a': ({0: 1.0}, {1: 1.0}), 'c': LOCAL0})
        kernel = model.predict({'a': (None, {1: 1.0}), 'c': LOCAL0})
        self.assertLess(pinned['a'], kernel['a'])
        placement = model.balance(dict(model.settled, c=LOCAL0), {'a', 'c'})
        self.assertEqual({0: 1.0}, placement['a'][0])
        self.assertEqual({1: 1.0}, placement['b'][0])
        placement = model.balance(dict(model.settled, c=LOCAL0), {'c'})
        self.assertEqual({1: 1.0}, placement['a'][0])
        self.assertEqual({0: 1.0}, placement['b'][0])

    def test_a_floating_guest_left_to_the_kernel_stays_floating(self):
        # A memory move of a floating guest (cpu None): its vCPUs are the
        # kernel's and move when a pin crowds their node.
        model = cost.Model(host(), [
            floating('a', {0: 1.0}, {0: 1.0}, vcpus=6),
            core_bound('p', {1: 1.0}, {1: 1.0}, vcpus=6)])
        ratios = model.predict({'a': (None, {1: 1.0}), 'p': LOCAL0})
        self.assertIn('a', ratios)
        placement = model.balance(
            dict(model.settled, a=(model.settled['a'][0], {1: 1.0}),
                 p=LOCAL0), {'p'})
        self.assertEqual({0: 2 / 6, 1: 4 / 6}, placement['a'][0])

    def test_a_pinned_guest_left_to_the_kernel_floats(self):
        # 'a' pinned to node 0 with 'b' (12 vCPUs on 8 cores), node 1
        # with 'c' (6): unpinned, the kernel moves vCPUs of 'a' to node
        # 1's idle cores, then evens the two busy nodes (as the
        # simulator's kernel does): 9 and 9.
        model = cost.Model(host(), unpinnable(vcpus=6))
        self.assertEqual({'a': (0, 1)}, model.release)
        self.assertEqual({}, model.reach)
        # Settled as measured: nothing floats now.
        self.assertEqual(model.now, model.settled)
        placement = model.balance(dict(model.settled), (),
                                  {'a': model.release['a']})
        self.assertEqual([9.0, 9.0], load_of(model, placement))
        self.assertEqual({0: 0.5, 1: 0.5}, placement['a'][0])
        ratios = model.predict({'a': (None, {0: 1.0})})
        self.assertGreater(ratios['a'], 1.0)
        self.assertGreater(ratios['b'], 1.0)
        self.assertLess(ratios['c'], 1.0)
        # Pinned where it runs, nothing changes.
        for ratio in model.predict({'a': LOCAL0}).values():
            self.assertAlmostEqual(1.0, ratio)

    def test_unpinned_onto_a_full_node_slows_its_guests(self):
        # Node 1 full (8 vCPUs on 8 cores), node 0 crowded (16): the
        # kernel evens the two once 'a' floats, and node 1's guest waits
        # for its cores, as the simulator's steady state has it.
        guests = unpinnable(vcpus=8)
        model = cost.Model(host(), guests)
        ratios = model.predict({'a': (None, {0: 1.0})})
        self.assertGreater(ratios['a'], 1.0)
        self.assertLess(ratios['c'], 0.95)
        # A guest Nova allows one node only has no release...
        one = cost.Model(host(), [dataclasses.replace(
            g, release=(0,)) if g.name == 'a' else g for g in guests])
        self.assertEqual({}, one.release)
        self.assertNotIn('c', one.predict({'a': (None, {0: 1.0})}))
        # ... and one floating already has its reach instead.
        both = cost.Model(host(), [dataclasses.replace(
            g, reach=(0, 1)) if g.name == 'a' else g for g in guests])
        self.assertEqual({}, both.release)
        self.assertEqual({'a': (0, 1)}, both.reach)

    def test_reach_bounds_the_nodes_its_vcpus_go_to(self):
        # Three nodes, node 0 crowded; the guest may only use 0 and 1.
        model = cost.Model(host(nodes=3), [
            floating('a', {0: 1.0}, {0: 1.0}, vcpus=12, reach=(0, 1)),
            core_bound('p', {1: 1.0}, {1: 1.0}, vcpus=8)])
        # Node 2's idle cores are out of reach: node 1, full with a
        # pinned guest, takes what evens the two within IMBALANCE_PCT.
        self.assertEqual({0: 10 / 12, 1: 2 / 12}, model.settled['a'][0])

    def test_a_busy_node_that_cannot_give_is_passed_over(self):
        # Node 0's floating guest may not leave it; node 2's may go to
        # node 3 (idle): the balancer does not stop at node 0.
        slit4 = tuple(tuple(10 if i == j else 21 for j in range(4))
                      for i in range(4))
        model = cost.Model(cost.HostModel.build([8] * 4, slit4, 20000.0), [
            floating('a', {0: 1.0}, {0: 1.0}, vcpus=12, reach=(0, 1)),
            core_bound('p', {1: 1.0}, {1: 1.0}, vcpus=8),
            floating('b', {2: 1.0}, {2: 1.0}, vcpus=10, reach=(2, 3))])
        self.assertEqual({2: 0.8, 3: 0.2}, model.settled['b'][0])

    def test_a_fraction_of_a_vcpu_does_not_move(self):
        # Measured over a window, 1.5 vCPUs on node 1 (4 CPUs, with a
        # pinned guest of 4): one moves; the half left is no task to move,
        # though node 1 stays over its cores.
        model = cost.Model(host(cpus=4), [
            floating('a', {0: 0.625, 1: 0.375}, {0: 1.0}, vcpus=4),
            core_bound('p', {1: 1.0}, {1: 1.0}, vcpus=4)])
        self.assertEqual({0: 0.875, 1: 0.125}, model.settled['a'][0])

    def test_nodes_without_cpus_are_out_of_reach(self):
        model = cost.Model(
            cost.HostModel.build([8, 0], SLIT2, 20000.0),
            [floating('a', {0: 1.0}, {0: 1.0}, vcpus=12)])
        self.assertEqual({}, model.reach)
        self.assertEqual({0: 1.0}, model.settled['a'][0])

    def test_pinned_guests_never_move(self):
        model = cost.Model(host(), [
            core_bound('a', {0: 1.0}, {0: 1.0}, vcpus=12),
            floating('b', {1: 1.0}, {1: 1.0}, vcpus=1)])
        self.assertEqual({0: 1.0}, model.settled['a'][0])
        self.assertEqual({1: 1.0}, model.settled['b'][0])


class TestPredictIterations(testtools.TestCase):
    """predict() computes the CPU and LLC terms once and only the traffic
    at each iteration: the same ratios as whole aggregates at each.
    """

    @staticmethod
    def reference(model, changes, iterations=10):
        """predict() by whole aggregates and speeds at each iteration."""
        settled = model.settled
        placement = dict(settled)
        pinned = set()
        freed = {}
        for name, (cpu, mem) in changes.items():
            placement[name] = (settled[name][0] if cpu is None else cpu,
                               mem)
            if cpu is not None:
                pinned.add(name)
            elif name in model.release:
                freed[name] = model.release[name]
        if pinned or freed:
            placement = model.balance(placement, pinned, freed)
        nodes = set()
        for name, (cpu, mem) in placement.items():
            if name in changes or (cpu, mem) != settled[name]:
                nodes.update(cpu, mem, *settled[name])
        reached = [name for name, (cpu, mem) in placement.items()
                   if nodes.intersection(cpu) or nodes.intersection(mem)]
        rest = model._aggregates({}, base=model._settled_base)
        for name in reached:
            model._add(rest, name, *settled[name], 1.0, sign=-1.0)
        moving = {name: placement[name] for name in reached}

        def ratios(speeds):
            agg = model._aggregates(moving, speeds, base=rest)
            return {name: model._speed(name, moving, agg) /
                    model._speed_settled[name] for name in reached}

        out = ratios(None)
        for _ in range(iterations):
            new = ratios(out)
            step = max((abs(new[n] - out[n]) for n in reached), default=0.0)
            out = {n: 0.5 * out[n] + 0.5 * new[n] for n in reached}
            if step < cost.CONVERGED:
                break
        return out

    def test_same_ratios_as_whole_aggregates(self):
        rng = random.Random(11)
        checked = 0
        for _ in range(60):
            nodes = rng.choice((2, 3))
            guests = []
            for i in range(rng.randrange(1, 9)):
                cpu = rng.randrange(nodes)
                mem = {n: rng.random() for n in rng.sample(
                    range(nodes), rng.randrange(1, nodes + 1))}
                total = sum(mem.values())
                reach = tuple(sorted(rng.sample(range(nodes),
                                                rng.randrange(1, nodes + 1))))
                # A guest pinned to one node now may float once unpinned.
                release = tuple(range(nodes)) if len(reach) == 1 and \
                    rng.random() < 0.5 else ()
                g = guest('g%d' % i, {cpu: 1.0},
                          {n: f / total for n, f in mem.items()},
                          vcpus=rng.randrange(1, 10),
                          ips=rng.uniform(1e8, 3e9), cpi=rng.uniform(0.5, 4),
                          rpi=rng.choice((0.0005, 0.02, 0.05)),
                          mpi=rng.uniform(0.0001, 0.01),
                          stall=rng.choice((None, 0.3)))
                guests.append(dataclasses.replace(g, reach=reach,
                                                  release=release))
            model = cost.Model(host(nodes=nodes, cpus=rng.choice((4, 8)),
                                    bandwidth_mbps=rng.choice((5e3, 2e4))),
                               guests)
            for g in guests:
                target = rng.randrange(nodes)
                for change in (({target: 1.0}, {target: 1.0}),
                               (None, {target: 1.0}),
                               ({target: 1.0}, model.settled[g.name][1])):
                    for iterations in (0, 10):
                        fast = model.predict({g.name: change}, iterations)
                        slow = self.reference(model, {g.name: change},
                                              iterations)
                        self.assertEqual(list(slow), list(fast))
                        for name in slow:
                            self.assertAlmostEqual(slow[name], fast[name],
                                                   places=12)
                        checked += 1
        self.assertGreater(checked, 1000)
