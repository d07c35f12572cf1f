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
"""The agent service through a broker outage: shared by the integration
test (tests/integration/test_broker_outage.py) and the benchmark that
prints the figures (benchmarks/broker_outage.py).

The agent service (cmd/agent.py as shipped) runs in this process on
libvirt's test driver and reports to the shared RabbitMQ through a
:class:`~tests.integration.proxy.TcpProxy` that the run cuts; the broker
itself is never touched. A libvirt timer ticks every 100 ms on libvirt's
event thread, and a guest starts every few seconds.
"""

import dataclasses
import os
import tempfile
import threading
import time
from unittest import mock
import uuid

# tests/integration/__init__.py chose oslo.service's threading backend.
from tests.integration import proxy as proxy_mod
from tests.unit.compute import libvirt_fixtures

URI = 'test:///default'
TICK_MS = 100
#: What the agent logs when reports stop going out (before: the line it
#: promised and never wrote; now: the publisher's).
OUTAGE_WORDS = ('Could not publish', 'not going out')


class Ticks:
    """A libvirt timer: when each tick ran on libvirt's event thread."""

    def __init__(self):
        import libvirt
        self.stamps = []
        self._lock = threading.Lock()
        self._timer = libvirt.virEventAddTimeout(TICK_MS, self._tick, None)

    def _tick(self, timer, opaque):
        with self._lock:
            self.stamps.append(time.monotonic())

    def remove(self):
        import libvirt
        libvirt.virEventRemoveTimeout(self._timer)

    def max_gap(self, start, end) -> float:
        """The longest time without a tick between ``start`` and ``end``."""
        with self._lock:
            stamps = [s for s in self.stamps if start <= s <= end]
        points = [start] + stamps + [end]
        return max(b - a for a, b in zip(points, points[1:]))


@dataclasses.dataclass
class Result:
    max_gap_before: float
    max_gap_during: float
    max_gap_after: float
    started_during: list
    placed_during: list
    placed_by_end: list


class OutageRun:
    """One agent service, one proxy, guests; :meth:`run` takes the
    broker away for ``outage`` seconds.
    """

    def __init__(self, topic: str, transport_host='127.0.0.1:5672'):
        host, _sep, port = transport_host.partition(':')
        self.proxy = proxy_mod.TcpProxy((host, int(port or 5672)))
        self.topic = topic
        self.guests = []
        self.service = None
        self.conn = None
        self.ticks = None
        self._patch = None

    def start(self, conf) -> None:
        """Start the agent service with ``conf``, parsed here.

        oslo.messaging reads some options from the global CONF only:
        ``conf`` must be it (a fresh one in tests, see
        tests/integration/test_broker_outage.py).
        """
        import libvirt

        from nova_numa_overhead.cmd import agent as agent_cmd
        from nova_numa_overhead.compute import libvirt_driver
        tmp = tempfile.mkdtemp()
        path = os.path.join(tmp, 'nova.conf')
        with open(path, 'w') as f:
            f.write('[DEFAULT]\nhost = cmp-outage\n'
                    '[numa_overhead]\n'
                    'transport_url = rabbit://guest:guest@%s/\n'
                    'report_topic = %s\n'
                    '[numa_overhead_agent]\nconnection_uri = %s\n'
                    'state_file =\n'
                    'sample_interval = 1\nreport_interval = 10\n'
                    'heartbeat_interval = 5\nrebalance_interval = 0\n'
                    'enforcement = nodeset\nreserve_mb = 64\n'
                    % (self.proxy.url_host, self.topic, URI))
        agent_cmd._register(conf)
        conf(['--config-file', path], project='nova')
        hv = libvirt_driver.LibvirtHypervisor(URI)
        hv.topology()          # the first open starts libvirt's event loop
        # The test driver reports KiB where the API says bytes.
        self._patch = mock.patch.object(hv, 'free_memory_mb', autospec=True,
                                        return_value=[1536, 3072])
        self._patch.start()
        self.ticks = Ticks()
        self.conn = libvirt.open(URI)
        self.service = agent_cmd.AgentService(conf, hypervisor=hv,
                                              notifier=_Notifier())
        self.service.start()

    def start_guest(self) -> str:
        name = 'instance-%s' % uuid.uuid4().hex[:8]
        xml = libvirt_fixtures.nova_domain_xml(name, str(uuid.uuid4()), 256,
                                               1, {})
        self.conn.defineXML(xml).create()
        self.guests.append(name)
        return name

    def run(self, outage: float, every: float = 5.0, before: float = 8.0,
            after: float = 15.0, when_restored=None) -> Result:
        t0 = time.monotonic()
        self.start_guest()
        time.sleep(before)
        cut_at = time.monotonic()
        self.proxy.cut()
        during = []
        while True:
            left = outage - (time.monotonic() - cut_at)
            if left <= 0:
                break
            time.sleep(min(every, left))
            if outage - (time.monotonic() - cut_at) > 1:
                during.append(self.start_guest())
        placed_during = [n for n in during
                         if n in self.service.agent.decisions]
        restored_at = time.monotonic()
        self.proxy.restore()
        if when_restored is not None:
            when_restored()
        time.sleep(after)
        end = time.monotonic()
        return Result(
            max_gap_before=self.ticks.max_gap(t0, cut_at),
            max_gap_during=self.ticks.max_gap(cut_at, restored_at),
            max_gap_after=self.ticks.max_gap(restored_at, end),
            started_during=during, placed_during=placed_during,
            placed_by_end=[n for n in during
                           if n in self.service.agent.decisions])

    def stop(self) -> None:
        self.proxy.stop()
        if self.service is not None:
            self.service.stop()
        if self.ticks is not None:
            self.ticks.remove()
        if self._patch is not None:
            self._patch.stop()
        if self.conn is not None:
            for name in self.guests:
                libvirt_fixtures.remove_guest(self.conn, name)
            self.conn.close()


class _Notifier:

    def info(self, ctxt, event_type, payload):
        pass
