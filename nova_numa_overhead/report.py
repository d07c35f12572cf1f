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

    {"version": "1.0",
     "host": "compute-1",                  # nova-compute's [DEFAULT] host
     "agent": {"version": "0.1.0", "id": "<uuid of this agent run>"},
     "seq": 42,                            # per agent run, increasing
     "age": 0.8,                           # seconds since measured
     "nodes": [{"total_mb": 65536, "free_mb": 30210, "guests": 3,
                "cpus": 16, "llc": 1, "mc": 2}, ...],
     "inter": [[0, 1], [1, 0]],            # levels, [cpu node][mem node]
     "rml": [[0, 3], [3, 0]],
     "distances": [[10, 21], [21, 10]]}   # SLIT

A newer minor version only adds optional keys, which older readers ignore;
a newer major version is rejected.
"""

import dataclasses
import json
import math

from nova_numa_overhead.overhead import estimator
from nova_numa_overhead.overhead import planner

VERSION = (1, 0)
VERSION_STR = '%d.%d' % VERSION
MAX_NODES = 64
MAX_LEVEL = 64
MAX_GUESTS = 100000
MAX_HOST_LEN = 255
DEFAULT_MAX_BYTES = 65536


class InvalidReport(ValueError):
    """A report that must not be used; the message says why."""


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
        return {
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


def build(host: str, agent_id: str, agent_version: str, seq: int,
          levels: estimator.Levels, total_mb, free_mb, guests, cpus,
          distances, age: float = 0.0) -> Report:
    """Assemble a report from the agent's measurements (and validate it)."""
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
    return from_dict(report.to_dict())


def _int(value, what, lo=0, hi=None):
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidReport('%s must be an integer, got %s'
                            % (what, type(value).__name__))
    if value < lo:
        raise InvalidReport('%s must be >= %d, got %d' % (what, lo, value))
    if hi is not None and value > hi:
        raise InvalidReport('%s must be <= %d, got %d' % (what, hi, value))
    return value


def _str(value, what, max_len=MAX_HOST_LEN):
    if not isinstance(value, str) or not value or len(value) > max_len:
        raise InvalidReport('%s must be a non-empty string of at most %d '
                            'characters' % (what, max_len))
    return value


def _matrix(value, what, n, lo, hi):
    if not isinstance(value, list) or len(value) != n:
        raise InvalidReport('%s must be a %dx%d list of lists' % (what, n, n))
    rows = []
    for i, row in enumerate(value):
        if not isinstance(row, list) or len(row) != n:
            raise InvalidReport('%s must be a %dx%d list of lists'
                                % (what, n, n))
        rows.append(tuple(_int(v, '%s[%d][%d]' % (what, i, j), lo, hi)
                          for j, v in enumerate(row)))
    return tuple(rows)


def parse_version(value) -> tuple:
    if not isinstance(value, str):
        raise InvalidReport('version must be a "MAJOR.MINOR" string')
    try:
        major, minor = (int(p) for p in value.split('.'))
    except ValueError:
        raise InvalidReport('version must be a "MAJOR.MINOR" string, got %r'
                            % value[:20])
    if major != VERSION[0]:
        raise InvalidReport('unsupported report version %s (this scheduler '
                            'reads %d.x)' % (value[:20], VERSION[0]))
    return major, minor


def from_dict(data, max_bytes: int | None = None) -> Report:
    """Validate a report received from the wire.

    :raises InvalidReport: with a message naming the first problem found.
    """
    if not isinstance(data, dict):
        raise InvalidReport('report must be a JSON object')
    if max_bytes is not None:
        try:
            size = len(json.dumps(data, separators=(',', ':')))
        except (TypeError, ValueError) as exc:
            raise InvalidReport('report is not JSON serialisable: %s' % exc)
        if size > max_bytes:
            raise InvalidReport('report is %d bytes, more than the %d '
                                'allowed' % (size, max_bytes))
    parse_version(data.get('version'))
    host = _str(data.get('host'), 'host')
    agent = data.get('agent')
    if not isinstance(agent, dict):
        raise InvalidReport('agent must be an object')
    agent_id = _str(agent.get('id'), 'agent.id', 64)
    agent_version = _str(agent.get('version'), 'agent.version', 64)
    seq = _int(data.get('seq'), 'seq')
    age = data.get('age')
    if isinstance(age, bool) or not isinstance(age, (int, float)) or \
            not math.isfinite(age) or age < 0:
        raise InvalidReport('age must be a finite number >= 0')
    raw_nodes = data.get('nodes')
    if not isinstance(raw_nodes, list) or not 1 <= len(raw_nodes) <= \
            MAX_NODES:
        raise InvalidReport('nodes must be a list of 1 to %d nodes'
                            % MAX_NODES)
    nodes = []
    for i, node in enumerate(raw_nodes):
        if not isinstance(node, dict):
            raise InvalidReport('nodes[%d] must be an object' % i)
        what = 'nodes[%d].' % i
        total = _int(node.get('total_mb'), what + 'total_mb')
        free = _int(node.get('free_mb'), what + 'free_mb', hi=total)
        nodes.append(NodeReport(
            total_mb=total, free_mb=free,
            guests=_int(node.get('guests'), what + 'guests', hi=MAX_GUESTS),
            cpus=_int(node.get('cpus'), what + 'cpus', hi=65536),
            llc=_int(node.get('llc'), what + 'llc', hi=MAX_LEVEL),
            mc=_int(node.get('mc'), what + 'mc', hi=MAX_LEVEL)))
    n = len(nodes)
    return Report(
        host=host, agent_id=agent_id, agent_version=agent_version, seq=seq,
        age=float(age), nodes=tuple(nodes),
        inter=_matrix(data.get('inter'), 'inter', n, 0, MAX_LEVEL),
        rml=_matrix(data.get('rml'), 'rml', n, 0, MAX_LEVEL),
        distances=_matrix(data.get('distances'), 'distances', n, 1, 255))
