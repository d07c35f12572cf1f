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
"""The plugin enabled in Nova's own functional tests, as an operator does.

Every Nova test gets, on top of what the test itself configures:

* when it starts its scheduler service, ``NUMAOverheadFilter`` appended to
  ``[filter_scheduler] available_filters`` and ``enabled_filters`` and
  ``NUMAOverheadWeigher`` to ``weight_classes`` (the README's nova.conf
  snippet, added to the test's own filter list rather than replacing it,
  as an operator adds the plugin to the filters they run);
  ``[numa_overhead]`` stays at its defaults;
* the end of the plugin's per-process state (store and report listener)
  when the test ends, as when a scheduler process exits: each Nova test
  plays a scheduler process of its own, and Nova's fixtures reset Nova's
  own process-wide state the same way;
* ``[wsgi] api_paste_config`` pointing at the wheel's ``api-paste.ini``
  (Nova's fixture looks for it next to a source checkout).

Nova's fixtures (cast-as-call, the RPC poller leak check...) stay as Nova
sets them.
"""

import nova.conf
import nova.test

from nova_numa_overhead.scheduler import store
from tests.functional import base as functional_base

CONF = nova.conf.CONF
FILTER_PATH = 'nova_numa_overhead.scheduler.filters.NUMAOverheadFilter'
WEIGHER_PATH = 'nova_numa_overhead.scheduler.weighers.NUMAOverheadWeigher'

_set_up = nova.test.TestCase.setUp
_start_service = nova.test.TestCase.start_service


def setUp(self):
    _set_up(self)
    self.addCleanup(store.reset_store)
    path = functional_base.find_api_paste_config()
    if path:
        self.flags(api_paste_config=path, group='wsgi')


def start_service(self, name, *args, **kwargs):
    if name == 'scheduler':
        opts = CONF.filter_scheduler
        self.flags(group='filter_scheduler',
                   available_filters=_with(opts.available_filters,
                                           FILTER_PATH),
                   enabled_filters=_with(opts.enabled_filters,
                                         'NUMAOverheadFilter'),
                   weight_classes=_with(opts.weight_classes, WEIGHER_PATH))
    return _start_service(self, name, *args, **kwargs)


def _with(values, value) -> list:
    values = list(values)
    return values if value in values else values + [value]


nova.test.TestCase.setUp = setUp
nova.test.TestCase.start_service = start_service
