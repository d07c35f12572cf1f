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

from nova_numa_overhead import report as report_mod
from tests import base


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
        ]
        for mutate, fragment in cases:
            data = copy.deepcopy(good)
            mutate(data)
            self._assert_rejected(data, fragment)

    def test_rejects_non_object(self):
        self._assert_rejected(['x'], 'JSON object')

    def test_rejects_oversized(self):
        data = base.make_report()
        data['padding'] = 'x' * 5000
        self._assert_rejected(data, 'more than the 4096 allowed',
                              max_bytes=4096)
        self.assertEqual('host1', report_mod.from_dict(
            base.make_report(), max_bytes=4096).host)

    def test_rejects_too_many_nodes(self):
        data = base.make_report()
        data['nodes'] = data['nodes'] * 40
        self._assert_rejected(data, 'nodes must be a list of 1 to 64')
