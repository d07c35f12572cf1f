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
from unittest import mock

import fixtures

from nova_numa_overhead.compute import hypervisor
from nova_numa_overhead.compute import probe
from nova_numa_overhead.overhead import estimator
from tests import base

MIB = 1024 * 1024

# Asymmetric like the paper's AMD Opteron 6376 (Table II): CPUs of node 1
# read node 0 slower than CPUs of node 0 read node 1.
AMD_LATENCY = {(0, 0): 100.0, (0, 1): 160.0, (1, 0): 220.0, (1, 1): 110.0}
AMD_BANDWIDTH = {(0, 0): 5600.0, (0, 1): 3700.0, (1, 0): 2000.0,
                 (1, 1): 5500.0}
TWO_NODES = {0: [0, 1, 2, 3], 1: [4, 5, 6, 7]}


def amd_runner(cpu_node, mem_node, cpus, size_mb, repeat):
    return (AMD_LATENCY[cpu_node, mem_node],
            AMD_BANDWIDTH[cpu_node, mem_node])


def valid_file_data(**overrides):
    data = {
        'version': 1,
        'measured_at': '2024-01-01T00:00:00+00:00',
        'size_mb': 64,
        'nodes': [0, 1],
        'latency_ns': [[100.0, 160.0], [220.0, 110.0]],
        'bandwidth_mbps': [[5600.0, 3700.0], [2000.0, 5500.0]],
    }
    data.update(overrides)
    return data


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
        matrix = probe.measure({0: self.nodes[0]}, size_mb=16, repeat=1)
        self.assertEqual([0], matrix.nodes)
        self.assertEqual(16, matrix.size_mb)
        self.assertEqual(1, len(matrix.latency_ns))
        self.assertEqual(1, len(matrix.latency_ns[0]))
        for value in (matrix.latency_ns[0][0], matrix.bandwidth_mbps[0][0]):
            self.assertTrue(math.isfinite(value), value)
            self.assertGreater(value, 0)
        # It is a valid topology on its own.
        args = probe.as_topology_args(matrix)
        self.assertEqual(1, len(args['latency_ns']))

    def test_binding_to_a_missing_node_fails_in_the_child(self):
        missing = max(self.nodes) + 40
        e = self.assertRaises(OSError, probe.run_cell, 0, missing,
                              self.nodes[0], 16, 1)
        self.assertEqual(errno.EINVAL, e.errno)
        self.assertIn('set_mempolicy(MPOL_BIND, node %d)' % missing, str(e))

    def test_measure_here_in_process(self):
        latency, bandwidth = probe.measure_here(1, 1)
        self.assertGreater(latency, 0)
        self.assertGreater(bandwidth, 0)


class TestMeasure(base.TestCase):

    def test_asymmetric_matrix_round_trip(self):
        runner = mock.create_autospec(amd_runner, side_effect=amd_runner)
        matrix = probe.measure(TWO_NODES, size_mb=32, repeat=2,
                               runner=runner)
        self.assertEqual(4, runner.call_count)
        runner.assert_any_call(1, 0, [4, 5, 6, 7], 32, 2)
        self.assertEqual([[100.0, 160.0], [220.0, 110.0]], matrix.latency_ns)
        self.assertEqual([[5600.0, 3700.0], [2000.0, 5500.0]],
                         matrix.bandwidth_mbps)
        self.assertEqual([0, 1], matrix.nodes)
        self.assertEqual(32, matrix.size_mb)

        path = os.path.join(self.useFixture(fixtures.TempDir()).path,
                            'topology.json')
        probe.save(matrix, path)
        with open(path) as f:
            self.assertEqual(1, json.load(f)['version'])
        loaded = probe.load(path, nodes=[0, 1])
        self.assertEqual(matrix, loaded)

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

    def test_failing_cell_is_nan_and_logged(self):
        def runner(cpu_node, mem_node, cpus, size_mb, repeat):
            if (cpu_node, mem_node) == (1, 0):
                raise OSError(errno.EPERM, 'set_mempolicy refused')
            return amd_runner(cpu_node, mem_node, cpus, size_mb, repeat)

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
        def runner(cpu_node, mem_node, cpus, size_mb, repeat):
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
        self.assertIn('node 1 has no CPUs', self.logger.output)

    def test_bad_arguments(self):
        self.assertRaises(ValueError, probe.measure, TWO_NODES, size_mb=0,
                          runner=amd_runner)
        self.assertRaises(ValueError, probe.measure, TWO_NODES, repeat=0,
                          runner=amd_runner)

    @mock.patch.object(probe, 'llc_bytes', autospec=True,
                       return_value=480 * MIB)
    @mock.patch.object(probe, 'run_cell', autospec=True,
                       return_value=(10.0, 1000.0))
    def test_default_runner_warns_about_a_cached_buffer(self, run_cell,
                                                        llc_bytes):
        matrix = probe.measure({0: [0]}, size_mb=16, repeat=1)
        run_cell.assert_called_once_with(0, 0, [0], 16, 1)
        llc_bytes.assert_called_once_with(0)
        self.assertEqual([[10.0]], matrix.latency_ns)
        self.assertIn('16 MiB buffer is not much larger than the 480 MiB LLC',
                      self.logger.output)


class TestFiles(base.TestCase):

    def setUp(self):
        super().setUp()
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
        self.assertRejected([1, 2], 'expected a JSON object')
        self.assertRejected(valid_file_data(version=2),
                            'unsupported version 2')
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
            '{"version": 1, "measured_at": "", "size_mb": 1, "nodes": [0],'
            ' "latency_ns": [[NaN]], "bandwidth_mbps": [[1.0]]}',
            'latency_ns[0][0] (CPU node 0, memory node 0) is not a '
            'positive number: nan')

    def test_nodes_must_match_the_host(self):
        self.assertRejected(valid_file_data(), 'measured on nodes [0, 1] but '
                            'the host has nodes [0, 1, 2]', nodes=[0, 1, 2])
        self.write(valid_file_data())
        self.assertEqual([0, 1], probe.load(self.path, nodes=[1, 0]).nodes)


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


class TestChild(base.TestCase):
    """The child's error reporting and the parent's reading of it."""

    def setUp(self):
        super().setUp()
        self.get_context = self.useFixture(fixtures.MockPatchObject(
            probe.multiprocessing, 'get_context', autospec=True)).mock
        self.ctx = self.get_context.return_value
        self.reader = mock.Mock()
        self.ctx.Pipe.return_value = (self.reader, mock.Mock())
        self.proc = self.ctx.Process.return_value

    def test_result(self):
        self.reader.recv.return_value = ('ok', 12.5, 9000.0)
        self.assertEqual((12.5, 9000.0), probe.run_cell(0, 1, [0], 16, 1))
        self.get_context.assert_called_once_with('forkserver')
        self.ctx.set_forkserver_preload.assert_called_once_with(
            [probe.__name__, 'numpy'])
        self.proc.start.assert_called_once_with()
        self.proc.join.assert_called_once_with()

    def test_error_with_errno(self):
        self.reader.recv.return_value = ('error', errno.EINVAL, 'bad node')
        e = self.assertRaises(OSError, probe.run_cell, 0, 1, [0], 16, 1)
        self.assertEqual(errno.EINVAL, e.errno)

    def test_error_without_errno(self):
        self.reader.recv.return_value = ('error', None, 'MemoryError: ')
        e = self.assertRaises(OSError, probe.run_cell, 0, 1, [0], 16, 1)
        self.assertEqual('MemoryError: ', str(e))

    def test_child_died(self):
        self.reader.recv.side_effect = EOFError
        self.proc.exitcode = -9
        e = self.assertRaises(OSError, probe.run_cell, 0, 1, [0], 16, 1)
        self.assertIn('exited with code -9 without a result', str(e))

    def test_timeout(self):
        self.reader.poll.return_value = False
        e = self.assertRaises(OSError, probe.run_cell, 0, 1, [0], 16, 1)
        self.assertEqual(errno.ETIMEDOUT, e.errno)
        self.proc.kill.assert_called_once_with()
        self.proc.join.assert_called_once_with()
        self.reader.close.assert_called_once_with()


class TestChildMain(base.TestCase):
    """_child_main run in-process with pinning and binding mocked out."""

    def setUp(self):
        super().setUp()
        self.affinity = self.useFixture(fixtures.MockPatchObject(
            probe.os, 'sched_setaffinity', autospec=True)).mock
        self.bind = self.useFixture(fixtures.MockPatchObject(
            probe, 'bind_memory', autospec=True)).mock
        self.measure = self.useFixture(fixtures.MockPatchObject(
            probe, 'measure_here', autospec=True,
            return_value=(12.5, 9000.0))).mock
        self.conn = mock.Mock()

    def test_pins_binds_then_measures(self):
        probe._child_main(self.conn, 1, [4, 5], 16, 2)
        self.affinity.assert_called_once_with(0, [4, 5])
        self.bind.assert_called_once_with(1)
        self.measure.assert_called_once_with(16, 2)
        self.conn.send.assert_called_once_with(('ok', 12.5, 9000.0))

    def test_bind_failure_is_sent(self):
        self.bind.side_effect = OSError(errno.EPERM, 'refused')
        probe._child_main(self.conn, 1, [4, 5], 16, 2)
        self.conn.send.assert_called_once_with(('error', errno.EPERM,
                                                'refused'))
        self.measure.assert_not_called()

    def test_affinity_failure_names_the_cpus(self):
        self.affinity.side_effect = OSError(errno.EINVAL, 'Invalid argument')
        probe._child_main(self.conn, 1, [4, 5], 16, 2)
        self.conn.send.assert_called_once_with(
            ('error', errno.EINVAL,
             'sched_setaffinity([4, 5]) failed: Invalid argument'))
        self.bind.assert_not_called()

    def test_other_failure_is_sent(self):
        self.measure.side_effect = MemoryError('16 MiB')
        probe._child_main(self.conn, 1, [4, 5], 16, 2)
        self.conn.send.assert_called_once_with(
            ('error', None, 'MemoryError: 16 MiB'))
