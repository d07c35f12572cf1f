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
"""Helpers for tests that run the plugin's Nova classes (no services)."""

import fixtures
import nova.conf
from nova import objects
from nova.scheduler import host_manager
from oslo_config import fixture as config_fixture

from nova_numa_overhead import conf as plugin_conf
from nova_numa_overhead.scheduler import store as store_mod
from tests import base

objects.register_all()


class NovaTestCase(base.TestCase):
    """Plugin options registered on Nova's CONF, under a fixture."""

    def setUp(self):
        super().setUp()
        self.conf = nova.conf.CONF
        plugin_conf.register_opts(self.conf)
        self.useFixture(config_fixture.Config(self.conf))
        # No report listener thread reaches for a broker in unit tests.
        self.useFixture(fixtures.MockPatchObject(store_mod.Listener,
                                                 'start'))
        self.addCleanup(store_mod.reset_store)


def host_state(host='host1', free_ram_mb=None, num_instances=0,
               aggregates=None):
    state = host_manager.HostState(host, host + '-node', 'cell1')
    state.free_ram_mb = free_ram_mb
    state.num_instances = num_instances
    state.aggregates = [objects.Aggregate(id=i, name='agg%d' % i,
                                          metadata=md)
                        for i, md in enumerate(aggregates or [])]
    return state


def spec(memory_mb=2048, extra_specs=None, hints=None, rebuild=False):
    flavor = objects.Flavor(memory_mb=memory_mb, vcpus=2, root_gb=10,
                            extra_specs=extra_specs or {})
    spec_obj = objects.RequestSpec(
        flavor=flavor, instance_uuid='4a1b9d5e-0000-4000-8000-000000000001',
        scheduler_hints={k: v if isinstance(v, list) else [v]
                         for k, v in (hints or {}).items()})
    if rebuild:
        spec_obj.scheduler_hints['_nova_check_type'] = ['rebuild']
    return spec_obj


def make_store(test, *reports, clock=None):
    """A store holding ``reports``, returned by get_store() in the test."""
    kwargs = {'clock': clock} if clock else {}
    reports_store = store_mod.ReportStore(test.conf, **kwargs)
    for data in reports:
        assert reports_store.ingest(data), data
    test.patch(store_mod, 'get_store', lambda conf: reports_store)
    return reports_store
