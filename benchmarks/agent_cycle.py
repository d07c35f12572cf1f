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
"""Cost of one agent cycle and the agent's memory per guest.

200 guests on an 8-node host, on an in-memory hypervisor (no libvirt
I/O: what is measured is the agent's own work): collect counters and
placement, update the sliding windows, estimate the levels (Figure 4),
build and publish a report, plan one starting guest. Printed next to a
baseline measured in the same run: the same cycle on the same host with
no guests. The goal is under 10 ms per cycle (1% of a core at a 1 s sample
interval) and under 2 KiB of agent memory per guest. Not a test: nothing
is asserted. Run: python benchmarks/agent_cycle.py [--guests N]
"""

import argparse
import dataclasses
import gc
import logging
import os
import random
import sys
import time
import tracemalloc

from oslo_config import cfg

# The in-memory hypervisor lives with the tests of this checkout: runs as
# "python benchmarks/agent_cycle.py", no PYTHONPATH needed.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

from nova_numa_overhead.compute import agent as agent_mod  # noqa: E402
from nova_numa_overhead import conf as plugin_conf  # noqa: E402
from tests.unit.compute import fakes  # noqa: E402

NODES = 8
GIB = 1024


class NullPublisher:

    def publish(self, report):
        report.to_dict()
        return True


class Hypervisor(fakes.FakeHypervisor):
    """The in-memory hypervisor, reading counters as libvirt does: a new
    record per guest at every read (the agent keeps the last one). Which
    guests have their perf events on is libvirt's to hold, not the
    agent's: enabled from the start, no set of them filled as the agent
    enables them.
    """

    def enable_counters(self, domain):
        return True

    def counters_enabled(self, domain):
        return True

    def counters(self, domains):
        # New numbers too (+ 0 makes a new int above the small ones).
        return {name: type(c)(*(v + 0 for v in dataclasses.astuple(c)))
                for name, c in super().counters(domains).items()}


def make_host(guests, rng):
    hv = Hypervisor(nodes=NODES, cpus_per_node=16, memory_mb=256 * GIB)
    for i in range(guests):
        nodes = rng.sample(range(NODES), rng.randint(1, 3))
        hv.add('instance-%05d' % i, {n: 2 * GIB // len(nodes)
                                     for n in nodes},
               vcpu_node=rng.randrange(NODES), vcpus=2)
    return hv


def run_counters(hv, rng):
    for name in hv.guests:
        hv.run(name, rng.randint(1e8, 1e9), 1e9, rng.randint(1e6, 1e7),
               rng.randint(1e5, 1e6), rng.randint(1e7, 3e8))


def timed_cycles(agent, hv, rng, clock, cycles):
    best = None
    for _ in range(cycles):
        run_counters(hv, rng)
        clock[0] += 1.0
        start = time.perf_counter()
        agent.cycle()
        agent.report()
        agent.host_view(without=None)
        elapsed = time.perf_counter() - start
        best = elapsed if best is None else min(best, elapsed)
    return best


def make_agent(conf, hv, clock):
    return agent_mod.Agent(conf, hv, NullPublisher(), 'bench-host',
                           clock=lambda: clock[0], sleep=lambda s: None)


def agent_memory(conf, guests, with_agent=True) -> int:
    """Bytes allocated while ``guests`` guests run 17 samples, sampled by
    an agent (``with_agent``) or not: the difference is the agent's.
    """
    rng = random.Random(11)
    clock = [0.0]
    hv = make_host(guests, rng)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    agent = make_agent(conf, hv, clock) if with_agent else None
    for _ in range(17):
        run_counters(hv, rng)
        clock[0] += 1.0
        if agent is not None:
            agent.cycle()
    if agent is not None:
        agent.managed_guests()
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    del agent
    return sum(s.size_diff for s in after.compare_to(before, 'filename'))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--guests', type=int, default=200)
    parser.add_argument('--cycles', type=int, default=20)
    args = parser.parse_args(argv)
    logging.disable(logging.CRITICAL)
    conf = plugin_conf.register_opts(cfg.ConfigOpts())
    conf([])
    conf.set_override('enforcement', 'advisory', group='numa_overhead_agent')
    rng = random.Random(7)

    clock = [0.0]
    empty = make_host(0, rng)
    baseline = timed_cycles(make_agent(conf, empty, clock), empty, rng,
                            clock, args.cycles)

    hv = make_host(args.guests, rng)
    agent = make_agent(conf, hv, clock)
    agent.cycle()
    cycle = timed_cycles(agent, hv, rng, clock, args.cycles)

    # Placement of one starting guest (plan + advisory decision).
    hv.add('instance-new', {0: 4 * GIB}, vcpu_node=0)
    start = time.perf_counter()
    agent.place(hv.guests['instance-new'])
    place = time.perf_counter() - start

    # Memory: what the agent holds for N guests, less what it holds for
    # none (topology, levels, buffers), per guest; what the in-memory
    # hypervisor allocates running its guests with no agent is not the
    # agent's (the counter records it reads are: a new one per read).
    def held(guests):
        return (agent_memory(conf, guests) -
                agent_memory(conf, guests, with_agent=False))

    empty_held = held(0)
    here = held(args.guests)
    per_guest = (here - empty_held) / args.guests
    # What one more guest costs: the agent's bounded records (its last
    # MAX_DECISIONS decisions and outcomes) are not per guest.
    marginal = (held(2 * args.guests) - here) / args.guests

    print('%d guests on a %d-node host (best of %d cycles)'
          % (args.guests, NODES, args.cycles))
    print('%-34s %10s %10s' % ('', 'ms', 'x empty'))
    print('%-34s %10.3f %10.2f' % ('cycle, no guests (baseline)',
                                   baseline * 1e3, 1.0))
    print('%-34s %10.3f %10.2f' % ('cycle (collect/estimate/report)',
                                   cycle * 1e3, cycle / baseline))
    print('%-34s %10.3f' % ('place one starting guest', place * 1e3))
    print('cycle vs the 10 ms goal: %.2f' % (cycle / 0.010))
    print('agent memory per guest: %.0f bytes (goal 2048); one more '
          'guest: %.0f bytes' % (per_guest, marginal))
    return 0


if __name__ == '__main__':
    sys.exit(main())
