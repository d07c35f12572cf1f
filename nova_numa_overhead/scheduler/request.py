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

Flavor extra specs (validated by nova-api too, see
:mod:`nova_numa_overhead.api.extra_specs`)::

    numa_overhead:policy     proportional | local | spread | none
    numa_overhead:max_level  int >= 0
    numa_overhead:max_nodes  int >= 1
    numa_overhead:rebalance  bool

Scheduler hint: ``numa_overhead_max_level`` (int >= 0). It can only lower
the limit the flavor, the aggregate and the configuration set. The
placement policy comes from the flavor alone, because the compute agent
sees the flavor's extra specs in the domain metadata, never the hints.
"""

import dataclasses

from oslo_utils import strutils

from nova_numa_overhead.overhead import planner

NAMESPACE = 'numa_overhead'
SPEC_POLICY = NAMESPACE + ':policy'
SPEC_MAX_LEVEL = NAMESPACE + ':max_level'
SPEC_MAX_NODES = NAMESPACE + ':max_nodes'
SPEC_REBALANCE = NAMESPACE + ':rebalance'
HINT_MAX_LEVEL = 'numa_overhead_max_level'
AGG_MAX_LEVEL = 'numa_overhead_max_level'
AGG_WEIGHT_MULTIPLIER = 'numa_overhead_weight_multiplier'


class InvalidRequest(ValueError):
    """A flavor extra spec or scheduler hint this plugin cannot honour."""


@dataclasses.dataclass(frozen=True)
class Policy:
    """The placement a flavor asks for (what the agent also reads)."""

    policy: str
    max_nodes: int
    max_level: int | None
    rebalance: bool


@dataclasses.dataclass(frozen=True)
class OverheadRequest:
    """One scheduling request, as the filter and the weigher need it."""

    memory_mb: int
    policy: str
    max_nodes: int
    max_level: int | None  # from flavor and hint; None = no limit
    rebalance: bool


def parse_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool):
        raise InvalidRequest('%s: %r is not an integer' % (name, value))
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        raise InvalidRequest('%s: %r is not an integer' % (name, value))
    if number < minimum:
        raise InvalidRequest('%s: %d is less than %d' % (name, number,
                                                         minimum))
    return number


def policy_from_extra_specs(extra_specs, default_policy: str,
                            default_max_nodes: int) -> Policy:
    """The placement policy of a flavor's extra specs.

    :raises InvalidRequest: naming the bad key and value.
    """
    specs = extra_specs or {}
    policy = specs.get(SPEC_POLICY, default_policy)
    if policy not in planner.POLICIES:
        raise InvalidRequest('%s: %r is not one of %s'
                             % (SPEC_POLICY, policy,
                                ', '.join(planner.POLICIES)))
    max_nodes = default_max_nodes
    if SPEC_MAX_NODES in specs:
        max_nodes = parse_int(SPEC_MAX_NODES, specs[SPEC_MAX_NODES], 1)
        max_nodes = min(max_nodes, planner.MAX_NODES_LIMIT)
    max_level = None
    if SPEC_MAX_LEVEL in specs:
        max_level = parse_int(SPEC_MAX_LEVEL, specs[SPEC_MAX_LEVEL], 0)
    rebalance = True
    if SPEC_REBALANCE in specs:
        try:
            rebalance = strutils.bool_from_string(specs[SPEC_REBALANCE],
                                                  strict=True)
        except ValueError:
            raise InvalidRequest('%s: %r is not a boolean'
                                 % (SPEC_REBALANCE, specs[SPEC_REBALANCE]))
    return Policy(policy=policy, max_nodes=max_nodes, max_level=max_level,
                  rebalance=rebalance)


def hint_max_level(hints) -> int | None:
    """The ``numa_overhead_max_level`` hint, or None."""
    if not hints or HINT_MAX_LEVEL not in hints:
        return None
    value = hints[HINT_MAX_LEVEL]
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            raise InvalidRequest('hint %s: give exactly one value, got %d'
                                 % (HINT_MAX_LEVEL, len(value)))
        value = value[0]
    return parse_int('hint ' + HINT_MAX_LEVEL, value, 0)


def from_spec(spec_obj, conf) -> OverheadRequest:
    """Parse a Nova RequestSpec.

    :raises InvalidRequest: for a bad extra spec or hint.
    """
    opts = conf.numa_overhead
    flavor = spec_obj.flavor
    policy = policy_from_extra_specs(flavor.extra_specs,
                                     opts.default_policy,
                                     opts.default_max_nodes)
    hints = spec_obj.scheduler_hints if spec_obj.obj_attr_is_set(
        'scheduler_hints') else None
    limits = [v for v in (policy.max_level, hint_max_level(hints))
              if v is not None]
    return OverheadRequest(memory_mb=max(int(flavor.memory_mb), 1),
                           policy=policy.policy, max_nodes=policy.max_nodes,
                           max_level=min(limits) if limits else None,
                           rebalance=policy.rebalance)
