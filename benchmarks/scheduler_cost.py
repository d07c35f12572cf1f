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
"""Scheduler-side cost of nova-numa-overhead, from 1,000 to 100,000 hosts.

For every host count, in the same run, with every host's report in the
store:

* NUMAOverheadFilter (with a max_level, so every host is looked up) and
  NUMAOverheadWeigher through Nova's own handlers, against Nova's
  RAMWeigher (the baseline) and NUMATopologyFilter (a 2-cell guest; timed on
  at most 2,000 hosts, it costs a hundred times more);
* ingesting one report of a 4-node and of an 8-node host (a host's next
  report: validation and a copy of the agent's plan);
* the store's memory per host (tracemalloc, host names included).

Then, once: the time to reject malformed reports whatever their size
claims, and what a flood of 100,000 made-up hosts leaves in a store capped
by ``[numa_overhead] max_hosts``. Not a test: nothing is asserted.

Run: python benchmarks/scheduler_cost.py [--hosts 1000 10000 100000]
"""

import argparse
import gc
import logging
import random
import sys
import time
import tracemalloc
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
# Distinct reports per node count; hosts take them in turn.
TEMPLATES = 64
NUMA_FILTER_HOSTS = 2000


def make_template(rng, nodes):
    """One report of a loaded ``nodes``-node host, planned by the agent."""
    topo = estimator.Topology.uniform(nodes)
    static = estimator.static_levels(topo)
    levels = estimator.Levels(
        llc=[rng.randint(0, 4) for _ in range(nodes)],
        mc=[rng.randint(0, 4) for _ in range(nodes)],
        inter=[[0 if i == j else rng.randint(0, 3) for j in range(nodes)]
               for i in range(nodes)],
        rml=static.rml)
    return report_mod.build(
        'template', 'agent-template', '0.1.0', 1, levels,
        total_mb=[65536] * nodes,
        free_mb=[rng.randint(4096, 65536) for _ in range(nodes)],
        guests=[rng.randint(0, 6) for _ in range(nodes)],
        cpus=[16] * nodes, distances=topo.distances,
        policy=CONF.numa_overhead.default_policy,
        max_nodes=CONF.numa_overhead.default_max_nodes).to_dict()


def host_report(template, index, seq):
    """The template as host ``index``'s report number ``seq``: what the
    JSON decoder hands the store (new strings, shared nested lists).
    """
    data = dict(template)
    data['host'] = 'compute-%06d.cell%d.example.org' % (index, index % 50)
    data['agent'] = {'version': '0.1.0',
                     'id': '%032x' % (index * 7919 + 1)}
    data['seq'] = seq
    return data


def make_spec(numa=False):
    """A floating guest's request (ours: a request with a NUMA topology
    is Nova's to place, the plugin passes it through), or a 2-cell
    guest's (the NUMATopologyFilter's).
    """
    topology = None if not numa else objects.InstanceNUMATopology(cells=[
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


def make_hosts(count, names):
    return [nova_fakes.FakeHostState(
        names[i], 'node%d' % i,
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


def fill(store, templates, count, seq):
    for i in range(count):
        store.ingest(host_report(templates[i % len(templates)], i, seq))


def store_bytes(templates, count):
    """Bytes a store holds per host after every host reported twice."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    store = store_mod.ReportStore(CONF)
    fill(store, templates, count, 1)
    fill(store, templates, count, 2)
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    assert len(store) == count
    held = sum(s.size_diff for s in after.compare_to(before, 'filename'))
    return store, held / count


def ingest_rate(store, templates, count, seq, repeat=3):
    """Reports per second of a store's steady state: every host's next
    report (timed on at most 20,000 reports), per second of wall-clock
    time and per second of CPU time (what a worker gets on a busy host).
    """
    sample = min(count, 20000)
    wall = cpu = None
    for k in range(repeat):
        datas = [host_report(templates[i % len(templates)], i, seq + k)
                 for i in range(sample)]
        start, start_cpu = time.perf_counter(), time.process_time()
        for data in datas:
            store.ingest(data)
        elapsed = time.perf_counter() - start
        elapsed_cpu = time.process_time() - start_cpu
        wall = elapsed if wall is None else min(wall, elapsed)
        cpu = elapsed_cpu if cpu is None else min(cpu, elapsed_cpu)
    return sample / wall, sample / max(cpu, 1e-9)


def run(count, repeat, templates4, templates8):
    store, bytes4 = store_bytes(templates4, count)
    ingest4 = ingest_rate(store, templates4, count, 3)
    store8, bytes8 = store_bytes(templates8, count)
    ingest8 = ingest_rate(store8, templates8, count, 3)
    del store8
    gc.collect()
    store_mod.get_store = lambda conf: store

    names = sorted(store.hosts())
    hosts = make_hosts(count, names)
    spec = make_spec()
    numa_spec = make_spec(numa=True)
    filter_handler = nova_filters.HostFilterHandler()
    weight_handler = nova_weights.HostWeightHandler()
    our_filter = filters.NUMAOverheadFilter()
    our_weigher = weighers.NUMAOverheadWeigher()
    numa_filter = numa_topology_filter.NUMATopologyFilter()
    ram_weigher = ram.RAMWeigher()
    numa_hosts = hosts[:NUMA_FILTER_HOSTS]

    def weigh(w):
        return lambda: weight_handler.get_weighed_objects([w], hosts, spec)

    def ours():
        passed = filter_handler.get_filtered_objects([our_filter], hosts,
                                                     spec)
        assert len(passed) == len(hosts)
        weight_handler.get_weighed_objects([our_weigher], passed, spec)

    def numa():
        list(filter_handler.get_filtered_objects([numa_filter], numa_hosts,
                                                 numa_spec))

    claims = iter(range(1, 10 ** 6))

    def claimed():
        # A guest placed on every host since its report (Nova's free RAM
        # lower): each host's view corrected, a new amount every run so
        # that no run finds it cached.
        free = 100000 - 4096 - next(claims)
        for host in hosts:
            host.free_ram_mb = free
        ours()

    ours()  # take the baselines of Nova's per-request bookkeeping
    ram_s = best_of(repeat, weigh(ram_weigher))
    ours_s = best_of(repeat, ours)
    numa_s = best_of(max(1, repeat // 3), numa) / len(numa_hosts) * count
    claimed_hosts = hosts
    hosts = hosts[:NUMA_FILTER_HOSTS]
    claimed_s = best_of(max(1, repeat // 3), claimed) / len(hosts)
    for host in claimed_hosts:
        host.free_ram_mb = 100000
    return {'hosts': count, 'ram_us': ram_s / count * 1e6,
            'ours_us': ours_s / count * 1e6, 'ratio': ours_s / ram_s,
            'claimed_us': claimed_s * 1e6,
            'numa_ratio': numa_s / ram_s, 'ingest4': ingest4,
            'ingest8': ingest8, 'bytes4': bytes4, 'bytes8': bytes8}


def malformed(templates4):
    """Malformed reports, several of them huge, and the time to reject the
    slowest of them (best of 3 each).
    """
    good = dict(host_report(templates4[0], 1, 1))
    deep = []
    nested = deep
    for _ in range(5000):
        nested.append([])
        nested = nested[0]
    n = 5000
    huge = dict(good, nodes=[dict(good['nodes'][0])] * n,
                inter=[[0] * n] * n, rml=[[0] * n] * n,
                distances=[[10] * n] * n)
    n = 64
    last_bad = dict(good, nodes=[dict(good['nodes'][0])] * n,
                    inter=[[0] * n] * n, rml=[[0] * n] * n,
                    distances=[[10] * n] * (n - 1) + [[10] * (n - 1) + [0]])
    cases = {
        '5,000 nodes and their matrices (~50 MB)': huge,
        '64 nodes, the last distance 0': last_bad,
        'wrong-shaped matrix (5,000 x 5,000)': dict(
            good, inter=[[0] * 5000] * 5000),
        '5,000 levels of nesting': dict(good, nodes=deep),
        'nesting as the host name': dict(good, host=deep),
        '50 MB host name': dict(good, host='h' * (50 * 2 ** 20)),
        'total_mb of 10**400': dict(good, nodes=[
            dict(good['nodes'][0], total_mb=10 ** 400)] * 4),
        'seq of 2**63': dict(good, seq=2 ** 63),
        'age of 1e9': dict(good, age=1e9),
        'NaN overhead in the plan': dict(good, planned=dict(
            good['planned'], overhead=[float('nan')] * len(
                good['planned']['mb']))),
        'not an object': [good] * 1000,
    }
    store = store_mod.ReportStore(CONF)
    worst = (0.0, None)
    for name, data in cases.items():
        seconds = best_of(3, lambda: store.ingest(data))
        worst = max(worst, (seconds, name))
    accepted = store.accepted
    # Valid, but padded: keys a reader does not know are never read.
    padded = dict(good, **{'k%d' % i: i for i in range(10 ** 6)})
    start = time.perf_counter()
    store.ingest(padded)
    padded_s = time.perf_counter() - start
    return len(cases), accepted, worst, padded_s


def flood(template, max_hosts, count=100000):
    """A flood of ``count`` made-up hosts into a store capped at
    ``max_hosts``: hosts held, memory held, time per refused report.
    """
    CONF.set_override('max_hosts', max_hosts, group='numa_overhead')
    datas = [host_report(template, i, 1) for i in range(count)]
    store = store_mod.ReportStore(CONF)
    fill(store, [template], max_hosts, 1)
    start = time.perf_counter()
    for data in datas[max_hosts:]:
        store.ingest(data)
    per = (time.perf_counter() - start) / (count - max_hosts)
    del datas, store
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    store = store_mod.ReportStore(CONF)
    fill(store, [template], count, 1)
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    CONF.clear_override('max_hosts', group='numa_overhead')
    held = sum(s.size_diff for s in after.compare_to(before, 'filename'))
    return len(store), store.refused, held, per


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--repeat', type=int, default=5)
    parser.add_argument('--hosts', type=int, nargs='*',
                        default=[1000, 10000, 100000])
    parser.add_argument('--flood-max-hosts', type=int, default=10000)
    args = parser.parse_args(argv)
    logging.disable(logging.CRITICAL)
    objects.register_all()
    plugin_conf.register_opts(CONF)
    CONF([], project='nova')
    CONF.set_override('max_hosts', max(args.hosts + [1]),
                      group='numa_overhead')
    # The weigher on (0 by default, when it looks nothing up): its cost.
    CONF.set_override('weight_multiplier', 1.0, group='numa_overhead')
    rng = random.Random(42)
    templates4 = [make_template(rng, 4) for _ in range(TEMPLATES)]
    templates8 = [make_template(rng, 8) for _ in range(TEMPLATES)]

    rows = [run(count, args.repeat, templates4, templates8)
            for count in args.hosts]
    print('Per host, filter+weigher through Nova\'s handlers against Nova\'s '
          'RAMWeigher alone\n(best of %d runs); ingest of a host\'s next '
          'report; store memory per host.' % args.repeat)
    print('Ingest per second of wall-clock time (and per CPU-second).')
    print('"placed us": ours per host when a guest was placed on it since '
          'its report\n(its view corrected, planned anew; at most %d hosts).'
          % NUMA_FILTER_HOSTS)
    print('%8s %8s %8s %6s %8s %10s %16s %16s %7s %7s' % (
        'hosts', 'RAM us', 'ours us', 'x RAM', 'NUMATop', 'placed us',
        'ingest4/s', 'ingest8/s', 'B/host4', 'B/host8'))
    for r in rows:
        print('%8d %8.2f %8.2f %6.2f %7.0fx %10.1f %7.0f (%6.0f) '
              '%7.0f (%6.0f) %7.0f %7.0f' % (
                  r['hosts'], r['ram_us'], r['ours_us'], r['ratio'],
                  r['numa_ratio'], r['claimed_us'], r['ingest4'][0],
                  r['ingest4'][1],
                  r['ingest8'][0], r['ingest8'][1], r['bytes4'],
                  r['bytes8']))

    cases, accepted, (worst, name), padded = malformed(templates4)
    print('\nMalformed reports: %d kinds, %d accepted; slowest rejection '
          '%.3f ms (%s)' % (cases, accepted, worst * 1e3, name))
    print('A valid report padded with 1,000,000 unknown keys: ingested in '
          '%.3f ms' % (padded * 1e3))
    held, refused, memory, per = flood(templates4[0], args.flood_max_hosts)
    print('Flood of 100,000 made-up hosts, max_hosts=%d: %d held, %d '
          'refused (%.1f us each), %.1f MiB held (%.0f B per held host)'
          % (args.flood_max_hosts, held, refused, per * 1e6,
             memory / 2 ** 20, memory / max(held, 1)))
    return 0


if __name__ == '__main__':
    sys.exit(main())
