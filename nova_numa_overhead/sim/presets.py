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
"""Host presets and workload profiles, from the papers' published figures.

The hosts' figures are copied from ``shared/data/published-numa-figures.json``
(themselves from the papers' setup sections); what the papers do not give
(memory-controller bandwidth, latencies where only distances are known) is
filled in with the usual figures of those platforms and said so below.
The workload profiles are fitted to the four characterization figures of
Liu & Li, section 3.2, that :mod:`nova_numa_overhead.sim.figures` lists as
the calibration set (Nova's default placement of the Figure 2 scenarios);
every other published figure is held out and compared, never fitted
(doc/source/user/simulator.rst). The improvement of any policy is an
output, never an input.
"""

from nova_numa_overhead.sim import model

GIB = 1024

# Liu & Li's benchmarks, plus a CPU-bound guest. Fitted by
# tools/calibrate-sim.py to the calibration set only (LLC hit rate 0.48 ->
# 0.10 and a 53.4% drop from 1 to 8 guests on one socket; a 22.1% drop
# with 2 guests on one controller; IPC 0.62 -> 0.31 in the remote-access
# scenario). The paper says YCSB and Memcached issue memory requests all
# the time while NPB/UA and TunkRank do most of theirs at start: the
# latter two keep a smaller share of their memory hot and access the LLC
# less per instruction.
PROFILES = {
    'ycsb': model.Profile('ycsb', api=0.0348, footprint_mb=5.37,
                          solo_hit=0.46, cpi0=0.821, mlp=4.48, touched=1.0),
    'memcached': model.Profile('memcached', api=0.0373, footprint_mb=5.37,
                               solo_hit=0.50, cpi0=0.756, mlp=4.48,
                               touched=1.0),
    'npb-ua': model.Profile('npb-ua', api=0.0251, footprint_mb=5.37,
                            solo_hit=0.50, cpi0=0.961, mlp=4.48,
                            touched=0.6),
    'tunkrank': model.Profile('tunkrank', api=0.0300, footprint_mb=5.37,
                              solo_hit=0.46, cpi0=0.887, mlp=4.48,
                              touched=0.6),
    # Not fitted: a guest that barely leaves its caches.
    'cpu-bound': model.Profile('cpu-bound', api=0.002, footprint_mb=0.25,
                               solo_hit=0.95, cpi0=0.55, mlp=1.0,
                               touched=0.05),
}
MEMORY_PROFILES = ('ycsb', 'memcached', 'npb-ua', 'tunkrank')


def _uniform(n, local, remote):
    return tuple(tuple(local if i == j else remote for j in range(n))
                 for i in range(n))


# Usable memory bandwidth of an x3850 socket (its four controllers), GB/s:
# not published, fitted with the profiles (tools/calibrate-sim.py).
X3850_MC_GBPS = 34.0


def ibm_x3850(sockets: int = 4) -> model.HostSpec:
    """IBM x3850 X5, Xeon X7550 (Liu & Li, section 3.1).

    Published: 8 cores with Hyper-Threading, 18 MB LLC, 64 GB behind four
    memory controllers of 16 GB per socket; QPI 6.4 GT/s (12.8 GB/s per
    direction; ~10 GB/s usable); remote latency at most 30% above local.
    Not published: the usable bandwidth per socket (``X3850_MC_GBPS``,
    fitted), 130 ns local latency; on 8 sockets two hops cost 1.3x, one 1.15x.
    """
    if sockets not in (2, 4, 8):
        raise ValueError('the x3850 preset has 2, 4 or 8 sockets')
    nodes = tuple(model.NodeSpec(cores=8, threads=2, llc_mb=18.0,
                                 memory_mb=64 * GIB, mc_gbps=X3850_MC_GBPS,
                                 controllers=4) for _ in range(sockets))
    if sockets == 8:
        hops = [[0 if i == j else (1 if (i ^ j) in (1, 2, 4) else 2)
                 for j in range(8)] for i in range(8)]
        latency = tuple(tuple(130.0 * (1.0, 1.15, 1.3)[h] for h in row)
                        for row in hops)
        distances = tuple(tuple((10, 12, 13)[h] for h in row)
                          for row in hops)
    else:
        latency = _uniform(sockets, 130.0, 169.0)
        distances = _uniform(sockets, 10, 13)
    return model.HostSpec(
        name='ibm-x3850-%ds' % sockets, nodes=nodes, latency_ns=latency,
        link_gbps=_uniform(sockets, 0.0, 10.0), distances=distances,
        ghz=2.0)


def intel_e5_4610() -> model.HostSpec:

    """4-node Xeon E5-4610 (vTRMS platform A): 8 cores and 32 GB per node,
    2-way QPI 7.2 GT/s, symmetric. Not published: Hyper-Threading, 15 MB
    LLC, one controller of ~25 GB/s per node (four DDR3 channels), 90 ns
    local and 140 ns remote latency.
    """
    nodes = tuple(model.NodeSpec(cores=8, threads=2, llc_mb=15.0,
                                 memory_mb=32 * GIB, mc_gbps=25.0)
                  for _ in range(4))
    return model.HostSpec(
        name='intel-e5-4610', nodes=nodes,
        latency_ns=_uniform(4, 90.0, 140.0),
        link_gbps=_uniform(4, 0.0, 14.4), distances=_uniform(4, 10, 21),
        ghz=2.0)


# vTRMS Table II, GB/s, rows = memory node, columns = vCPU node.
AMD_6376_STREAM = (
    (5.6, 5.2, 4.4, 3.9, 3.0, 2.1, 2.9, 2.0),
    (4.6, 5.7, 3.9, 4.3, 2.1, 3.0, 2.0, 2.9),
    (3.0, 3.8, 5.7, 5.1, 4.3, 2.0, 3.0, 2.1),
    (2.1, 4.4, 5.2, 5.6, 3.9, 3.1, 2.1, 3.1),
    (4.3, 2.0, 3.1, 2.1, 5.5, 5.2, 3.1, 3.8),
    (3.8, 3.0, 2.1, 3.1, 5.1, 5.6, 2.1, 4.2),
    (4.1, 1.9, 3.0, 3.8, 3.1, 2.0, 5.6, 4.6),
    (3.7, 2.9, 2.0, 4.3, 2.1, 3.0, 5.2, 5.5),
)
AMD_6376_SLIT = (
    (10, 16, 16, 22, 16, 22, 16, 22),
    (16, 10, 22, 16, 16, 22, 22, 16),
    (16, 22, 10, 16, 16, 16, 16, 16),
    (22, 16, 16, 10, 16, 16, 22, 22),
    (16, 16, 16, 16, 10, 16, 16, 22),
    (22, 22, 16, 16, 16, 10, 22, 16),
    (16, 22, 16, 22, 16, 22, 10, 16),
    (22, 16, 16, 22, 22, 16, 16, 10),
)


def amd_6376() -> model.HostSpec:

    """8-node Opteron 6376 (vTRMS platform B): 16 cores and 16 GB per
    node (as the data file says), an asymmetric bandwidth matrix (Table
    II) that SLIT (Table I) cannot describe. The measured single-guest
    STREAM figures scale to link and controller capacities (x2.5);
    latency follows the bandwidth loss (105 ns local). Not published: 8 MB
    LLC and one controller per node, no SMT.
    """
    n = 8
    stream = AMD_6376_STREAM
    link = tuple(tuple(stream[m][c] * 2.5 for m in range(n))
                 for c in range(n))
    latency = tuple(tuple(105.0 * (stream[c][c] / stream[m][c]) ** 0.6
                          for m in range(n)) for c in range(n))
    nodes = tuple(model.NodeSpec(cores=16, llc_mb=8.0, memory_mb=16 * GIB,
                                 mc_gbps=stream[i][i] * 2.5)
                  for i in range(n))
    return model.HostSpec(name='amd-6376', nodes=nodes, latency_ns=latency,
                          link_gbps=link, distances=AMD_6376_SLIT, ghz=2.3)


HOSTS = {
    'ibm-x3850-2s': lambda: ibm_x3850(2),
    'ibm-x3850-4s': lambda: ibm_x3850(4),
    'ibm-x3850-8s': lambda: ibm_x3850(8),
    'intel-e5-4610': intel_e5_4610,
    'amd-6376': amd_6376,
}


def host(name: str) -> model.HostSpec:
    try:
        return HOSTS[name]()
    except KeyError:
        raise ValueError('unknown host preset %r (known: %s)'
                         % (name, ', '.join(sorted(HOSTS))))
