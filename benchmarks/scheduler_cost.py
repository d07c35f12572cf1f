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
"""Per-host scheduling cost of NUMAOverheadFilter + NUMAOverheadWeigher.

Builds 1,000 and 10,000 HostStates of 4-node hosts, each with a report in
the store, and times, in the same run, through Nova's own handlers:

* NUMAOverheadFilter (with a max_level, so every host is looked up),
* NUMAOverheadWeigher,
* Nova's RAMWeigher (the baseline) and NUMATopologyFilter (a 2-cell guest).

Prints microseconds per host and ratios against RAMWeigher, and the cost
of ingesting one report (validation + planning at arrival). Not a test:
nothing is asserted. Run: python benchmarks/scheduler_cost.py [--repeat N]
"""

import argparse
import logging
import random
import sys
import time
import warnings

warnings.simplefilter('ignore')

import nova.conf  # noqa: E402
from nova import objects  # noqa: E402
from nova.scheduler import filters as nova_filters  # noqa: E402
from nova.scheduler.filters import numa_topology_filter  # noqa: E402
from nova.scheduler import weights as nova_weights  # noqa: E402
from nova.scheduler.weights import ram  # noqa: E402
from nova.tests.unit.scheduler import fakes as nova_fakes  # noqa: E402

from nova_numa_overhead import conf as plugin_conf  # noqa: E402
from nova_numa_overhead.overhead import estimator  # noqa: E402
from nova_numa_overhead import report as report_mod  # noqa: E402
from nova_numa_overhead.scheduler import filters  # noqa: E402
from nova_numa_overhead.scheduler import store as store_mod  # noqa: E402
from nova_numa_overhead.scheduler import weighers  # noqa: E402

CONF = nova.conf.CONF
NODES = 4


def make_report(rng, host, seq):
    topo = estimator.Topology.uniform(NODES)
    static = estimator.static_levels(topo)
    levels = estimator.Levels(
        llc=[rng.randint(0, 4) for _ in range(NODES)],
        mc=[rng.randint(0, 4) for _ in range(NODES)],
        inter=[[0 if i == j else rng.randint(0, 3) for j in range(NODES)]
               for i in range(NODES)],
        rml=static.rml)
    return report_mod.build(
        host, 'agent-' + host, '0.1.0', seq, levels,
        total_mb=[65536] * NODES,
        free_mb=[rng.randint(4096, 65536) for _ in range(NODES)],
        guests=[rng.randint(0, 6) for _ in range(NODES)],
        cpus=[16] * NODES, distances=topo.distances).to_dict()


def make_spec():
    topology = objects.InstanceNUMATopology(cells=[
        objects.InstanceNUMACell(id=0, cpuset=set([0]), pcpuset=set(),
                                 memory=256),
        objects.InstanceNUMACell(id=1, cpuset=set([1]), pcpuset=set(),
                                 memory=256)])
    return objects.RequestSpec(
        numa_topology=topology, pci_requests=None,
        instance_uuid='4a1b9d5e-0000-4000-8000-000000000001',
        flavor=objects.Flavor(memory_mb=4096, vcpus=2, root_gb=10,
                              extra_specs={'numa_overhead:max_level': '16'}),
        image=objects.ImageMeta(properties=objects.ImageMetaProps()),
        scheduler_hints={})


def make_hosts(count):
    return [nova_fakes.FakeHostState(
        'host%d' % i, 'node%d' % i,
        {'numa_topology': nova_fakes.NUMA_TOPOLOGY, 'pci_stats': None,
         'cpu_allocation_ratio': 16.0, 'ram_allocation_ratio': 1.5,
         'free_ram_mb': 100000, 'num_instances': 3,
         'allocation_candidates': [{'mappings': {}}]})
        for i in range(count)]


def best_of(repeat, func):
    best = None
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        elapsed = time.perf_counter() - start
        best = elapsed if best is None else min(best, elapsed)
    return best


def run(count, repeat, rng):
    reports = store_mod.ReportStore(CONF)
    datas = [make_report(rng, 'host%d' % i, 1) for i in range(count)]
    start = time.perf_counter()
    for data in datas:
        reports.ingest(data)
    ingest = (time.perf_counter() - start) / count
    store_mod.get_store = lambda conf: reports

    hosts = make_hosts(count)
    spec = make_spec()
    filter_handler = nova_filters.HostFilterHandler()
    weight_handler = nova_weights.HostWeightHandler()
    our_filter = filters.NUMAOverheadFilter()
    our_weigher = weighers.NUMAOverheadWeigher()
    numa_filter = numa_topology_filter.NUMATopologyFilter()
    ram_weigher = ram.RAMWeigher()

    def filt(f):
        return lambda: list(filter_handler.get_filtered_objects(
            [f], hosts, spec))

    def weigh(w):
        return lambda: weight_handler.get_weighed_objects([w], hosts, spec)

    def ours():
        passed = filter_handler.get_filtered_objects([our_filter], hosts,
                                                     spec)
        weight_handler.get_weighed_objects([our_weigher], passed, spec)

    ours()  # take the baselines of Nova's per-request bookkeeping
    timings = {
        'RAMWeigher': best_of(repeat, weigh(ram_weigher)),
        'NUMAOverheadFilter': best_of(repeat, filt(our_filter)),
        'NUMAOverheadWeigher': best_of(repeat, weigh(our_weigher)),
        'NUMAOverheadFilter+Weigher': best_of(repeat, ours),
        'NUMATopologyFilter': best_of(max(1, repeat // 3),
                                      filt(numa_filter)),
    }
    base = timings['RAMWeigher']
    print('\n%d hosts (best of %d runs; report ingest %.1f us/report)'
          % (count, repeat, ingest * 1e6))
    print('%-28s %12s %10s' % ('', 'us/host', 'x RAMWeigher'))
    for name, seconds in timings.items():
        print('%-28s %12.2f %10.2f' % (name, seconds / count * 1e6,
                                       seconds / base))
    return timings, ingest


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--repeat', type=int, default=7)
    parser.add_argument('--hosts', type=int, nargs='*',
                        default=[1000, 10000])
    args = parser.parse_args(argv)
    logging.disable(logging.CRITICAL)
    objects.register_all()
    plugin_conf.register_opts(CONF)
    CONF([], project='nova')
    rng = random.Random(42)
    for count in args.hosts:
        run(count, args.repeat, rng)
    return 0


if __name__ == '__main__':
    sys.exit(main())
