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

from unittest import mock

import fixtures
from nova import objects
from oslo_config import fixture as config_fixture

from nova_numa_overhead.scheduler import filters
from nova_numa_overhead.scheduler import request
from nova_numa_overhead.scheduler import store
from tests import base
from tests.unit.scheduler import fakes


def load_bad_options(test, **values):
    """Values as nova.conf would give them: oslo.config checks a value
    only when it is read.
    """
    test.conf([], default_config_files=[])
    test.useFixture(config_fixture.Config(test.conf)).load_raw_values(
        group='numa_overhead', **values)


def fresh_flavor_throttle(test):
    """request's throttle of bad flavor lines, as at start-up (other tests'
    lines would count against it).
    """
    for name in ('_BAD_FLAVORS', '_BAD_HINTS'):
        test.patch(request, name, store._Throttle(
            getattr(request, name).summary, logger=request.LOG))


def levels_report(host, level, guests=1):
    # One node: the planned overhead is its LLC + MC levels.
    return base.make_report(host=host, nodes=1, llc=level // 2,
                            mc=level - level // 2, guests=guests)


class TestNUMAOverheadFilter(fakes.NovaTestCase):

    def setUp(self):
        super().setUp()
        self.filt = filters.NUMAOverheadFilter()
        fakes.make_store(self, levels_report('low', 1),
                         levels_report('mid', 4), levels_report('high', 8))
        self.hosts = [fakes.host_state(h) for h in
                      ('low', 'mid', 'high', 'unknown')]

    def passing(self, spec_obj, hosts=None):
        return [h.host for h in self.filt.filter_all(hosts or self.hosts,
                                                     spec_obj)]

    def test_no_limit_passes_everything(self):
        self.assertEqual(['low', 'mid', 'high', 'unknown'],
                         self.passing(fakes.spec()))

    def test_flavor_limit(self):
        spec_obj = fakes.spec(extra_specs={'numa_overhead:max_level': '4'})
        self.assertEqual(['low', 'mid', 'unknown'], self.passing(spec_obj))
        self.assertIn('high fails NUMAOverheadFilter: planned overhead',
                      self.logger.output)

    def test_hint_tightens_flavor(self):
        spec_obj = fakes.spec(extra_specs={'numa_overhead:max_level': '4'},
                              hints={'numa_overhead_max_level': '1'})
        self.assertEqual(['low', 'unknown'], self.passing(spec_obj))

    def test_config_and_aggregate_are_upper_bounds(self):
        self.flags(max_level=4)
        spec_obj = fakes.spec(hints={'numa_overhead_max_level': '10'})
        self.assertEqual(['low', 'mid', 'unknown'], self.passing(spec_obj))
        hosts = [fakes.host_state('mid', aggregates=[
            {'numa_overhead_max_level': '2'}, {'other': 'x'}])]
        self.assertEqual([], self.passing(spec_obj, hosts))

    def test_bad_aggregate_value_is_ignored_and_logged(self):
        hosts = [fakes.host_state('high', aggregates=[
            {'numa_overhead_max_level': 'low'}])]
        self.assertEqual(['high'], self.passing(fakes.spec(), hosts))
        self.assertIn("Ignoring aggregate metadata numa_overhead_max_level: "
                      "'low' is not an integer on host high",
                      self.logger.output)

    def test_unknown_hosts_follow_config(self):
        spec_obj = fakes.spec(extra_specs={'numa_overhead:max_level': '8'})
        self.assertIn('unknown', self.passing(spec_obj))
        self.flags(unknown_host='fail')
        self.assertEqual(['low', 'mid', 'high'], self.passing(spec_obj))

    def test_host_that_cannot_hold_the_request_is_unknown(self):
        # Memory fit is Nova's to judge (RAM overcommit, guests placed
        # since the report): such a host follows unknown_host, as one
        # without a report does.
        spec_obj = fakes.spec(memory_mb=10 ** 6,
                              extra_specs={'numa_overhead:max_level': '0'})
        self.assertEqual(['low', 'mid', 'high', 'unknown'],
                         self.passing(spec_obj))
        self.assertEqual(['low'], self.passing(spec_obj, self.hosts[:1]))
        self.flags(unknown_host='fail')
        self.assertEqual([], self.passing(spec_obj))
        self.assertIn('low fails NUMAOverheadFilter: its reported free '
                      'memory cannot hold the request and unknown_host=fail',
                      self.logger.output)

    def test_invalid_hint_is_logged_and_ignored(self):
        # nova-api checks no hint, and it stays in the request spec for
        # every later move of the server: it must not refuse them all.
        fresh_flavor_throttle(self)
        spec_obj = fakes.spec(extra_specs={'numa_overhead:max_level': '4'},
                              hints={'numa_overhead_max_level': 'lots'})
        self.assertEqual(['low', 'mid', 'unknown'], self.passing(spec_obj))
        self.assertIn('Ignoring a bad scheduler hint of instance '
                      '4a1b9d5e-0000-4000-8000-000000000001: hint '
                      "numa_overhead_max_level: 'lots' is not an integer",
                      self.logger.output)
        self.assertNotIn('Traceback', self.logger.output)

    def test_memory_nova_places_itself_is_not_filtered(self):
        # A NUMA topology (dedicated CPUs, hugepages, hw:numa_nodes): the
        # agent leaves the guest alone, its plan would never happen.
        spec_obj = fakes.spec(extra_specs={'numa_overhead:max_level': '0'})
        spec_obj.numa_topology = objects.InstanceNUMATopology(cells=[])
        self.assertEqual(['low', 'mid', 'high', 'unknown'],
                         self.passing(spec_obj))

    def test_a_bad_aggregate_value_is_logged_a_few_times(self):
        fresh_flavor_throttle(self)
        self.patch(filters, '_BAD_AGGREGATES', store._Throttle(
            filters._BAD_AGGREGATES.summary, logger=filters.LOG))
        hosts = [fakes.host_state('h%d' % i, aggregates=[
            {'numa_overhead_max_level': 'high'}]) for i in range(50)]
        self.passing(fakes.spec(), hosts)
        self.assertEqual(store.LOG_BURST, self.logger.output.count(
            "Ignoring aggregate metadata numa_overhead_max_level: 'high' "
            "is not an integer"))

    def test_rebuild_is_not_filtered(self):
        spec_obj = fakes.spec(extra_specs={'numa_overhead:max_level': '0'},
                              rebuild=True)
        self.assertEqual(4, len(self.passing(spec_obj)))
        self.assertFalse(filters.NUMAOverheadFilter.RUN_ON_REBUILD)

    def test_host_passes(self):
        spec_obj = fakes.spec(extra_specs={'numa_overhead:max_level': '2'})
        self.assertTrue(self.filt.host_passes(self.hosts[0], spec_obj))
        self.assertFalse(self.filt.host_passes(self.hosts[1], spec_obj))

    def test_store_failure_does_not_break_scheduling(self):
        def broken(*args):
            raise RuntimeError('boom')
        self.patch(filters.store.Query, "overhead", broken)
        spec_obj = fakes.spec(extra_specs={'numa_overhead:max_level': '2'})
        # Treated as unknown: passes with the default policy.
        self.assertEqual(4, len(self.passing(spec_obj)))

    def test_bad_option_passes_every_host_with_one_error(self):
        spec_obj = fakes.spec(extra_specs={'numa_overhead:max_level': '2'})
        for option, value, fragment in (
                ('unknown_host', 'Pass', "found 'Pass'"),
                ('default_policy', 'Local', "found 'Local'"),
                ('max_level', '-1', 'greater than or equal to 0')):
            load_bad_options(self, **{option: value})
            errors = self.useFixture(fixtures.FakeLogger(
                name=filters.__name__, level='ERROR'))
            self.filt = filters.NUMAOverheadFilter()
            for _ in range(3):
                self.assertEqual(['low', 'mid', 'high', 'unknown'],
                                 self.passing(spec_obj))
            # Throttled: one line for the three requests, naming the value.
            self.assertEqual(1, errors.output.count(
                'NUMAOverheadFilter passes every host unfiltered (bad '
                '[numa_overhead] option: Value for option %s' % option))
            self.assertIn(fragment, errors.output)
            self.assertNotIn('Traceback', errors.output)

    def test_an_error_of_the_plugin_passes_every_host(self):
        errors = self.useFixture(fixtures.FakeLogger(name=filters.__name__,
                                                     level='ERROR'))
        with mock.patch.object(request, 'from_spec', autospec=True,
                               side_effect=RuntimeError('boom')):
            self.assertEqual(4, len(self.passing(fakes.spec())))
        self.assertIn('NUMAOverheadFilter passes every host unfiltered '
                      '(RuntimeError: boom)', errors.output)
        # A bug, not a setting: with its traceback.
        self.assertIn('Traceback', errors.output)

    def test_bad_flavor_spec_is_logged_and_ignored(self):
        # Flavors nova-api did not check (created before the plugin, or
        # through a microversion below 2.86) still boot, with the defaults.
        for specs, reason in (
                ({'numa_overhead:rebalance': 'sometimes'},
                 "numa_overhead:rebalance: 'sometimes' is not a boolean"),
                ({'numa_overhead:policy': 'Local'},
                 "numa_overhead:policy: 'Local' is not one of"),
                ({'numa_overhead:max_nodes': '0'},
                 'numa_overhead:max_nodes: 0 is less than 1'),
                ({'numa_overhead:max_level': 'high'},
                 "numa_overhead:max_level: 'high' is not an integer")):
            fresh_flavor_throttle(self)
            errors = self.useFixture(fixtures.FakeLogger(
                name=request.__name__, level='ERROR'))
            self.assertEqual(['low', 'mid', 'high', 'unknown'],
                             self.passing(fakes.spec(extra_specs=specs)))
            self.assertIn('Ignoring bad extra specs of flavor <unnamed>, '
                          'their defaults apply: ' + reason, errors.output)
        # Only the bad one: its good max_level applies, a hint too.
        spec_obj = fakes.spec(extra_specs={'numa_overhead:max_level': '1',
                                           'numa_overhead:policy': 'x'},
                              hints={'numa_overhead_max_level': '4'})
        self.assertEqual(['low', 'unknown'], self.passing(spec_obj))
