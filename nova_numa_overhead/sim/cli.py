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
"""``nova-numa-overhead simulate``."""

import dataclasses
import json
import sys

from nova_numa_overhead.sim import cluster
from nova_numa_overhead.sim import policies as policies_mod
from nova_numa_overhead.sim import report
from nova_numa_overhead.sim import runner
from nova_numa_overhead.sim import scenarios
from nova_numa_overhead.sim import sweep


# Processes of a sweep: one per CPU at most makes sense.
MAX_WORKERS = 256


def load(args):
    if args.scenario_file:
        scenario = scenarios.load(args.scenario_file)
    else:
        scenario = scenarios.get(args.scenario)
    if args.seed is not None:
        # Another arrival order: the memory the guests need at once
        # changes with it.
        scenario = dataclasses.replace(scenario, seed=args.seed).validate(
            args.scenario_file or '')
    return scenario


def policy_names(value):
    """``--policies``: None for every policy; ValueError for an empty
    list or name.
    """
    if value is None:
        return None
    names = tuple(p.strip() for p in value.split(','))
    if not all(names):
        raise ValueError('--policies %r: expected comma-separated policy '
                         'names' % value)
    return names


def simulate(scenario, policies=None, progress=None, transport_url=None,
             options=None):
    """Run a scenario: a cluster one through Nova's scheduler handlers.
    ``options``: group -> {option: value} (:func:`options`).
    """
    if scenario.hosts > 1:
        return cluster.run(scenario, policies or runner.DEFAULT_POLICIES,
                           progress=progress, transport_url=transport_url,
                           options=options)
    return runner.run(scenario, policies or runner.DEFAULT_POLICIES,
                      progress=progress, options=options)


def options(settings) -> dict:
    """``--set GROUP.OPTION=VALUE`` arguments -> group -> {option:
    value}, the values of the options' types, checked (ValueError, one
    line, otherwise: :func:`~nova_numa_overhead.sim.policies.check_options`;
    an option set twice too).
    """
    out = {}
    for item in settings or ():
        key, sep, value = item.partition('=')
        group, dot, name = key.strip().partition('.')
        if not sep or not dot or not group or not name:
            raise ValueError('--set %s: expected GROUP.OPTION=VALUE, as '
                             'numa_overhead_agent.guest_floor=0.93' % item)
        if name in out.get(group, {}):
            raise ValueError('--set: %s.%s is set twice' % (group, name))
        out.setdefault(group, {})[name] = value.strip()
    return policies_mod.check_options(out)


def unread(settings, policies, clusters=True) -> list:
    """The ``--set`` groups no selected policy reads (``policies``: None
    for every one; ``clusters``: whether a cluster may run): the agent's
    are read by ours and liu-li, the scheduler side's by ours in a
    cluster only.
    """
    chosen = set(policies or runner.DEFAULT_POLICIES)
    readers = {
        policies_mod.AGENT_GROUP: bool(chosen & {
            name for name, cls in policies_mod.POLICIES.items()
            if issubclass(cls, policies_mod.OverheadAware)}),
        policies_mod.SCHEDULER_GROUP: clusters and
        policies_mod.DEFAULT in chosen,
    }
    return [group for group in settings or () if not readers[group]]


def _warn_unread(settings, policies, clusters=True) -> None:
    for group in unread(settings, policies, clusters):
        print('nova-numa-overhead simulate: warning: no selected policy '
              'reads the %s options set (%s)%s' % (
                  group, ', '.join(sorted(settings[group])),
                  '' if group == policies_mod.AGENT_GROUP else
                  ': only overhead-aware in a cluster does'),
              file=sys.stderr)


def run(args, out=None) -> int:
    out = out or sys.stdout
    if args.list and getattr(args, 'options', None):
        print('nova-numa-overhead simulate: --set does not apply to --list',
              file=sys.stderr)
        return 2
    if args.list:
        listed = {name: factory().description
                  for name, factory in sorted(scenarios.builtin().items())}
        if args.format == 'json':
            print(json.dumps(listed, indent=2), file=out)
            return 0
        for name, description in listed.items():
            print('%-18s %s' % (name, description), file=out)
        return 0
    if getattr(args, 'sweep', None) is not None or \
            getattr(args, 'all', False):
        return run_sweep(args, out)
    try:
        scenario = load(args)
        policies = policy_names(args.policies)
        settings = options(getattr(args, 'options', None))
        if policies:
            runner.check_policies(policies)
        _warn_unread(settings, policies, scenario.hosts > 1)
        progress = None if args.quiet else report.Progress(scenario.name)
        results = simulate(scenario, policies, progress, args.transport_url,
                           settings)
    except (OSError, ValueError) as exc:
        print('nova-numa-overhead simulate: %s' % exc, file=sys.stderr)
        return 2
    except cluster.ClusterError as exc:
        print('nova-numa-overhead simulate: %s' % exc, file=sys.stderr)
        return 1
    data = report.summary(scenario, results)
    if settings:
        data['options'] = settings
    print(report.to_json(data) if args.format == 'json'
          else report.table(data), file=out)
    if args.plot:
        try:
            report.plot(data, args.plot)
        except (ImportError, OSError, ValueError) as exc:
            print('nova-numa-overhead simulate: no figure: %s' % exc,
                  file=sys.stderr)
            return 1
    return 0


def run_sweep(args, out) -> int:
    if (args.sweep is not None and args.sweep < 1) or \
            not 1 <= args.workers <= MAX_WORKERS:
        print('nova-numa-overhead simulate: --sweep must be >= 1, --workers '
              'from 1 to %d' % MAX_WORKERS, file=sys.stderr)
        return 2
    progress = None
    try:
        policies = policy_names(args.policies)
        if policies:
            runner.check_policies(policies)
            if not {'nova-default', 'overhead-aware'} <= set(policies):
                # Its table and bar are ours against Nova's default.
                raise ValueError('a sweep compares overhead-aware with '
                                 'nova-default: --policies must name both')
        settings = options(getattr(args, 'options', None))
        _warn_unread(settings, policies)
        if args.sweep is None:
            progress = None if args.quiet else report.Progress('built-ins')
            data = sweep.run_builtin(policies, workers=args.workers,
                                     progress=progress, options=settings)
        else:
            progress = None if args.quiet else report.Progress(
                'sweep of %d' % args.sweep)
            data = sweep.run(args.sweep,
                             1 if args.seed is None else args.seed,
                             policies, workers=args.workers,
                             progress=progress, options=settings)
    except ValueError as exc:
        print('nova-numa-overhead simulate: %s' % exc, file=sys.stderr)
        return 2
    except cluster.ClusterError as exc:
        if progress is not None:
            progress.done()
        print('nova-numa-overhead simulate: %s' % exc, file=sys.stderr)
        return 1
    if args.format == 'json':
        if settings:
            data['options'] = settings
        print(report.to_json(dict(data, summary=sweep.distribution(data))),
              file=out)
    elif args.sweep is None:
        print(sweep.lines(data), file=out)
    else:
        print(sweep.table(data), file=out)
    return 0
