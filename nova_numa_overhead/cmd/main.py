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
import sys


DEMO_SCENARIO = 'mixed-16'


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog='nova-numa-overhead',
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
    probe.add_argument('--output', required=True,
                       help='JSON file to write')
    probe.add_argument('--size-mb', type=int, default=256,
                       help='buffer per measurement (default 256; at '
                            'least 4x the last-level cache)')
    probe.add_argument('--repeat', type=int, default=3)
    simulate = sub.add_parser(
        'simulate', help='run the simulated NUMA host (or cluster) under '
                         'every placement policy and compare them')
    which = simulate.add_mutually_exclusive_group(required=True)
    which.add_argument('--scenario', help='a built-in scenario '
                       '(--list shows them)')
    which.add_argument('--scenario-file', help='a scenario file (TOML)')
    which.add_argument('--list', action='store_true',
                       help='list the built-in scenarios')
    simulate.add_argument('--format', choices=('table', 'json'),
                          default='table')
    simulate.add_argument('--plot', metavar='FILE.png',
                          help='also draw the figure')
    simulate.add_argument('--seed', type=int,
                          help='arrival order seed (default: the '
                               "scenario's)")
    simulate.add_argument('--policies',
                          help='comma-separated subset of the policies')
    simulate.add_argument('--transport-url',
                          help='oslo.messaging URL for the cluster '
                               'scenario (default: in-memory fake://)')
    simulate.add_argument('--quiet', action='store_true',
                          help='no progress bar')
    from nova_numa_overhead.cmd import status
    status.add_parser(sub)
    args = parser.parse_args(argv)
    if args.command == 'status':
        return status.run(args)
    if args.command == 'simulate':
        from nova_numa_overhead.sim import cli as sim_cli
        return sim_cli.run(args)
    if args.command == 'probe':
        return _probe(args)
    if args.command == 'demo':
        from nova_numa_overhead import demo as demo_mod
        try:
            if not args.scheduler_only:
                from nova_numa_overhead.sim import cli as sim_cli
                rc = sim_cli.run(argparse.Namespace(
                    list=False, scenario=DEMO_SCENARIO, scenario_file=None,
                    seed=None, policies=None, format='table',
                    plot=args.plot, transport_url=args.transport_url,
                    quiet=False))
                if rc:
                    return rc
                print('figure: %s\n' % args.plot)
            return demo_mod.run(args.transport_url)
        except KeyboardInterrupt:
            return 130
        except Exception as exc:
            print('nova-numa-overhead demo: %s' % exc, file=sys.stderr)
            return 1
    return 2


def _probe(args) -> int:
    from nova_numa_overhead.compute import probe
    try:
        nodes = probe.host_nodes()
        matrix = probe.measure(nodes, size_mb=args.size_mb,
                               repeat=args.repeat)
        probe.save(matrix, args.output)
    except (OSError, ValueError) as exc:
        print('nova-numa-overhead probe: %s' % exc, file=sys.stderr)
        return 1
    width = max(len(str(n)) for n in matrix.nodes)
    print('latency proxy (ns per access), rows = CPU node, columns = '
          'memory node')
    for i, row in enumerate(matrix.latency_ns):
        print('  %*s %s' % (width, matrix.nodes[i],
                            ' '.join('%8.2f' % v for v in row)))
    print('bandwidth (MB/s)')
    for i, row in enumerate(matrix.bandwidth_mbps):
        print('  %*s %s' % (width, matrix.nodes[i],
                            ' '.join('%8.0f' % v for v in row)))
    print('written to %s' % args.output)
    return 0


if __name__ == '__main__':
    sys.exit(main())
