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
"""Scenarios: a host, guests arriving, how long to run, a seed.

Built-in scenarios reproduce Liu & Li's experiments (Figures 2, 7, 8;
Tables 2 and 3) plus an asymmetric AMD host and a cluster. Users write
their own as TOML files (format in doc/source/user/simulator.rst)::

    name = "my-scenario"
    host = "ibm-x3850-4s"          # a preset, or a [host] table
    seed = 1
    duration = 60                  # seconds after the last arrival
    arrival_interval = 5
    measure = 30                   # last seconds averaged

    [[guests]]
    name = "db"                    # numbered when count > 1
    count = 2
    profile = "ycsb"               # ycsb | memcached | npb-ua | tunkrank
                                   # | cpu-bound
    vcpus = 1
    memory_gb = 4
    vcpu_node = 0                  # where its vCPUs are pinned
    first_touch = [0]              # where Nova's default puts its memory
    extra_specs = {"numa_overhead:policy" = "proportional"}
"""

import dataclasses
import tomllib

from nova_numa_overhead.sim import model
from nova_numa_overhead.sim import presets

GIB = 1024


@dataclasses.dataclass(frozen=True)
class GuestPlan:
    name: str
    profile: str
    vcpus: int
    memory_mb: int
    vcpu_node: int
    first_touch: tuple
    extra_specs: tuple = ()
    pinned: bool = False


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    host: model.HostSpec
    guests: tuple
    seed: int = 1
    duration: int = 60
    arrival_interval: int = 5
    measure: int = 30
    hosts: int = 1              # > 1: a cluster of identical hosts

    def validate(self) -> 'Scenario':
        n = self.host.size
        if not self.guests:
            raise ValueError('scenario %s has no guests' % self.name)
        for g in self.guests:
            if g.profile not in presets.PROFILES:
                raise ValueError('guest %s: unknown profile %r (known: %s)'
                                 % (g.name, g.profile,
                                    ', '.join(sorted(presets.PROFILES))))
            if not 0 <= g.vcpu_node < n or any(
                    not 0 <= m < n for m in g.first_touch):
                raise ValueError('guest %s: node out of range 0-%d'
                                 % (g.name, n - 1))
            if g.vcpus < 1 or g.memory_mb < 1:
                raise ValueError('guest %s: vcpus and memory must be > 0'
                                 % g.name)
        if min(self.duration, self.arrival_interval, self.measure) < 1:
            raise ValueError('duration, arrival_interval and measure must '
                             'be >= 1')
        return self


PATTERNS = ('llc', 'mc', 'remote', 'interconnect')
PROFILE_CYCLE = presets.MEMORY_PROFILES


def _pattern(kind: str, k: int, count: int, nodes: int) -> tuple:
    """(vCPU node, first-touch nodes) of guest k in Liu & Li's Figure 2."""
    if kind == 'llc':
        # All guests on socket 0, memory spread over the controllers.
        return 0, (k % nodes,)
    if kind == 'mc':
        # Socket 0; half the guests on one controller, half on another.
        return 0, (0 if k < max(1, count // 2) else nodes - 1,)
    if kind == 'remote':
        # Spread over the sockets, memory on the neighbour (but guest 1).
        return k % nodes, ((k % nodes) if k == 0 else (k + 1) % nodes,)
    if kind == 'interconnect':
        # Pairs across sockets 1 and 2: memory on one, vCPUs on the other.
        a, b = (1, 2) if nodes > 2 else (0, 1)
        return (b, (a,)) if k % 2 == 0 else (a, (b,))
    raise ValueError(kind)


def paper(kind: str, count: int, host: str = 'ibm-x3850-4s',
          memory_gb: int = 4) -> Scenario:
    spec = presets.host(host)
    guests = []
    for k in range(count):
        if kind == 'mixed':
            quarter = max(1, count // 4)
            sub = PATTERNS[min(k // quarter, 3)]
            idx = k % quarter
            vcpu, touch = _pattern(sub, idx, quarter, spec.size)
        else:
            vcpu, touch = _pattern(kind, k, count, spec.size)
        guests.append(GuestPlan(
            name='vm%d' % (k + 1),
            profile=PROFILE_CYCLE[k % len(PROFILE_CYCLE)], vcpus=1,
            memory_mb=memory_gb * GIB, vcpu_node=vcpu, first_touch=touch))
    return Scenario(
        name='%s-%d' % (kind, count) if host == 'ibm-x3850-4s' else
        '%s-%d-%s' % (kind, count, host),
        description='Liu & Li %s scenario, %d guests on %s'
        % (kind, count, spec.name), host=spec, guests=tuple(guests)
    ).validate()


def amd_asymmetric() -> Scenario:
    """16 memory-hungry guests on the 8-node AMD host, whose bandwidth
    matrix is asymmetric: first touch on their vCPU node, two per node.
    """
    spec = presets.amd_6376()
    guests = tuple(GuestPlan(
        name='vm%d' % (k + 1), profile=PROFILE_CYCLE[k % 4], vcpus=2,
        memory_mb=4 * GIB, vcpu_node=(k * 3) % 8,
        first_touch=(((k * 3) % 8),)) for k in range(16))
    return Scenario(name='amd-asymmetric',
                    description='16 guests on the asymmetric 8-node '
                                'Opteron 6376', host=spec,
                    guests=guests).validate()


def cluster() -> Scenario:
    """Three 4-socket hosts; 36 guests arrive and the scheduler picks a
    host for each (the node is the host's least loaded one).
    """
    spec = presets.ibm_x3850(4)
    profiles = PROFILE_CYCLE + ('cpu-bound',)
    guests = tuple(GuestPlan(
        name='vm%d' % (k + 1), profile=profiles[k % len(profiles)],
        vcpus=2, memory_mb=8 * GIB, vcpu_node=0, first_touch=(0,))
        for k in range(36))
    return Scenario(name='cluster', description='36 guests arriving on a '
                    'cluster of three 4-socket hosts', host=spec,
                    guests=guests, hosts=3, arrival_interval=2).validate()


def builtin() -> dict:
    """Name -> factory of every built-in scenario."""
    table = {}
    for kind in PATTERNS:
        for count in (2, 4, 6, 8):
            table['%s-%d' % (kind, count)] = (
                lambda kind=kind, count=count: paper(kind, count))
    for count in (8, 12, 16):
        table['mixed-%d' % count] = lambda count=count: paper('mixed', count)
    for gb in (4, 8, 16, 32):
        table['memory-%dg' % gb] = (
            lambda gb=gb: dataclasses.replace(
                paper('mixed', 8, memory_gb=gb), name='memory-%dg' % gb,
                description='Liu & Li Table 2: 8 mixed guests of %d GB'
                % gb))
    for sockets in (2, 4, 8):
        table['sockets-%d' % sockets] = (
            lambda sockets=sockets: dataclasses.replace(
                paper('mixed', 8, host='ibm-x3850-%ds' % sockets),
                name='sockets-%d' % sockets,
                description='Liu & Li Table 3: 8 mixed guests on %d '
                'sockets' % sockets))
    table['amd-asymmetric'] = amd_asymmetric
    table['cluster'] = cluster
    return table


def get(name: str) -> Scenario:
    table = builtin()
    if name not in table:
        raise ValueError('unknown scenario %r; built-in ones: %s'
                         % (name, ', '.join(sorted(table))))
    return table[name]()


def _host_from_table(data) -> model.HostSpec:
    try:
        nodes = tuple(model.NodeSpec(
            cores=int(n['cores']), llc_mb=float(n['llc_mb']),
            memory_mb=int(float(n['memory_gb']) * GIB),
            mc_gbps=float(n['mc_gbps'])) for n in data['nodes'])
        size = len(nodes)

        def matrix(key):
            rows = tuple(tuple(float(v) for v in row) for row in data[key])
            if len(rows) != size or any(len(r) != size for r in rows):
                raise ValueError('%s must be %dx%d' % (key, size, size))
            return rows

        return model.HostSpec(
            name=str(data.get('name', 'custom')), nodes=nodes,
            latency_ns=matrix('latency_ns'), link_gbps=matrix('link_gbps'),
            distances=tuple(tuple(int(v) for v in r)
                            for r in matrix('distances')),
            ghz=float(data.get('ghz', 2.0)))
    except (KeyError, TypeError) as exc:
        raise ValueError('[host]: missing or bad field %s' % exc)


def load(path: str) -> Scenario:
    """Read a scenario file; ValueError naming the problem."""
    try:
        with open(path, 'rb') as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError('%s: not valid TOML: %s' % (path, exc))
    host = data.get('host', 'ibm-x3850-4s')
    spec = presets.host(host) if isinstance(host, str) else \
        _host_from_table(host)
    guests = []
    for i, entry in enumerate(data.get('guests', [])):
        try:
            count = int(entry.get('count', 1))
            base = entry.get('name', 'vm%d' % (i + 1))
            vcpu = int(entry.get('vcpu_node', 0))
            for c in range(count):
                guests.append(GuestPlan(
                    name=base if count == 1 else '%s-%d' % (base, c + 1),
                    profile=str(entry.get('profile', 'ycsb')),
                    vcpus=int(entry.get('vcpus', 1)),
                    memory_mb=int(float(entry.get('memory_gb', 4)) * GIB),
                    vcpu_node=vcpu,
                    first_touch=tuple(int(n) for n in entry.get(
                        'first_touch', [vcpu])),
                    extra_specs=tuple(sorted(dict(entry.get(
                        'extra_specs', {})).items()))))
        except (TypeError, ValueError) as exc:
            raise ValueError('%s: guests[%d]: %s' % (path, i, exc))
    return Scenario(
        name=str(data.get('name', path)),
        description=str(data.get('description', '')), host=spec,
        guests=tuple(guests), seed=int(data.get('seed', 1)),
        duration=int(data.get('duration', 60)),
        arrival_interval=int(data.get('arrival_interval', 5)),
        measure=int(data.get('measure', 30)),
        hosts=int(data.get('hosts', 1))).validate()
