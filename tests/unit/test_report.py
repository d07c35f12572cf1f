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

import copy
import json
import os

from nova_numa_overhead.overhead import planner
from nova_numa_overhead import report as report_mod
from tests import base

FIXTURES = os.path.join(os.path.dirname(__file__), 'fixtures')


def stored_report(name='report-1.0.json') -> dict:
    """A report as an older agent sent it, kept as it was on the wire."""
    with open(os.path.join(FIXTURES, name)) as f:
        return json.load(f)


class TestReport(base.TestCase):

    def test_round_trip(self):
        data = base.make_report(nodes=4, llc=[0, 1, 2, 3], mc=2, guests=3)
        report = report_mod.from_dict(data)
        self.assertEqual('host1', report.host)
        self.assertEqual(4, report.size)
        self.assertEqual([0, 1, 2, 3], report.levels().llc)
        self.assertEqual(data, report.to_dict())

    def test_view_uses_figure_4(self):
        report = report_mod.from_dict(base.make_report(llc=[1, 0], mc=[2, 0]))
        view = report.view()
        self.assertEqual(3, view.overhead[0][0])
        # MC(1) + LLC(0) + INTER(0, 1) + RML(0, 1) = 0 + 1 + 0 + 2
        self.assertEqual(3, view.overhead[0][1])
        self.assertEqual((0, 1), view.local_nodes)

    def test_newer_minor_version_is_read(self):
        data = base.make_report()
        data['version'] = '1.7'
        data['something_new'] = {'x': 1}
        self.assertEqual('host1', report_mod.from_dict(data).host)

    def _assert_rejected(self, data, fragment, **kwargs):
        exc = self.assertRaises(report_mod.InvalidReport,
                                report_mod.from_dict, data, **kwargs)
        self.assertIn(fragment, str(exc))

    def test_rejects(self):
        good = base.make_report()
        cases = [
            (lambda d: d.update(version='2.0'), 'unsupported report version'),
            (lambda d: d.update(version='one'), 'MAJOR.MINOR'),
            (lambda d: d.pop('version'), 'MAJOR.MINOR'),
            (lambda d: d.update(host=''), 'host'),
            (lambda d: d.update(host=7), 'host'),
            (lambda d: d.update(seq=-1), 'seq must be >= 0'),
            (lambda d: d.update(seq=True), 'seq must be an integer'),
            (lambda d: d.update(age=-3), 'age'),
            (lambda d: d.update(age=float('nan')), 'age'),
            (lambda d: d.update(agent='x'), 'agent must be an object'),
            (lambda d: d.update(nodes=[]), 'nodes must be a list'),
            (lambda d: d['nodes'][1].update(free_mb=-5),
             'nodes[1].free_mb must be >= 0'),
            (lambda d: d['nodes'][0].update(free_mb=10 ** 9),
             'nodes[0].free_mb must be <='),
            (lambda d: d['nodes'][0].update(llc=999), 'nodes[0].llc'),
            (lambda d: d['nodes'][0].pop('mc'), 'nodes[0].mc'),
            (lambda d: d.update(inter=[[0, 1]]), 'inter must be a 2x2'),
            (lambda d: d['rml'][0].__setitem__(1, 'x'), 'rml[0][1]'),
            (lambda d: d['distances'][0].__setitem__(0, 0),
             'distances[0][0] must be >= 1'),
            (lambda d: d['inter'][1].__setitem__(0, 65),
             'inter[1][0] must be <= 64, got 65'),
            (lambda d: d['inter'].__setitem__(1, 7), 'inter must be a 2x2'),
            (lambda d: d['rml'].__setitem__(1, [0, 1, 2]),
             'rml must be a 2x2'),
            (lambda d: d.update(seq=2 ** 63),
             'seq must be <= 9007199254740991, got a 64-bit integer'),
            (lambda d: d.update(age=1e9), 'age must be a number from 0'),
            (lambda d: d.update(age=True), 'age must be a number'),
            (lambda d: d['nodes'][0].update(total_mb=10 ** 400),
             'nodes[0].total_mb must be <= 1073741824, got a 1329-bit '
             'integer'),
            (lambda d: d['nodes'][0].update(guests=True),
             'nodes[0].guests must be an integer, got bool'),
            (lambda d: d['nodes'].__setitem__(1, [1]),
             'nodes[1] must be an object'),
            (lambda d: d.update(host='cmp 7'), 'host must be 1 to 253'),
            (lambda d: d.update(host='cmp-7\nRejected x'), 'host must be'),
            (lambda d: d.update(host='cmp\x00'), 'host must be'),
            (lambda d: d.update(host='cmp-\u202e7'), 'host must be'),
            (lambda d: d.update(host='h' * 254), 'host must be'),
            (lambda d: d['agent'].update(id='a b'),
             'agent.id must be 1 to 64'),
            (lambda d: d['agent'].update(version='x' * 65), 'agent.version'),
            (lambda d: d.update(version='1.0' + '0' * 10 ** 6), 'MAJOR.MINOR'),
            (lambda d: d.update(planned=[]), 'planned must be an object'),
        ]
        for mutate, fragment in cases:
            data = copy.deepcopy(good)
            mutate(data)
            self._assert_rejected(data, fragment)

    def test_rejects_non_object(self):
        self._assert_rejected(['x'], 'JSON object')

    def test_rejects_too_many_nodes(self):
        data = base.make_report()
        data['nodes'] = data['nodes'] * 40
        self._assert_rejected(data, 'nodes must be a list of 1 to 64')

    def test_host_names_nova_accepts(self):
        for host in ('cmp-7', 'compute_01.cell1.example.org', '10.0.0.7',
                     'fd00::17', 'h' * 253):
            data = base.make_report(host=host)
            self.assertEqual(host, report_mod.parse(data).host)

    def test_messages_are_bounded_and_printable(self):
        data = base.make_report()
        data['version'] = '\n\x00\u202e' + 'x' * 10 ** 6
        exc = self.assertRaises(report_mod.InvalidReport,
                                report_mod.parse, data)
        self.assertLess(len(str(exc)), 200)
        self.assertTrue(str(exc).isprintable())

    def test_booleans_in_matrices_count_as_integers(self):
        data = base.make_report()
        data['inter'] = [[False, True], [0, 0]]
        self.assertEqual(((0, 1), (0, 0)), report_mod.from_dict(data).inter)


class TestPlanned(base.TestCase):
    """Report format 1.1: the agent's plan of the default policy."""

    def test_build_plans_every_bucket_as_the_planner(self):
        data = base.make_report(nodes=4, llc=[0, 2, 1, 3], mc=[1, 0, 2, 0],
                                guests=[2, 0, 1, 3], total_mb=65536,
                                free_mb=[30000, 60000, 1000, 8000],
                                policy='proportional')
        self.assertEqual('1.1', data['version'])
        planned = data['planned']
        self.assertEqual('proportional', planned['policy'])
        self.assertEqual(4, planned['max_nodes'])
        self.assertEqual(list(planner.BUCKETS[:len(planned['mb'])]),
                         planned['mb'])
        # Up to the first bucket the free memory cannot hold (99,000 MiB).
        self.assertEqual(98304, planned['mb'][-1])
        view = report_mod.from_dict(data).view()
        self.assertEqual(
            [planner.plan(view, mb, 'proportional', 4).overhead
             for mb in planned['mb']], planned['overhead'])

    def test_round_trip(self):
        data = base.make_report(nodes=4, llc=[0, 2, 1, 3], guests=2,
                                policy='spread', max_nodes=2)
        report = report_mod.from_dict(data)
        self.assertEqual('spread', report.planned.policy)
        self.assertEqual(2, report.planned.max_nodes)
        self.assertEqual(data, report.to_dict())
        parsed = report_mod.parse(data)
        self.assertEqual([round(v * 1000) for v in
                          data['planned']['overhead']],
                         list(parsed.planned.overhead))

    def test_stored_1_0_report_is_read_without_a_plan(self):
        data = stored_report()
        self.assertEqual('1.0', data['version'])
        report = report_mod.from_dict(data)
        self.assertEqual('cmp-legacy-7', report.host)
        self.assertIsNone(report.planned)
        self.assertEqual(4, report.size)

    def test_other_buckets_or_policies_are_ignored(self):
        # A newer agent's plan this scheduler cannot use: planned here.
        # Whatever its values: the versioning rule promises it is
        # ignored, not that the whole report is refused.
        for change in ({'mb': [300]}, {'policy': 'clever'},
                       {'mb': list(range(31)), 'overhead': [0.0] * 31},
                       {'policy': 'p' * 65},
                       {'policy': 'clever', 'overhead': [300.0]},
                       {'policy': 'clever', 'max_nodes': 999}):
            data = base.make_report(policy='proportional')
            data['planned'].update(change)
            data['planned']['overhead'] = data['planned']['overhead'][
                :len(data['planned']['mb'])]
            self.assertIsNone(report_mod.parse(data).planned)

    def test_rejects(self):
        cases = [
            ({'max_nodes': 0}, 'planned.max_nodes must be >= 1'),
            ({'policy': 7}, 'planned.policy'),
            ({'mb': 'x'}, 'planned.mb must be a list'),
            ({'policy': ''}, 'planned.policy'),
            ({'overhead': [0.0, 0.0]},
             'planned.overhead must be a list as long'),
            ({'overhead': 'x'}, 'planned.overhead must be a list'),
        ]
        bad_values = [float('nan'), float('inf'), -1.0, 257, '1', None, True,
                      10 ** 400]
        for value in bad_values:
            cases.append(({'overhead': [value]}, 'planned.overhead[0] must '
                                                 'be a number from 0 to 256'))
        for change, fragment in cases:
            data = base.make_report(nodes=1, total_mb=256, free_mb=256,
                                    policy='proportional')
            data['planned'].update(change)
            exc = self.assertRaises(report_mod.InvalidReport,
                                    report_mod.parse, data)
            self.assertIn(fragment, str(exc))
