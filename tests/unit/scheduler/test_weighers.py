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

import math
from unittest import mock

import fixtures
from nova import objects
from nova.scheduler import weights as nova_weights
from nova.scheduler.weights import ram

from nova_numa_overhead.scheduler import store as store_mod
from nova_numa_overhead.scheduler import weighers
from tests.unit.scheduler import fakes
from tests.unit.scheduler import test_filters


class TestNUMAOverheadWeigher(fakes.NovaTestCase):

    def setUp(self):
        super().setUp()
        fakes.make_store(self, test_filters.levels_report('low', 1),
                         test_filters.levels_report('mid', 4),
                         test_filters.levels_report('high', 8))
        self.weigher = weighers.NUMAOverheadWeigher()
        # On (0 by default: see test_off_by_default).
        self.flags(weight_multiplier=1.0)

    def weigh(self, hosts, spec_obj=None):
        handler = nova_weights.HostWeightHandler()
        weighed = handler.get_weighed_objects(
            [self.weigher], hosts, spec_obj or fakes.spec())
        return [(w.obj.host, round(w.weight, 3)) for w in weighed]

    def test_raw_weights(self):
        hosts = [fakes.host_state(h) for h in ('mid', 'low', 'x')]
        raw = self.weigher.weigh_objects(
            [nova_weights.WeighedHost(h, 0.0) for h in hosts], fakes.spec())
        # 1 / (1 + planned overhead); unknown hosts get weight_of_unknown.
        self.assertEqual(1 / (1 + 1.0), raw[1])
        self.assertLess(raw[0], raw[1])
        self.assertEqual(0.0, raw[2])

    def test_off_by_default(self):
        # Loaded, it weighs every host 0 until the multiplier is set; an
        # aggregate may still turn it on for its hosts.
        self.conf.clear_override('weight_multiplier', group='numa_overhead')
        self.assertEqual(0.0, self.conf.numa_overhead.weight_multiplier)
        hosts = [fakes.host_state(h) for h in ('high', 'mid', 'low')]
        self.assertEqual({0.0}, {w for _, w in self.weigh(hosts)})
        # Off everywhere: no look-up in the store.
        with mock.patch.object(store_mod, 'get_store',
                               autospec=True) as get_store:
            self.weigh(hosts)
        get_store.assert_not_called()
        hosts = [fakes.host_state('high'), fakes.host_state('low', aggregates=[
            {'numa_overhead_weight_multiplier': '1.0'}])]
        self.assertEqual([('low', 0.5), ('high', 0.0)], self.weigh(hosts))

    def test_lower_overhead_weighs_more(self):
        hosts = [fakes.host_state(h) for h in ('high', 'mid', 'low')]
        self.assertEqual(['low', 'mid', 'high'],
                         [h for h, _ in self.weigh(hosts)])

    def test_unknown_weight_is_configurable(self):
        hosts = [fakes.host_state(h) for h in ('high', 'unknown', 'low')]
        self.assertEqual('unknown', self.weigh(hosts)[-1][0])
        self.flags(weight_of_unknown=1.0)
        self.assertEqual('unknown', self.weigh(hosts)[0][0])

    def test_multiplier_and_aggregate_override(self):
        self.flags(weight_multiplier=2.0)
        hosts = [fakes.host_state('low'), fakes.host_state('high')]
        # Raw weights 1 / (1 + 1) and 1 / (1 + 8), times the multiplier.
        self.assertEqual([('low', 1.0), ('high', 0.222)], self.weigh(hosts))
        hosts = [fakes.host_state('low', aggregates=[
            {'numa_overhead_weight_multiplier': '-1.0'}]),
            fakes.host_state('high')]
        self.assertEqual([('high', 0.222), ('low', -0.5)],
                         self.weigh(hosts))

    def test_weights_are_not_stretched_over_the_hosts(self):
        # Nova stretches a weigher's weights over the hosts' range unless
        # the weigher anchors them: two hosts a fraction of a level apart
        # would then differ by the whole multiplier.
        self.assertEqual((0.0, 1.0), (self.weigher.minval,
                                      self.weigher.maxval))
        hosts = [fakes.host_state(h) for h in ('low', 'mid')]
        self.assertEqual([('low', 0.5), ('mid', 0.2)], self.weigh(hosts))

    def test_nova_spreading_decides_between_close_hosts(self):
        # 'low' (level 1) and 'mid' (level 4): raw weights 0.5 and 0.2,
        # 0.3 apart; the RAM weigher (anchored at 0 by Nova) puts 'mid'
        # 0.875 ahead. Stretched, ours would put 'low' a whole 1.0 ahead
        # and overrule it.
        hosts = [fakes.host_state('low', free_ram_mb=4096),
                 fakes.host_state('mid', free_ram_mb=32768)]
        handler = nova_weights.HostWeightHandler()
        weighed = handler.get_weighed_objects(
            [self.weigher, ram.RAMWeigher()], hosts, fakes.spec())
        self.assertEqual(['mid', 'low'], [w.obj.host for w in weighed])

    def test_planned_overheads_out_of_range_weigh_as_unknown(self):
        hosts = [fakes.host_state(h) for h in ('a', 'b', 'c', 'd')]
        query = mock.Mock()
        query.overheads.return_value = [float('nan'), -0.5, math.inf, 1.0]
        store = mock.Mock()
        store.query.return_value = query
        self.patch(store_mod, 'get_store', lambda conf: store)
        self.flags(weight_of_unknown=0.1)
        raw = self.weigher.weigh_objects(
            [nova_weights.WeighedHost(h, 0.0) for h in hosts], fakes.spec())
        self.assertEqual([0.1, 0.1, 0.1, 0.5], raw)

    def test_bad_hint_is_ignored_with_an_error(self):
        test_filters.fresh_flavor_throttle(self)
        hosts = [fakes.host_state(h) for h in ('high', 'low')]
        spec_obj = fakes.spec(hints={'numa_overhead_max_level': 'x'})
        for _ in range(store_mod.LOG_BURST + 5):
            self.assertEqual([('low', 0.5), ('high', 0.111)],
                             self.weigh(hosts, spec_obj))
        # Throttled, as every request with the hint repeats it.
        self.assertEqual(store_mod.LOG_BURST, self.logger.output.count(
            "Ignoring a bad scheduler hint of instance "
            "4a1b9d5e-0000-4000-8000-000000000001: hint "
            "numa_overhead_max_level: 'x' is not an integer"))

    def test_memory_nova_places_itself_is_not_weighed(self):
        hosts = [fakes.host_state(h) for h in ('high', 'low')]
        spec_obj = fakes.spec()
        spec_obj.numa_topology = objects.InstanceNUMATopology(cells=[])
        self.assertEqual([0.0, 0.0],
                         [w for _, w in self.weigh(hosts, spec_obj)])

    def test_bad_flavor_spec_weighs_as_the_defaults(self):
        test_filters.fresh_flavor_throttle(self)
        hosts = [fakes.host_state(h) for h in ('high', 'low')]
        spec_obj = fakes.spec(extra_specs={'numa_overhead:policy': 'x'})
        self.assertEqual([('low', 0.5), ('high', 0.111)],
                         self.weigh(hosts, spec_obj))

    def test_bad_option_gives_equal_weights_with_one_error(self):
        hosts = [fakes.host_state(h) for h in ('high', 'low')]
        for option, value in (('weight_of_unknown', '1.5'),
                              ('default_policy', 'Local'),
                              ('weight_multiplier', 'lots')):
            if option == 'weight_multiplier':
                self.conf.clear_override('weight_multiplier',
                                         group='numa_overhead')
            test_filters.load_bad_options(self, **{option: value})
            errors = self.useFixture(fixtures.FakeLogger(
                name=weighers.__name__, level='ERROR'))
            self.weigher = weighers.NUMAOverheadWeigher()
            for _ in range(3):
                self.assertEqual([0.0, 0.0],
                                 [w for _, w in self.weigh(hosts)])
            self.assertEqual(1, errors.output.count(
                'NUMAOverheadWeigher gives every host the same weight (bad '
                '[numa_overhead] option: Value for option %s' % option))
            self.assertNotIn('Traceback', errors.output)

    def test_weight_of_unknown_is_not_read_when_off(self):
        # Off (multiplier 0), it reads nothing it does not use.
        self.conf.clear_override('weight_multiplier', group='numa_overhead')
        test_filters.load_bad_options(self, weight_of_unknown='1.5')
        errors = self.useFixture(fixtures.FakeLogger(name=weighers.__name__,
                                                     level='ERROR'))
        hosts = [fakes.host_state(h) for h in ('high', 'low')]
        self.assertEqual([0.0, 0.0], [w for _, w in self.weigh(hosts)])
        self.assertEqual('', errors.output)

    def test_an_error_of_the_plugin_gives_equal_weights(self):
        errors = self.useFixture(fixtures.FakeLogger(name=weighers.__name__,
                                                     level='ERROR'))
        hosts = [fakes.host_state(h) for h in ('high', 'low')]
        with mock.patch.object(weighers.request, 'from_spec', autospec=True,
                               side_effect=RuntimeError('boom')):
            self.assertEqual([0.0, 0.0], [w for _, w in self.weigh(hosts)])
        self.assertIn('NUMAOverheadWeigher gives every host the same weight '
                      '(RuntimeError: boom)', errors.output)
        self.assertIn('Traceback', errors.output)

    def test_weigh_single_object(self):
        self.assertEqual(0.5, self.weigher._weigh_object(
            fakes.host_state('low'), fakes.spec()))
