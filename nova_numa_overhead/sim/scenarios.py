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
"""Scenarios: a host, guests arriving (and leaving, and changing), a seed.

Built-in scenarios reproduce Liu & Li's experiments (Figures 2, 7, 8;
Tables 2 and 3), vTRMS's 32-guest runs, and add scenarios where guests
leave and change over time, an asymmetric AMD host and a cluster. Users
write their own as TOML files, read strictly: an unknown key, a value of
the wrong type, an unknown profile or policy, a node out of range or more
memory than the host has is one line naming the file and the key. The
format is in doc/source/user/simulator.rst::

    name = "my-scenario"
    host = "ibm-x3850-4s"          # a preset, or a [host] table
    seed = 1
    duration = 60                  # seconds after the last arrival
    arrival_interval = 5
    measure = 30                   # last seconds averaged
    balancing = true               # the kernel's automatic NUMA balancing
    counters = "perf"              # perf | perf+stalls | resctrl

    [[guests]]
    name = "db"                    # numbered when count > 1
    count = 2
    profile = "ycsb"
    vcpus = 2
    memory_gb = 4
    vcpu_node = 0                  # or a list: vCPUs spread over them
    vcpu_affinity = "node"         # stay there | "host": the kernel places
                                   # them (a Nova guest without pinning)
    first_touch = [0]              # where Nova's default puts its memory
    leave_at = 120                 # seconds after it arrives
    phases = [{at = 60, profile = "cpu-bound"}]
    extra_specs = {"numa_overhead:policy" = "proportional"}
"""

import dataclasses
import math
try:
    import tomllib
except ImportError:  # Python 3.10: the same parser, from PyPI
    import tomli as tomllib

from nova_numa_overhead import report
from nova_numa_overhead.sim import backend
from nova_numa_overhead.sim import model
from nova_numa_overhead.sim import presets

GIB = 1024


@dataclasses.dataclass(frozen=True)
class Phase:
    at: int                    # seconds after the guest arrives
    profile: str


@dataclasses.dataclass(frozen=True)
class GuestPlan:
    name: str
    profile: str
    vcpus: int
    memory_mb: int
    vcpu_nodes: tuple          # vCPUs spread evenly over these nodes
    first_touch: tuple
    first_controller: int | None = None   # within the first-touch node
    extra_specs: tuple = ()
    pinned: bool = False       # Nova pinned it (policies keep off)
    leave_at: int | None = None           # seconds after it arrives
    phases: tuple = ()
    preallocate: bool = False
    # vCPUs float over the host (the kernel places them) instead of
    # staying where the scenario put them.
    floating: bool = False

    @property
    def vcpu_node(self) -> int:
        return self.vcpu_nodes[0]


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
    balancing: bool = True
    counters: str = backend.DEFAULT_COUNTERS

    def validate(self, where: str = '') -> 'Scenario':
        """Raise ValueError naming the problem (``where``: file name)."""
        prefix = '%s: ' % where if where else ''
        if not self.guests:
            raise ValueError('%sscenario %s has no guests'
                             % (prefix, self.name))
        names = set()
        for i, g in enumerate(self.guests):
            at = '%sguests[%d] (%s): ' % (prefix, i, g.name)
            if g.name in names:
                raise ValueError('%sduplicate guest name' % at)
            names.add(g.name)
            self._check_guest(at, g)
        if min(self.duration, self.arrival_interval, self.measure) < 1:
            raise ValueError('%sduration, arrival_interval and measure must '
                             'be >= 1' % prefix)
        if self.hosts < 1:
            raise ValueError('%shosts must be >= 1' % prefix)
        if self.counters not in backend.COUNTER_PROFILES:
            raise ValueError('%scounters: unknown profile %r (known: %s)' % (
                prefix, self.counters, ', '.join(backend.COUNTER_PROFILES)))
        peak, when = self.peak_memory_mb()
        have = sum(node.memory_mb for node in self.host.nodes) * self.hosts
        if peak > have:
            raise ValueError(
                '%sovercommitted: the guests need %d MiB at %d s but the '
                'host%s %d MiB' % (prefix, peak, when,
                                   's have' if self.hosts > 1 else ' has',
                                   have))
        return self

    def _check_guest(self, at: str, g: GuestPlan) -> None:
        n = self.host.size
        for profile in [g.profile] + [p.profile for p in g.phases]:
            if profile not in presets.PROFILES:
                raise ValueError('%sunknown profile %r (known: %s)' % (
                    at, profile, ', '.join(sorted(presets.PROFILES))))
        nodes = tuple(g.vcpu_nodes) + tuple(g.first_touch)
        if not g.vcpu_nodes or any(not 0 <= m < n for m in nodes):
            raise ValueError('%snode out of range 0-%d' % (at, n - 1))
        if g.first_controller is not None:
            node = g.first_touch[0] if g.first_touch else g.vcpu_node
            if not 0 <= g.first_controller < \
                    self.host.nodes[node].controllers:
                raise ValueError(
                    '%sfirst_controller %d: node %d has %d controllers'
                    % (at, g.first_controller, node,
                       self.host.nodes[node].controllers))
        if g.vcpus < 1 or g.memory_mb < 1:
            raise ValueError('%svcpus and memory must be > 0' % at)
        total = sum(node.memory_mb for node in self.host.nodes)
        if g.memory_mb > total:
            raise ValueError('%s%d MiB is more than the host has (%d MiB)'
                             % (at, g.memory_mb, total))
        if g.leave_at is not None and g.leave_at < 1:
            raise ValueError('%sleave_at must be >= 1' % at)
        for p in g.phases:
            if p.at < 1 or (g.leave_at is not None and p.at >= g.leave_at):
                raise ValueError('%sphase at %d s is outside the guest\'s '
                                 'life' % (at, p.at))
        _check_extra_specs(at, dict(g.extra_specs))

    def arrivals(self) -> list:
        """(time, plan) of every guest, in arrival order."""
        import random
        order = list(self.guests)
        random.Random(self.seed).shuffle(order)
        return [((k + 1) * self.arrival_interval - self.arrival_interval,
                 plan) for k, plan in enumerate(order)]

    def steps(self) -> int:
        """Simulated seconds of one run."""
        return len(self.guests) * self.arrival_interval + self.duration

    def peak_memory_mb(self) -> tuple:
        events = []
        for at, plan in self.arrivals():
            events.append((at, plan.memory_mb))
            if plan.leave_at is not None:
                events.append((at + plan.leave_at, -plan.memory_mb))
        peak = when = used = 0
        # Departures at the same second free memory first.
        for at, delta in sorted(events, key=lambda e: (e[0], e[1])):
            used += delta
            if used > peak:
                peak, when = used, at
        return peak, when


def _check_extra_specs(at: str, specs: dict) -> None:
    from nova_numa_overhead.overhead import specs as specs_mod
    ours = {k: v for k, v in specs.items()
            if k.startswith(specs_mod.NAMESPACE + ':')}
    known = (specs_mod.SPEC_POLICY, specs_mod.SPEC_MAX_LEVEL,
             specs_mod.SPEC_MAX_NODES, specs_mod.SPEC_REBALANCE)
    for key in ours:
        if key not in known:
            raise ValueError('%sextra_specs: unknown key %s (known: %s)'
                             % (at, key, ', '.join(known)))
    try:
        specs_mod.policy_from_extra_specs(ours, 'proportional', 4)
    except specs_mod.InvalidRequest as exc:
        raise ValueError('%sextra_specs: %s' % (at, exc))


# -- built-in scenarios ----------------------------------------------------

PATTERNS = ('llc', 'mc', 'remote', 'interconnect')
PROFILE_CYCLE = presets.MEMORY_PROFILES


def _pattern(kind: str, k: int, nodes: int) -> tuple:
    """(vCPU node, first-touch node, controller) of guest k in Liu & Li's
    Figure 2.
    """
    if kind == 'llc':
        # All guests on socket 0, their memory over its four controllers.
        return 0, 0, k % 4
    if kind == 'mc':
        # Socket 0; guests 1-4 on controller 0, guests 5-8 on controller 3.
        return 0, 0, 0 if k < 4 else 3
    if kind == 'remote':
        # Spread over the sockets, memory on the neighbour (but guest 1).
        node = k % nodes
        return node, (node if k == 0 else (node + 1) % nodes), None
    if kind == 'interconnect':
        # Pairs across sockets 1 and 2: memory on one, vCPUs on the other.
        a, b = (1, 2) if nodes > 2 else (0, 1)
        return (b, a, None) if k % 2 == 0 else (a, b, None)
    raise ValueError(kind)


def paper(kind: str, count: int, host: str = 'ibm-x3850-4s',
          memory_gb: int = 4, name: str | None = None,
          description: str | None = None) -> Scenario:
    """A Liu & Li scenario: guests of 2 vCPUs and ``memory_gb``."""
    spec = presets.host(host)
    guests = []
    for k in range(count):
        if kind == 'mixed':
            quarter = max(1, count // 4)
            sub = PATTERNS[min(k // quarter, 3)]
            vcpu, touch, ctrl = _pattern(sub, k % quarter, spec.size)
        else:
            vcpu, touch, ctrl = _pattern(kind, k, spec.size)
        guests.append(GuestPlan(
            name='vm%d' % (k + 1),
            profile=PROFILE_CYCLE[k % len(PROFILE_CYCLE)], vcpus=2,
            memory_mb=memory_gb * GIB, vcpu_nodes=(vcpu,),
            first_touch=(touch,), first_controller=ctrl))
    return Scenario(
        name=name or '%s-%d' % (kind, count),
        description=description or 'Liu & Li %s scenario, %d guests on %s'
        % (kind, count, spec.name), host=spec, guests=tuple(guests)
    ).validate()


def amd_asymmetric() -> Scenario:
    """16 memory-hungry guests on the 8-node AMD host, whose bandwidth
    matrix is asymmetric: first touch on their vCPU node, two per node.
    """
    spec = presets.amd_6376()
    guests = tuple(GuestPlan(
        name='vm%d' % (k + 1), profile=PROFILE_CYCLE[k % 4], vcpus=2,
        memory_mb=4 * GIB, vcpu_nodes=((k * 3) % 8,),
        first_touch=(((k * 3) % 8),)) for k in range(16))
    return Scenario(name='amd-asymmetric',
                    description='16 guests on the asymmetric 8-node '
                                'Opteron 6376', host=spec,
                    guests=guests).validate()


def vtrms(host: str) -> Scenario:
    """vTRMS's evaluation: 32 guests of YCSB and Memcached, 1 vCPU and
    1 GB each, first touch where the kernel starts them (packed on the
    first nodes).
    """
    spec = presets.host(host)
    cpus = [n.cpus for n in spec.nodes]
    guests = []
    node = used = 0
    for k in range(32):
        if used >= cpus[node] // 2:
            node, used = (node + 1) % spec.size, 0
        guests.append(GuestPlan(
            name='vm%d' % (k + 1), profile=('ycsb', 'memcached')[k % 2],
            vcpus=1, memory_mb=GIB, vcpu_nodes=(node,),
            first_touch=(node,)))
        used += 1
    return Scenario(name='vtrms-%s' % host,
                    description='vTRMS: 32 YCSB/Memcached guests on %s'
                    % spec.name, host=spec, guests=tuple(guests),
                    arrival_interval=2).validate()


def churn() -> Scenario:
    """Guests come and go on a 4-socket host: twelve arrive on sockets 0
    and 1; half of them leave after two minutes while six more arrive;
    the survivors' memory stays where the early crowd left it.
    """
    spec = presets.ibm_x3850(4)
    guests = []
    for k in range(18):
        node = k % 2 if k < 12 else 2 + k % 2
        guests.append(GuestPlan(
            name='vm%d' % (k + 1), profile=PROFILE_CYCLE[k % 4], vcpus=2,
            memory_mb=8 * GIB, vcpu_nodes=(node,), first_touch=(node,),
            leave_at=120 if k < 12 and k % 2 == 0 else None))
    return Scenario(name='churn', description='18 guests arriving, six '
                    'leaving, on the 4-socket x3850', host=spec,
                    guests=tuple(guests), duration=180, measure=120,
                    arrival_interval=5).validate()


def phases() -> Scenario:
    """Workloads change: guests that start CPU-bound turn memory-bound
    (and back) while they run, on a 2-socket host.
    """
    spec = presets.ibm_x3850(2)
    guests = []
    for k in range(8):
        first, later = ('cpu-bound', PROFILE_CYCLE[k % 4]) if k % 2 else \
            (PROFILE_CYCLE[k % 4], 'cpu-bound')
        guests.append(GuestPlan(
            name='vm%d' % (k + 1), profile=first, vcpus=2,
            memory_mb=8 * GIB, vcpu_nodes=(0,), first_touch=(0,),
            phases=(Phase(60, later), Phase(150, first))))
    return Scenario(name='phases', description='8 guests changing between '
                    'CPU-bound and memory-bound phases on 2 sockets',
                    host=spec, guests=tuple(guests), duration=200,
                    measure=160).validate()


def cluster() -> Scenario:
    """Three 4-socket hosts; 36 guests arrive and the scheduler picks a
    host for each (the node is the host's least loaded one).
    """
    spec = presets.ibm_x3850(4)
    profiles = PROFILE_CYCLE + ('cpu-bound',)
    guests = tuple(GuestPlan(
        name='vm%d' % (k + 1), profile=profiles[k % len(profiles)],
        vcpus=2, memory_mb=8 * GIB, vcpu_nodes=(0,), first_touch=(0,))
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
    # Table 2's 4 GB row and Table 3's 4-socket row are mixed-8.
    for gb in (8, 16, 32):
        table['memory-%dg' % gb] = (
            lambda gb=gb: paper('mixed', 8, memory_gb=gb,
                                name='memory-%dg' % gb,
                                description='Liu & Li Table 2: 8 mixed '
                                'guests of %d GB' % gb))
    for sockets, count in ((2, 4), (8, 16)):
        table['sockets-%d' % sockets] = (
            lambda sockets=sockets, count=count: paper(
                'mixed', count, host='ibm-x3850-%ds' % sockets,
                name='sockets-%d' % sockets,
                description='Liu & Li Table 3: %d mixed guests on %d '
                'sockets' % (count, sockets)))
    table['vtrms-intel'] = lambda: vtrms('intel-e5-4610')
    table['vtrms-amd'] = lambda: vtrms('amd-6376')
    table['amd-asymmetric'] = amd_asymmetric
    table['churn'] = churn
    table['phases'] = phases
    table['cluster'] = cluster
    return table


def get(name: str) -> Scenario:
    table = builtin()
    if name not in table:
        raise ValueError('unknown scenario %r; built-in ones: %s'
                         % (name, ', '.join(sorted(table))))
    return table[name]()


# -- scenario files --------------------------------------------------------

class _Reader:
    """Strict typed access to one TOML table, errors naming the key."""

    def __init__(self, path: str, where: str, data, known: tuple):
        self.path = path
        self.where = where
        if not isinstance(data, dict):
            self.fail('', 'expected a table, got %s' % _kind(data))
        self.data = data
        unknown = sorted(k for k in data if k not in known)
        if unknown:
            self.fail(unknown[0], 'unknown key (known: %s)'
                      % ', '.join(known))

    def fail(self, key, message):
        at = '.'.join(p for p in (self.where, key) if p)
        raise ValueError('%s: %s%s' % (self.path, at + ': ' if at else '',
                                       message))

    def get(self, key, types, default=None, check=None, what=None):
        if key not in self.data:
            if default is _REQUIRED:
                self.fail(key, 'missing')
            return default
        value = self.data[key]
        if isinstance(value, bool) and bool not in types:
            ok = False
        else:
            ok = isinstance(value, types)
        if not ok:
            self.fail(key, 'expected %s, got %s'
                      % (what or _names(types), _kind(value)))
        if check is not None:
            problem = check(value)
            if problem:
                self.fail(key, problem)
        return value

    def int(self, key, default=None, minimum=None):
        return self.get(key, (int,), default,
                        None if minimum is None else
                        (lambda v: None if v >= minimum
                         else 'must be >= %d' % minimum),
                        what='an integer')

    def number(self, key, default=None, positive=False, maximum=None):
        def check(v):
            if not _finite(v):
                return 'must be a finite number'
            if positive and not v > 0:
                return 'must be > 0'
            if maximum is not None and v > maximum:
                return 'must be <= %g' % maximum
            return None
        value = self.get(key, (int, float), default, check,
                         what='a number')
        return None if value is None else float(value)

    def bounded(self, key, default, minimum, maximum):
        """An integer from ``minimum`` to ``maximum``."""
        return self.get(key, (int,), default, lambda v: None
                        if minimum <= v <= maximum else
                        'must be from %d to %d' % (minimum, maximum),
                        what='an integer')

    def str(self, key, default=None):
        return self.get(key, (str,), default, what='a string')

    def bool(self, key, default=None):
        return self.get(key, (bool,), default, what='true or false')

    def int_list(self, key, default=None):
        value = self.get(key, (list, int), default,
                         what='an integer or a list of integers')
        if value is None or isinstance(value, int):
            return value if value is None else [value]
        for v in value:
            if isinstance(v, bool) or not isinstance(v, int):
                self.fail(key, 'expected integers, got %s' % _kind(v))
        return value

    def matrix(self, key, size, number=True):
        rows = self.get(key, (list,), _REQUIRED, what='a list of rows')
        if len(rows) != size or any(
                not isinstance(r, list) or len(r) != size for r in rows):
            self.fail(key, 'must be %dx%d' % (size, size))
        for row in rows:
            for v in row:
                if isinstance(v, bool) or not isinstance(
                        v, (int, float) if number else int):
                    self.fail(key, 'expected %s, got %s' % (
                        'numbers' if number else 'integers', _kind(v)))
                if not _finite(v) or v > MAX_MATRIX_VALUE:
                    self.fail(key, 'values must be finite numbers up to '
                              '%g' % MAX_MATRIX_VALUE)
        return tuple(tuple(float(v) for v in r) for r in rows)


_REQUIRED = object()


def _finite(value) -> bool:
    """Whether a TOML number is finite (an integer of 400 digits is not
    a float: OverflowError).
    """
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _names(types) -> str:
    return ' or '.join({int: 'an integer', float: 'a number',
                        str: 'a string', bool: 'true or false',
                        list: 'a list', dict: 'a table'}.get(t, t.__name__)
                       for t in types)


def _kind(value) -> str:
    if isinstance(value, bool):
        return 'the boolean %s' % str(value).lower()
    if isinstance(value, str):
        return 'the string %r' % value
    if isinstance(value, (int, float)):
        return 'the number %s' % value
    if isinstance(value, list):
        return 'a list'
    if isinstance(value, dict):
        return 'a table'
    return type(value).__name__


# What a file may ask for: beyond these a run would not end in reasonable
# time, or a report could not describe the host (its node limit).
MAX_NODES = report.MAX_NODES
MAX_HOSTS = 64
MAX_GUESTS = 1000
MAX_VCPUS = 1024
MAX_SECONDS = 86400
MAX_GHZ = 10.0
MAX_MATRIX_VALUE = 1e6

SCENARIO_KEYS = ('name', 'description', 'host', 'seed', 'duration',
                 'arrival_interval', 'measure', 'hosts', 'balancing',
                 'counters', 'guests')
HOST_KEYS = ('name', 'ghz', 'nodes', 'latency_ns', 'link_gbps', 'distances')
NODE_KEYS = ('cores', 'threads', 'llc_mb', 'memory_gb', 'mc_gbps',
             'controllers')
GUEST_KEYS = ('name', 'count', 'profile', 'vcpus', 'memory_gb', 'vcpu_node',
              'vcpu_affinity', 'first_touch', 'first_controller',
              'extra_specs', 'pinned', 'leave_at', 'phases', 'preallocate')
PHASE_KEYS = ('at', 'profile')


def _host_from_table(path, data) -> model.HostSpec:
    r = _Reader(path, 'host', data, HOST_KEYS)
    nodes_data = r.get('nodes', (list,), _REQUIRED, what='a list of tables')
    if not 0 < len(nodes_data) <= MAX_NODES:
        r.fail('nodes', 'from 1 to %d nodes' % MAX_NODES)
    nodes = []
    for i, entry in enumerate(nodes_data):
        n = _Reader(path, 'host.nodes[%d]' % i, entry, NODE_KEYS)
        node = model.NodeSpec(
            cores=n.bounded('cores', _REQUIRED, 1, MAX_VCPUS),
            threads=n.bounded('threads', 1, 1, 8),
            llc_mb=n.number('llc_mb', _REQUIRED, True, MAX_MATRIX_VALUE),
            memory_mb=int(n.number('memory_gb', _REQUIRED, True,
                                   MAX_MATRIX_VALUE) * GIB),
            mc_gbps=n.number('mc_gbps', _REQUIRED, True, MAX_MATRIX_VALUE),
            controllers=n.bounded('controllers', 1, 1, 64))
        if node.memory_mb < node.controllers:
            n.fail('memory_gb', 'less than 1 MiB per controller')
        nodes.append(node)
    size = len(nodes)
    latency = r.matrix('latency_ns', size)
    link = r.matrix('link_gbps', size)
    distances = r.matrix('distances', size, number=False)
    for a in range(size):
        for b in range(size):
            if latency[a][b] <= 0 or (a != b and link[a][b] <= 0):
                r.fail('latency_ns' if latency[a][b] <= 0 else 'link_gbps',
                       'values must be > 0 (off the diagonal for links)')
            if (a == b and distances[a][b] != 10) or \
                    (a != b and not 10 <= distances[a][b] <= 254):
                r.fail('distances', 'SLIT distances: 10 on the diagonal, '
                       '10 to 254 elsewhere')
    return model.HostSpec(
        name=r.str('name', 'custom'), nodes=tuple(nodes), latency_ns=latency,
        link_gbps=link,
        distances=tuple(tuple(int(v) for v in row) for row in distances),
        ghz=r.number('ghz', 2.0, True, MAX_GHZ))


def _guests(path, entries, spec) -> list:
    guests = []
    for i, entry in enumerate(entries):
        r = _Reader(path, 'guests[%d]' % i, entry, GUEST_KEYS)
        count = r.bounded('count', 1, 1, MAX_GUESTS)
        if len(guests) + count > MAX_GUESTS:
            r.fail('count', 'more than %d guests in all' % MAX_GUESTS)
        base = r.str('name', 'vm%d' % (i + 1))
        vcpu_nodes = r.int_list('vcpu_node', [0])
        if not vcpu_nodes:
            r.fail('vcpu_node', 'at least one node')
        touch = r.int_list('first_touch', None)
        specs = r.get('extra_specs', (dict,), {}, what='a table')
        for key, value in specs.items():
            if not isinstance(value, str):
                r.fail('extra_specs.%s' % key, 'expected a string, got %s'
                       % _kind(value))
        phases = []
        for j, p in enumerate(r.get('phases', (list,), [],
                                    what='a list of tables')):
            pr = _Reader(path, 'guests[%d].phases[%d]' % (i, j), p,
                         PHASE_KEYS)
            phases.append(Phase(at=pr.bounded('at', _REQUIRED, 1,
                                              MAX_SECONDS),
                                profile=pr.str('profile', _REQUIRED)))
        if len({p.at for p in phases}) < len(phases):
            r.fail('phases', 'two phases at the same second')
        plan = dict(
            profile=r.str('profile', 'ycsb'),
            vcpus=r.bounded('vcpus', 1, 1, MAX_VCPUS),
            memory_mb=int(r.number('memory_gb', 4, True, MAX_MATRIX_VALUE) *
                          GIB),
            vcpu_nodes=tuple(vcpu_nodes),
            first_touch=tuple(touch if touch is not None
                              else vcpu_nodes[:1]),
            first_controller=r.int('first_controller', None, 0),
            extra_specs=tuple(sorted(specs.items())),
            pinned=r.bool('pinned', False),
            leave_at=r.bounded('leave_at', None, 1, MAX_SECONDS),
            phases=tuple(sorted(phases, key=lambda p: p.at)),
            preallocate=r.bool('preallocate', False),
            floating=r.get('vcpu_affinity', (str,), 'node', lambda v: None
                           if v in ('node', 'host')
                           else 'must be "node" or "host"',
                           what='a string') == 'host')
        if plan['first_controller'] is not None and \
                not plan['first_touch']:
            r.fail('first_controller', 'needs a first_touch node')
        for c in range(count):
            guests.append(GuestPlan(
                name=base if count == 1 else '%s-%d' % (base, c + 1),
                **plan))
    return guests


def load(path: str) -> Scenario:
    """Read a scenario file; ValueError naming the file and the key."""
    try:
        with open(path, 'rb') as f:
            data = tomllib.load(f)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ValueError('%s: not valid TOML: %s' % (path, exc))
    except OSError as exc:
        raise ValueError('%s: %s' % (path, exc.strerror or exc))
    r = _Reader(path, '', data, SCENARIO_KEYS)
    host = r.get('host', (str, dict), 'ibm-x3850-4s',
                 what='a preset name or a table')
    if isinstance(host, str):
        try:
            spec = presets.host(host)
        except ValueError as exc:
            r.fail('host', str(exc))
    else:
        spec = _host_from_table(path, host)
    entries = r.get('guests', (list,), _REQUIRED,
                    what='a list of [[guests]] tables')
    scenario = Scenario(
        name=r.str('name', path),
        description=r.str('description', ''), host=spec,
        guests=tuple(_guests(path, entries, spec)),
        seed=r.int('seed', 1),
        duration=r.bounded('duration', 60, 1, MAX_SECONDS),
        arrival_interval=r.bounded('arrival_interval', 5, 1, MAX_SECONDS),
        measure=r.bounded('measure', 30, 1, MAX_SECONDS),
        hosts=r.bounded('hosts', 1, 1, MAX_HOSTS),
        balancing=r.bool('balancing', True),
        counters=r.str('counters', backend.DEFAULT_COUNTERS))
    return scenario.validate(path)
