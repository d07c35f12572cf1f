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
"""``nova-numa-overhead reports``: which hosts the schedulers hear.

Joins the report topic as one more listener, exactly as a scheduler worker
does (same transport, same topic, a fanout queue of its own, the same
validation in a :class:`~nova_numa_overhead.scheduler.store.ReportStore`),
asks every agent for a fresh report, and shows every host heard: its agent
run, the age and sequence number of its last report, its levels per node,
the planned overhead of a typical request there and what
NUMAOverheadFilter would do with that request. Read with the schedulers'
``nova.conf``, it shows what they know; a host missing here is a host they
treat as unknown.

It changes nothing: the only message it sends is the request for fresh
reports that every scheduler worker sends when it starts (``--no-sync``:
none).
"""

import json
import logging
import os
import socket
import sys
import textwrap
import threading
import time
import uuid

from oslo_config import cfg

from nova_numa_overhead.cmd import common

PROG = 'nova-numa-overhead reports'
WIDTH = 80
DEFAULT_MEMORY_MB = 4096
DEFAULT_WAIT = 5.0
DEFAULT_WATCH = 5.0
#: Shortest --watch period: 0 would redraw the table in a busy loop.
MIN_WATCH = 1.0


def add_parser(subparsers):
    """Add the ``reports`` subcommand to ``subparsers``."""
    parser = subparsers.add_parser(
        'reports',
        help='listen on the report topic like a scheduler and show every '
             'host heard: age, levels, planned overhead, what the filter '
             'would do',
        description='Listen for the agents\' reports as a scheduler worker '
                    'does and show every host heard. Run it with the '
                    'schedulers\' nova.conf: in a cells v2 deployment that '
                    'is the API-level broker.')
    parser.add_argument(
        '--config-file', metavar='PATH', action='append', default=None,
        help='nova.conf of a scheduler (repeatable; default: oslo.config\'s '
             'search for nova.conf, e.g. /etc/nova/nova.conf)')
    parser.add_argument(
        '--transport-url', metavar='URL',
        help='broker to listen on (default: [numa_overhead] transport_url, '
             'else [DEFAULT] transport_url)')
    parser.add_argument('--format', choices=('table', 'json'),
                        default='table',
                        help='output format (default: table)')
    parser.add_argument(
        '--wait', type=common.seconds(3600), default=DEFAULT_WAIT,
        metavar='SECONDS',
        help='how long to listen before showing the hosts (default: %g)'
             % DEFAULT_WAIT)
    parser.add_argument(
        '--watch', type=common.seconds(3600, low=MIN_WATCH), nargs='?',
        const=DEFAULT_WATCH, metavar='SECONDS',
        help='keep listening and show the hosts again every SECONDS '
             '(default: %g, at least %g) until interrupted'
             % (DEFAULT_WATCH, MIN_WATCH))
    parser.add_argument(
        '--no-sync', dest='sync', action='store_false',
        help='do not ask the agents for a fresh report: wait for their '
             'periodic ones')
    parser.add_argument(
        '--memory-mb', type=common.bounded_int(1, 64 * 1024 * 1024),
        default=DEFAULT_MEMORY_MB, metavar='MB',
        help='memory of the typical request to plan (default: %d)'
             % DEFAULT_MEMORY_MB)
    parser.add_argument(
        '--max-level', type=common.bounded_int(0, 64), metavar='N',
        help='the limit the filter applies (default: [numa_overhead] '
             'max_level; unset: every known host passes)')
    parser.add_argument('--debug', action='store_true',
                        help='log what oslo.messaging does on stderr')
    parser.set_defaults(func=run)
    return parser


class Listener:
    """One more report listener: a store and what it accepted, when."""

    def __init__(self, conf, clock=time.monotonic):
        from nova_numa_overhead import rpc
        from nova_numa_overhead.scheduler import store as store_mod
        import oslo_messaging as messaging
        self.conf = conf
        self.clock = clock
        self.store = store_mod.ReportStore(conf, clock=clock)
        self.heard = {}         # host -> (Report, arrival on our clock)
        self.rejected = 0
        self._lock = threading.Lock()
        self.target = messaging.Target(namespace=rpc.NAMESPACE,
                                       version=rpc.RPC_VERSION)
        self._server = None

    # The RPC endpoint: the method agents cast.
    def report(self, ctxt, report):
        from nova_numa_overhead import report as report_mod
        try:
            if not self.store.ingest(report):
                with self._lock:
                    self.rejected += 1
                return
            parsed = report_mod.from_dict(report)
        except Exception:
            logging.getLogger(__name__).exception(
                'Could not read a NUMA overhead report')
            return
        with self._lock:
            self.heard[parsed.host] = (parsed, self.clock())

    def start(self, transport, sync: bool) -> None:
        import oslo_messaging as messaging

        from nova_numa_overhead import rpc
        topic = self.conf.numa_overhead.report_topic
        name = 'reports-%s-%d-%s' % (socket.gethostname(), os.getpid(),
                                     uuid.uuid4().hex[:8])
        self._server = messaging.get_rpc_server(
            transport, messaging.Target(topic=topic, server=name), [self])
        self._server.start()
        if sync:
            rpc.request_sync(self.conf, transport)

    def stop(self) -> None:
        if self._server is not None:
            server, self._server = self._server, None
            server.stop()
            server.wait()

    def hosts(self, memory_mb: int, limit) -> list:
        """Every host heard, with what a scheduler would make of it."""
        from nova_numa_overhead.scheduler import store as store_mod
        opts = self.conf.numa_overhead
        query = self.store.query(memory_mb, opts.default_policy,
                                 opts.default_max_nodes)
        now = self.clock()
        with self._lock:
            heard = dict(self.heard)
        rows = []
        for host, (report, arrived) in sorted(heard.items()):
            age = now - arrived + report.age
            planned = query.overhead(host)
            fresh = planned is not store_mod.UNKNOWN
            shown = None if not fresh or planned == store_mod.DOES_NOT_FIT \
                else round(planned, 2)
            # As the filter: without a limit every host passes, unknown
            # ones too; unknown_host counts only when a limit applies.
            if limit is None:
                passes, why = True, ('no limit' if fresh else
                                     'older than report_ttl: unknown, '
                                     'no limit')
            elif not fresh:
                passes = opts.unknown_host == 'pass'
                why = 'older than report_ttl: unknown, unknown_host=%s' % (
                    opts.unknown_host)
            elif planned > limit:
                passes = False
                why = ('no room for %d MiB' % memory_mb if shown is None
                       else 'above max_level %d' % limit)
            else:
                passes, why = True, 'within max_level %d' % limit
            rows.append({
                'host': host,
                'agent_id': report.agent_id,
                'agent_version': report.agent_version,
                'seq': report.seq,
                'age': round(age, 1),
                'fresh': fresh,
                'nodes': [{'total_mb': n.total_mb, 'free_mb': n.free_mb,
                           'guests': n.guests, 'llc': n.llc, 'mc': n.mc}
                          for n in report.nodes],
                'planned_overhead': shown,
                'fits': fresh and shown is not None,
                'filter': 'passes' if passes else 'fails',
                'why': why,
            })
        return rows


def load_conf(files, transport_url=None) -> cfg.ConfigOpts:
    """The global configuration, validated.

    Global because oslo.messaging reads some of its options (tracing,
    metrics) from ``cfg.CONF`` only, as in a scheduler worker.

    :raises CommandError: naming the file or option.
    """
    from nova_numa_overhead import conf as plugin_conf
    conf = plugin_conf.register_opts(cfg.CONF)
    argv = []
    for path in files or ():
        argv.extend(['--config-file', path])
    try:
        conf(argv, project='nova', prog=PROG,
             default_config_files=None if files is None else [],
             default_config_dirs=None if files is None else [])
        for name in conf.numa_overhead:
            getattr(conf.numa_overhead, name)
    except (cfg.Error, ValueError) as exc:
        raise common.CommandError('configuration error: %s' % exc,
                                  common.EXIT_USAGE)
    if transport_url:
        conf.set_override('transport_url', transport_url,
                          group='numa_overhead')
    return conf


def _transport(conf):
    """The reports' transport and its URL (what agents must publish to)."""
    from nova_numa_overhead import rpc
    try:
        transport = rpc.get_transport(conf)
    except Exception as exc:
        raise common.CommandError('cannot use the transport: %s' % exc,
                                  common.EXIT_USAGE)
    # oslo.messaging's own default is rabbit:// (guest on localhost).
    return transport, conf.numa_overhead.transport_url or conf.transport_url


# -- output -------------------------------------------------------------------

def render(rows: list, header: dict) -> str:
    """The hosts as text for an 80-column terminal."""
    lines = [common.one_line(
        'Topic %(topic)s via %(url)s; report_ttl %(ttl)d s. Typical request: '
        '%(memory)d MiB, policy %(policy)s, max_nodes %(max_nodes)d; '
        'filter limit %(limit)s, unknown hosts %(unknown)s.' % header)]
    lines = textwrap.wrap(lines[0], WIDTH)
    lines.append('')
    if not rows:
        lines.append('No host heard yet.')
        return '\n'.join(lines)
    lines.append('%-18s %-8s %6s %6s %7s  %-6s %s' % (
        'HOST', 'AGENT', 'AGE s', 'SEQ', 'PLANNED', 'FILTER',
        'LLC/MC PER NODE'))
    for row in rows:
        planned = ('stale' if not row['fresh'] else
                   'no room' if row['planned_overhead'] is None else
                   '%.2f' % row['planned_overhead'])
        levels = ' '.join('%d:%d/%d' % (i, n['llc'], n['mc'])
                          for i, n in enumerate(row['nodes']))
        host = row['host']
        if len(host) > 18:
            lines.append(host)
            host = ''
        first = '%-18s %-8s %6.0f %6d %7s  %-6s ' % (
            host, row['agent_id'][:8], row['age'], row['seq'], planned,
            row['filter'])
        lines += textwrap.wrap(levels, WIDTH, initial_indent=first,
                               subsequent_indent=' ' * len(first))
    stale = [r['host'] for r in rows if not r['fresh']]
    if stale:
        lines.append('')
        lines += textwrap.wrap(
            'Stale (older than report_ttl, so unknown to the filter and '
            'weigher): %s.' % ', '.join(stale), WIDTH)
    return '\n'.join(lines)


def _logging(debug: bool):
    """Warnings (rejected reports) as one line each on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(PROG + ': %(message)s'))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if debug else logging.WARNING)
    if not debug:
        # oslo.messaging's reconnect chatter is not for an operator.
        for name in ('oslo.messaging', 'oslo_messaging', 'amqp', 'kombu'):
            logging.getLogger(name).setLevel(logging.ERROR)
    return handler


def run(args) -> int:
    """Run ``reports`` with parsed arguments; returns the exit code."""
    _logging(args.debug)
    conf = load_conf(args.config_file, args.transport_url)
    transport, url = _transport(conf)
    common.check_broker(url, conf=conf)
    opts = conf.numa_overhead
    limit = args.max_level if args.max_level is not None else opts.max_level
    header = {'topic': opts.report_topic, 'url': common.redact(url),
              'ttl': opts.report_ttl, 'memory': args.memory_mb,
              'policy': opts.default_policy,
              'max_nodes': opts.default_max_nodes,
              'limit': 'none' if limit is None else str(limit),
              'unknown': 'pass' if opts.unknown_host == 'pass' else 'fail'}
    listener = Listener(conf)
    try:
        listener.start(transport, args.sync)
        if args.watch is None:
            time.sleep(args.wait)
            return _show(listener, args, header, limit, once=True)
        while True:
            time.sleep(args.watch)
            _show(listener, args, header, limit, once=False)
    except KeyboardInterrupt:
        # How --watch ends.
        return 0 if args.watch is not None else common.EXIT_INTERRUPTED
    finally:
        listener.stop()
        transport.cleanup()


def _show(listener, args, header: dict, limit, once: bool) -> int:
    rows = listener.hosts(args.memory_mb, limit)
    if args.format == 'json':
        data = dict(header, limit=limit, hosts=rows,
                    rejected=listener.rejected,
                    time=time.strftime('%Y-%m-%dT%H:%M:%S%z'))
        print(json.dumps(data, indent=None if not once else 2,
                         sort_keys=True), flush=True)
    else:
        if not once:
            print('--- %s' % time.strftime('%H:%M:%S'))
        print(render(rows, header), flush=True)
    if once and not rows:
        return common.fail(
            PROG, 'no agent reported within %g s on topic %s via %s: are '
            'the agents running, with the same report_topic and a '
            '[numa_overhead] transport_url pointing at this broker (in '
            'cells v2, the API-level one)?' % (
                args.wait, header['topic'], header['url']))
    return 0
