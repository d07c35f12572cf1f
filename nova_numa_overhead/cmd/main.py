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
"""``nova-numa-overhead``: the operator's command line."""

import argparse
import os
import sys

from nova_numa_overhead.cmd import common
from nova_numa_overhead.cmd import reports
from nova_numa_overhead.cmd import status

PROG = 'nova-numa-overhead'
DEMO_SCENARIO = 'mixed-16'
# Probe buffers: 1 MiB up to 64 GiB per measurement.
PROBE_MAX_MB = 64 * 1024
PROBE_MAX_REPEAT = 100
PROBE_MAX_STREAMS = 4096


def main(argv=None) -> int:
    parser = common.ArgumentParser(
        prog=PROG,
        description='NUMA memory-zone overhead aware scheduling for Nova.')
    sub = parser.add_subparsers(dest='command', required=True)
    demo = sub.add_parser(
        'demo', help='the mixed scenario of Liu & Li simulated under every '
                     'policy (table and figure), then hosts reporting to '
                     'Nova\'s filter and weigher for a few flavors')
    demo.add_argument('--transport-url', default=None,
                      help='oslo.messaging URL for the reports (default: '
                           'in-memory fake://)')
    demo.add_argument('--plot', default='numa-overhead-demo.png',
                      metavar='FILE.png',
                      help='where to draw the figure (default: '
                           '%(default)s)')
    demo.add_argument('--scheduler-only', action='store_true',
                      help='only the scheduler walkthrough')
    probe = sub.add_parser(
        'probe', help='measure the node-to-node memory latency and '
                      'bandwidth matrix of this host (vTRMS) for '
                      '[numa_overhead_agent] topology_file')
    probe.add_argument('--output', required=True, metavar='FILE',
                       help='JSON file to write (its directory must exist)')
    probe.add_argument('--size-mb', type=common.bounded_int(1, PROBE_MAX_MB),
                       default=256, metavar='MB',
                       help='buffer per measurement in MiB (default 256; '
                            'at least 4x the last-level cache, checked '
                            'before measuring); the bandwidth streams '
                            'share it, each at least 16 MiB (or the whole '
                            'buffer, if smaller)')
    probe.add_argument('--repeat', type=common.bounded_int(
                       1, PROBE_MAX_REPEAT), default=3, metavar='N',
                       help='measurements per node pair, the best one '
                            'kept (default 3, at most %d)'
                            % PROBE_MAX_REPEAT)
    probe.add_argument('--streams', type=common.bounded_int(
                       1, PROBE_MAX_STREAMS), default=None, metavar='N',
                       help='concurrent copy streams that measure the '
                            'bandwidth, one per CPU of the CPU node that '
                            'the probe may run on, at most N (default: '
                            'all of them; fewer than the node has make '
                            'the agent take the bandwidth as ratios only)')
    simulate = sub.add_parser(
        'simulate', help='run the simulated NUMA host (or cluster) under '
                         'every placement policy and compare them')
    which = simulate.add_mutually_exclusive_group(required=True)
    which.add_argument('--scenario', help='a built-in scenario '
                       '(--list shows them)')
    which.add_argument('--scenario-file', help='a scenario file (TOML)')
    which.add_argument('--list', action='store_true',
                       help='list the built-in scenarios')
    which.add_argument('--all', action='store_true',
                       help='every built-in scenario, one line each')
    which.add_argument('--sweep', type=int, metavar='N',
                       help='N generated scenarios (seeded by --seed, '
                            'default 1) and the distribution of the '
                            'results per policy')
    simulate.add_argument('--format', choices=('table', 'json'),
                          default='table',
                          help='output format (default: table; json also '
                               'applies to --list)')
    simulate.add_argument('--plot', metavar='FILE.png',
                          help='also draw the figure')
    simulate.add_argument('--seed', type=int,
                          help="arrival order seed (default: the "
                               "scenario's); with --sweep, the sweep's "
                               "seed (default 1)")
    simulate.add_argument('--workers', type=int, default=2,
                          help='processes for --sweep (default 2)')
    simulate.add_argument('--policies',
                          help='comma-separated subset of the policies')
    simulate.add_argument('--set', action='append', dest='options',
                          metavar='GROUP.OPTION=VALUE',
                          help='set an option of the default configuration '
                               '(numa_overhead_agent: the agents; '
                               'numa_overhead: the scheduler side, in '
                               'clusters), e.g. numa_overhead_agent.'
                               'guest_floor=0.93; may be repeated')
    simulate.add_argument('--transport-url',
                          help='oslo.messaging URL for the cluster '
                               'scenario (default: in-memory fake://)')
    simulate.add_argument('--quiet', action='store_true',
                          help='no progress bar')
    status.add_parser(sub)
    reports.add_parser(sub)
    args = parser.parse_args(argv)
    common.quiet_eventlet()
    with common.broken_pipe_is_quiet():
        try:
            return _run(args)
        except KeyboardInterrupt:
            return common.EXIT_INTERRUPTED
        except common.CommandError as exc:
            return common.fail('%s %s' % (PROG, args.command), exc,
                               exc.code)
    return common.EXIT_ERROR


def _run(args) -> int:
    if args.command == 'status':
        return status.run(args)
    if args.command == 'reports':
        return reports.run(args)
    if args.command == 'simulate':
        sim_cli = _sim_cli()
        if args.plot:
            common.check_figure(args.plot)
        return sim_cli.run(args)
    if args.command == 'probe':
        return _probe(args)
    if args.command == 'demo':
        return _demo(args)
    return common.EXIT_USAGE


def _sim_cli():
    """The simulator's command line module; a one-line error where the
    simulator's packages are missing (a scheduler or API node's install).
    """
    try:
        from nova_numa_overhead.sim import cli as sim_cli
    except ImportError as exc:
        raise common.CommandError(
            'the simulator needs %s: pip install \'nova-numa-overhead[sim]\''
            % (exc.name or exc))
    return sim_cli


def _demo(args) -> int:
    from nova_numa_overhead import demo as demo_mod
    common.check_broker(args.transport_url)
    if not args.scheduler_only:
        common.check_figure(args.plot)
    try:
        if not args.scheduler_only:
            rc = _sim_cli().run(argparse.Namespace(
                list=False, scenario=DEMO_SCENARIO, scenario_file=None,
                sweep=None, workers=2, all=False,
                seed=None, policies=None, format='table',
                plot=args.plot, transport_url=args.transport_url,
                quiet=False))
            if rc:
                return rc
            print('figure: %s' % args.plot)
            print('every built-in scenario: nova-numa-overhead simulate '
                  '--all; 50 generated ones (the distribution): '
                  'nova-numa-overhead simulate --sweep 50\n')
        return demo_mod.run(args.transport_url)
    except (KeyboardInterrupt, common.CommandError):
        raise
    except Exception as exc:
        raise common.CommandError(exc)


def _probe(args) -> int:
    from nova_numa_overhead.compute import probe
    try:
        probe.check_output(args.output)
        nodes = probe.host_nodes()
        smallest = probe.min_size_mb(nodes)
        if smallest and args.size_mb < smallest:
            raise common.CommandError(
                '--size-mb %d is below %d times the last-level cache '
                '(%d MiB): use --size-mb %d or more, or the latency would '
                'be measured in the cache' % (
                    args.size_mb, probe.LLC_FACTOR,
                    probe.largest_llc_bytes(nodes) // (1024 * 1024),
                    smallest), common.EXIT_USAGE)
        matrix = probe.measure(nodes, size_mb=args.size_mb,
                               repeat=args.repeat, streams=args.streams)
        probe.save(matrix, args.output)
    except (OSError, ValueError) as exc:
        raise common.CommandError(exc)
    width = max(len(str(n)) for n in matrix.nodes)
    print('latency proxy (ns per access), rows = CPU node, columns = '
          'memory node')
    for i, row in enumerate(matrix.latency_ns):
        print('  %*s %s' % (width, matrix.nodes[i],
                            ' '.join('%8.2f' % v for v in row)))
    print('bandwidth (MB/s) of concurrent streams, rows = CPU node '
          '(its streams), columns = memory node')
    for i, row in enumerate(matrix.bandwidth_mbps):
        count = matrix.bandwidth_streams[i]
        print('  %*s %s %s' % (width, matrix.nodes[i],
                               '(%4s)' % ('-' if count is None else count),
                               ' '.join('%8.0f' % v for v in row)))
    print('written to %s' % os.path.abspath(args.output))
    return 0


if __name__ == '__main__':
    sys.exit(main())
