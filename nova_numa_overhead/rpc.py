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
"""oslo.messaging glue for host reports.

Agents cast reports with ``fanout=True`` on ``[numa_overhead]
report_topic``; every scheduler worker runs its own RPC server on that topic
and so receives every report (the pattern Nova uses for compute ->
scheduler instance info). A scheduler worker that starts asks all agents
for a fresh report by a fanout cast of ``sync`` on ``<report_topic>.agents``.
"""

import socket
import threading

from oslo_log import log as logging
import oslo_messaging as messaging

from nova_numa_overhead import report as report_mod

LOG = logging.getLogger(__name__)

NAMESPACE = 'numa_overhead'
RPC_VERSION = '1.0'

_SERVERS = []
_SERVERS_LOCK = threading.Lock()


def agent_topic(conf) -> str:
    return conf.numa_overhead.report_topic + '.agents'


def get_transport(conf):
    """The reports' transport: its own URL, else Nova's.

    ``conf`` must be the global ``cfg.CONF`` (Nova's, or the agent's):
    oslo.messaging reads some of its options from there only.
    """
    url = conf.numa_overhead.transport_url or None
    return messaging.get_rpc_transport(conf, url=url)


def _server_name(prefix):
    # oslo.messaging declares a queue named ``<topic>.<server>`` that
    # outlives its server: a name per process left one behind at every
    # worker or agent restart. One name per host reuses it. The workers of
    # a host sharing it is harmless: only fanout casts are sent, and each
    # listener has a fanout queue of its own; nothing is cast to a server
    # by name.
    return '%s-%s' % (prefix, socket.gethostname())


class SchedulerEndpoint:
    """Receives reports; bad ones are logged and dropped, never raised."""

    target = messaging.Target(namespace=NAMESPACE, version=RPC_VERSION)

    def __init__(self, store):
        self.store = store

    def report(self, ctxt, report=None, **kwargs):
        # Arguments missing or added (a later agent's): the store rejects
        # what it cannot read in one throttled line; a signature mismatch
        # would have oslo.messaging log a traceback for every message.
        try:
            self.store.ingest(report)
        except Exception:
            LOG.exception('Failed to ingest a NUMA overhead report')


class AgentEndpoint:
    """Answers the schedulers' requests for a fresh report."""

    target = messaging.Target(namespace=NAMESPACE, version=RPC_VERSION)

    def __init__(self, on_sync):
        self.on_sync = on_sync

    def sync(self, ctxt, requester=None, **kwargs):
        LOG.debug('Report requested by scheduler %s', requester)
        try:
            self.on_sync()
        except Exception:
            LOG.exception('Failed to answer a report request')


def _start(conf, topic, endpoint, prefix, transport=None, then=None):
    """A server of ``endpoint`` on ``topic``, started and registered;
    ``then(transport)`` after (the scheduler's sync request).
    """
    # No executor is named: oslo.messaging picks the one the process runs
    # with (eventlet in a monkey-patched Nova, threads otherwise), and
    # naming one is deprecated.
    own = transport is None
    transport = transport or get_transport(conf)
    try:
        target = messaging.Target(topic=topic, server=_server_name(prefix))
        server = messaging.get_rpc_server(transport, target, [endpoint])
        server.start()
    except Exception:
        # A start retried every few seconds while the broker is away
        # leaves no transport (connections, threads) behind.
        if own:
            _cleanup(transport)
        raise
    with _SERVERS_LOCK:
        _SERVERS.append(server)
    if then is not None:
        then(transport)
    return server


def _cleanup(transport) -> None:
    try:
        transport.cleanup()
    except Exception:
        LOG.debug('Error cleaning up a transport', exc_info=True)


def start_scheduler_listener(conf, store, transport=None):
    """Listen for reports into ``store``; ask agents for fresh ones."""
    def started(transport):
        LOG.info('Listening for NUMA overhead reports on topic %s',
                 conf.numa_overhead.report_topic)
        if conf.numa_overhead.sync_on_start:
            request_sync(conf, transport)
    return _start(conf, conf.numa_overhead.report_topic,
                  SchedulerEndpoint(store), 'scheduler', transport, started)


def start_agent_listener(conf, on_sync, transport=None):
    """Listen for the schedulers' sync requests (agent side)."""
    return _start(conf, agent_topic(conf), AgentEndpoint(on_sync), 'agent',
                  transport)


def request_sync(conf, transport=None) -> None:
    client = messaging.get_rpc_client(
        transport or get_transport(conf),
        messaging.Target(topic=agent_topic(conf), namespace=NAMESPACE,
                         version=RPC_VERSION))
    try:
        client.prepare(fanout=True).cast({}, 'sync',
                                         requester=socket.gethostname())
    except Exception:
        LOG.exception('Could not ask agents for fresh NUMA overhead reports')


class ReportPublisher:
    """Agent side: casts reports to every scheduler worker.

    ``retry``: connection retries per report (oslo.messaging's meaning);
    the agent's sender thread
    (:class:`~nova_numa_overhead.compute.publisher.AsyncPublisher`) does
    its own backoff, so a report fails fast instead of waiting out an
    outage.
    """

    def __init__(self, conf, transport=None, retry: int = 0):
        self.conf = conf
        self.retry = retry
        self._client = messaging.get_rpc_client(
            transport or get_transport(conf),
            messaging.Target(topic=conf.numa_overhead.report_topic,
                             namespace=NAMESPACE, version=RPC_VERSION))

    def send(self, report: report_mod.Report) -> None:
        """Send a report; raises what oslo.messaging raised."""
        self._client.prepare(fanout=True, retry=self.retry).cast(
            {}, 'report', report=report.to_dict())

    def publish(self, report: report_mod.Report) -> bool:
        """Send a report; False (and a log line) if the broker refused."""
        try:
            self.send(report)
        except Exception as exc:
            LOG.warning('Could not publish NUMA overhead report %(seq)d: '
                        '%(exc)s', {'seq': report.seq, 'exc': exc})
            return False
        return True


def forget_servers_after_fork() -> None:
    """In a forked child: forget the parent's servers, without stopping
    them.

    Their threads are the parent's, absent from the child: stopping one
    here would wait for them forever (and the lock may have been held at
    the fork). The parent keeps serving on them.
    """
    global _SERVERS_LOCK
    _SERVERS_LOCK = threading.Lock()
    _SERVERS.clear()


def stop_listeners() -> None:
    with _SERVERS_LOCK:
        servers = list(_SERVERS)
        _SERVERS.clear()
    for server in servers:
        _stop(server)


def stop_listener(server) -> None:
    """Stop one server :func:`_start` started (the others keep on)."""
    with _SERVERS_LOCK:
        if server in _SERVERS:
            _SERVERS.remove(server)
    _stop(server)


def _stop(server) -> None:
    try:
        server.stop()
        server.wait()
    except Exception:
        LOG.debug('Error stopping a report listener', exc_info=True)
