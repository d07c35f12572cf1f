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
"""Cells v2: agents on a cell's broker, schedulers on the API-level one.

Two virtual hosts of the shared RabbitMQ stand for the two brokers: a
"cell" vhost (nova-compute's ``[DEFAULT] transport_url``) and an "API"
vhost (the schedulers'). The test creates them with rabbitmqctl, gives the
guest user access, and deletes them (and nothing else) at the end.

Two real agents run on libvirt's test driver with nova-compute's
configuration: one with ``[numa_overhead] transport_url`` pointing at the
API vhost, one without. ``nova-numa-overhead reports``, run with a
scheduler's configuration, hears the first and not the second, which
reports to the cell's broker where no scheduler listens.
"""

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
import uuid

import fixtures

from tests import base
from tests.integration import test_rabbitmq

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
BROKER = '127.0.0.1:5672'
TIMEOUT = 90


def rabbitmqctl(*commands):
    """Run rabbitmqctl commands in parallel (each takes seconds)."""
    ctl = shutil.which('rabbitmqctl')
    procs = [subprocess.Popen([ctl, '-q'] + list(c), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
             for c in commands]
    failed = []
    for command, proc in zip(commands, procs):
        out, _ = proc.communicate(timeout=120)
        if proc.returncode:
            failed.append('%s: %s' % (' '.join(command), out.strip()))
    return failed


class Watch:
    """``nova-numa-overhead reports --watch --format json`` as a process."""

    def __init__(self, test, conf_file):
        self.proc = subprocess.Popen(
            [sys.executable, '-m', 'nova_numa_overhead.cmd.main', 'reports',
             '--config-file', conf_file, '--format', 'json', '--watch',
             '1'], cwd=TOP, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        test.addCleanup(self.stop)
        self.lines = queue.Queue()
        self.last = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))

    def hosts(self) -> dict:
        """Host -> row of the newest output (none yet: empty)."""
        while True:
            try:
                self.last = self.lines.get_nowait()
            except queue.Empty:
                break
        if self.proc.poll() is not None and self.last is None:
            raise AssertionError('reports exited with %s: %s' % (
                self.proc.returncode, self.proc.stderr.read()))
        return {r['host']: r for r in (self.last or {}).get('hosts', [])}

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class TestCellsV2(base.TestCase):

    def setUp(self):
        super().setUp()
        if not test_rabbitmq.broker_reachable():
            self.fail('RabbitMQ is not reachable at %s (start it with: '
                      'rabbitmq-server -detached)' % BROKER)
        if shutil.which('rabbitmqctl') is None:
            self.skipTest('needs rabbitmqctl to create virtual hosts')
        tag = uuid.uuid4().hex[:8]
        self.cell = 'nno-test-cell1-' + tag
        self.api = 'nno-test-api-' + tag
        self.tmp = self.useFixture(fixtures.TempDir()).path
        failed = rabbitmqctl(['add_vhost', self.cell],
                             ['add_vhost', self.api])
        # Delete only what this test created, whatever happens next.
        self.addCleanup(rabbitmqctl, ['delete_vhost', self.cell],
                        ['delete_vhost', self.api])
        failed += rabbitmqctl(
            ['set_permissions', '-p', self.cell, 'guest', '.*', '.*', '.*'],
            ['set_permissions', '-p', self.api, 'guest', '.*', '.*', '.*'])
        self.assertEqual([], failed)

    def url(self, vhost):
        return 'rabbit://guest:guest@%s/%s' % (BROKER, vhost)

    def conf_file(self, name, text):
        path = os.path.join(self.tmp, name)
        with open(path, 'w') as f:
            f.write(text)
        return path

    def agent(self, host, reports_to=None):
        """nova-numa-overhead-agent with nova-compute's nova.conf of a cell.
        """
        text = ('[DEFAULT]\nhost = %s\ntransport_url = %s\n'
                '[numa_overhead_agent]\nconnection_uri = test:///default\n'
                'state_file =\n'
                'sample_interval = 1\nreport_interval = 600\n'
                'heartbeat_interval = 90\n' % (host, self.url(self.cell)))
        if reports_to:
            text += '[numa_overhead]\ntransport_url = %s\n' % reports_to
        return test_rabbitmq.start_agent(
            self, self.conf_file(host + '.conf', text))

    def test_reports_reach_the_api_level_schedulers(self):
        # A scheduler's nova.conf names the API-level broker only.
        scheduler = Watch(self, self.conf_file(
            'scheduler.conf', '[DEFAULT]\ntransport_url = %s\n'
            % self.url(self.api)))
        # Listening on the cell's broker, where nova-compute talks.
        cell = Watch(self, self.conf_file(
            'cell.conf', '[DEFAULT]\ntransport_url = %s\n'
            % self.url(self.cell)))
        agents = [self.agent('cmp-cells', reports_to=self.url(self.api)),
                  self.agent('cmp-cell-only')]
        deadline = time.monotonic() + TIMEOUT
        while not ('cmp-cells' in scheduler.hosts() and
                   'cmp-cell-only' in cell.hosts()):
            self.assertLess(time.monotonic(), deadline,
                            'scheduler heard %s, cell heard %s' % (
                                sorted(scheduler.hosts()),
                                sorted(cell.hosts())))
            self.assertEqual([None, None], [a.poll() for a in agents])
            time.sleep(0.5)
        heard = scheduler.hosts()
        self.assertEqual(['cmp-cells'], sorted(heard))
        self.assertTrue(heard['cmp-cells']['fresh'])
        self.assertEqual(2, len(heard['cmp-cells']['nodes']))
        # Without [numa_overhead] transport_url the reports stay in the
        # cell, where no scheduler listens.
        self.assertEqual(['cmp-cell-only'], sorted(cell.hosts()))
