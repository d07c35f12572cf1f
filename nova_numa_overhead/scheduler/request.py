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
"""What a scheduling request asks of NUMA overhead: flavor extra specs and
scheduler hints, parsed and validated once per request.

Flavor extra specs (parsed by :mod:`nova_numa_overhead.overhead.specs`,
which the agent shares, and validated by nova-api too, see
:mod:`nova_numa_overhead.api.extra_specs`)::

    numa_overhead:policy     proportional | local | spread | none
    numa_overhead:max_level  int >= 0
    numa_overhead:max_nodes  int >= 1
    numa_overhead:rebalance  bool

Scheduler hint: ``numa_overhead_max_level`` (int >= 0). It can only lower
the limit the flavor, the aggregate and the configuration set. The
placement policy comes from the flavor alone, because the compute agent
sees the flavor's extra specs in the domain metadata, never the hints.
nova-api checks no hint, and a server's hints stay in its request spec
for every later move (evacuate, migrate, resize, unshelve): a bad one is
logged and ignored, never a reason to refuse every host.

A request whose memory Nova places itself (a NUMA topology: dedicated
CPUs, hugepages, ``hw:numa_nodes``...; the agent leaves such guests alone)
is not the plugin's: the filter passes every host, the weigher weighs
none.
"""

import dataclasses
import time

from oslo_log import log as logging

from nova_numa_overhead.overhead import specs
from nova_numa_overhead.scheduler import store

LOG = logging.getLogger(__name__)

# The flavor's extra specs are parsed beside the planner (the agent reads
# them too); their names stay importable from here.
NAMESPACE = specs.NAMESPACE
SPEC_POLICY = specs.SPEC_POLICY
SPEC_MAX_LEVEL = specs.SPEC_MAX_LEVEL
SPEC_MAX_NODES = specs.SPEC_MAX_NODES
SPEC_REBALANCE = specs.SPEC_REBALANCE
InvalidRequest = specs.InvalidRequest
Policy = specs.Policy
parse_int = specs.parse_int
policy_from_extra_specs = specs.policy_from_extra_specs
HINT_MAX_LEVEL = 'numa_overhead_max_level'
AGG_MAX_LEVEL = 'numa_overhead_max_level'
AGG_WEIGHT_MULTIPLIER = 'numa_overhead_weight_multiplier'

# Every boot of a flavor with a bad spec would log it (twice with the
# weigher on).
_BAD_FLAVORS = store._Throttle(
    '%(count)d more requests with bad numa_overhead:* flavor extra specs '
    'in the last %(interval)d s', logger=LOG)
_BAD_HINTS = store._Throttle(
    '%(count)d more requests with a bad numa_overhead_max_level hint in the '
    'last %(interval)d s', logger=LOG)


@dataclasses.dataclass(frozen=True)
class OverheadRequest:
    """One scheduling request, as the filter and the weigher need it."""

    memory_mb: int
    policy: str
    max_nodes: int
    max_level: int | None  # from flavor and hint; None = no limit
    rebalance: bool


def placed_by_nova(spec_obj) -> bool:
    """Whether Nova places this request's memory itself (the request
    spec has a NUMA topology, as the NUMATopologyFilter reads it).
    """
    return spec_obj.obj_attr_is_set('numa_topology') and \
        spec_obj.numa_topology is not None


def hint_max_level(hints) -> int | None:
    """The ``numa_overhead_max_level`` hint, or None.

    :raises InvalidRequest: naming the problem.
    """
    if not hints or HINT_MAX_LEVEL not in hints:
        return None
    value = hints[HINT_MAX_LEVEL]
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            raise InvalidRequest('hint %s: give exactly one value, got %d'
                                 % (HINT_MAX_LEVEL, len(value)))
        value = value[0]
    return parse_int('hint ' + HINT_MAX_LEVEL, value, 0)


def _without_bad_specs(flavor, default_policy, default_max_nodes):
    """The policy of a flavor's good ``numa_overhead:*`` specs, the bad
    ones logged (throttled) and left to their defaults: a bad
    ``rebalance`` does not drop a good ``max_level``.
    """
    good, reasons = {}, []
    for key, value in (flavor.extra_specs or {}).items():
        try:
            policy_from_extra_specs({key: value}, default_policy,
                                    default_max_nodes)
        except InvalidRequest as exc:
            reasons.append(str(exc))
            continue
        good[key] = value
    _BAD_FLAVORS.log(
        time.monotonic(), 'Ignoring bad extra specs of flavor %(flavor)s, '
        'their defaults apply: %(reason)s',
        {'flavor': flavor.name if flavor.obj_attr_is_set('name')
         else '<unnamed>', 'reason': '; '.join(reasons)}, logging.ERROR)
    return policy_from_extra_specs(good, default_policy, default_max_nodes)


def from_spec(spec_obj, conf) -> OverheadRequest:
    """Parse a Nova RequestSpec.

    A bad flavor extra spec (one nova-api did not check: set before the
    plugin was installed, or through a compute API microversion below
    2.86) is logged and ignored for the request: its default applies, and
    the flavor's good ones still do. A bad hint is logged and ignored.
    """
    opts = conf.numa_overhead
    default_policy = opts.default_policy
    default_max_nodes = opts.default_max_nodes
    flavor = spec_obj.flavor
    try:
        policy = policy_from_extra_specs(flavor.extra_specs, default_policy,
                                         default_max_nodes)
    except InvalidRequest:
        policy = _without_bad_specs(flavor, default_policy,
                                    default_max_nodes)
    hints = spec_obj.scheduler_hints if spec_obj.obj_attr_is_set(
        'scheduler_hints') else None
    try:
        hint = hint_max_level(hints)
    except InvalidRequest as exc:
        hint = None
        _BAD_HINTS.log(
            time.monotonic(), 'Ignoring a bad scheduler hint of instance '
            '%(uuid)s: %(reason)s', {'uuid': spec_obj.instance_uuid,
                                     'reason': exc}, logging.ERROR)
    limits = [v for v in (policy.max_level, hint) if v is not None]
    return OverheadRequest(memory_mb=max(int(flavor.memory_mb), 1),
                           policy=policy.policy, max_nodes=policy.max_nodes,
                           max_level=min(limits) if limits else None,
                           rebalance=policy.rebalance)
