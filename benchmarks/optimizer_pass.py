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
"""Cost of one optimizer pass (the agent holds its lock meanwhile).

N floating, memory-intensive guests (default 40, 100 and 200) on a 4-node
host of 8 CPUs per node, on the in-memory hypervisor, measured for 5 s;
then one pass of the optimizer's planning (no move made: advisory).
Printed next to a baseline measured in the same run: one sampling cycle
of the same agent on the same host. A pass runs every optimize_interval
(5 s): the goal is a pass of at most a few sampling cycles, whatever the
number of guests (the pass's prediction budget, PREDICTIONS, bounds it).
Not a test: nothing is asserted. Run: python benchmarks/optimizer_pass.py
"""

import argparse
import logging
import os
import random
import sys
import time

from oslo_config import cfg

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

from nova_numa_overhead.compute import agent as agent_mod  # noqa: E402
from nova_numa_overhead.compute import optimizer  # noqa: E402
from nova_numa_overhead import conf as plugin_conf  # noqa: E402
from tests.unit.compute import fakes  # noqa: E402

NODES = 4
GIB = 1024
IPS = 10 ** 9


class NullPublisher:

    def publish(self, report):
        return True


class Clock:

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def make_agent(guests, rng):
    hv = fakes.FakeHypervisor(nodes=NODES, cpus_per_node=8,
                              memory_mb=512 * GIB)
    every_cpu = tuple(range(NODES * 8))
    for i in range(guests):
        name = 'instance-%05d' % i
        hv.add(name, {rng.randrange(NODES): 2 * GIB},
               vcpu_node=rng.randrange(NODES), vcpus=4)
        # Floating: the cost model balances their vCPUs as the kernel.
        hv.affinity[name] = every_cpu
    conf = plugin_conf.register_opts(cfg.ConfigOpts())
    conf([])
    conf.set_override('enforcement', 'advisory', 'numa_overhead_agent')
    clock = Clock()
    agent = agent_mod.Agent(conf, hv, NullPublisher(), 'bench', clock=clock,
                            sleep=lambda s: None)
    return agent, hv, clock


def sample(agent, hv, clock, rng):
    clock.now += 1
    for name in hv.guests:
        ips = IPS * rng.uniform(0.5, 1.5)
        # No stalled-cycles event, as on most hosts.
        hv.run(name, int(ips), int(2 * ips), int(0.04 * ips),
               int(0.02 * ips), 0)
    agent.cycle()


def measure(guests, repeat):
    rng = random.Random(guests)
    agent, hv, clock = make_agent(guests, rng)
    for _ in range(5):
        sample(agent, hv, clock, rng)
    cycle = []
    for _ in range(repeat):
        agent.optimizer.next_pass = clock.now + 3600   # not this cycle
        start = time.perf_counter()
        sample(agent, hv, clock, rng)
        cycle.append(time.perf_counter() - start)
    plan = []
    actions = 0
    for _ in range(repeat):
        start = time.perf_counter()
        actions = len(agent.optimizer.plan(clock.now))
        plan.append(time.perf_counter() - start)
    return min(cycle), min(plan), actions, agent.optimizer.counts['budget']


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--guests', type=int, nargs='*',
                        default=[40, 100, 200])
    parser.add_argument('--repeat', type=int, default=3)
    args = parser.parse_args(argv)
    logging.disable(logging.CRITICAL)
    print('optimizer pass on %d nodes (budget %d predictions), best of %d'
          % (NODES, optimizer.PREDICTIONS, args.repeat))
    print('%7s %12s %12s %7s %8s %8s' % ('guests', 'cycle ms', 'pass ms',
                                         'ratio', 'moves', 'budget'))
    for guests in args.guests:
        cycle, plan, actions, budget = measure(guests, args.repeat)
        print('%7d %12.1f %12.1f %7.1f %8d %8d' % (
            guests, cycle * 1000, plan * 1000, plan / cycle, actions,
            budget))
    return 0


if __name__ == '__main__':
    sys.exit(main())
