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
"""Every published figure the simulator is compared with, its role and the
tolerance it is judged by.

This table was written before the model was recalibrated, and the
tolerances were fixed then: the calibration set is what the workload
profiles may be fitted to; the validation set is never used for fitting,
and a figure outside its tolerance is reported as a disagreement, not
tuned away. Figures the simulator cannot produce say why.

Keys are paths into ``shared/data/published-numa-figures.json``.
"""

import dataclasses

CALIBRATION = 'calibration'
VALIDATION = 'validation'
NOT_SIMULATED = 'not simulated'


@dataclasses.dataclass(frozen=True)
class Figure:
    key: str                 # path in the data file
    role: str
    tolerance: float = 0.0   # absolute, in the figure's own unit
    relative: float = 0.0    # or relative, whichever is larger
    note: str = ''


FIGURES = (
    # Liu & Li, section 3.2: Nova's default (NUMA-aware first touch)
    # placement of the four Figure 2 scenarios. The profiles are fitted to
    # these four, as they were before.
    Figure('characterization_liu_li/llc_contention_8vms_perf_drop',
           CALIBRATION, 0.05),
    Figure('characterization_liu_li/llc_hit_rate_1vm_to_8vms',
           CALIBRATION, 0.05),
    Figure('characterization_liu_li/mc_congestion_2vms_perf_drop',
           CALIBRATION, 0.05),
    Figure('characterization_liu_li/remote_ipc_1vm_to_8vms',
           CALIBRATION, 0.05),
    # Held out: same experiments, never fitted.
    Figure('characterization_liu_li/mc_congestion_8vms_extra_drop_vs_llc_case',
           VALIDATION, 0.06),
    Figure('characterization_liu_li/interconnect_perf_drop_per_vm_pair',
           VALIDATION, 0.06),
    Figure('characterization_liu_li/interconnect_llc_hit_rate_range',
           VALIDATION, 0.08),
    Figure('characterization_liu_li/llc_hit_rate_vs_perf_correlation',
           VALIDATION, 0.15,
           note='correlation over the guest counts 1-8'),
    Figure('characterization_liu_li/cycle_loss_vs_perf_correlation_mc',
           VALIDATION, 0.15,
           note='correlation over the guest counts 2-8'),
    Figure('characterization_liu_li/ipc_ratio_vs_perf_correlation',
           VALIDATION, 0.15,
           note='correlation over the guest counts 2-8'),
    Figure('characterization_liu_li/cycle_loss_vs_perf_correlation_'
           'interconnect', VALIDATION, 0.15,
           note='correlation over the guest pairs 1-4'),
    # Liu & Li, section 6: their allocator + swap FIFO against NUMA-aware
    # placement, compared with this project's default configuration against
    # Nova's default. Judged within 50% of the published gain or 0.05,
    # whichever is larger, and with the same sign.
    Figure('results_liu_li/scenario_improvement_by_vm_count',
           VALIDATION, 0.05, 0.5),
    Figure('results_liu_li/mixed_improvement_over_numa_aware',
           VALIDATION, 0.05, 0.5),
    Figure('results_liu_li/overall_16vms_4socket_improvement',
           VALIDATION, 0.05, 0.5),
    Figure('results_liu_li/mixed_fraction_of_optimal', VALIDATION, 0.08,
           note="read as Figure 8's normalisation: each guest's throughput "
                "relative to running alone"),
    Figure('results_liu_li/table2_memory_scaling_default_vs_optimized',
           VALIDATION, 0.05, 0.5,
           note='per benchmark: the gain, and how the default changes '
                'from 4 to 32 GB'),
    Figure('results_liu_li/table3_socket_scaling_default_vs_optimized',
           VALIDATION, 0.05, 0.5,
           note='per benchmark: the gain, and how the default changes '
                'with the socket count'),
    Figure('results_liu_li/allocator_share_of_gain', NOT_SIMULATED,
           note='needs the paper allocator without its swap FIFO on Xen; '
                'the agent has no such split by default'),
    Figure('results_liu_li/swap_fifo_improvement', NOT_SIMULATED,
           note='as above'),
    Figure('results_liu_li/fig9_page_shares_sockets_0_to_3', NOT_SIMULATED,
           note="the planner's arithmetic, checked by "
                "tests/unit/overhead/test_planner.py"),
    Figure('results_liu_li/proportional_example', NOT_SIMULATED,
           note="the planner's arithmetic, checked by "
                "tests/unit/overhead/test_planner.py"),
    # Baselines against each other, on their own papers' platforms.
    Figure('vtrms/improvement_32vms_intel', VALIDATION, 0.05, 0.5,
           note='vTRMS against numad, 32 YCSB/Memcached guests on the '
                'E5-4610'),
    Figure('vtrms/improvement_32vms_amd', VALIDATION, 0.05, 0.5,
           note='vTRMS against numad, 32 YCSB/Memcached guests on the '
                'Opteron 6376'),
    Figure('vprobe/max_improvement_vs_credit', NOT_SIMULATED,
           note="against Xen's credit scheduler, which is not modelled"),
    Figure('vdarm/average_improvement_8node', NOT_SIMULATED,
           note='PARSEC/NPB applications this simulator has no profiles '
                'for'),
)


def by_key() -> dict:
    return {f.key: f for f in FIGURES}


def agrees(figure: Figure, published: float, simulated: float) -> bool:
    """Within the figure's tolerance (and, for gains, the same sign)."""
    allowed = max(figure.tolerance, figure.relative * abs(published))
    if figure.relative and published * simulated < 0:
        return False
    return abs(simulated - published) <= allowed
