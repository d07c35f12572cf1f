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
"""``nova-numa-overhead status``: what the agent sees on this host.

Runs the agent's own code (:class:`~nova_numa_overhead.compute.agent.Agent`
over the libvirt backend) for a few sampling cycles and prints, per node,
the overhead levels, memory and guests; per node pair, the interconnect and
remote-latency levels; per guest, where its memory is, where the placer
would put it and what the rebalancer would move next.

It never changes anything: enforcement is forced to ``advisory``, the
hypervisor is wrapped so that every changing call is refused, perf events
are not enabled (levels from counters appear only for guests whose perf
events the running agent enabled), and the report is kept, not sent.
"""

import argparse
import contextlib
import json
import logging
import socket
import sys
import textwrap
import time

from oslo_config import cfg

from nova_numa_overhead.compute import hypervisor as hv_mod

PROG = 'nova-numa-overhead status'
WIDTH = 80
EXIT_ERROR = 1
EXIT_CONFIG = 2


class ConfigError(Exception):
    """The configuration cannot be used; the message names the option."""


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError('must be at least 1')
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError('must be a number >= 0')
    return value


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``status`` subcommand to ``subparsers``."""
    parser = subparsers.add_parser(
        'status',
        help='show the overhead levels, memory and guests of this compute '
             'host, and what the agent would move next (changes nothing)',
        description='Measure this host with the agent\'s code for a few '
                    'samples and show what the agent sees and would do. '
                    'Nothing is changed: enforcement is forced to '
                    'advisory.')
    parser.add_argument(
        '--connect', metavar='URI', default=None,
        help='libvirt URI (default: [numa_overhead_agent] connection_uri '
             'of the --config-file, else qemu:///system)')
    parser.add_argument(
        '--config-file', metavar='PATH', action='append', default=[],
        help='nova.conf to read thresholds and policies from (repeatable; '
             'default: none, built-in defaults)')
    parser.add_argument('--format', choices=('table', 'json'),
                        default='table', help='output format (default: '
                                              'table)')
    parser.add_argument('--samples', type=_positive_int, default=2,
                        help='sampling cycles (default: 2; counters need '
                             'two)')
    parser.add_argument('--interval', type=_seconds, default=1.0,
                        metavar='SECONDS',
                        help='seconds between samples (default: 1.0)')
    parser.add_argument('--debug', action='store_true',
                        help='log what the agent code does on stderr')
    parser.set_defaults(func=run)
    return parser


class _KeptPublisher:
    """Keeps the agent's report instead of sending it."""

    def __init__(self):
        self.report = None

    def publish(self, report) -> bool:
        self.report = report
        return True


class ReadOnlyHypervisor(hv_mod.Hypervisor):
    """A hypervisor that reads through and refuses every change."""

    def __init__(self, hypervisor: hv_mod.Hypervisor):
        self.hv = hypervisor
        self.last_error = None

    def _read(self, func, *args):
        try:
            return func(*args)
        except hv_mod.HypervisorUnavailable as exc:
            self.last_error = exc
            raise

    def topology(self):
        return self._read(self.hv.topology)

    def free_memory_mb(self):
        return self._read(self.hv.free_memory_mb)

    def domains(self):
        return self._read(self.hv.domains)

    def counters(self, domains):
        return self._read(self.hv.counters, domains)

    def vcpu_cpus(self, domain):
        return self._read(self.hv.vcpu_cpus, domain)

    def memory_per_node(self, domain):
        return self._read(self.hv.memory_per_node, domain)

    def enable_counters(self, domain):
        # Enabling perf events changes the guest: the agent's job.
        return False

    def _refuse(self, what):
        raise hv_mod.HypervisorError('status is read-only: refusing to %s'
                                     % what)

    def set_nodeset(self, domain, nodes):
        self._refuse('change the nodeset of %s' % domain.name)

    def move_pages(self, domain, moves, max_pages):
        self._refuse('move pages of %s' % domain.name)

    def pin_vcpus(self, domain, cpus):
        self._refuse('pin the vCPUs of %s' % domain.name)

    def close(self):
        self.hv.close()


class _AdvisoryOpts:
    """``[numa_overhead_agent]`` with enforcement forced to advisory."""

    enforcement = 'advisory'

    def __init__(self, opts):
        self._opts = opts

    def __getattr__(self, name):
        return getattr(self._opts, name)


class _AdvisoryConf:
    """A read-only view of the configuration for the agent code.

    Not ``set_override``: oslo.config would keep the override in option
    state that other ConfigOpts of the process can share.
    """

    def __init__(self, conf):
        self._conf = conf
        self.numa_overhead_agent = _AdvisoryOpts(conf.numa_overhead_agent)

    def __getattr__(self, name):
        return getattr(self._conf, name)


def load_conf(files) -> cfg.ConfigOpts:
    """The agent's options from ``files`` (none: defaults), validated.

    :raises ConfigError: naming the file or option.
    """
    from nova_numa_overhead.cmd import agent as agent_cmd
    from nova_numa_overhead.conf import opts as conf_opts
    conf = cfg.ConfigOpts()
    # Registered by group name: each ConfigOpts then has option state of
    # its own (the modules' OptGroup objects would share it).
    for group, opts in conf_opts.list_opts():
        conf.register_opts(opts, group=group.name)
    conf.register_opt(cfg.StrOpt('host', default=socket.gethostname()))
    argv = []
    for path in files:
        argv.extend(['--config-file', path])
    try:
        conf(argv, project='nova', prog=PROG, default_config_files=[],
             default_config_dirs=[])
        agent_cmd.validate(conf)
    except (cfg.Error, ValueError) as exc:
        raise ConfigError(str(exc))
    return conf


@contextlib.contextmanager
def _logging(debug: bool):
    """Keep the agent code's log lines off the terminal (unless debug)."""
    logger = logging.getLogger('nova_numa_overhead')
    level = logger.level
    handler = None
    if debug:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(
            '%(levelname)s %(name)s: %(message)s'))
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    else:
        logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(level)
        if handler is not None:
            logger.removeHandler(handler)


def _host(conf) -> str:
    """nova-compute's ``[DEFAULT] host``, the name schedulers know."""
    return getattr(conf, 'host', None) or socket.gethostname()


def collect(conf, uri: str, samples: int = 2, interval: float = 1.0,
            hypervisor=None, sleep=time.sleep,
            clock=time.monotonic) -> dict:
    """Run the agent's cycles on ``uri`` and return what it saw.

    :raises HypervisorError: when the host cannot be read.
    """
    from nova_numa_overhead.compute import agent as agent_mod
    configured = conf.numa_overhead_agent.enforcement
    conf = _AdvisoryConf(conf)
    if hypervisor is None:
        from nova_numa_overhead.compute import libvirt_driver
        hypervisor = libvirt_driver.LibvirtHypervisor(uri)
    hv = ReadOnlyHypervisor(hypervisor)
    try:
        # Fails fast (no reconnect loop) when libvirt is unreachable.
        hv.topology()
        publisher = _KeptPublisher()
        agent = agent_mod.Agent(conf, hv, publisher, _host(conf),
                                clock=clock, sleep=lambda seconds: None)
        for i in range(samples):
            if i:
                sleep(interval)
            if not agent.cycle():
                raise hv_mod.HypervisorUnavailable(
                    str(hv.last_error or 'lost the connection to %s' % uri))
        decisions = {}
        for name, domain in sorted(agent.domains.items()):
            decision = agent.place(domain)
            if decision is not None:
                decisions[name] = decision
        moves = agent.rebalance()
        return _status(conf, agent, uri, samples, interval, decisions,
                       moves, publisher.report, configured)
    finally:
        hv.close()


def _per_node(mapping: dict, size: int) -> list:
    result = [0] * size
    for node, value in (mapping or {}).items():
        if 0 <= node < size:
            result[node] = value
    return result


def _guest(conf, agent, name: str, decision, size: int) -> dict:
    from nova_numa_overhead.compute import placer as placer_mod
    opts = conf.numa_overhead_agent
    domain = agent.domains[name]
    state = agent.collector.guests.get(name)
    policy, why = placer_mod.guest_policy(
        domain, opts.managed_guests, conf.numa_overhead.default_policy,
        conf.numa_overhead.default_max_nodes)
    kind = agent.collector.classify(
        name, available_mbps=opts.node_bandwidth_mbps,
        low=opts.llc_low_bound, high=opts.llc_high_bound)
    planned = decision is not None and decision.action == 'planned'
    return {
        'name': name,
        'uuid': domain.uuid,
        'memory_mb': domain.memory_mb,
        'vcpus': domain.vcpus,
        'managed': policy is not None,
        'policy': policy.policy if policy else None,
        'max_nodes': policy.max_nodes if policy else None,
        'rebalance': bool(policy and policy.rebalance),
        'reason': why or (decision.reason if decision and not planned
                          else ''),
        'counters': bool(state and state.delta is not None),
        'workload': kind.action if kind else None,
        'memory_mb_per_node': _per_node(state.memory_mb if state else {},
                                        size),
        'cpu_per_node': [round(f, 3) for f in _per_node(
            state.cpu if state else {}, size)],
        'plan_mb_per_node': (_per_node(decision.plan, size) if planned
                             else None),
        'planned_overhead': decision.overhead if planned else None,
        'placement_moves': [
            {'from': src, 'to': dst, 'mb': mb}
            for src, dst, mb in (decision.moves if planned else [])],
    }


def _status(conf, agent, uri, samples, interval, decisions, moves,
            report, enforcement) -> dict:
    opts = conf.numa_overhead_agent
    topology = agent.topology
    levels = agent.levels
    size = topology.size
    overhead = levels.overhead_matrix()
    free = list(agent.free_mb)
    guests = agent.guests_per_node()
    nodes = [{'id': node.id, 'cpus': len(node.cpus),
              'total_mb': node.memory_mb,
              'free_mb': free[i] if i < len(free) else None,
              'guests': guests[i], 'llc': levels.llc[i], 'mc': levels.mc[i],
              'overhead': overhead[i][i]}
             for i, node in enumerate(topology.nodes)]
    guest_list = [_guest(conf, agent, name, decisions.get(name), size)
                  for name in sorted(agent.domains)]
    notes = []
    if guest_list and not any(g['counters'] for g in guest_list):
        notes.append(
            'No guest has hardware counters: status does not enable perf '
            'events (the running agent does), so the LLC, MC and INTER '
            'levels read 0 and RML comes from the node distances only.')
    return {
        'host': agent.host,
        'uri': uri,
        'samples': samples,
        'interval': interval,
        'agent': {'enforcement': enforcement,
                  'managed_guests': opts.managed_guests,
                  'rebalance_interval': opts.rebalance_interval,
                  'rebalance_threshold': opts.rebalance_threshold},
        'nodes': nodes,
        'inter': [list(r) for r in levels.inter],
        'rml': [list(r) for r in levels.rml],
        'overhead': [list(r) for r in overhead],
        'distances': [list(r) for r in topology.distances],
        'guests': guest_list,
        'rebalance_moves': [
            {'guest': m.guest, 'from': m.src, 'to': m.dst, 'mb': m.mb,
             'reason': m.reason} for m in moves],
        'report': report.to_dict() if report is not None else None,
        'notes': notes,
    }


# -- the table ---------------------------------------------------------------

def _wrap(text: str, indent: str = '', first: str | None = None) -> list:
    return textwrap.wrap(text, WIDTH, initial_indent=indent if first is None
                         else first, subsequent_indent=indent,
                         break_on_hyphens=False) or [indent.rstrip()]


def _matrix(title: str, rows: list, diagonal: str = '-') -> list:
    """A node x node matrix, its columns split to fit the width."""
    size = len(rows)
    cells = [[diagonal if i == j and diagonal else str(v)
              for j, v in enumerate(row)] for i, row in enumerate(rows)]
    width = max([3] + [len(c) for row in cells for c in row] +
                [len(str(size - 1))])
    label = max(4, len(str(size - 1)) + 2)
    per_line = max(1, (WIDTH - label) // (width + 1))
    lines = _wrap(title)
    for start in range(0, size, per_line):
        cols = range(start, min(size, start + per_line))
        lines.append(' ' * label + ''.join(
            ' %*d' % (width, j) for j in cols))
        for i in range(size):
            lines.append('%*d' % (label, i) + ''.join(
                ' %*s' % (width, cells[i][j]) for j in cols))
    return lines


def _nodes_text(values: list) -> str:
    used = ['%d:%s' % (n, v) for n, v in enumerate(values) if v]
    return '  '.join(used) or 'none'


def render(status: dict) -> str:
    """The status as text for an 80-column terminal."""
    agent = status['agent']
    nodes = status['nodes']
    lines = _wrap('Host %s via %s: %d NUMA nodes, %d guests, %d samples '
                  '%g s apart.' % (status['host'], status['uri'], len(nodes),
                                   len(status['guests']), status['samples'],
                                   status['interval']))
    lines += _wrap('Agent settings: enforcement %s, managed guests %s, '
                   'rebalancing every %d s above level %d. Nothing was '
                   'changed.' % (agent['enforcement'],
                                 agent['managed_guests'],
                                 agent['rebalance_interval'],
                                 agent['rebalance_threshold']))
    lines.append('')
    lines.append('NODE  CPUS  TOTAL MiB   FREE MiB  GUESTS  LLC   MC  LOCAL')
    for node in nodes:
        free = '?' if node['free_mb'] is None else node['free_mb']
        lines.append('%4d  %4d  %9d  %9s  %6d  %3d  %3d  %5d' % (
            node['id'], node['cpus'], node['total_mb'], free,
            node['guests'], node['llc'], node['mc'], node['overhead']))
    lines.append('')
    lines += _matrix('INTER, interconnect congestion level, CPU node (row) '
                     '-> memory node (column):', status['inter'])
    lines.append('')
    lines += _matrix('RML, remote-access latency level:', status['rml'])
    lines.append('')
    lines += _matrix('Overhead of each memory node seen from each CPU node '
                     '(Figure 4 sums):', status['overhead'], diagonal='')
    lines.append('')
    lines.append('GUESTS (MiB per node: now, and where the placer would put '
                 'it if it started now)')
    if not status['guests']:
        lines.append('  none')
    for guest in status['guests']:
        lines += _guest_lines(guest)
    lines.append('')
    lines.append('NEXT REBALANCING MOVES')
    if not status['rebalance_moves']:
        lines.append('  none')
    for move in status['rebalance_moves']:
        lines += _wrap('%s: %d MiB node %d -> %d (%s)' % (
            move['guest'], move['mb'], move['from'], move['to'],
            move['reason']), indent='    ', first='  ')
    for note in status['notes']:
        lines.append('')
        lines += _wrap(note)
    return '\n'.join(lines)


def _guest_lines(guest: dict) -> list:
    if guest['managed']:
        state = 'managed, policy %s, max_nodes %d' % (
            guest['policy'], guest['max_nodes'])
        if not guest['rebalance']:
            state += ', no rebalancing'
        if guest['workload']:
            state += ', workload %s' % guest['workload']
    else:
        state = 'not managed: %s' % guest['reason']
    lines = _wrap('%s  %d MiB  %d vCPUs  %s' % (
        guest['name'], guest['memory_mb'], guest['vcpus'], state),
        indent='      ', first='  ')
    lines += _wrap(_nodes_text(guest['memory_mb_per_node']),
                   indent=' ' * 10, first='    now   ')
    if guest['plan_mb_per_node'] is not None:
        lines += _wrap(_nodes_text(guest['plan_mb_per_node']),
                       indent=' ' * 10, first='    plan  ')
        moves = ', '.join('%d MiB %d->%d' % (m['mb'], m['from'], m['to'])
                          for m in guest['placement_moves']) or 'nothing'
        lines += _wrap('overhead %.2f; to get there: %s' % (
            guest['planned_overhead'], moves), indent=' ' * 10,
            first=' ' * 10)
    elif guest['managed']:
        lines += _wrap(guest['reason'], indent=' ' * 10,
                       first='    plan  ')
    return lines


# -- running it --------------------------------------------------------------

def _one_line(message: str) -> str:
    return ' '.join(str(message).split())


def _hint(message: str) -> str:
    lower = message.lower()
    if any(word in lower for word in ('permission denied', 'authenticat',
                                      'polkit', 'access denied')):
        return ' (run it as root or as a member of the libvirt group)'
    if any(word in lower for word in ('connection refused',
                                      'no such file', 'failed to connect')):
        return ' (is libvirtd running? see --connect)'
    return ''


def _fail(message: str, code: int) -> int:
    message = _one_line(message)
    print('%s: %s%s' % (PROG, message, _hint(message)), file=sys.stderr)
    return code


def run(args) -> int:
    """Run ``status`` with parsed arguments; returns the exit code."""
    try:
        with _logging(args.debug):
            conf = load_conf(args.config_file)
            uri = args.connect or conf.numa_overhead_agent.connection_uri
            status = collect(conf, uri, args.samples, args.interval)
    except ConfigError as exc:
        return _fail('configuration error: %s' % exc, EXIT_CONFIG)
    except hv_mod.HypervisorError as exc:
        return _fail(str(exc), EXIT_ERROR)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        return _fail('unexpected error: %s: %s' % (type(exc).__name__, exc),
                     EXIT_ERROR)
    if args.format == 'json':
        print(json.dumps(status, indent=2, sort_keys=True))
    else:
        print(render(status))
    return 0


def main(argv=None) -> int:
    """``python -m nova_numa_overhead.cmd.status``: status on its own."""
    parser = argparse.ArgumentParser(prog='nova-numa-overhead')
    add_parser(parser.add_subparsers(dest='command', required=True))
    return run(parser.parse_args(['status'] + list(
        sys.argv[1:] if argv is None else argv)))


if __name__ == '__main__':
    sys.exit(main())
