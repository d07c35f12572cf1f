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

import errno
import json
import math
import os
import threading
import time
from unittest import mock

import fixtures

from nova_numa_overhead.compute import hypervisor
from nova_numa_overhead.compute import numa_stat
from nova_numa_overhead.compute import probe
from nova_numa_overhead.overhead import cost
from nova_numa_overhead.overhead import estimator
from tests import base
from tests.unit.compute import probe_children

MIB = 1024 * 1024

# Asymmetric like the paper's AMD Opteron 6376 (Table II): CPUs of node 1
# read node 0 slower than CPUs of node 0 read node 1.
AMD_LATENCY = {(0, 0): 100.0, (0, 1): 160.0, (1, 0): 220.0, (1, 1): 110.0}
AMD_BANDWIDTH = {(0, 0): 5600.0, (0, 1): 3700.0, (1, 0): 2000.0,
                 (1, 1): 5500.0}
TWO_NODES = {0: [0, 1, 2, 3], 1: [4, 5, 6, 7]}


def amd_runner(cpu_node, mem_node, cpus, size_mb, repeat, streams):
    return (AMD_LATENCY[cpu_node, mem_node],
            AMD_BANDWIDTH[cpu_node, mem_node])


def valid_file_data(**overrides):
    data = {
        'version': 2,
        'measured_at': '2024-01-01T00:00:00+00:00',
        'size_mb': 64,
        'nodes': [0, 1],
        'bandwidth_streams': [4, 4],
        'latency_ns': [[100.0, 160.0], [220.0, 110.0]],
        'bandwidth_mbps': [[5600.0, 3700.0], [2000.0, 5500.0]],
    }
    data.update(overrides)
    return data


def version_1_data(**overrides):
    """A file from before concurrent streams."""
    data = valid_file_data(version=1, **overrides)
    del data['bandwidth_streams']
    return data


def allow_all_cpus(test):
    """As if the probe could run on every CPU of the fake nodes."""
    return test.useFixture(fixtures.MockPatchObject(
        probe, 'allowed_cpus', autospec=True,
        return_value=set(range(64)))).mock


class Shared:
    """What ``ctx.RawValue('d')`` is to a stream, in one process."""

    value = 0.0


class ScriptedBarrier:
    """A cell's barrier as one stream sees it, in one process: ``index``
    is what ``wait()`` returns (0: the stream that sets the start). As a
    follower, the round's start is set by the leader while this stream
    waits at the second meeting.
    """

    def __init__(self, start_at, index):
        self.start_at = start_at
        self.index = index
        self.waits = 0
        self.starts = []

    def wait(self):
        self.waits += 1
        if self.waits % 2 == 0:
            if self.index:
                self.start_at.value = time.monotonic() + 0.01
            self.starts.append(self.start_at.value)
        return self.index


class TestRealProbe(base.TestCase):
    """The real child process on this host's node 0 (kept small)."""

    def setUp(self):
        super().setUp()
        try:
            probe.syscall_number()
        except OSError:
            self.skipTest('set_mempolicy number unknown on this machine')
        self.nodes = probe.host_nodes()
        if not self.nodes.get(0):
            self.skipTest('no node 0 with CPUs in sysfs')

    def test_one_node_matrix_is_positive_and_finite(self):
        # Node 0 with a CPU this process may not run on, as under a
        # cpuset: a child pinned to it would fail with EINVAL.
        allowed = os.sched_getaffinity(0)
        outside = max(allowed | set(self.nodes[0])) + 1
        usable = [cpu for cpu in self.nodes[0] if cpu in allowed]
        if not usable:
            self.skipTest('no CPU of node 0 in this process affinity')
        matrix = probe.measure({0: self.nodes[0] + [outside]}, size_mb=16,
                               repeat=1)
        self.assertEqual([0], matrix.nodes)
        self.assertEqual(16, matrix.size_mb)
        # Every CPU of the node that the probe may use copied.
        self.assertEqual([len(usable)], matrix.bandwidth_streams)
        self.assertIn('CPU node 0: only %d of its %d CPUs'
                      % (len(usable), len(self.nodes[0]) + 1),
                      self.logger.output)
        self.assertNotIn('failed', self.logger.output)
        self.assertEqual(1, len(matrix.latency_ns))
        self.assertEqual(1, len(matrix.latency_ns[0]))
        for value in (matrix.latency_ns[0][0], matrix.bandwidth_mbps[0][0]):
            self.assertTrue(math.isfinite(value), value)
            self.assertGreater(value, 0)
        # It is a valid topology on its own.
        args = probe.as_topology_args(matrix)
        self.assertEqual(1, len(args['latency_ns']))

    def test_two_streams_start_each_round_together(self):
        if len(self.nodes[0]) < 2:
            self.skipTest('node 0 has one CPU')
        ctx = probe._context()
        barrier = ctx.Barrier(2, timeout=60)
        start_at = ctx.RawValue('d', 0.0)
        results = probe.run_children(
            ctx, probe._child_main, 'test-streams',
            [(0, [cpu], 16, 3, barrier, start_at, 2)
             for cpu in self.nodes[0][:2]], ['a', 'b'],
            time.monotonic() + 60)
        self.assertEqual(2, len(results))
        for nbytes, rounds in results:
            # Two copies of 16 MiB per round, read and written.
            self.assertEqual(2 * 2 * 16 * MIB, nbytes)
            self.assertEqual(3, len(rounds))
        # No stream starts a round before every stream ended the last
        # one (whether they then overlap depends on what else runs here).
        for r in (1, 2):
            self.assertGreaterEqual(min(s[1][r][0] for s in results),
                                    max(s[1][r - 1][1] for s in results))
        for _nbytes, rounds in results:
            # Within the wall time, but for the thread clock's own
            # accounting (a round here takes a few ms; 0.1 ms over was
            # seen on a loaded machine).
            self.assertTrue(all(0 <= cpu <= 1.01 * (end - start) + 0.001
                                for start, end, cpu in rounds), rounds)
        mbps, overlap, on_cpu = probe.aggregate_streams(results)
        self.assertGreater(mbps, 0)
        self.assertTrue(0.0 <= overlap <= 1.0, overlap)
        self.assertTrue(0.0 <= on_cpu <= 1.0, on_cpu)
        # The same through run_cell: the latency, then both streams.
        latency, bandwidth = probe.run_cell(0, 0, self.nodes[0], 16, 1, 2)
        self.assertGreater(latency, 0)
        self.assertGreater(bandwidth, 0)

    def test_binding_to_a_missing_node_fails_in_the_child(self):
        missing = max(self.nodes) + 40
        e = self.assertRaises(OSError, probe.run_cell, 0, missing,
                              self.nodes[0], 16, 1)
        self.assertEqual(errno.EINVAL, e.errno)
        self.assertIn('latency child: set_mempolicy(MPOL_BIND, node %d)'
                      % missing, str(e))

    def test_latency_and_a_stream_in_process(self):
        self.assertGreater(probe.latency_here(1, 1), 0)
        nbytes, rounds = probe.stream_here(1, 2, 3, threading.Barrier(1),
                                           Shared())
        self.assertEqual(3 * 2 * MIB, nbytes)
        self.assertEqual(2, len(rounds))
        self.assertTrue(all(end > start and cpu > 0
                            for start, end, cpu in rounds))


class TestMeasure(base.TestCase):

    def setUp(self):
        super().setUp()
        self.allowed = allow_all_cpus(self)

    def test_asymmetric_matrix_round_trip(self):
        runner = mock.create_autospec(amd_runner, side_effect=amd_runner)
        matrix = probe.measure(TWO_NODES, size_mb=32, repeat=2,
                               runner=runner)
        self.assertEqual(4, runner.call_count)
        # Every CPU of the CPU node streams.
        runner.assert_any_call(1, 0, [4, 5, 6, 7], 32, 2, 4)
        self.assertEqual([[100.0, 160.0], [220.0, 110.0]], matrix.latency_ns)
        self.assertEqual([[5600.0, 3700.0], [2000.0, 5500.0]],
                         matrix.bandwidth_mbps)
        self.assertEqual([0, 1], matrix.nodes)
        self.assertEqual(32, matrix.size_mb)
        self.assertEqual([4, 4], matrix.bandwidth_streams)

        path = os.path.join(self.useFixture(fixtures.TempDir()).path,
                            'topology.json')
        probe.save(matrix, path)
        with open(path) as f:
            data = json.load(f)
        self.assertEqual(2, data['version'])
        self.assertEqual([4, 4], data['bandwidth_streams'])
        loaded = probe.load(path, nodes=[0, 1])
        self.assertEqual(matrix, loaded)
        self.assertNotIn('version 1', self.logger.output)

        args = probe.as_topology_args(loaded)
        self.assertEqual(((100.0, 160.0), (220.0, 110.0)),
                         args['latency_ns'])
        slit = ((10, 16), (16, 10))
        topo = estimator.Topology(distances=slit, **args)
        # Latency first: 160/100 from node 0, 220/110 from node 1, where
        # SLIT says 1.6 both ways.
        self.assertAlmostEqual(1.6, topo.remote_ratio(0, 1))
        self.assertAlmostEqual(2.0, topo.remote_ratio(1, 0))
        bw_only = estimator.Topology(distances=slit,
                                     bandwidth_mbps=args['bandwidth_mbps'])
        self.assertAlmostEqual(5600 / 3700, bw_only.remote_ratio(0, 1))
        self.assertAlmostEqual(5500 / 2000, bw_only.remote_ratio(1, 0))
        host = hypervisor.HostTopology(nodes=(), distances=slit, **args)
        self.assertEqual(args['bandwidth_mbps'], host.bandwidth_mbps)
        self.assertEqual((4, 4), topo.bandwidth_streams)
        # All 4 CPUs of each node: the cost model's capacities as they
        # were measured.
        model = cost.HostModel.build(
            [4, 4], slit, 20000.0, matrix_mbps=topo.bandwidth_mbps,
            matrix_streams=topo.bandwidth_streams)
        self.assertEqual((5600.0, 5500.0), model.bandwidth_mbps)

    def test_streams_are_limited_per_node(self):
        runner = mock.create_autospec(amd_runner, side_effect=amd_runner)
        matrix = probe.measure({0: [0, 1, 2, 3], 1: [4, 5]}, runner=runner,
                               streams=3)
        runner.assert_any_call(0, 1, [0, 1, 2, 3], 64, 3, 3)
        runner.assert_any_call(1, 0, [4, 5], 64, 3, 2)
        self.assertEqual([3, 2], matrix.bandwidth_streams)
        matrix = probe.measure(TWO_NODES, runner=amd_runner, streams=1)
        self.assertEqual([1, 1], matrix.bandwidth_streams)

    @mock.patch.object(probe, 'node_available_mb', autospec=True,
                       return_value=None)
    @mock.patch.object(probe, 'run_children', autospec=True)
    def test_one_failing_stream_fails_its_cell(self, run_children, free):
        # The latency child answers, then one of node 1's streams fails
        # (run_children kills the others and raises its error).
        def children(ctx, target, name, arglists, labels, deadline):
            if len(arglists) == 1:
                return [(100.0,)]
            if name == 'numa-probe-1-0':
                raise OSError(errno.EPERM, '%s: set_mempolicy refused'
                              % labels[2])
            return [(200e6, [(0.0, 0.1, 0.1)])] * len(arglists)

        run_children.side_effect = children
        matrix = probe.measure(TWO_NODES, size_mb=16, repeat=1)
        self.assertTrue(math.isnan(matrix.bandwidth_mbps[1][0]))
        self.assertTrue(math.isnan(matrix.latency_ns[1][0]))
        # The others: 4 streams of 200 MB in 0.1 s.
        self.assertEqual(8000.0, matrix.bandwidth_mbps[1][1])
        self.assertEqual(100.0, matrix.latency_ns[1][1])
        self.assertIn('CPU node 1 -> memory node 0 failed, recorded as NaN: '
                      'PermissionError: [Errno 1] stream on CPU 6: '
                      'set_mempolicy refused', self.logger.output)

    def test_only_cpus_the_probe_may_run_on_measure(self):
        # A cpuset or taskset leaves the probe CPUs 1, 2 and 4: a child
        # pinned elsewhere would fail with EINVAL.
        self.allowed.return_value = {1, 2, 4, 9}
        runner = mock.create_autospec(amd_runner, side_effect=amd_runner)
        matrix = probe.measure(TWO_NODES, runner=runner)
        runner.assert_any_call(0, 1, [1, 2], 64, 3, 2)
        runner.assert_any_call(1, 0, [4], 64, 3, 1)
        self.assertEqual(4, runner.call_count)
        self.assertEqual([2, 1], matrix.bandwidth_streams)
        self.assertEqual([[5600.0, 3700.0], [2000.0, 5500.0]],
                         matrix.bandwidth_mbps)
        self.assertIn('CPU node 0: only 2 of its 4 CPUs (1-2) are in the '
                      'CPU affinity of the probe (cpuset or taskset): its '
                      'bandwidth is measured by at most 2 streams, which '
                      'the cost model takes as ratios only',
                      self.logger.output)
        self.assertIn('CPU node 1: only 1 of its 4 CPUs (4)',
                      self.logger.output)
        # The file says so, and the cost model keeps the ratios only.
        model = cost.HostModel.build(
            [4, 4], ((10, 21), (21, 10)), 20000.0,
            matrix_mbps=matrix.bandwidth_mbps,
            matrix_streams=matrix.bandwidth_streams)
        self.assertEqual(20000.0, model.bandwidth_mbps[0])
        self.assertAlmostEqual(20000.0 * 5500 / 5600, model.bandwidth_mbps[1])
        # --streams still limits them.
        matrix = probe.measure(TWO_NODES, runner=amd_runner, streams=1)
        self.assertEqual([1, 1], matrix.bandwidth_streams)

    def test_node_with_no_cpu_the_probe_may_run_on(self):
        self.allowed.return_value = {0, 1, 2, 3}
        runner = mock.create_autospec(amd_runner, side_effect=amd_runner)
        matrix = probe.measure(TWO_NODES, runner=runner)
        self.assertEqual(2, runner.call_count)
        self.assertEqual([4, None], matrix.bandwidth_streams)
        self.assertTrue(all(math.isnan(v) for v in matrix.latency_ns[1]))
        self.assertTrue(all(math.isnan(v) for v in matrix.bandwidth_mbps[1]))
        self.assertIn('NUMA probe: none of the CPUs of node 1 (4-7) is in '
                      'the CPU affinity of the probe (0-3; cpuset or '
                      'taskset): its row is NaN', self.logger.output)

    def test_failing_cell_is_nan_and_logged(self):
        def runner(cpu_node, mem_node, cpus, size_mb, repeat, streams):
            if (cpu_node, mem_node) == (1, 0):
                raise OSError(errno.EPERM, 'set_mempolicy refused')
            return amd_runner(cpu_node, mem_node, cpus, size_mb, repeat,
                              streams)

        matrix = probe.measure(TWO_NODES, runner=runner)
        self.assertTrue(math.isnan(matrix.latency_ns[1][0]))
        self.assertTrue(math.isnan(matrix.bandwidth_mbps[1][0]))
        self.assertEqual([100.0, 160.0], matrix.latency_ns[0])
        self.assertEqual(110.0, matrix.latency_ns[1][1])
        self.assertEqual(5500.0, matrix.bandwidth_mbps[1][1])
        self.assertIn('CPU node 1 -> memory node 0 failed, recorded as NaN: '
                      'PermissionError: [Errno 1] set_mempolicy refused',
                      self.logger.output)
        self.assertRaises(ValueError, probe.as_topology_args, matrix)

    def test_implausible_result_is_nan(self):
        def runner(cpu_node, mem_node, cpus, size_mb, repeat, streams):
            return (0.0, 100.0) if cpu_node != mem_node else (1.0, 100.0)

        matrix = probe.measure(TWO_NODES, runner=runner)
        self.assertEqual(1.0, matrix.latency_ns[0][0])
        self.assertTrue(math.isnan(matrix.latency_ns[0][1]))
        self.assertTrue(math.isnan(matrix.bandwidth_mbps[0][1]))
        self.assertIn('CPU node 0 -> memory node 1 gave latency 0.0 ns',
                      self.logger.output)

    def test_node_without_cpus_gives_a_nan_row(self):
        runner = mock.create_autospec(amd_runner, side_effect=amd_runner)
        matrix = probe.measure({0: [0, 1], 1: []}, runner=runner)
        self.assertEqual(2, runner.call_count)
        self.assertEqual([100.0, 160.0], matrix.latency_ns[0])
        self.assertTrue(all(math.isnan(v) for v in matrix.latency_ns[1]))
        self.assertEqual([2, None], matrix.bandwidth_streams)
        self.assertIn('node 1 has no CPUs', self.logger.output)

    def test_bad_arguments(self):
        self.assertRaises(ValueError, probe.measure, TWO_NODES, size_mb=0,
                          runner=amd_runner)
        self.assertRaises(ValueError, probe.measure, TWO_NODES, repeat=0,
                          runner=amd_runner)
        self.assertRaises(ValueError, probe.measure, TWO_NODES, streams=0,
                          runner=amd_runner)

    @mock.patch.object(probe, 'llc_bytes', autospec=True,
                       return_value=480 * MIB)
    @mock.patch.object(probe, 'run_cell', autospec=True,
                       return_value=(10.0, 1000.0))
    def test_default_runner_warns_about_a_cached_buffer(self, run_cell,
                                                        llc_bytes):
        matrix = probe.measure({0: [0]}, size_mb=16, repeat=1)
        run_cell.assert_called_once_with(0, 0, [0], 16, 1, 1)
        llc_bytes.assert_called_once_with(0)
        self.assertEqual([[10.0]], matrix.latency_ns)
        self.assertIn('16 MiB buffer is not much larger than the 480 MiB LLC',
                      self.logger.output)


class TestStreams(base.TestCase):
    """How concurrent streams are sized and added up."""

    def test_each_round_starts_at_the_time_set_for_it(self):
        for index in (0, 1):
            start_at = Shared()
            barrier = ScriptedBarrier(start_at, index)
            _nbytes, rounds = probe.stream_here(1, 3, 1, barrier, start_at)
            # Both meetings of each round, then the copy from the start
            # set for that round on (the leader's START_MARGIN ahead).
            self.assertEqual(6, barrier.waits)
            self.assertEqual(3, len(barrier.starts))
            for (start, end, _cpu), begin in zip(rounds, barrier.starts):
                self.assertGreaterEqual(start, begin)
                self.assertGreater(end, start)
            if index == 0:
                self.assertEqual(3, len(set(barrier.starts)))

    def test_concurrent_streams_are_summed(self):
        # Two streams of 100 MB per round; the best round is kept.
        results = [(100e6, [(0.0, 1.0, 1.0), (10.0, 10.5, 0.5)]),
                   (100e6, [(0.0, 1.0, 1.0), (10.0, 10.5, 0.5)])]
        self.assertEqual((400.0, 1.0, 1.0), probe.aggregate_streams(results))
        # Eight streams moving 50 MB each in 0.1 s: 4000 MB/s.
        mbps, overlap, on_cpu = probe.aggregate_streams(
            [(50e6, [(5.0, 5.1, 0.1)])] * 8)
        self.assertAlmostEqual(4000.0, mbps)
        self.assertEqual((1.0, 1.0), (overlap, on_cpu))

    def test_streams_that_do_not_overlap_are_not_added_up(self):
        # One after the other: their bytes over both their times, as if
        # one stream had copied them (not 200 MB/s, the sum of rates).
        self.assertEqual((100.0, 0.0, 1.0), probe.aggregate_streams(
            [(100e6, [(0.0, 1.0, 1.0)]), (100e6, [(1.0, 2.0, 1.0)])]))
        # Half a round apart: all together a third of the wall time.
        mbps, overlap, _ = probe.aggregate_streams(
            [(100e6, [(0.0, 1.0, 1.0)]), (100e6, [(0.5, 1.5, 1.0)])])
        self.assertAlmostEqual(200.0 / 1.5, mbps)
        self.assertAlmostEqual(1.0 / 3.0, overlap)
        self.assertRaises(ValueError, probe.aggregate_streams, [])

    def test_streams_sharing_their_cpus_with_other_work(self):
        # Together all the time, but the second stream had its CPU for
        # 0.4 s of its 1 s (another process ran there).
        self.assertEqual((200.0, 1.0, 0.4), probe.aggregate_streams(
            [(100e6, [(0.0, 1.0, 1.0)]), (100e6, [(0.0, 1.0, 0.4)])]))

    def test_per_stream_size(self):
        # One stream: the whole buffer, as before streams.
        self.assertEqual(256, probe.stream_size_mb(256, 1))
        self.assertEqual(1, probe.stream_size_mb(1, 1))
        # Several share it...
        self.assertEqual(32, probe.stream_size_mb(256, 8))
        self.assertEqual(86, probe.stream_size_mb(256, 3))
        # ... down to STREAM_MIN_MB each (size_mb when it is smaller).
        self.assertEqual(probe.STREAM_MIN_MB, probe.stream_size_mb(256, 64))
        self.assertEqual(8, probe.stream_size_mb(8, 4))
        for size_mb in (1, 7, 64, 256, 1000, 4096):
            for streams in (1, 2, 3, 8, 64, 256):
                each = probe.stream_size_mb(size_mb, streams)
                # Together at least the buffer one stream had (checked
                # against the LLC), and bounded.
                self.assertGreaterEqual(streams * each, size_mb)
                self.assertLessEqual(
                    streams * each,
                    max(size_mb, streams * probe.STREAM_MIN_MB) + streams)
                # Each stream copies at least size_mb per round.
                self.assertGreaterEqual(
                    each * probe.stream_passes(size_mb, streams), size_mb)
        self.assertEqual(2 * 64 * 16, probe.cell_memory_mb(256, 64))
        self.assertEqual(512, probe.cell_memory_mb(256, 1))
        self.assertRaises(ValueError, probe.stream_size_mb, 256, 0)

    def test_node_available_memory_from_sysfs(self):
        root = self.useFixture(fixtures.TempDir()).path

        def meminfo(node, text):
            os.makedirs(os.path.join(root, 'node%d' % node))
            with open(os.path.join(root, 'node%d' % node, 'meminfo'),
                      'w') as f:
                f.write(text)

        meminfo(1, 'Node 1 MemTotal:       16384000 kB\n'
                   'Node 1 MemFree:         2097152 kB\n'
                   'Node 1 MemUsed:        14286848 kB\n')
        self.assertEqual(2048, probe.node_available_mb(1, root))
        # Page cache and reclaimable slab, half counted: 1 GiB free, 6
        # GiB of files and 1 GiB of slab make 4.5 GiB (anonymous memory,
        # shmem, huge pages: none).
        meminfo(3, 'Node 3 MemTotal:       16777216 kB\n'
                   'Node 3 MemFree:         1048576 kB\n'
                   'Node 3 Active(anon):    5242880 kB\n'
                   'Node 3 Active(file):    4194304 kB\n'
                   'Node 3 Inactive(file):  2097152 kB\n'
                   'Node 3 Shmem:           1048576 kB\n'
                   'Node 3 SReclaimable:    1048576 kB\n'
                   'Node 3 SUnreclaim:       524288 kB\n'
                   'Node 3 HugePages_Free:      512\n')
        self.assertEqual(4608, probe.node_available_mb(3, root))
        self.assertIsNone(probe.node_available_mb(2, root))
        meminfo(4, 'Node 4 MemTotal: 16384000 kB\n')
        self.assertIsNone(probe.node_available_mb(4, root))


class TestRunCell(base.TestCase):
    """run_cell's children as run_children is asked for them."""

    def setUp(self):
        super().setUp()
        allow_all_cpus(self)
        self.free = self.useFixture(fixtures.MockPatchObject(
            probe, 'node_available_mb', autospec=True,
            return_value=None)).mock
        self.children = self.useFixture(fixtures.MockPatchObject(
            probe, 'run_children', autospec=True)).mock
        self.useFixture(fixtures.MockPatchObject(
            probe, '_context', autospec=True))

    def test_latency_alone_then_one_stream_per_cpu(self):
        self.children.side_effect = [
            [(12.5,)],
            [(300e6, [(0.0, 0.1, 0.1), (1.0, 1.06, 0.06)]),
             (300e6, [(0.0, 0.1, 0.1), (1.0, 1.06, 0.06)]),
             (300e6, [(0.0, 0.1, 0.1), (1.0, 1.06, 0.06)])]]
        latency, mbps = probe.run_cell(0, 1, [4, 5, 6, 7], 96, 2, 3)
        self.assertEqual(12.5, latency)
        # 900 MB in the best round's 0.06 s.
        self.assertAlmostEqual(15000.0, mbps)
        first, second = self.children.call_args_list
        _ctx, target, name, arglists, labels, _deadline = first[0]
        self.assertEqual(probe._child_main, target)
        self.assertEqual('numa-probe-0-1', name)
        # One child on all of the node's CPUs, the whole buffer.
        self.assertEqual([(1, [4, 5, 6, 7], 96, 2)], arglists)
        self.assertEqual(['latency child'], labels)
        _ctx, target, name, arglists, labels, _deadline = second[0]
        # Three children, each on one CPU with its own 32 MiB, three
        # copies a round, all on the same barrier and start time.
        self.assertEqual([[4], [5], [6]], [a[1] for a in arglists])
        self.assertEqual({(1, 32, 2, 3)},
                         {(a[0], a[2], a[3], a[6]) for a in arglists})
        self.assertEqual(1, len({id(a[4]) for a in arglists}))
        self.assertEqual(['stream on CPU 4', 'stream on CPU 5',
                          'stream on CPU 6'], labels)
        self.assertNotIn('understate', self.logger.output)

    def test_streams_that_barely_overlap_are_logged(self):
        self.children.side_effect = [
            [(12.5,)],
            [(100e6, [(0.0, 1.0, 1.0)]), (100e6, [(0.9, 1.9, 1.0)])]]
        self.assertEqual((12.5, 100e6 * 2 / 1.9 / 1e6),
                         probe.run_cell(0, 0, [0, 1], 16, 1, 2))
        self.assertIn('CPU node 0 -> memory node 0: in the best round the 2 '
                      'streams all copied together for 5% of the time and '
                      'had their CPUs for 100% of theirs (other work on the '
                      'host?): its 105 MB/s understate them',
                      self.logger.output)

    def test_streams_that_share_their_cpus_are_logged(self):
        self.children.side_effect = [
            [(12.5,)],
            [(100e6, [(0.0, 1.0, 1.0)]), (100e6, [(0.0, 1.0, 0.5)])]]
        probe.run_cell(0, 0, [0, 1], 16, 1, 2)
        self.assertIn('all copied together for 100% of the time and had '
                      'their CPUs for 50% of theirs', self.logger.output)

    def test_not_enough_free_memory_fails_before_any_child(self):
        self.free.return_value = 100
        e = self.assertRaises(OSError, probe.run_cell, 0, 1, [0, 1], 256, 1,
                              2)
        self.assertEqual(errno.ENOMEM, e.errno)
        self.assertIn('memory node 1 has 100 MiB available but the cell '
                      'needs '
                      '512 MiB (2 streams x 2 x 128 MiB): use fewer streams '
                      'or a smaller size', str(e))
        self.free.assert_called_once_with(1)
        self.children.assert_not_called()
        # In the matrix: that cell NaN and logged, the others measured.
        self.free.side_effect = lambda node: 100 if node == 1 else None
        self.children.side_effect = lambda ctx, target, name, arglists, \
            labels, deadline: ([(9.0,)] if len(arglists) == 1 else
                               [(1e8, [(0.0, 0.1, 0.1)])] * len(arglists))
        matrix = probe.measure({0: [0, 1], 1: [2, 3]}, size_mb=256,
                               repeat=1)
        self.assertTrue(math.isnan(matrix.bandwidth_mbps[0][1]))
        self.assertEqual(2000.0, matrix.bandwidth_mbps[0][0])
        self.assertIn('CPU node 0 -> memory node 1 failed, recorded as NaN: '
                      'OSError: [Errno 12] memory node 1 has 100 MiB '
                      'available',
                      self.logger.output)

    def test_streams_must_fit_the_cpus(self):
        self.assertRaises(ValueError, probe.run_cell, 0, 0, [0, 1], 16, 1, 3)
        self.assertRaises(ValueError, probe.run_cell, 0, 0, [0, 1], 16, 1, 0)
        self.children.assert_not_called()


class TestRunChildren(base.TestCase):
    """Children of the fork server, stand-ins for the measuring ones."""

    def setUp(self):
        super().setUp()
        self.ctx = probe._context()

    def children(self, target, arglists, timeout=60.0):
        return probe.run_children(
            self.ctx, target, 'test-probe', arglists,
            ['child %d' % i for i in range(len(arglists))],
            time.monotonic() + timeout)

    def test_answers_in_order(self):
        self.assertEqual([('a',), ('b',), ('c',)],
                         self.children(probe_children.answer,
                                       [('a',), ('b',), ('c',)]))

    def test_a_failing_stream_stops_the_others_and_names_itself(self):
        barrier = self.ctx.Barrier(3, timeout=60)
        # Two wait at the barrier, the third fails: its error, not the
        # others' 'broken', whatever order they answer in.
        procs = [(probe_children.wait_at, barrier),
                 (probe_children.wait_at, barrier),
                 (probe_children.fail_then_break, barrier)]
        e = self.assertRaises(OSError, probe.run_children, self.ctx,
                              probe_children.dispatch, 'test-probe', procs,
                              ['stream on CPU %d' % i for i in range(3)],
                              time.monotonic() + 60)
        self.assertEqual(errno.EPERM, e.errno)
        self.assertEqual('stream on CPU 2: set_mempolicy refused',
                         e.strerror)

    def test_a_child_dying_without_an_answer(self):
        barrier = self.ctx.Barrier(2, timeout=600)
        # The other waits for it at the barrier until it is killed.
        procs = [(probe_children.wait_at, barrier),
                 (probe_children.die, 3)]
        e = self.assertRaises(OSError, probe.run_children, self.ctx,
                              probe_children.dispatch, 'test-probe', procs,
                              ['child 0', 'child 1'],
                              time.monotonic() + 600)
        self.assertEqual('child 1 exited with code 3 without a result',
                         str(e))

    def test_timeout(self):
        e = self.assertRaises(OSError, self.children, probe_children.hang,
                              [(), ()], timeout=0.5)
        self.assertEqual(errno.ETIMEDOUT, e.errno)
        self.assertIn('timed out', str(e))

    def test_a_child_that_cannot_start_stops_the_others(self):
        ctx = mock.Mock()
        pipes = []

        def pipe(duplex):
            pipes.append((mock.Mock(), mock.Mock()))
            return pipes[-1]

        ctx.Pipe.side_effect = pipe
        started = mock.Mock(exitcode=-9)
        failed = mock.Mock()
        failed.start.side_effect = OSError(errno.EAGAIN, 'fork failed')
        ctx.Process.side_effect = [started, failed]
        e = self.assertRaises(OSError, probe.run_children, ctx,
                              probe_children.answer, 'test-probe',
                              [('a',), ('b',)], ['child 0', 'child 1'],
                              time.monotonic() + 60)
        self.assertEqual(errno.EAGAIN, e.errno)
        # The one started would wait for the other at its barrier.
        started.kill.assert_called_once_with()
        started.join.assert_called_once_with(mock.ANY)
        started.close.assert_called_once_with()
        # No pipe left open, that of the child that did not start either.
        self.assertEqual(2, len(pipes))
        for reader, writer in pipes:
            reader.close.assert_called_once_with()
            writer.close.assert_called_once_with()

    @mock.patch.object(probe, 'EXIT_GRACE', 0.2)
    def test_a_child_that_answers_but_does_not_exit_is_killed(self):
        start = time.monotonic()
        [(pid,), other] = self.children(
            probe_children.dispatch,
            [(probe_children.answer_then_hang,),
             (probe_children.answer, 'b')])
        self.assertEqual(('b',), other)
        self.assertLess(time.monotonic() - start, 30)
        self.assertIn('child 0 did not exit 0 s after its answer: killed',
                      self.logger.output)
        # Reaped by the fork server, not left running.
        self.assertRaises(ProcessLookupError, os.kill, pid, 0)

    @mock.patch.object(probe.multiprocessing, 'get_context', autospec=True)
    def test_fork_server_with_numpy_loaded(self, get_context):
        self.assertEqual(get_context.return_value, probe._context())
        get_context.assert_called_once_with('forkserver')
        get_context.return_value.set_forkserver_preload.\
            assert_called_once_with([probe.__name__, 'numpy'])


class TestFiles(base.TestCase):

    def setUp(self):
        super().setUp()
        allow_all_cpus(self)
        self.dir = self.useFixture(fixtures.TempDir()).path
        self.path = os.path.join(self.dir, 'topology.json')

    def write(self, data):
        with open(self.path, 'w') as f:
            f.write(data if isinstance(data, str) else json.dumps(data))

    def assertRejected(self, data, message, **kwargs):
        self.write(data)
        e = self.assertRaises(ValueError, probe.load, self.path, **kwargs)
        self.assertIn(message, str(e))
        self.assertIn(self.path, str(e))

    def test_missing_file_is_none(self):
        self.assertIsNone(probe.load(os.path.join(self.dir, 'absent.json')))

    def test_valid_file(self):
        self.write(valid_file_data())
        matrix = probe.load(self.path)
        self.assertEqual([[100.0, 160.0], [220.0, 110.0]], matrix.latency_ns)
        self.assertEqual('2024-01-01T00:00:00+00:00', matrix.measured_at)
        self.assertEqual([4, 4], matrix.bandwidth_streams)

    def test_version_1_file_is_one_stream_per_cell_with_a_warning(self):
        self.write(version_1_data())
        matrix = probe.load(self.path)
        self.assertEqual([1, 1], matrix.bandwidth_streams)
        self.assertEqual([[5600.0, 3700.0], [2000.0, 5500.0]],
                         matrix.bandwidth_mbps)
        warning = ('NUMA probe: %s is a version 1 file: its bandwidth was '
                   'measured by one stream per cell, a fraction of what a '
                   "node's CPUs move together; run nova-numa-overhead probe "
                   'again\n' % self.path)
        self.assertEqual(1, self.logger.output.count(warning))
        self.assertEqual(1, len(self.logger.output.splitlines()))
        # The cost model then keeps its ratios only (node_bandwidth_mbps
        # 20000 MB/s here).
        args = probe.as_topology_args(matrix)
        self.assertEqual((1, 1), args['bandwidth_streams'])
        model = cost.HostModel.build(
            [4, 4], ((10, 21), (21, 10)), 20000.0,
            matrix_mbps=args['bandwidth_mbps'],
            matrix_streams=args['bandwidth_streams'])
        self.assertEqual(20000.0, model.bandwidth_mbps[0])
        self.assertAlmostEqual(20000.0 * 5500 / 5600, model.bandwidth_mbps[1])
        # Saved again, it says what it is: one stream each.
        probe.save(matrix, self.path)
        self.assertEqual(matrix, probe.load(self.path))
        # A node without CPUs has no row and no stream.
        self.write(version_1_data(latency_ns=[[100.0, 160.0], None],
                                  bandwidth_mbps=[[5600.0, 3700.0], None]))
        self.assertEqual([1, None], probe.load(
            self.path, cpu_less=[1]).bandwidth_streams)

    def test_bad_bandwidth_streams(self):
        for streams, message in (
                ('4', "bandwidth_streams must be a list of 2 entries (one "
                      "per node), not '4'"),
                ([4], 'bandwidth_streams must be a list of 2 entries'),
                ({'0': 4, '1': 4}, 'bandwidth_streams must be a list'),
                ([4, 0], 'bandwidth_streams[1] (CPU node 1) must be a '
                         'positive integer, not 0'),
                ([4, -2], 'not -2'),
                ([4, 2.0], 'not 2.0'),
                ([True, 4], 'bandwidth_streams[0] (CPU node 0) must be a '
                            'positive integer, not True'),
                ([4, '4'], "not '4'"),
                # Null only for a node without CPUs (a null row).
                ([4, None], 'bandwidth_streams[1] (CPU node 1) must be a '
                            'positive integer, not None')):
            self.write(valid_file_data(bandwidth_streams=streams))
            e = self.assertRaises(ValueError, probe.load, self.path)
            self.assertIn(message, str(e))
            self.assertTrue(str(e).startswith(self.path + ': '), e)
            self.assertNotIn('\n', str(e))
        data = valid_file_data()
        del data['bandwidth_streams']
        self.assertRejected(data, 'missing bandwidth_streams')
        self.assertRejected(dict(version_1_data(), bandwidth_streams=[4, 4]),
                            'bandwidth_streams in a version 1 file')

    def test_nan_cell_is_saved_as_null_and_rejected(self):
        matrix = probe.measure(TWO_NODES, runner=amd_runner)
        matrix.latency_ns[1][0] = math.nan
        probe.save(matrix, self.path)
        with open(self.path) as f:
            self.assertIsNone(json.load(f)['latency_ns'][1][0])
        self.assertEqual(['topology.json'], os.listdir(self.dir))
        e = self.assertRaises(ValueError, probe.load, self.path)
        self.assertIn('latency_ns[1][0] (CPU node 1, memory node 0) is '
                      'missing', str(e))

    def test_cpu_less_node_row_may_be_null(self):
        # The probe's output on a host whose node 1 has memory only.
        probe.save(probe.measure({0: [0, 1], 1: []}, runner=amd_runner),
                   self.path)
        e = self.assertRaises(ValueError, probe.load, self.path)
        self.assertIn('latency_ns[1][0] (CPU node 1, memory node 0) is '
                      'missing', str(e))
        matrix = probe.load(self.path, nodes=[0, 1], cpu_less=[1])
        self.assertEqual([[100.0, 160.0], None], matrix.latency_ns)
        self.assertIsNone(matrix.bandwidth_mbps[1])
        args = probe.as_topology_args(matrix, cpu_less=[1])
        self.assertEqual(((100.0, 160.0), None), args['latency_ns'])
        self.assertRaises(ValueError, probe.as_topology_args, matrix)
        # Only whole rows, and only of nodes without CPUs.
        data = valid_file_data(latency_ns=[[100.0, 160.0], [None, 110.0]])
        self.assertRejected(data, 'latency_ns[1][0]', cpu_less=[1])
        data = valid_file_data(latency_ns=[[None, None], [220.0, 110.0]])
        self.assertRejected(data, 'latency_ns[0][0]', cpu_less=[1])

    def test_save_replaces_an_existing_file(self):
        self.write('old')
        probe.save(probe.measure(TWO_NODES, runner=amd_runner), self.path)
        self.assertEqual([0, 1], probe.load(self.path).nodes)

    def test_malformed_files(self):
        self.assertRejected('{"version": 1,', 'not valid JSON')
        with open(self.path, 'wb') as f:
            f.write(b'\xff\xfe{"version": 2}')
        e = self.assertRaises(ValueError, probe.load, self.path)
        self.assertIn('%s: not valid JSON' % self.path, str(e))
        self.assertRejected('[' * 100000 + ']' * 100000,
                            'not valid JSON: nested too deeply')
        self.assertRejected([1, 2], 'expected a JSON object')
        self.assertRejected('null', 'expected a JSON object')
        self.assertRejected(valid_file_data(version=3),
                            'unsupported version 3 (expected 1 or 2)')
        self.assertRejected(valid_file_data(version='2'),
                            "unsupported version '2'")
        data = valid_file_data()
        del data['bandwidth_mbps']
        self.assertRejected(data, 'missing bandwidth_mbps')
        self.assertRejected(valid_file_data(nodes=[0, 0]),
                            'nodes must be a non-empty list of distinct')
        self.assertRejected(valid_file_data(nodes=[]), 'nodes must be')
        self.assertRejected(valid_file_data(nodes=[0, -1]), 'nodes must be')
        self.assertRejected(valid_file_data(size_mb=0), 'size_mb must be')
        self.assertRejected(valid_file_data(measured_at=5),
                            'measured_at must be a string')

    def test_shape_must_match_the_nodes(self):
        self.assertRejected(valid_file_data(nodes=[0, 1, 2]),
                            'latency_ns: expected 3 rows (one per node), '
                            'got 2')
        self.assertRejected(
            valid_file_data(bandwidth_mbps=[[1.0, 2.0], [3.0]]),
            'bandwidth_mbps[1]: expected 2 values, got 1')
        self.assertRejected(valid_file_data(latency_ns={'0': [1.0]}),
                            'latency_ns: expected 2 rows (one per node), '
                            'got a dict')

    def test_cells_must_be_positive_numbers(self):
        self.assertRejected(
            valid_file_data(latency_ns=[[100.0, -1.0], [220.0, 110.0]]),
            'latency_ns[0][1] (CPU node 0, memory node 1) is not a '
            'positive number: -1.0')
        self.assertRejected(
            valid_file_data(bandwidth_mbps=[[5600.0, 0], [2000.0, 5500.0]]),
            'bandwidth_mbps[0][1] (CPU node 0, memory node 1) is not a '
            'positive number: 0')
        self.assertRejected(
            valid_file_data(latency_ns=[[100.0, '160'], [220.0, 110.0]]),
            "latency_ns[0][1] (CPU node 0, memory node 1) is not a "
            "positive number: '160'")
        self.assertRejected(
            valid_file_data(latency_ns=[[100.0, 160.0], [220.0, True]]),
            'latency_ns[1][1]')
        # Python's json reads NaN although save() never writes it.
        self.assertRejected(
            '{"version": 2, "measured_at": "", "size_mb": 1, "nodes": [0],'
            ' "bandwidth_streams": [1],'
            ' "latency_ns": [[NaN]], "bandwidth_mbps": [[1.0]]}',
            'latency_ns[0][0] (CPU node 0, memory node 0) is not a '
            'positive number: nan')

    def test_nodes_must_match_the_host(self):
        self.assertRejected(valid_file_data(), 'measured on nodes [0, 1] but '
                            'the host has nodes [0, 1, 2]', nodes=[0, 1, 2])
        self.write(valid_file_data())
        self.assertEqual([1, 0], probe.load(self.path, nodes=[1, 0]).nodes)

    def test_rows_and_columns_follow_the_hosts_node_order(self):
        # as_topology_args indexes by position: a file measured in another
        # order than the host's must not hand node 1's row to node 0.
        self.write(valid_file_data(
            nodes=[1, 0], bandwidth_streams=[2, 4],
            latency_ns=[[100.0, 300.0], [150.0, 110.0]],
            bandwidth_mbps=[[5500.0, 2000.0], [3700.0, 5600.0]]))
        matrix = probe.load(self.path, nodes=[0, 1])
        self.assertEqual([0, 1], matrix.nodes)
        args = probe.as_topology_args(matrix)
        self.assertEqual(((110.0, 150.0), (300.0, 100.0)),
                         args['latency_ns'])
        self.assertEqual(((5600.0, 3700.0), (2000.0, 5500.0)),
                         args['bandwidth_mbps'])
        self.assertEqual((4, 2), args['bandwidth_streams'])
        # A CPU-less node's row stays None wherever it lands.
        self.write(valid_file_data(
            nodes=[1, 0], bandwidth_streams=[None, 4],
            latency_ns=[None, [150.0, 110.0]],
            bandwidth_mbps=[None, [3700.0, 5600.0]]))
        matrix = probe.load(self.path, nodes=[0, 1], cpu_less=[1])
        self.assertEqual([[110.0, 150.0], None], matrix.latency_ns)
        self.assertEqual([4, None], matrix.bandwidth_streams)


class TestSysfs(base.TestCase):

    def setUp(self):
        super().setUp()
        self.root = self.useFixture(fixtures.TempDir()).path

    def make(self, relpath, content):
        path = os.path.join(self.root, relpath)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, 'w') as f:
            f.write(content)

    def test_host_nodes_from_a_fixture(self):
        self.make('node0/cpulist', '0-3,8-11\n')
        self.make('node1/cpulist', '4-7,12-15\n')
        self.make('node2/cpulist', '\n')      # memory only (CXL)
        self.make('possible', '0-2\n')
        self.make('power/uevent', '')
        self.assertEqual({0: [0, 1, 2, 3, 8, 9, 10, 11],
                          1: [4, 5, 6, 7, 12, 13, 14, 15],
                          2: []},
                         probe.host_nodes(self.root))

    def test_host_nodes_without_numa(self):
        self.assertEqual({}, probe.host_nodes(
            os.path.join(self.root, 'absent')))

    def test_host_nodes_of_this_machine(self):
        nodes = probe.host_nodes()
        if not nodes:
            self.skipTest('no NUMA sysfs here')
        self.assertIn(0, nodes)
        cpus = [c for node_cpus in nodes.values() for c in node_cpus]
        self.assertEqual(len(cpus), len(set(cpus)))
        self.assertLessEqual(os.sched_getaffinity(0), set(cpus))

    def test_format_cpulist(self):
        fmt = numa_stat.format_cpulist
        self.assertEqual('0-3,8-11', fmt([8, 9, 10, 11, 0, 1, 2, 3]))
        self.assertEqual('5', fmt({5}))
        self.assertEqual('0,2,4-5', fmt([0, 2, 4, 5, 5]))
        self.assertEqual('', fmt([]))
        for text in ('0-3,8-11', '1', '0,2-3,7'):
            self.assertEqual(text, fmt(probe.parse_cpulist(text)))

    def test_allowed_cpus_are_this_process_affinity(self):
        self.assertEqual(os.sched_getaffinity(0), probe.allowed_cpus())

    def test_parse_cpulist(self):
        self.assertEqual([0, 1, 2, 3, 8, 9, 10, 11],
                         probe.parse_cpulist('0-3,8-11\n'))
        self.assertEqual([5], probe.parse_cpulist('5'))
        self.assertEqual([], probe.parse_cpulist(''))
        self.assertRaises(ValueError, probe.parse_cpulist, '3-1')
        self.assertRaises(ValueError, probe.parse_cpulist, '0-3:2')
        self.assertRaises(ValueError, probe.parse_cpulist, 'a')

    def test_llc_bytes(self):
        cpu = os.path.join(self.root, 'cpu')
        self.make('cpu/cpu0/cache/index0/level', '1\n')
        self.make('cpu/cpu0/cache/index0/size', '48K\n')
        self.make('cpu/cpu0/cache/index3/level', '3\n')
        self.make('cpu/cpu0/cache/index3/size', '32768K\n')
        self.make('cpu/cpu0/cache/index4/level', 'x\n')
        self.assertEqual(32 * MIB, probe.llc_bytes(0, cpu))
        self.assertIsNone(probe.llc_bytes(1, cpu))


class TestBindMemory(base.TestCase):

    @mock.patch.object(probe.ctypes, 'get_errno', autospec=True,
                       return_value=errno.EPERM)
    @mock.patch.object(probe, '_syscall', autospec=True)
    @mock.patch.object(probe.platform, 'machine', autospec=True,
                       return_value='x86_64')
    def test_failure_raises_oserror(self, machine, syscall, get_errno):
        call = syscall.return_value
        call.return_value = -1
        e = self.assertRaises(OSError, probe.bind_memory, 65)
        self.assertEqual(errno.EPERM, e.errno)
        self.assertIn('set_mempolicy(MPOL_BIND, node 65) failed', str(e))
        number, mode, mask, maxnode = call.call_args[0]
        self.assertEqual(238, number.value)
        self.assertEqual(probe.MPOL_BIND, mode.value)
        self.assertEqual([0, 2], list(mask))     # bit 65 = word 1, bit 1
        self.assertEqual(129, maxnode.value)

    def test_syscall_numbers(self):
        self.assertEqual(238, probe.syscall_number('x86_64'))
        self.assertEqual(237, probe.syscall_number('aarch64'))
        e = self.assertRaises(OSError, probe.syscall_number, 'mips')
        self.assertEqual(errno.ENOSYS, e.errno)

    def test_negative_node(self):
        self.assertRaises(ValueError, probe.bind_memory, -1)


class TestChildMain(base.TestCase):
    """_child_main run in-process with pinning and binding mocked out."""

    def setUp(self):
        super().setUp()
        self.affinity = self.useFixture(fixtures.MockPatchObject(
            probe.os, 'sched_setaffinity', autospec=True)).mock
        self.bind = self.useFixture(fixtures.MockPatchObject(
            probe, 'bind_memory', autospec=True)).mock
        self.latency = self.useFixture(fixtures.MockPatchObject(
            probe, 'latency_here', autospec=True, return_value=12.5)).mock
        self.stream = self.useFixture(fixtures.MockPatchObject(
            probe, 'stream_here', autospec=True,
            return_value=(64 * MIB, [(1.0, 1.1, 0.1)]))).mock
        # Records the order of the answer and the barrier's abort.
        self.calls = mock.Mock()
        self.conn = self.calls.conn
        self.barrier = self.calls.barrier

    def test_pins_binds_then_measures_the_latency(self):
        probe._child_main(self.conn, 1, [4, 5], 16, 2)
        self.affinity.assert_called_once_with(0, [4, 5])
        self.bind.assert_called_once_with(1)
        self.latency.assert_called_once_with(16, 2)
        self.stream.assert_not_called()
        self.conn.send.assert_called_once_with(('ok', 12.5))

    def test_a_stream(self):
        start_at = Shared()
        probe._child_main(self.conn, 1, [5], 16, 2, self.barrier, start_at,
                          4)
        self.affinity.assert_called_once_with(0, [5])
        self.stream.assert_called_once_with(16, 2, 4, self.barrier, start_at)
        self.latency.assert_not_called()
        self.conn.send.assert_called_once_with(
            ('ok', 64 * MIB, [(1.0, 1.1, 0.1)]))
        self.barrier.abort.assert_not_called()

    def test_a_failing_stream_answers_then_breaks_the_barrier(self):
        self.bind.side_effect = OSError(errno.EPERM, 'refused')
        probe._child_main(self.conn, 1, [5], 16, 2, self.barrier, Shared())
        self.assertEqual(
            [mock.call.conn.send(('error', errno.EPERM, 'refused')),
             mock.call.conn.close(), mock.call.barrier.abort()],
            self.calls.mock_calls)
        self.stream.assert_not_called()

    def test_a_stream_whose_sibling_failed(self):
        self.stream.side_effect = threading.BrokenBarrierError
        probe._child_main(self.conn, 1, [5], 16, 2, self.barrier, Shared())
        self.conn.send.assert_called_once_with(
            ('broken', None, 'another stream of the cell failed'))

    def test_bind_failure_is_sent(self):
        self.bind.side_effect = OSError(errno.EPERM, 'refused')
        probe._child_main(self.conn, 1, [4, 5], 16, 2)
        self.conn.send.assert_called_once_with(('error', errno.EPERM,
                                                'refused'))
        self.latency.assert_not_called()

    def test_affinity_failure_names_the_cpus(self):
        self.affinity.side_effect = OSError(errno.EINVAL, 'Invalid argument')
        probe._child_main(self.conn, 1, [4, 5], 16, 2)
        self.conn.send.assert_called_once_with(
            ('error', errno.EINVAL,
             'sched_setaffinity([4, 5]) failed: Invalid argument'))
        self.bind.assert_not_called()

    def test_other_failure_is_sent(self):
        self.latency.side_effect = MemoryError('16 MiB')
        probe._child_main(self.conn, 1, [4, 5], 16, 2)
        self.conn.send.assert_called_once_with(
            ('error', None, 'MemoryError: 16 MiB'))
