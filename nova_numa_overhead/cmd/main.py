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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog='nova-numa-overhead',
        description='NUMA memory-zone overhead aware scheduling for Nova.')
    sub = parser.add_subparsers(dest='command', required=True)
    demo = sub.add_parser(
        'demo', help='hosts report their overhead; see which host Nova\'s '
                     'filter and weigher pick for a few flavors')
    demo.add_argument('--transport-url', default=None,
                      help='oslo.messaging URL for the reports (default: '
                           'in-memory fake://)')
    args = parser.parse_args(argv)
    if args.command == 'demo':
        from nova_numa_overhead import demo as demo_mod
        try:
            return demo_mod.run(args.transport_url)
        except KeyboardInterrupt:
            return 130
        except Exception as exc:
            print('nova-numa-overhead demo: %s' % exc, file=sys.stderr)
            return 1
    return 2


if __name__ == '__main__':
    sys.exit(main())
