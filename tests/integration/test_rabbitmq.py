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
"""Host reports through the real RabbitMQ at 127.0.0.1:5672.

Each test uses a topic of its own. The broker is shared: an outage is a
TCP proxy the test cuts (tests/integration/proxy.py), never the broker
stopped.
"""

import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
import uuid

import fixtures
from oslo_config import cfg
from oslo_config import fixture as config_fixture

from nova_numa_overhead import conf as plugin_conf
from nova_numa_overhead import report as report_mod
from nova_numa_overhead import rpc
from tests import base
from tests.integration import proxy as proxy_mod

TRANSPORT_URL = os.environ.get('NUMA_OVERHEAD_TEST_TRANSPORT_URL',
                               'rabbit://guest:guest@127.0.0.1:5672/')
TIMEOUT = 60


def broker_reachable():
    try:
        socket.create_connection(('127.0.0.1', 5672), timeout=2).close()
        return True
    except OSError:
        return False


def start_agent(test, conf_file):
    """nova-numa-overhead-agent in a process of its own, stopped at the end.
    """
    top = os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    proc = subprocess.Popen(
        [sys.executable, '-m', 'nova_numa_overhead.cmd.agent',
         '--config-file', conf_file], cwd=top, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)

    def stop():
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    test.addCleanup(stop)
    return proc


class ListenerProcess:
    """A scheduler-side store in a separate process."""

    def __init__(self, topic, sync=False):
        top = os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__))))
        self.proc = subprocess.Popen(
            [sys.executable, '-m', 'tests.integration.listener',
             TRANSPORT_URL, topic, 'sync' if sync else 'nosync'],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True, cwd=top)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.hosts = {}
        self.wait_for(lambda line: line == 'ready')

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line.strip())

    def wait_for(self, predicate, timeout=TIMEOUT):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.5)
            except queue.Empty:
                if self.proc.poll() is not None:
                    raise AssertionError('listener exited with %s'
                                         % self.proc.returncode)
                continue
            if line.startswith('hosts '):
                self.hosts = json.loads(line[6:])
            if predicate(line):
                return line
        raise AssertionError('listener: timed out; last hosts %s'
                             % self.hosts)

    def wait_for_seq(self, host, seq, timeout=TIMEOUT):
        if self.hosts.get(host, -1) >= seq:
            return
        self.wait_for(lambda line: self.hosts.get(host, -1) >= seq,
                      timeout)

    def stop(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except Exception:
            self.proc.kill()
            self.proc.wait()


class TestReportsOverRabbitMQ(base.TestCase):

    def setUp(self):
        super().setUp()
        if not broker_reachable():
            self.fail('RabbitMQ is not reachable at 127.0.0.1:5672 '
                      '(start it with: rabbitmq-server -detached)')
        self.topic = 'numa-overhead-test-' + uuid.uuid4().hex[:8]
        # oslo.messaging reads some options from the global CONF only.
        self.agent_conf = plugin_conf.register_opts(cfg.CONF)
        self.useFixture(config_fixture.Config(self.agent_conf))
        self.agent_conf([], project='nova')
        self.agent_conf.set_override('transport_url', TRANSPORT_URL,
                                     group='numa_overhead')
        self.agent_conf.set_override('report_topic', self.topic,
                                     group='numa_overhead')
        self.transport = rpc.get_transport(self.agent_conf)
        self.addCleanup(self.transport.cleanup)
        self.publisher = rpc.ReportPublisher(self.agent_conf,
                                             transport=self.transport)
        self.seq = 0

    def listener(self, sync=False):
        proc = ListenerProcess(self.topic, sync=sync)
        self.addCleanup(proc.stop)
        return proc

    def publish(self, host='compute-1'):
        self.seq += 1
        data = base.make_report(host=host, seq=self.seq)
        self.assertTrue(self.publisher.publish(report_mod.from_dict(data)))
        return self.seq

    def test_fanout_reaches_every_scheduler_process(self):
        first, second = self.listener(), self.listener()
        seq = self.publish()
        first.wait_for_seq('compute-1', seq)
        second.wait_for_seq('compute-1', seq)

    def test_late_scheduler_gets_a_report_through_sync(self):
        self.publish()  # Nobody listens yet: this one is lost.
        server = rpc.start_agent_listener(
            self.agent_conf, lambda: self.publish('compute-2'),
            transport=self.transport)
        self.addCleanup(rpc.stop_listeners)
        del server
        late = self.listener(sync=True)
        late.wait_for(lambda line: 'compute-2' in late.hosts)
        self.assertNotIn('compute-1', late.hosts)

    def test_agent_process_reports_and_answers_sync(self):
        # The real nova-numa-overhead-agent, on libvirt's test driver.
        first = self.listener()
        conf_file = os.path.join(self.useFixture(
            fixtures.TempDir()).path, 'nova.conf')
        with open(conf_file, 'w') as f:
            f.write('[DEFAULT]\nhost = cmp-agent\n'
                    '[numa_overhead]\ntransport_url = %s\n'
                    'report_topic = %s\n'
                    '[numa_overhead_agent]\n'
                    'connection_uri = test:///default\nstate_file =\n'
                    'sample_interval = 1\nreport_interval = 600\n'
                    'heartbeat_interval = 90\nenforcement = advisory\n'
                    % (TRANSPORT_URL, self.topic))
        agent = start_agent(self, conf_file)
        first.wait_for(lambda line: 'cmp-agent' in first.hosts)
        # Periodic reports are 90 s apart: a scheduler started now gets one
        # only because it asks for it.
        late = self.listener(sync=True)
        late.wait_for(lambda line: 'cmp-agent' in late.hosts, timeout=30)
        self.assertIsNone(agent.poll())

    def test_reports_flow_again_after_the_broker_comes_back(self):
        # The broker goes away for this publisher only: its proxy closes
        # every connection and refuses new ones. The shared broker is
        # never stopped (other tests use it).
        proxy = proxy_mod.TcpProxy()
        self.addCleanup(proxy.stop)
        self.agent_conf.set_override(
            'transport_url', 'rabbit://guest:guest@%s/' % proxy.url_host,
            group='numa_overhead')
        transport = rpc.get_transport(self.agent_conf)
        self.addCleanup(transport.cleanup)
        self.publisher = rpc.ReportPublisher(self.agent_conf,
                                             transport=transport)
        proc = self.listener()
        proc.wait_for_seq('compute-1', self.publish())
        proxy.cut()
        self.seq += 1
        # It fails fast (the agent's sender thread does the retrying).
        self.assertFalse(self.publisher.publish(report_mod.from_dict(
            base.make_report(host='compute-1', seq=self.seq))))
        proxy.restore()
        deadline = time.monotonic() + TIMEOUT
        while True:
            seq = self.publish()
            try:
                proc.wait_for_seq('compute-1', seq, timeout=3)
                break
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
