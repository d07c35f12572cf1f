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
"""nova-api validators for the ``numa_overhead:*`` flavor extra specs.

Loaded by nova-api through the ``nova.api.extra_spec_validators`` entry
point, so that ``openstack flavor set --property numa_overhead:...`` with a
bad key or value is an HTTP 400 naming the key. Registering the namespace
also makes nova-api refuse unknown ``numa_overhead:`` keys (typos).
"""

from nova.api.validation.extra_specs import base
from nova import exception

from nova_numa_overhead.overhead import planner
from nova_numa_overhead.overhead import specs


class Validator(base.ExtraSpecValidator):
    """Nova's validator, with the key named in every error message."""

    def validate(self, name, value):
        try:
            super().validate(name, value)
        except exception.ValidationError as exc:
            reason = str(exc).replace('Validation failed; ', '', 1)
            raise exception.ValidationError(
                "Validation failed for extra spec '%s': %s" % (name, reason))


EXTRA_SPEC_VALIDATORS = [
    Validator(
        name=specs.SPEC_POLICY,
        description=(
            'How the nova-numa-overhead agent places the guest\'s memory '
            'over the host\'s NUMA nodes, and how the scheduler scores '
            'hosts for it: %s.' % '; '.join(
                '``%s``: %s' % item for item in planner.POLICY_HELP.items())),
        value={'type': str, 'enum': list(planner.POLICIES)},
    ),
    Validator(
        name=specs.SPEC_MAX_LEVEL,
        description=(
            'Highest planned NUMA memory-zone overhead level a host may '
            'have for this flavor (NUMAOverheadFilter). Scheduler hints, '
            'aggregates and the configuration can lower it, not raise it.'),
        value={'type': int, 'min': 0},
    ),
    Validator(
        name=specs.SPEC_MAX_NODES,
        description=(
            'Number of NUMA nodes the proportional policy spreads the '
            'guest\'s memory over.'),
        value={'type': int, 'min': 1, 'max': planner.MAX_NODES_LIMIT},
    ),
    Validator(
        name=specs.SPEC_REBALANCE,
        description=(
            'Whether the agent may move this guest\'s pages periodically '
            'to rebalance NUMA overhead.'),
        value={'type': bool},
    ),
]


def register():
    return EXTRA_SPEC_VALIDATORS
