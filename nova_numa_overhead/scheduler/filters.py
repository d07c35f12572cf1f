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
"""NUMAOverheadFilter: hosts whose planned NUMA overhead is low enough.

A host passes when the overhead level its planner would place this guest's
memory at (see :mod:`nova_numa_overhead.overhead.planner`) is at most the
smallest of the scheduler hint ``numa_overhead_max_level``, the flavor's
``numa_overhead:max_level``, the host's aggregate metadata
``numa_overhead_max_level`` and ``[numa_overhead] max_level``. With none of
them set every host passes. Hosts without a fresh report, or whose
reported free memory cannot hold the request (memory fit is Nova's to
judge: overcommit, guests placed since the report), follow
``[numa_overhead] unknown_host``.

Enable with ``[filter_scheduler] enabled_filters = ...,NUMAOverheadFilter``
and add ``nova_numa_overhead.scheduler.filters.NUMAOverheadFilter`` to
``available_filters``.
"""

import time

import nova.conf
from nova.scheduler import filters
from nova.scheduler.filters import utils as filter_utils
from nova.scheduler import utils as scheduler_utils
from oslo_log import log as logging

from nova_numa_overhead import conf as plugin_conf
from nova_numa_overhead.scheduler import request
from nova_numa_overhead.scheduler import store

LOG = logging.getLogger(__name__)
CONF = nova.conf.CONF


# A bad aggregate value is met for each of its hosts at every request.
_BAD_AGGREGATES = store._Throttle(
    '%(count)d more hosts with a bad numa_overhead_max_level aggregate value '
    'in the last %(interval)d s', logger=LOG)


def aggregate_max_level(host_state) -> int | None:
    """Smallest valid ``numa_overhead_max_level`` of the host's aggregates."""
    values = []
    for value in filter_utils.aggregate_values_from_key(
            host_state, request.AGG_MAX_LEVEL):
        try:
            values.append(request.parse_int(
                'aggregate metadata ' + request.AGG_MAX_LEVEL, value, 0))
        except request.InvalidRequest as exc:
            _BAD_AGGREGATES.log(time.monotonic(), 'Ignoring %(exc)s on host '
                                '%(host)s', {'exc': exc,
                                             'host': host_state.host})
    return min(values) if values else None


def _unknown_why(planned) -> str:
    """Why a host's planned overhead is unknown."""
    if planned is store.UNKNOWN:
        return 'no fresh report'
    return 'its reported free memory cannot hold the request'


class NUMAOverheadFilter(filters.BaseHostFilter):
    """Pass hosts whose planned NUMA memory-zone overhead is allowed."""

    # A rebuild keeps the host and the guest's memory where it is: there is
    # nothing to re-plan.
    RUN_ON_REBUILD = False

    def __init__(self):
        super().__init__()
        plugin_conf.register_opts(CONF)
        # A failure here repeats at every request: one line a minute.
        self._failures = store._Throttle(
            '%(count)d more requests NUMAOverheadFilter passed unfiltered '
            'in the last %(interval)d s', burst=1, logger=LOG)
        # The report listener starts now, in the background (a forked
        # worker starts its own on its first request); requests never wait
        # for it.
        store.start(CONF)

    def filter_all(self, filter_obj_list, spec_obj):
        hosts = list(filter_obj_list)
        if scheduler_utils.request_is_rebuild(spec_obj) or \
                request.placed_by_nova(spec_obj):
            return hosts
        try:
            return self._filter_all(hosts, spec_obj)
        except Exception as exc:
            # A bad option (oslo.config checks a value when it is read) or
            # a bug of the plugin: Nova schedules as without the filter.
            store.log_failure(self._failures, 'NUMAOverheadFilter passes '
                              'every host unfiltered', exc)
            return hosts

    def _filter_all(self, hosts, spec_obj):
        req = request.from_spec(spec_obj, CONF)
        if not hosts:
            return hosts
        opts = CONF.numa_overhead
        limits = [v for v in (req.max_level, opts.max_level)
                  if v is not None]
        limit = min(limits) if limits else None
        unknown_passes = opts.unknown_host == 'pass'
        try:
            query = store.get_store(CONF).query(req.memory_mb, req.policy,
                                                req.max_nodes)
        except Exception:
            LOG.exception('NUMA overhead store unavailable')
            query = None
        if limit is None:
            # Only hosts with an aggregate limit are looked up.
            return [h for h in hosts
                    if self._passes(h, limit, query, unknown_passes)]
        return self._filter_all_limited(hosts, limit, query, unknown_passes)

    def _filter_all_limited(self, hosts, limit, query, unknown_passes):
        """Every host is looked up: in one batch (the hot path)."""
        planned = None
        if query is not None:
            try:
                planned = query.overheads(hosts)
            except Exception:
                LOG.exception('NUMA overhead look-up failed')
        if planned is None:
            planned = [store.UNKNOWN] * len(hosts)
        debug = LOG.isEnabledFor(logging.DEBUG)
        passed = []
        for host_state, value in zip(hosts, planned):
            host_limit = limit
            if host_state.aggregates:
                from_aggregates = aggregate_max_level(host_state)
                if from_aggregates is not None:
                    host_limit = min(limit, from_aggregates)
            if value is store.UNKNOWN or value == store.DOES_NOT_FIT:
                if unknown_passes:
                    passed.append(host_state)
                elif debug:
                    LOG.debug('%(host)s fails NUMAOverheadFilter: %(why)s '
                              'and unknown_host=fail',
                              {'host': host_state.host,
                               'why': _unknown_why(value)})
            elif value <= host_limit:
                passed.append(host_state)
            elif debug:
                LOG.debug('%(host)s fails NUMAOverheadFilter: planned '
                          'overhead %(planned)s above the allowed %(limit)d',
                          {'host': host_state.host, 'planned': value,
                           'limit': host_limit})
        return passed

    def host_passes(self, host_state, spec_obj):
        return bool(self.filter_all([host_state], spec_obj))

    @staticmethod
    def _passes(host_state, limit, query, unknown_passes) -> bool:
        if host_state.aggregates:
            from_aggregates = aggregate_max_level(host_state)
            if from_aggregates is not None:
                limit = from_aggregates if limit is None else min(
                    limit, from_aggregates)
        if limit is None:
            return True
        planned = None
        if query is not None:
            try:
                planned = query.overhead(host_state.host,
                                         host_state.free_ram_mb,
                                         host_state.num_instances)
            except Exception:
                LOG.exception('NUMA overhead lookup failed for host %s',
                              host_state.host)
        if planned is store.UNKNOWN or planned == store.DOES_NOT_FIT:
            if not unknown_passes:
                LOG.debug('%(host)s fails NUMAOverheadFilter: %(why)s and '
                          'unknown_host=fail',
                          {'host': host_state.host,
                           'why': _unknown_why(planned)})
            return unknown_passes
        if planned > limit:
            LOG.debug('%(host)s fails NUMAOverheadFilter: planned overhead '
                      '%(planned)s above the allowed %(limit)d',
                      {'host': host_state.host, 'planned': planned,
                       'limit': limit})
            return False
        return True
