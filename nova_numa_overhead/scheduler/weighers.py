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
"""NUMAOverheadWeigher: a higher weight means a lower planned overhead.

A host's raw weight is ``1 / (1 + planned overhead level)`` of the request
(1.0 when the guest would see no overhead), or ``[numa_overhead]
weight_of_unknown`` without a fresh report, when the reported free memory
cannot hold the request or when the planned overhead is not a finite level
of 0 or more. Raw weights lie between 0 and 1 and Nova takes
them as they are (``minval`` 0, ``maxval`` 1: not stretched over the range
the hosts happen to span, as Nova's RAM and CPU weighers anchor theirs at
0), times ``[numa_overhead] weight_multiplier``, which aggregate metadata
``numa_overhead_weight_multiplier`` overrides. Hosts a tenth of a level
apart thus differ by a few hundredths, not by the whole multiplier: the
weigher adds to Nova's spreading weighers instead of overruling them on
small differences.

Enable with ``[filter_scheduler] weight_classes =
nova.scheduler.weights.all_weighers,
nova_numa_overhead.scheduler.weighers.NUMAOverheadWeigher`` and a positive
``weight_multiplier`` (0 by default: in the simulator it traded a small
mean gain for more harm; see the option's help and the deployment guide).
"""

import math

import nova.conf
from nova.scheduler import utils as scheduler_utils
from nova.scheduler import weights
from oslo_log import log as logging

from nova_numa_overhead import conf as plugin_conf
from nova_numa_overhead.scheduler import request
from nova_numa_overhead.scheduler import store

LOG = logging.getLogger(__name__)
CONF = nova.conf.CONF


class NUMAOverheadWeigher(weights.BaseHostWeigher):
    """Prefer hosts where the guest's memory would see less overhead."""

    # The raw weight's own range (weight_of_unknown too): Nova normalises
    # against it, not against the hosts' minimum and maximum.
    minval = 0.0
    maxval = 1.0

    def __init__(self):
        super().__init__()
        plugin_conf.register_opts(CONF)
        self._multiplier = None
        # Repeats at every request: throttled.
        self._failures = store._Throttle(
            '%(count)d more requests NUMAOverheadWeigher could not weigh in '
            'the last %(interval)d s', burst=1, logger=LOG)
        # The report listener starts now, in the background (a forked
        # worker starts its own on its first request); requests never wait
        # for it.
        store.start(CONF)

    def weight_multiplier(self, host_state):
        if not host_state.aggregates and self._multiplier is not None:
            # Read once per request by weigh_objects; Nova calls this for
            # every host.
            return self._multiplier
        try:
            return scheduler_utils.get_weight_multiplier(
                host_state, request.AGG_WEIGHT_MULTIPLIER,
                CONF.numa_overhead.weight_multiplier)
        except Exception:
            # A bad weight_multiplier: weigh_objects logged it and weighed
            # every host 0, which any multiplier leaves 0.
            return 0.0

    def weigh_objects(self, weighed_obj_list, weight_properties):
        try:
            return self._weigh_objects(weighed_obj_list, weight_properties)
        except Exception as exc:
            # A bad option (oslo.config checks a value when it is read) or
            # a bug of the plugin: the weigher leaves the choice to Nova's.
            store.log_failure(self._failures, 'NUMAOverheadWeigher gives '
                              'every host the same weight', exc)
            return [0.0] * len(weighed_obj_list)

    def _weigh_objects(self, weighed_obj_list, weight_properties):
        opts = CONF.numa_overhead
        self._multiplier = opts.weight_multiplier
        if not self._multiplier and not any(
                request.AGG_WEIGHT_MULTIPLIER in agg.metadata
                for obj in weighed_obj_list
                for agg in obj.obj.aggregates or ()):
            # Off (the default) and no aggregate turns it on: every weight
            # would be multiplied by 0; no look-up.
            return [0.0] * len(weighed_obj_list)
        if request.placed_by_nova(weight_properties):
            # Nova places its memory (a NUMA topology): not the plugin's.
            return [0.0] * len(weighed_obj_list)
        unknown = opts.weight_of_unknown
        req = request.from_spec(weight_properties, CONF)
        hosts = [obj.obj for obj in weighed_obj_list]
        try:
            query = store.get_store(CONF).query(req.memory_mb, req.policy,
                                                req.max_nodes)
            planned = query.overheads(hosts)
        except Exception:
            # 0, not weight_of_unknown: aggregates' multipliers would
            # still tell the hosts apart.
            LOG.exception('NUMA overhead look-up failed')
            return [0.0] * len(weighed_obj_list)
        isfinite = math.isfinite
        # The hot loop of the weigher: one look-up per host, done above.
        # Nova does not clamp what weigh_objects returns: a planned
        # overhead that is not a finite level >= 0 weighs as unknown.
        return [1.0 / (1.0 + value)
                if value is not None and isfinite(value) and value >= 0
                else unknown for value in planned]

    def _weigh_object(self, host_state, weight_properties):
        return self.weigh_objects(
            [weights.WeighedHost(host_state, 0.0)], weight_properties)[0]
