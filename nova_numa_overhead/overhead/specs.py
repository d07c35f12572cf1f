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
"""A flavor's ``numa_overhead:*`` extra specs, parsed and validated.

The agent reads them from the domain metadata Nova writes, the scheduler
from the request spec, nova-api validates them
(:mod:`nova_numa_overhead.api.extra_specs`): one parser, beside the
planner whose policies they name, so that the compute side needs nothing
of the scheduler package::

    numa_overhead:policy     proportional | local | spread | none
    numa_overhead:max_level  int >= 0
    numa_overhead:max_nodes  int >= 1
    numa_overhead:rebalance  bool
"""

import dataclasses

from oslo_utils import strutils

from nova_numa_overhead.overhead import planner

NAMESPACE = 'numa_overhead'
SPEC_POLICY = NAMESPACE + ':policy'
SPEC_MAX_LEVEL = NAMESPACE + ':max_level'
SPEC_MAX_NODES = NAMESPACE + ':max_nodes'
SPEC_REBALANCE = NAMESPACE + ':rebalance'


class InvalidRequest(ValueError):
    """A flavor extra spec or scheduler hint this plugin cannot honour."""


@dataclasses.dataclass(frozen=True)
class Policy:
    """The placement a flavor asks for (what the agent also reads)."""

    policy: str
    max_nodes: int
    max_level: int | None
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
