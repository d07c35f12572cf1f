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
"""The host report: what an agent tells the schedulers about its host.

Wire format (documented in doc/source/reference/report-format.rst), a JSON
object carried as the ``report`` argument of an oslo.messaging cast::

    {"version": "1.1",
     "host": "compute-1",                  # nova-compute's [DEFAULT] host
     "agent": {"version": "0.1.0", "id": "<uuid of this agent run>"},
     "seq": 42,                            # per agent run, increasing
     "age": 0.8,                           # seconds since measured
     "nodes": [{"total_mb": 65536, "free_mb": 30210, "guests": 3,
                "cpus": 16, "llc": 1, "mc": 2}, ...],
                                           # free_mb: room, free memory
                                           # minus what guests have yet
                                           # to touch (overhead.room)
     "inter": [[0, 1], [1, 0]],            # levels, [cpu node][mem node]
     "rml": [[0, 3], [3, 0]],
     "distances": [[10, 21], [21, 10]],    # SLIT
     "planned": {"policy": "proportional", "max_nodes": 4,   # since 1.1
                 "mb": [256, 384, 512, ...], "overhead": [0.0, 0.0, ...]}}

A newer minor version only adds optional keys, which older readers ignore;
a newer major version is rejected.

:func:`parse` is the one validator. It looks at nothing but the keys it
knows, checks every length before walking a list and bounds every number,
so whatever arrives costs at most what a 64-node report costs; it returns
the report in the compact form the schedulers keep (:class:`Parsed`).
"""

import array
import collections
import dataclasses
import functools
import itertools
import math
import operator
import re
import struct

from nova_numa_overhead.overhead import estimator
from nova_numa_overhead.overhead import planner

VERSION = (1, 1)
VERSION_STR = '%d.%d' % VERSION
MAX_NODES = 64
MAX_LEVEL = 64
# overhead[L][i] adds at most four levels (Figure 4).
MAX_OVERHEAD = 4 * MAX_LEVEL
MAX_GUESTS = 100000
MAX_CPUS = 65536
MAX_NODE_MB = 2 ** 30  # 1 PiB per node
MAX_SEQ = 2 ** 53 - 1  # exact in every JSON implementation
MAX_AGE = 86400
# Nova's [DEFAULT] host is a host name, FQDN or IP address (oslo.config's
# HostDomainOpt): at most 253 of these characters.
MAX_HOST_LEN = 253
MAX_TOKEN_LEN = 64
NODE_FIELDS = ('total_mb', 'free_mb', 'guests', 'cpus', 'llc', 'mc')

_HOST_RE = re.compile(r'[A-Za-z0-9_.:-]+')
# agent.id and agent.version: printable ASCII, no spaces.
_TOKEN_RE = re.compile(r'[!-~]+')
_VERSION_RE = re.compile(r'([0-9]{1,4})\.([0-9]{1,4})')
_INT = frozenset((int,))
_INT_BOOL = frozenset((int, bool))
_LIST = frozenset((list,))
_DICT = frozenset((dict,))
_NODE_FIELDS_OF = operator.itemgetter(*NODE_FIELDS)
_NODE_LO = (0, 0, 0, 0, 0, 0)
_NODE_HI = (MAX_NODE_MB, MAX_NODE_MB, MAX_GUESTS, MAX_CPUS, MAX_LEVEL,
            MAX_LEVEL)
_NUMBER = frozenset((int, float))
_BUCKETS = list(planner.BUCKETS)


class InvalidReport(ValueError):
    """A report that must not be used; the message says why."""


Planned = collections.namedtuple('Planned', 'policy max_nodes overhead')
Planned.__doc__ = """The agent's plan of the default policy: planned overhead
per request-size bucket (``planner.BUCKETS[k]`` for entry ``k``).
"""

Parsed = collections.namedtuple(
    'Parsed',
    'host agent_id agent_version seq age size topology blob planned')
Parsed.__doc__ = """A validated report in compact form.

For ``size`` nodes, ``topology`` packs what a host's hardware fixes:
total_mb and cpus per node (little-endian uint32), then the rml and
distances matrices row by row (one byte each); hosts of one model share
it. ``blob`` packs the rest: free_mb and guests per node (uint32), llc and
mc per node and the inter matrix (bytes). See :func:`unpack`. ``planned``
is a :class:`Planned` whose overhead is an ``array('I')`` of thousandths
of a level, or None.
"""


@dataclasses.dataclass(frozen=True)
class NodeReport:
    total_mb: int
    free_mb: int
    guests: int
    cpus: int
    llc: int
    mc: int


@dataclasses.dataclass(frozen=True)
class Report:
    host: str
    agent_id: str
    agent_version: str
    seq: int
    age: float
    nodes: tuple
    inter: tuple
    rml: tuple
    distances: tuple
    # The agent's plan of the default policy (overhead as floats), or None.
    planned: Planned | None = None

    @property
    def size(self) -> int:
        return len(self.nodes)

    def levels(self) -> estimator.Levels:
        return estimator.Levels(
            llc=[n.llc for n in self.nodes], mc=[n.mc for n in self.nodes],
            inter=[list(r) for r in self.inter],
            rml=[list(r) for r in self.rml])

    def view(self, extra=None, free_mb=None, guests=None) -> planner.HostView:
        """The planner's view of this host, optionally corrected."""
        nodes = self.nodes
        return planner.HostView(
            free_mb=list(free_mb if free_mb is not None
                         else [n.free_mb for n in nodes]),
            total_mb=[n.total_mb for n in nodes],
            guests=list(guests if guests is not None
                        else [n.guests for n in nodes]),
            overhead=self.levels().overhead_matrix(extra),
            distances=[list(r) for r in self.distances],
            local_nodes=tuple(i for i, n in enumerate(nodes) if n.cpus > 0))

    def to_dict(self) -> dict:
        data = {
            'version': VERSION_STR,
            'host': self.host,
            'agent': {'version': self.agent_version, 'id': self.agent_id},
            'seq': self.seq,
            'age': self.age,
            'nodes': [dataclasses.asdict(n) for n in self.nodes],
            'inter': [list(r) for r in self.inter],
            'rml': [list(r) for r in self.rml],
            'distances': [list(r) for r in self.distances],
        }
        if self.planned is not None:
            overhead = list(self.planned.overhead)
            data['planned'] = {
                'policy': self.planned.policy,
                'max_nodes': self.planned.max_nodes,
                'mb': _BUCKETS[:len(overhead)],
                'overhead': overhead}
        return data


def build(host: str, agent_id: str, agent_version: str, seq: int,
          levels: estimator.Levels, total_mb, free_mb, guests, cpus,
          distances, age: float = 0.0, policy: str | None = None,
          max_nodes: int = planner.DEFAULT_MAX_NODES) -> Report:
    """Assemble a report from the agent's measurements (and validate it).

    With ``policy``, the report carries the plan of that policy and
    ``max_nodes`` for every request-size bucket, made over the report's own
    view: exactly what a scheduler would plan from the report.
    """
    nodes = tuple(
        NodeReport(total_mb=int(t), free_mb=int(f), guests=int(g),
                   cpus=int(c), llc=int(ll), mc=int(m))
        for t, f, g, c, ll, m in zip(total_mb, free_mb, guests, cpus,
                                     levels.llc, levels.mc))
    report = Report(host=host, agent_id=agent_id,
                    agent_version=agent_version, seq=int(seq),
                    age=float(age), nodes=nodes,
                    inter=tuple(tuple(r) for r in levels.inter),
                    rml=tuple(tuple(r) for r in levels.rml),
                    distances=tuple(tuple(r) for r in distances))
    if policy is not None:
        report = dataclasses.replace(report, planned=Planned(
            policy, max_nodes, tuple(planner.plan_buckets(
                report.view(), policy, max_nodes))))
    return from_dict(report.to_dict())


def _show(value) -> str:
    """A number for a message, bounded whatever its size."""
    if type(value) is int and -10 ** 15 < value < 10 ** 15:
        return str(value)
    if type(value) is int:
        return 'a %d-bit integer' % value.bit_length()
    return type(value).__name__


def _int(value, what, lo=0, hi=None, kinds=_INT):
    if type(value) not in kinds:
        raise InvalidReport('%s must be an integer, got %s'
                            % (what, type(value).__name__))
    if value < lo:
        raise InvalidReport('%s must be >= %d, got %s'
                            % (what, lo, _show(value)))
    if hi is not None and value > hi:
        raise InvalidReport('%s must be <= %d, got %s'
                            % (what, hi, _show(value)))
    return value


@functools.lru_cache(maxsize=None)
def _outside(lo: int, hi: int):
    """Finds a byte outside [lo, hi] (in C)."""
    return re.compile(b'[^\\x%02x-\\x%02x]' % (lo, hi))


def _matrix(value, what, n, lo, hi) -> bytes:
    """An n x n matrix of integers in [lo, hi] (<= 255), row by row as
    bytes. The checks run in C (a 64 x 64 matrix costs tens of
    microseconds); JSON true and false count as 1 and 0, as in Python.
    """
    if type(value) is not list or len(value) != n or \
            not _LIST.issuperset(map(type, value)) or \
            set(map(len, value)) != {n}:
        raise InvalidReport('%s must be a %dx%d list of lists' % (what, n, n))
    rows = []
    try:
        for row in value:
            rows.append(bytes(row))
    except (TypeError, ValueError):
        i = len(rows)
        for j, v in enumerate(value[i]):
            _int(v, '%s[%d][%d]' % (what, i, j), lo, hi, _INT_BOOL)
        raise InvalidReport('%s[%d] must be integers' % (what, i))
    packed = b''.join(rows)
    bad = _outside(lo, hi).search(packed)
    if bad is not None:
        i, j = divmod(bad.start(), n)
        _int(value[i][j], '%s[%d][%d]' % (what, i, j), lo, hi, _INT_BOOL)
    return packed


def _token(value, what, pattern=_TOKEN_RE, max_len=MAX_TOKEN_LEN,
           kind='printable ASCII without spaces') -> str:
    if type(value) is not str or not 0 < len(value) <= max_len or \
            not pattern.fullmatch(value):
        raise InvalidReport('%s must be 1 to %d characters of %s'
                            % (what, max_len, kind))
    return value


def parse_version(value) -> tuple:
    match = _VERSION_RE.fullmatch(value) if type(value) is str and \
        len(value) <= 9 else None
    if match is None:
        raise InvalidReport('version must be a "MAJOR.MINOR" string')
    major, minor = int(match.group(1)), int(match.group(2))
    if major != VERSION[0]:
        raise InvalidReport('unsupported report version %s (this scheduler '
                            'reads %d.x)' % (value, VERSION[0]))
    return major, minor


@functools.lru_cache(maxsize=MAX_NODES)
def _numbers(n: int) -> struct.Struct:
    # Two numbers of n nodes (total_mb and cpus, or free_mb and guests).
    return struct.Struct('<%dI' % (2 * n))


def _planned(value) -> 'Planned | None':
    """The report's plan, or None when absent or not for this scheduler's
    buckets and policies (a newer agent's: planned here instead).
    """
    if value is None:
        return None
    if type(value) is not dict:
        raise InvalidReport('planned must be an object')
    policy = value.get('policy')
    if type(policy) is not str or not policy:
        raise InvalidReport('planned.policy must be a policy name')
    mb, overhead = value.get('mb'), value.get('overhead')
    if type(mb) is not list:
        raise InvalidReport('planned.mb must be a list of request sizes')
    if policy not in planner.POLICIES or len(mb) > len(_BUCKETS) or \
            mb != _BUCKETS[:len(mb)]:
        # A newer agent's plan (other buckets, another policy): ignored,
        # whatever its values, as the versioning rule says.
        return None
    max_nodes = _int(value.get('max_nodes'), 'planned.max_nodes', 1,
                     MAX_NODES)
    if type(overhead) is not list or len(overhead) != len(mb):
        raise InvalidReport('planned.overhead must be a list as long as '
                            'planned.mb')
    # min and max may miss a NaN; their sum never does.
    if overhead and not (_NUMBER.issuperset(map(type, overhead)) and
                         min(overhead) >= 0 and
                         max(overhead) <= MAX_OVERHEAD and
                         math.isfinite(sum(overhead))):
        for k, v in enumerate(overhead):
            if type(v) not in _NUMBER or not 0 <= v <= MAX_OVERHEAD:
                raise InvalidReport('planned.overhead[%d] must be a number '
                                    'from 0 to %d' % (k, MAX_OVERHEAD))
    # Thousandths of a level: the planner rounds to three decimals, so
    # m / 1000 gives the agent's number back exactly.
    return Planned(policy, max_nodes, array.array('I', map(
        round, map(operator.mul, overhead, itertools.repeat(1000)))))


def _nodes(raw) -> tuple:
    """The six columns of the nodes (NODE_FIELDS), checked."""
    if not _DICT.issuperset(map(type, raw)):
        for i, node in enumerate(raw):
            if type(node) is not dict:
                raise InvalidReport('nodes[%d] must be an object' % i)
    try:
        rows = list(map(_NODE_FIELDS_OF, raw))
    except KeyError:
        rows = None
    if rows is None or \
            not _INT.issuperset(map(type, itertools.chain(*rows))):
        # Find the first culprit, column by column.
        for field in NODE_FIELDS:
            for i, node in enumerate(raw):
                _int(node.get(field), 'nodes[%d].%s' % (i, field))
    columns = tuple(zip(*rows))
    for field, values, lo, hi in zip(NODE_FIELDS, columns, _NODE_LO,
                                     _NODE_HI):
        if min(values) < lo or max(values) > hi:
            for i, value in enumerate(values):
                _int(value, 'nodes[%d].%s' % (i, field), lo, hi)
    total, free = columns[:2]
    if any(map(operator.gt, free, total)):
        for i, (f, t) in enumerate(zip(free, total)):
            if f > t:
                raise InvalidReport('nodes[%d].free_mb must be <= %d '
                                    '(total_mb), got %d' % (i, t, f))
    return columns


def parse(data) -> Parsed:
    """Validate a report received from the wire, cheaply.

    Every check bounds the work that follows it: nothing is walked before
    its length is known to be acceptable, keys this version does not know
    are never looked at, and no value is formatted into a message unbounded.

    :raises InvalidReport: with a message naming the first problem found.
    """
    if not isinstance(data, dict):
        raise InvalidReport('report must be a JSON object')
    parse_version(data.get('version'))
    host = _token(data.get('host'), 'host', _HOST_RE, MAX_HOST_LEN,
                  'a host name or address as Nova accepts it (letters, '
                  'digits, "-", "_", ".", ":")')
    agent = data.get('agent')
    if type(agent) is not dict:
        raise InvalidReport('agent must be an object')
    agent_id = _token(agent.get('id'), 'agent.id')
    agent_version = _token(agent.get('version'), 'agent.version')
    seq = _int(data.get('seq'), 'seq', 0, MAX_SEQ)
    age = data.get('age')
    if type(age) not in _NUMBER or not 0 <= age <= MAX_AGE:
        raise InvalidReport('age must be a number from 0 to %d' % MAX_AGE)
    raw = data.get('nodes')
    if type(raw) is not list or not 1 <= len(raw) <= MAX_NODES:
        raise InvalidReport('nodes must be a list of 1 to %d nodes'
                            % MAX_NODES)
    n = len(raw)
    total, free, guests, cpus, llc, mc = _nodes(raw)
    numbers = _numbers(n)
    topology = b''.join((
        numbers.pack(*total, *cpus),
        _matrix(data.get('rml'), 'rml', n, 0, MAX_LEVEL),
        _matrix(data.get('distances'), 'distances', n, 1, 255)))
    blob = b''.join((
        numbers.pack(*free, *guests), bytes(llc), bytes(mc),
        _matrix(data.get('inter'), 'inter', n, 0, MAX_LEVEL)))
    return Parsed(host, agent_id, agent_version, seq, float(age), n,
                  topology, blob, _planned(data.get('planned')))


def unpack(parsed: Parsed) -> Report:
    """The full report from its compact form."""
    n = parsed.size
    numbers = _numbers(n)
    topology, blob = parsed.topology, parsed.blob
    total, cpus = _split(numbers.unpack_from(topology), n)
    free, guests = _split(numbers.unpack_from(blob), n)
    llc, mc = _split(blob[8 * n:10 * n], n)
    nodes = tuple(NodeReport(*fields) for fields in zip(
        total, free, guests, cpus, llc, mc))
    planned = parsed.planned
    if planned is not None:
        planned = Planned(planned.policy, planned.max_nodes,
                          tuple(m / 1000 for m in planned.overhead))
    return Report(host=parsed.host, agent_id=parsed.agent_id,
                  agent_version=parsed.agent_version, seq=parsed.seq,
                  age=parsed.age, nodes=nodes,
                  inter=_split(blob[10 * n:], n),
                  rml=_split(topology[8 * n:8 * n + n * n], n),
                  distances=_split(topology[8 * n + n * n:], n),
                  planned=planned)


def _split(values, n) -> tuple:
    """Rows of n (as tuples of ints)."""
    return tuple(tuple(values[i:i + n]) for i in range(0, len(values), n))


def from_dict(data) -> Report:
    """Validate a report received from the wire (see :func:`parse`).

    :raises InvalidReport: with a message naming the first problem found.
    """
    return unpack(parse(data))
