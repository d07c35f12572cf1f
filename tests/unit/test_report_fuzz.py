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
"""Property-based fuzzing of the report parser.

Whatever arrives, :func:`report.parse` returns a report within every bound
or raises InvalidReport with a short, printable message; nothing else
escapes. Inputs: any JSON-like value, and valid reports with one part
replaced, removed or pushed past its bound.
"""

import collections
import copy

from hypothesis import given
from hypothesis import strategies as st

from nova_numa_overhead.overhead import estimator
from nova_numa_overhead import report as report_mod
from tests import base

# Inputs tried, rejected, accepted and escaped (an exception other than
# InvalidReport), by this module and the store's state machine; a run under
# "python -m unittest" can print them.
COUNTS = collections.Counter()

BOUNDARY_INTS = [-1, 0, 1, 64, 65, 255, 256, 2 ** 31, 2 ** 32, 2 ** 53,
                 2 ** 63, 2 ** 64, 10 ** 400, -10 ** 400]
BOUNDARY_FLOATS = [float('nan'), float('inf'), -float('inf'), -0.0, 1e308,
                   5e-324, 0.5]
HOSTILE_TEXT = ['', ' ', '\n', '\x00', '\u202e', 'a' * 300, 'x' * 100000,
                '1.0', '1.1', '2.0', 'proportional', 'cmp-7\nForged line']


def json_values(max_leaves=15):
    """Any value the JSON decoder can hand over, and a few it cannot."""
    scalars = (st.none() | st.booleans() | st.integers() |
               st.sampled_from(BOUNDARY_INTS) | st.floats() |
               st.sampled_from(BOUNDARY_FLOATS) | st.text(max_size=20) |
               st.sampled_from(HOSTILE_TEXT))
    return st.recursive(
        scalars,
        lambda children: (st.lists(children, max_size=6) |
                          st.dictionaries(st.text(max_size=10) |
                                          st.sampled_from(list(_KEYS)),
                                          children, max_size=6)),
        max_leaves=max_leaves)


_KEYS = ('version', 'host', 'agent', 'id', 'seq', 'age', 'nodes', 'inter',
         'rml', 'distances', 'planned', 'policy', 'max_nodes', 'mb',
         'overhead') + report_mod.NODE_FIELDS


def _plan(rng) -> dict:
    """The 'planned' part of a report. The parser does not check it
    against the levels, so it is drawn directly: planning is what costs.
    """
    count = rng.randint(0, len(report_mod._BUCKETS))
    return {'policy': rng.choice(['proportional', 'spread', 'local',
                                  'none']),
            'max_nodes': rng.randint(1, report_mod.MAX_NODES),
            'mb': report_mod._BUCKETS[:count],
            'overhead': [rng.randint(0, 256000) / 1000
                         for _ in range(count)]}


@st.composite
def valid_reports(draw, max_nodes=8):
    """Reports an agent may send: 1 to 8 nodes, planned or not. Drawn from
    a seeded generator: hypothesis's own draws cost ~40 us each, and what
    is fuzzed is the mutation (see mutated_reports).
    """
    rng = draw(st.randoms(use_true_random=False))
    n = draw(st.integers(1, max_nodes))

    def levels():
        return [rng.randint(0, report_mod.MAX_LEVEL) for _ in range(n)]

    total = [rng.randint(0, 2 ** 20) for _ in range(n)]
    data = report_mod.build(
        'cmp-%d' % rng.randint(0, 10 ** 6), '%032x' % rng.getrandbits(128),
        '0.1.0', rng.randint(0, report_mod.MAX_SEQ),
        estimator.Levels(llc=levels(), mc=levels(),
                         inter=[levels() for _ in range(n)],
                         rml=[levels() for _ in range(n)]),
        total_mb=total, free_mb=[rng.randint(0, t) for t in total],
        guests=[rng.randint(0, 50) for _ in range(n)],
        cpus=[rng.randint(0, 64) for _ in range(n)],
        distances=estimator.Topology.uniform(n).distances,
        age=rng.uniform(0, report_mod.MAX_AGE)).to_dict()
    if draw(st.booleans()):
        data['planned'] = _plan(rng)
    return data


def _paths(value, prefix=()):
    """Every path into a report (keys and indices), the root included."""
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _paths(child, prefix + (key,))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _paths(child, prefix + (index,))


@st.composite
def mutated_reports(draw):
    """A valid report with one part replaced, removed or added to."""
    data = copy.deepcopy(draw(valid_reports()))
    path = draw(st.sampled_from(sorted(_paths(data), key=repr)))
    if not path:
        return draw(json_values())
    parent = data
    for key in path[:-1]:
        parent = parent[key]
    key = path[-1]
    action = draw(st.sampled_from(['replace', 'remove', 'boundary',
                                   'extend']))
    if action == 'remove':
        del parent[key]
    elif action == 'boundary':
        parent[key] = draw(st.sampled_from(BOUNDARY_INTS + BOUNDARY_FLOATS +
                                           HOSTILE_TEXT + [True, None]))
    elif action == 'extend' and isinstance(parent[key], list):
        parent[key] = parent[key] + draw(st.lists(json_values(5),
                                                  min_size=1, max_size=3))
    else:
        parent[key] = draw(json_values())
    return data


def check_parse(test, data):
    """parse() either keeps every bound or says why not, briefly."""
    COUNTS['tried'] += 1
    try:
        parsed = report_mod.parse(data)
    except report_mod.InvalidReport as exc:
        COUNTS['rejected'] += 1
        message = str(exc)
        test.assertTrue(message.isprintable(), message)
        test.assertLess(len(message), 300)
        return None
    except BaseException:
        COUNTS['escaped'] += 1
        raise
    COUNTS['accepted'] += 1
    report = report_mod.unpack(parsed)
    test.assertTrue(1 <= report.size <= report_mod.MAX_NODES)
    for node in report.nodes:
        test.assertLessEqual(node.free_mb, node.total_mb)
        test.assertLessEqual(node.total_mb, report_mod.MAX_NODE_MB)
    test.assertLessEqual(report.seq, report_mod.MAX_SEQ)
    test.assertLessEqual(report.age, report_mod.MAX_AGE)
    # What was accepted reads back the same.
    again = report_mod.parse(report.to_dict())
    test.assertEqual(parsed, again)
    return parsed


class TestParserFuzz(base.TestCase):

    @base.fuzz(800)
    @given(json_values())
    def test_any_json(self, data):
        check_parse(self, data)
        check_parse(self, {'version': '1.1', 'host': 'h', 'nodes': data})

    @base.fuzz(500)
    @given(mutated_reports())
    def test_mutated_reports(self, data):
        check_parse(self, data)

    @base.fuzz(100)
    @given(valid_reports())
    def test_valid_reports_are_accepted(self, data):
        self.assertIsNotNone(check_parse(self, data))
