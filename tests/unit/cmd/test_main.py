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
"""The rough edges of ``nova-numa-overhead`` an operator met on day one.

Each case runs the command as an operator would and expects one line on
standard error naming the problem, a non-zero exit code, and no
traceback. Cases that depend on the process (a closed pipe, warnings at
import) run the console script's module in a subprocess.
"""

import builtins
import io
import json
import os
import socket
import ssl
import subprocess
import sys
import time
from unittest import mock

import fixtures

from nova_numa_overhead.cmd import common
from nova_numa_overhead.cmd import main as main_cmd
from nova_numa_overhead.compute import probe
from tests import base

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


def free_port() -> int:
    """A local TCP port where nothing listens (now)."""
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


class CommandTestCase(base.TestCase):

    def setUp(self):
        super().setUp()
        self.stdout = self.useFixture(
            fixtures.MonkeyPatch('sys.stdout', io.StringIO())).new_value
        self.stderr = self.useFixture(
            fixtures.MonkeyPatch('sys.stderr', io.StringIO())).new_value
        self.tmp = self.useFixture(fixtures.TempDir()).path

    def run_main(self, *argv):
        try:
            return main_cmd.main(list(argv))
        except SystemExit as exc:   # argparse
            return exc.code

    def assertOneLineError(self, rc, *fragments, code=None):
        err = self.stderr.getvalue()
        self.assertNotEqual(0, rc, err)
        if code is not None:
            self.assertEqual(code, rc, err)
        lines = err.splitlines()
        self.assertEqual(1, len(lines), err)
        self.assertNotIn('Traceback', err)
        for fragment in fragments:
            self.assertIn(fragment, lines[0])
        return lines[0]


class TestProbe(CommandTestCase):

    def setUp(self):
        super().setUp()
        self.measure = self.useFixture(fixtures.MockPatchObject(
            probe, 'measure', autospec=True)).mock
        self.useFixture(fixtures.MockPatchObject(
            probe, 'host_nodes', autospec=True,
            return_value={0: [0, 1], 1: [2, 3]}))
        self.useFixture(fixtures.MockPatchObject(
            probe, 'llc_bytes', autospec=True,
            return_value=32 * 1024 * 1024))

    def test_missing_directory_fails_before_measuring(self):
        path = os.path.join(self.tmp, 'missing', 'topology.json')
        rc = self.run_main('probe', '--output', path)
        self.assertOneLineError(rc, 'probe: directory %s does not exist'
                                % os.path.dirname(path))
        self.measure.assert_not_called()

    def test_output_is_a_directory(self):
        rc = self.run_main('probe', '--output', self.tmp)
        self.assertOneLineError(rc, 'is a directory')
        self.measure.assert_not_called()

    def test_size_below_four_times_the_llc(self):
        rc = self.run_main('probe', '--output',
                           os.path.join(self.tmp, 't.json'),
                           '--size-mb', '1')
        self.assertOneLineError(rc, '--size-mb 1 is below 4 times the '
                                'last-level cache (32 MiB)',
                                'use --size-mb 128', code=2)
        self.measure.assert_not_called()

    def test_size_and_repeat_bounds(self):
        for argv, fragment in (
                (['--size-mb', '0'], 'argument --size-mb: must be an '
                                     'integer from 1 to 65536, not 0'),
                (['--size-mb', '99999999'], 'argument --size-mb'),
                (['--repeat', '0'], 'argument --repeat'),
                (['--repeat', 'x'], "'x' is not an integer")):
            self.stderr.truncate(0)
            self.stderr.seek(0)
            rc = self.run_main('probe', '--output',
                               os.path.join(self.tmp, 't.json'), *argv)
            self.assertOneLineError(rc, fragment, code=2)
        self.measure.assert_not_called()

    def test_write_error_names_the_output_not_a_temporary_file(self):
        self.measure.return_value = probe.Matrix(
            latency_ns=[[1.0]], bandwidth_mbps=[[1.0]], nodes=[0],
            measured_at='now', size_mb=256, bandwidth_streams=[2])
        path = os.path.join(self.tmp, 't.json')
        with mock.patch.object(probe.os, 'replace', autospec=True,
                               side_effect=PermissionError(
                                   13, 'Permission denied')):
            rc = self.run_main('probe', '--output', path)
        line = self.assertOneLineError(rc, 'cannot write %s' % path)
        self.assertNotIn('.tmp', line)
        self.assertEqual([], os.listdir(self.tmp))

    def test_streams(self):
        self.measure.return_value = probe.Matrix(
            latency_ns=[[10.0, 20.0], [20.0, 10.0]],
            bandwidth_mbps=[[9000.0, 4000.0], [4000.0, 9000.0]],
            nodes=[0, 1], measured_at='now', size_mb=256,
            bandwidth_streams=[1, 1])
        path = os.path.join(self.tmp, 't.json')
        self.assertEqual(0, self.run_main('probe', '--output', path,
                                          '--streams', '1'))
        self.measure.assert_called_once_with(
            {0: [0, 1], 1: [2, 3]}, size_mb=256, repeat=3, streams=1)
        out = self.stdout.getvalue()
        self.assertIn('bandwidth (MB/s) of concurrent streams, rows = CPU '
                      'node (its streams), columns = memory node', out)
        self.assertIn('  0 (   1)     9000     4000\n', out)
        self.assertEqual([1, 1], probe.load(path).bandwidth_streams)
        # By default, all of each node's CPUs.
        self.measure.reset_mock()
        self.assertEqual(0, self.run_main('probe', '--output', path))
        self.assertIsNone(self.measure.call_args[1]['streams'])
        rc = self.run_main('probe', '--output', path, '--streams', '0')
        self.assertOneLineError(rc, 'argument --streams', code=2)

    def test_help_documents_every_option(self):
        parser_help = self._help('probe')
        self.assertIn('measurements per node pair', parser_help)
        self.assertIn('buffer per measurement', parser_help)
        self.assertIn('concurrent copy streams', parser_help)

    def _help(self, command):
        self.assertEqual(0, self.run_main(command, '--help'))
        return self.stdout.getvalue()


def _failing(module, missing):
    """``__import__`` as where importing ``module`` fails on ``missing``
    (not installed).
    """
    real = builtins.__import__

    def importer(name, *args, **kwargs):
        if name == module or name.startswith(module + '.'):
            raise ModuleNotFoundError('No module named %r' % missing,
                                      name=missing)
        return real(name, *args, **kwargs)
    return importer


class TestSimulate(CommandTestCase):

    def test_plot_with_an_unknown_format_fails_before_running(self):
        with mock.patch('nova_numa_overhead.sim.cli.simulate',
                        autospec=True) as simulate:
            rc = self.run_main('simulate', '--scenario', 'remote-4',
                               '--quiet', '--plot',
                               os.path.join(self.tmp, 'x.txt'))
        self.assertOneLineError(rc, 'cannot draw', '.png', code=2)
        simulate.assert_not_called()

    def test_plot_into_a_missing_directory(self):
        rc = self.run_main('simulate', '--scenario', 'remote-4', '--quiet',
                           '--plot', os.path.join(self.tmp, 'no', 'x.png'))
        self.assertOneLineError(rc, 'does not exist', code=2)

    def test_list_as_json(self):
        self.assertEqual(0, self.run_main('simulate', '--list', '--format',
                                          'json'))
        listed = json.loads(self.stdout.getvalue())
        self.assertIn('remote-4', listed)

    def test_format_has_help(self):
        self.assertEqual(0, self.run_main('simulate', '--help'))
        self.assertIn('output format', self.stdout.getvalue())

    def test_without_the_simulator_s_packages_one_line(self):
        # A scheduler or API node's install has no numpy: importing the
        # simulator fails on it.
        self.useFixture(fixtures.MockPatchObject(
            builtins, '__import__',
            side_effect=_failing('nova_numa_overhead.sim', 'numpy')))
        rc = self.run_main('simulate', '--scenario', 'remote-4', '--quiet')
        self.assertOneLineError(rc, "the simulator needs numpy: pip install "
                                "'nova-numa-overhead[sim]'", code=1)

    def test_unknown_command_is_one_line(self):
        rc = self.run_main('simulat')
        self.assertOneLineError(rc, "invalid choice: 'simulat'", code=2)


class TestDemo(CommandTestCase):

    def test_broker_port_where_nothing_listens(self):
        url = 'rabbit://guest:secret@127.0.0.1:%d/' % free_port()
        start = time.monotonic()
        rc = self.run_main('demo', '--scheduler-only', '--transport-url',
                           url)
        line = self.assertOneLineError(rc, 'cannot reach the broker',
                                       'Connection refused', code=1)
        self.assertNotIn('secret', line)
        # No retrying forever (generous: the machine is shared).
        self.assertLess(time.monotonic() - start, 60)

    def test_bad_transport_url(self):
        rc = self.run_main('demo', '--scheduler-only', '--transport-url',
                           'rabbit://guest:guest@127.0.0.1:notaport/')
        self.assertOneLineError(rc, 'bad transport URL')

    def test_hosts_report_and_a_hint_changes_the_choice(self):
        # In a process of its own: the demo parses Nova's global CONF,
        # which resets the defaults other modules set there.
        from nova_numa_overhead import demo
        result = subprocess.run(
            [sys.executable, '-m', 'nova_numa_overhead.cmd.main', 'demo',
             '--scheduler-only'], cwd=TOP, capture_output=True, text=True,
            timeout=300)
        self.assertEqual(0, result.returncode, result.stderr)
        text = result.stdout
        self.assertTrue(text.startswith('nova-numa-overhead demo: 4 hosts '
                                        'report'), text)
        picks = [line for line in text.splitlines()
                 if line.startswith('  -> Nova picks')]
        self.assertEqual(len(demo.FLAVORS), len(picks))
        hinted = [i for i, f in enumerate(demo.FLAVORS) if f[3]]
        self.assertTrue(hinted)
        for i in hinted:
            self.assertIn('(without the hint: ', picks[i])


class TestCommon(base.TestCase):

    def test_redact(self):
        self.assertEqual('rabbit://u:***@h:5672/v',
                         common.redact('rabbit://u:pw@h:5672/v'))
        self.assertEqual('fake://', common.redact('fake://'))

    def test_other_transports_are_not_checked(self):
        common.check_broker('fake://')
        common.check_broker(None)

    def broker_ssl(self, url):
        """The ``ssl`` the broker check gives py-amqp for ``url``."""
        common.check_broker(url, conf=self.conf)
        return self.amqp_connection.call_args.kwargs['ssl']

    def test_broker_check_over_tls_as_oslo_messaging(self):
        from oslo_messaging import conffixture
        self.useFixture(conffixture.ConfFixture(self.conf))
        self.amqp_connection = self.useFixture(fixtures.MockPatch(
            'amqp.Connection', autospec=True)).mock
        url = 'rabbit://u:p@rabbit.example.org:5671/'
        self.assertFalse(self.broker_ssl(url))
        self.assertTrue(self.broker_ssl(url + '?ssl=1'))
        self.assertFalse(self.broker_ssl(url + '?ssl=false'))
        # [oslo_messaging_rabbit], its files as the driver gives them.
        tmp = self.useFixture(fixtures.TempDir()).path
        files = {}
        for name in ('ca', 'cert', 'key'):
            files[name] = os.path.join(tmp, name + '.pem')
            with open(files[name], 'w') as f:
                f.write('-')
        self.flags(group='oslo_messaging_rabbit', ssl=True,
                   ssl_ca_file=files['ca'], ssl_cert_file=files['cert'],
                   ssl_key_file=files['key'])
        self.assertEqual({'ca_certs': files['ca'],
                          'cert_reqs': ssl.CERT_REQUIRED,
                          'server_hostname': 'rabbit.example.org',
                          'certfile': files['cert'],
                          'keyfile': files['key']}, self.broker_ssl(url))
        # The URL's query over the options, as oslo.messaging reads it.
        self.assertFalse(self.broker_ssl(url + '?ssl=0'))

    def test_broker_check_tls_errors_are_one_line(self):
        from oslo_messaging import conffixture
        self.useFixture(conffixture.ConfFixture(self.conf))
        url = 'rabbit://u:p@localhost:5671/'
        exc = self.assertRaises(common.CommandError, common.check_broker,
                                url + '?ssl=maybe', conf=self.conf)
        self.assertEqual(common.EXIT_USAGE, exc.code)
        self.assertIn('ssl', str(exc))
        self.assertNotIn(':p@', str(exc))
        self.flags(group='oslo_messaging_rabbit', ssl=True,
                   ssl_ca_file='/nonexistent/ca.pem')
        exc = self.assertRaises(common.CommandError, common.check_broker,
                                url, conf=self.conf)
        self.assertEqual(common.EXIT_USAGE, exc.code)
        self.assertEqual('configuration error: [oslo_messaging_rabbit] '
                         'ssl_ca_file: cannot read /nonexistent/ca.pem',
                         str(exc))


class TestConsoleScripts(base.TestCase):
    """What only a separate process shows."""

    def run_module(self, module, *argv, **kwargs):
        return subprocess.run(
            [sys.executable, '-m', module] + list(argv), cwd=TOP,
            capture_output=True, text=True, timeout=120, **kwargs)

    def test_piping_into_head_is_quiet(self):
        proc = subprocess.Popen(
            [sys.executable, '-m', 'nova_numa_overhead.cmd.main',
             'simulate', '--list'], cwd=TOP, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        proc.stdout.readline()
        proc.stdout.close()     # what `| head -1` does
        err = proc.stderr.read()
        proc.wait(timeout=60)
        self.assertNotIn('Traceback', err)
        self.assertNotIn('BrokenPipeError', err)

    def test_agent_start_prints_no_eventlet_warning(self):
        conf = os.path.join(self.useFixture(fixtures.TempDir()).path,
                            'nova.conf')
        with open(conf, 'w') as f:
            f.write('[numa_overhead_agent]\nenforcement = bogus\n')
        result = self.run_module('nova_numa_overhead.cmd.agent',
                                 '--config-file', conf)
        self.assertEqual(2, result.returncode, result.stderr)
        self.assertNotIn('Eventlet', result.stderr)
        lines = result.stderr.splitlines()
        self.assertEqual(1, len(lines), result.stderr)
        self.assertTrue(lines[0].startswith(
            'nova-numa-overhead-agent: configuration error: '
            '[numa_overhead_agent] enforcement'), lines[0])
