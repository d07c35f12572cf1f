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
"""Entry point for oslo-config-generator (namespace ``nova_numa_overhead``)."""

from nova_numa_overhead import conf
from nova_numa_overhead.conf import privileged


def list_opts():
    """Return a list of (group, options) for every option group.

    ``[numa_overhead_privileged]`` is listed but not registered by
    :func:`nova_numa_overhead.conf.register_opts`: oslo.privsep registers
    it (see :mod:`nova_numa_overhead.conf.privileged`).
    """
    result = []
    for module in conf._MODULES + (privileged,):
        for group, opts in module.list_opts().items():
            result.append((group, opts))
    return result
