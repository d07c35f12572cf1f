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
"""``nova-numa-overhead reports`` over oslo.messaging's in-memory driver.

The same command against RabbitMQ, with agents in two virtual hosts as in
a cells v2 deployment, is in tests/integration/test_cells.py.
"""

import io
import os
import time
import uuid

import fixtures
from oslo_config import cfg
from oslo_messaging import conffixture as messaging_conffixture

from nova_numa_overhead.cmd import main as main_cmd
from nova_numa_overhead.cmd import reports
from nova_numa_overhead import report as report_mod
from nova_numa_overhead import rpc
from tests import base
from tests.unit.scheduler import test_store


class TestListener(base.TestCase):

    def setUp(self):
        super().setUp()
        # The options oslo.messaging registers on the global CONF only, on
        # this test's own ConfigOpts.
        self.useFixture(messaging_conffixture.ConfFixture(self.conf))
        self.flags(transport_url='fake://',
                   report_topic='reports-' + uuid.uuid4().hex[:8])
        self.transport = rpc.get_transport(self.conf)
        self.addCleanup(self.transport.cleanup)
        self.clock = test_store.FakeClock()
        self.listener = reports.Listener(self.conf, clock=self.clock)
        self.listener.start(self.transport, sync=False)
        self.addCleanup(self.listener.stop)
        self.publisher = rpc.ReportPublisher(self.conf,
                                             transport=self.transport)

    def publish(self, **kwargs):
        report = report_mod.from_dict(base.make_report(**kwargs))
        self.assertTrue(self.publisher.publish(report))

    def wait_for(self, *hosts):
        deadline = time.monotonic() + 30
        while set(hosts) - set(self.listener.heard):
            self.assertLess(time.monotonic(), deadline,
                            'heard only %s' % sorted(self.listener.heard))
            time.sleep(0.02)

    def test_every_host_heard_with_what_the_filter_would_do(self):
        self.publish(host='cmp-calm', mc=0, seq=3, agent_id='a' * 32)
        self.publish(host='cmp-busy', mc=4, llc=2)
        self.publish(host='cmp-full', free_mb=100)
        self.wait_for('cmp-calm', 'cmp-busy', 'cmp-full')
        self.clock.now += 12
        rows = {r['host']: r for r in self.listener.hosts(4096, limit=3)}
        calm = rows['cmp-calm']
        self.assertEqual(('a' * 32, 3, 12.0, True), (
            calm['agent_id'], calm['seq'], calm['age'], calm['fresh']))
        self.assertEqual(0.0, calm['planned_overhead'])
        self.assertEqual(('passes', 'within max_level 3'),
                         (calm['filter'], calm['why']))
        self.assertEqual([0, 0], [n['mc'] for n in calm['nodes']])
        busy = rows['cmp-busy']
        self.assertEqual(6.0, busy['planned_overhead'])
        self.assertEqual(('fails', 'above max_level 3'),
                         (busy['filter'], busy['why']))
        full = rows['cmp-full']
        self.assertIsNone(full['planned_overhead'])
        self.assertEqual(('fails', 'no room for 4096 MiB'),
                         (full['filter'], full['why']))
        # Without a limit the filter passes every known host.
        self.assertEqual({'passes'}, {r['filter'] for r in
                                      self.listener.hosts(4096, None)})
        text = reports.render(self.listener.hosts(4096, 3), {
            'topic': 't', 'url': 'fake://', 'ttl': 180, 'memory': 4096,
            'policy': 'proportional', 'max_nodes': 4, 'limit': '3',
            'unknown': 'pass'})
        self.assertIn('cmp-busy           agent-1      12      1    6.00  '
                      'fails  0:2/4 1:2/4', text)
        self.assertIn('cmp-full           agent-1      12      1 no room  '
                      'fails', text)

    def test_a_stale_host_follows_unknown_host(self):
        self.publish(host='cmp-old')
        self.wait_for('cmp-old')
        self.clock.now += 181
        row = self.listener.hosts(4096, limit=3)[0]
        self.assertFalse(row['fresh'])
        self.assertEqual('passes', row['filter'])
        self.assertIn('unknown_host=pass', row['why'])
        self.flags(unknown_host='fail')
        self.assertEqual('fails', self.listener.hosts(4096, 3)[0]['filter'])
        text = reports.render(self.listener.hosts(4096, 3), {
            'topic': 't', 'url': 'fake://', 'ttl': 180, 'memory': 4096,
            'policy': 'proportional', 'max_nodes': 4, 'limit': '3',
            'unknown': 'fail'})
        self.assertIn('stale', text)
        self.assertIn('Stale (older than report_ttl, so unknown to the '
                      'filter and weigher): cmp-old.', text)

    def test_a_stale_host_passes_without_a_limit(self):
        # As the filter: unknown_host counts only when a limit applies.
        self.flags(unknown_host='fail')
        self.publish(host='cmp-old')
        self.wait_for('cmp-old')
        self.clock.now += 181
        row = self.listener.hosts(4096, limit=None)[0]
        self.assertFalse(row['fresh'])
        self.assertEqual(('passes', 'older than report_ttl: unknown, no '
                          'limit'), (row['filter'], row['why']))

    def test_a_bad_report_is_counted_not_shown(self):
        self.listener.report({}, {'host': 'cmp-x', 'version': '9.0'})
        self.assertEqual(1, self.listener.rejected)
        self.assertEqual({}, self.listener.heard)
        self.assertIn('Rejected NUMA overhead report from host cmp-x',
                      self.logger.output)

    def test_the_table_fits_80_columns(self):
        self.publish(host='cmp-' + 'x' * 40, nodes=16)
        self.wait_for('cmp-' + 'x' * 40)
        text = reports.render(self.listener.hosts(4096, None), {
            'topic': 'numa-overhead', 'url': 'rabbit://u:***@h:5672/api',
            'ttl': 180, 'memory': 4096, 'policy': 'proportional',
            'max_nodes': 4, 'limit': 'none', 'unknown': 'pass'})
        self.assertEqual([], [line for line in text.splitlines()
                              if len(line) > 80])
        self.assertIn('15:0/0', text)


class TestCommand(base.TestCase):

    def setUp(self):
        super().setUp()
        # run() parses the global CONF: give it a fresh one (parsing the
        # real one would reset the defaults other modules set there).
        fresh = cfg.ConfigOpts()
        self.useFixture(messaging_conffixture.ConfFixture(fresh))
        self.useFixture(fixtures.MonkeyPatch(
            'oslo_config.cfg.CONF', fresh))
        self.stdout = self.useFixture(
            fixtures.MonkeyPatch('sys.stdout', io.StringIO())).new_value
        self.stderr = self.useFixture(
            fixtures.MonkeyPatch('sys.stderr', io.StringIO())).new_value
        self.tmp = self.useFixture(fixtures.TempDir()).path

    def conf_file(self, text):
        path = os.path.join(self.tmp, 'nova.conf')
        with open(path, 'w') as f:
            f.write(text)
        return path

    def run_main(self, *argv):
        try:
            return main_cmd.main(['reports'] + list(argv))
        except SystemExit as exc:
            return exc.code

    def one_line(self):
        lines = self.stderr.getvalue().splitlines()
        self.assertEqual(1, len(lines), self.stderr.getvalue())
        return lines[0]

    def test_nobody_reports_is_an_error(self):
        path = self.conf_file('[numa_overhead]\ntransport_url = fake://\n'
                              'report_topic = nobody-%s\n'
                              % uuid.uuid4().hex[:8])
        self.assertEqual(1, self.run_main('--config-file', path, '--wait',
                                          '0', '--no-sync'))
        self.assertIn('No host heard yet.', self.stdout.getvalue())
        self.assertIn('reports: no agent reported within 0 s on topic '
                      'nobody-', self.one_line())

    def test_bad_transport_url(self):
        self.assertEqual(2, self.run_main(
            '--config-file', self.conf_file('[DEFAULT]\n'),
            '--transport-url', 'rabbit://guest:guest@127.0.0.1:notaport/'))
        self.assertIn('notaport', self.one_line())

    def test_watch_needs_at_least_a_second(self):
        # 0 would redraw the table in a busy loop: refused before it runs.
        self.useFixture(fixtures.MockPatch(
            'nova_numa_overhead.cmd.reports.run', autospec=True,
            return_value=0))
        for value in ('0', '0.5'):
            self.stderr.seek(0)
            self.stderr.truncate()
            self.assertEqual(2, self.run_main('--watch', value))
            self.assertIn('--watch: must be a number of seconds from 1 to '
                          '3600, not %s' % value, self.one_line())

    def test_bad_configuration(self):
        path = self.conf_file('[numa_overhead]\nunknown_host = maybe\n')
        self.assertEqual(2, self.run_main('--config-file', path))
        self.assertIn('configuration error', self.one_line())
        self.assertIn('maybe', self.one_line())
