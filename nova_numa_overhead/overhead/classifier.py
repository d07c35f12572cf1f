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
"""Workload classification: which guests are worth moving, and how.

vProbe classifies vCPUs by LLC pressure, LLC references per thousand
instructions (RPKI): below 3 *LLC friendly*, above 20 *LLC thrashing*,
*LLC fitting* in between. vDARM classifies VMs by CPI and a sensitivity
factor ``SF = 1 - bandwidth demand / available bandwidth``: CPI < 1 is
insensitive (class 0), CPI >= 1 with SF >= 0 is sensitive to remote-access
latency (class 1), CPI >= 1 with SF < 0 suffers from memory traffic
congestion (class 2).

The agent combines them into an action:

* ``leave``: LLC friendly or insensitive guests are not moved;
* ``gather``: latency-sensitive guests get their memory near their vCPUs
  (the local policy);
* ``spread``: congested guests get their memory spread proportionally over
  low-overhead nodes (the proportional policy).
"""

import dataclasses

LLC_LOW_BOUND = 3.0
LLC_HIGH_BOUND = 20.0
# One DDR4-2400 channel pair is ~38 GB/s peak; ~60% is usable under load.
DEFAULT_NODE_BANDWIDTH_MBPS = 20000
CACHE_LINE = 64

FRIENDLY = 'llc-friendly'
FITTING = 'llc-fitting'
THRASHING = 'llc-thrashing'

LEAVE = 'leave'
GATHER = 'gather'
SPREAD = 'spread'


@dataclasses.dataclass(frozen=True)
class Classification:
    llc_type: str
    rpki: float
    cpi: float
    sensitivity: float
    vdarm_class: int
    action: str


def llc_type(llc_references: float, instructions: float,
             low: float = LLC_LOW_BOUND,
             high: float = LLC_HIGH_BOUND) -> tuple:
    """vProbe's vCPU type and the RPKI it was derived from."""
    if instructions <= 0:
        return FRIENDLY, 0.0
    rpki = 1000.0 * llc_references / instructions
    if rpki < low:
        return FRIENDLY, rpki
    if rpki > high:
        return THRASHING, rpki
    return FITTING, rpki


def sensitivity_factor(llc_misses: float, seconds: float,
                       available_mbps: float) -> float:
    """vDARM's SF: 1 - demand / available (misses x 64 B per second)."""
    if seconds <= 0 or available_mbps <= 0:
        return 1.0
    demand_mbps = llc_misses * CACHE_LINE / seconds / 1e6
    return 1.0 - demand_mbps / available_mbps


def classify(instructions: float, cycles: float, llc_references: float,
             llc_misses: float, seconds: float,
             available_mbps: float = DEFAULT_NODE_BANDWIDTH_MBPS,
             low: float = LLC_LOW_BOUND,
             high: float = LLC_HIGH_BOUND) -> Classification:
    """Classify one guest from counter deltas over ``seconds``."""
    kind, rpki = llc_type(llc_references, instructions, low, high)
    cpi = cycles / instructions if instructions > 0 else 0.0
    sf = sensitivity_factor(llc_misses, seconds, available_mbps)
    if cpi < 1.0:
        vdarm = 0
    elif sf < 0:
        vdarm = 2
    else:
        vdarm = 1
    if kind == FRIENDLY or vdarm == 0:
        action = LEAVE
    elif vdarm == 2 or kind == THRASHING:
        action = SPREAD
    else:
        action = GATHER
    return Classification(llc_type=kind, rpki=round(rpki, 3),
                          cpi=round(cpi, 3), sensitivity=round(sf, 3),
                          vdarm_class=vdarm, action=action)
