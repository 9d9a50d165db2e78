#!/usr/bin/env python3
"""Step time of `optitpu train --shard-optimizer` against the unsharded data-parallel run.

    scripts/bench_train_shard.py OPTITPU [--rounds R] [--steps S] [--devices 4,8] [--hidden H,H]
                                         [--optimizer O] [--allreduce tree|direct] [--mpi N]
                                         [--overlap auto|on|off] [--no-overlap-too] [--json]

For each device count, each round runs the same job unsharded then sharded (sharded first on odd
rounds, so drift in the machine's load hits both), with --ckpt-dir none --json, and reads the
loop's wall time per step (wall_s / steps_run: forward/backward, reduction, update, all-gather,
and the evaluations, the same in both), the CPU time per step summed over the replicas' phases
(the step's work, less stretched by a loaded machine than the wall time), the optimizer state
bytes per device and the share of that CPU time spent outside compute (outside_compute_share). Prints each figure's median
over the rounds and sharded / unsharded (with --json one row per figure, ratio = unsharded /
sharded: > 1 when sharding does better); checks that both runs end with the same params_sha256.
Medians and a ratio of one run, never one time: the machines are shared.
--no-overlap-too adds two runs per round with --overlap off, sharded (one reduce-scatter after the
backward, one all-gather after the update) and unsharded (one all-reduce after the backward),
interleaved with the other two; their figures are printed beside them.
--mpi N runs every job across N processes of one device each instead (`optitpu launch --np N
--oversubscribe -- train --mpi --devices 1 ...`, OMPI_MCA_mpi_yield_when_idle=1 unless set: the
machine may be oversubscribed); the CPU figures and outside_compute_share are process 0's.
"""
import argparse, json, os, statistics, subprocess, sys, tempfile

ap = argparse.ArgumentParser()
ap.add_argument('optitpu')
ap.add_argument('--rounds', type=int, default=5)
ap.add_argument('--steps', type=int, default=100)
ap.add_argument('--devices', default='4,8')
ap.add_argument('--hidden', default='', help='--hidden of the MLP (default: the demo model)')
ap.add_argument('--optimizer', default='adam')
ap.add_argument('--allreduce', default='tree', help='tree (the default) or direct')
ap.add_argument('--overlap', default='', help='--overlap of the two main runs (default: auto)')
ap.add_argument('--no-overlap-too', action='store_true',
                help='also both runs with --overlap off, interleaved')
ap.add_argument('--mpi', type=int, default=0,
                help='N processes of one device each (optitpu launch) instead of --devices')
ap.add_argument('--json', action='store_true')
a = ap.parse_args()
if a.mpi:
    a.devices = str(a.mpi)
    os.environ.setdefault('OMPI_MCA_mpi_yield_when_idle', '1')

out = tempfile.mkdtemp()


def cpu_med(js):
    """Median CPU milliseconds per step summed over the replicas' phases: the work the step
    costs, which a loaded machine's scheduling stretches less than the wall time."""
    return statistics.median(1e3 * (j['compute_cpu_s'] + j['comm_cpu_s'] + j['ckpt_cpu_s'] +
                                    j['other_cpu_s']) / j['steps_run'] for j in js)


rows = []
for d in [int(x) for x in a.devices.split(',')]:
    runs = {False: [], True: [], 'no': [], 'refno': []}
    kinds = [False, True] + (['no', 'refno'] if a.no_overlap_too else [])
    for r in range(a.rounds):
        for shard in (kinds if r % 2 == 0 else kinds[::-1]):
            pod = (['launch', '--np', str(d), '--oversubscribe', '--max-restarts', '0', '--',
                    'train', '--mpi', '--devices', '1'] if a.mpi else ['train', '--devices', str(d)])
            cmd = [a.optitpu] + pod + ['--steps', str(a.steps), '--ckpt-dir', 'none', '--json',
                                       '--quiet', '--out', out, '--optimizer', a.optimizer,
                                       '--allreduce', a.allreduce]
            if a.hidden: cmd += ['--hidden', a.hidden]
            if shard and shard != 'refno': cmd.append('--shard-optimizer')
            if shard in ('no', 'refno'): cmd += ['--overlap', 'off']
            elif a.overlap: cmd += ['--overlap', a.overlap]
            res = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            # under launch process 0's report is the JSON line
            j = json.loads([ln for ln in res.splitlines() if ln.startswith('{')][-1])
            runs[shard].append(j)
    shas = {j['params_sha256'] for j in runs[False] + runs[True] + runs['no'] + runs['refno']}
    if len(shas) != 1:
        sys.exit(f'{d} devices: the sharded and unsharded runs end with different parameters')
    med = {s: statistics.median(1e3 * j['wall_s'] / j['steps_run'] for j in runs[s])
           for s in kinds}
    # every run's figures, for the ranges beside the medians
    each = {s: {'ms_per_step': [1e3 * j['wall_s'] / j['steps_run'] for j in runs[s]],
                'outside_compute_share': [j['outside_compute_share'] for j in runs[s]]}
            for s in kinds}
    rows.append({'devices': d, 'params': runs[False][0]['param_elements'],
                 'unsharded_step_ms': med[False], 'sharded_step_ms': med[True],
                 'ratio': med[True] / med[False],
                 'unsharded_cpu_ms': cpu_med(runs[False]), 'sharded_cpu_ms': cpu_med(runs[True]),
                 'unsharded_outside_compute': statistics.median(
                     j['outside_compute_share'] for j in runs[False]),
                 'sharded_outside_compute': statistics.median(
                     j['outside_compute_share'] for j in runs[True]),
                 'unsharded_state_bytes': runs[False][0]['optim_state_bytes_per_device'],
                 'sharded_state_bytes': runs[True][0]['optim_state_bytes_per_device'],
                 'bit_identical': True, 'rounds': a.rounds, 'steps': a.steps,
                 'each': each})
    if a.no_overlap_too:
        for k, pre in (('no', 'no_overlap_'), ('refno', 'unsharded_no_overlap_')):
            rows[-1].update({pre + 'step_ms': med[k], pre + 'cpu_ms': cpu_med(runs[k]),
                             pre + 'outside_compute': statistics.median(
                                 j['outside_compute_share'] for j in runs[k])})
if a.json:
    # one row per figure in the project's bench format (ratio > 1: the sharded run does better)
    out_rows = []
    for r in rows:
        r['first_row'] = len(out_rows)
        pod = f"{r['devices']} MPI processes" if a.mpi else f"{r['devices']} devices"
        case = (f"{a.optimizer} mlp {r['params']} params, {pod}, "
                f"--allreduce {a.allreduce}, median of {a.rounds} x {a.steps} steps")
        out_rows.append({'bench': 'train_shard', 'case': case, 'metric': 'ms_per_step',
                         'value': r['sharded_step_ms'],
                         'baseline': 'unsharded data-parallel run of the same job',
                         'baseline_value': r['unsharded_step_ms'],
                         'ratio': r['unsharded_step_ms'] / r['sharded_step_ms'],
                         'bit_identical': True})
        out_rows.append({'bench': 'train_shard', 'case': case,
                         'metric': 'optim_state_bytes_per_device',
                         'value': r['sharded_state_bytes'],
                         'baseline': 'unsharded data-parallel run of the same job',
                         'baseline_value': r['unsharded_state_bytes'],
                         'ratio': r['unsharded_state_bytes'] / r['sharded_state_bytes']})
        out_rows.append({'bench': 'train_shard', 'case': case, 'metric': 'cpu_ms_per_step',
                         'value': r['sharded_cpu_ms'],
                         'baseline': 'unsharded data-parallel run of the same job',
                         'baseline_value': r['unsharded_cpu_ms'],
                         'ratio': r['unsharded_cpu_ms'] / r['sharded_cpu_ms']})
        out_rows.append({'bench': 'train_shard', 'case': case, 'metric': 'outside_compute_share',
                         'value': r['sharded_outside_compute'],
                         'baseline': 'unsharded data-parallel run of the same job',
                         'baseline_value': r['unsharded_outside_compute'],
                         'ratio': r['unsharded_outside_compute'] / r['sharded_outside_compute']})
        if a.no_overlap_too:
            for metric, key in (('ms_per_step', 'step_ms'), ('cpu_ms_per_step', 'cpu_ms'),
                                ('outside_compute_share', 'outside_compute')):
                for vk, bk, label in (
                        ('sharded_', 'no_overlap_', 'the sharded run with --overlap off'),
                        ('unsharded_', 'unsharded_no_overlap_',
                         'the unsharded run with --overlap off')):
                    v, b = r[vk + key], r[bk + key]
                    out_rows.append({'bench': 'train_shard', 'case': case, 'metric': metric,
                                     'value': v, 'baseline': label, 'baseline_value': b,
                                     'ratio': b / v})
        # each median's range over the rounds (min, max): which runs a row compares
        runs_of = {'unsharded data-parallel run of the same job': (True, False),
                   'the sharded run with --overlap off': (True, 'no'),
                   'the unsharded run with --overlap off': (False, 'refno')}
        for o in out_rows[r['first_row']:]:
            if o['metric'] in ('ms_per_step', 'outside_compute_share'):
                for key, k in zip(('value_range', 'baseline_range'), runs_of[o['baseline']]):
                    v = r['each'][k][o['metric']]
                    o[key] = [min(v), max(v)]
    for o in out_rows:
        print(json.dumps(o))
else:
    print(f"{'devices':>7} {'params':>9} {'unsharded ms/step':>17} {'sharded ms/step':>15} "
          f"{'sharded/unsharded':>17} {'state B/device (unsh -> sh)':>28} "
          f"{'outside compute (unsh -> sh)':>28}")
    for r in rows:
        st = f"{r['unsharded_state_bytes']} -> {r['sharded_state_bytes']}"
        print(f"{r['devices']:>7} {r['params']:>9} {r['unsharded_step_ms']:>17.3f} "
              f"{r['sharded_step_ms']:>15.3f} {r['ratio']:>17.3f} {st:>28} "
              f"{r['unsharded_outside_compute']:>13.3f} -> {r['sharded_outside_compute']:<11.3f}")
    if a.no_overlap_too:
        for pre, label in (('no_overlap_', 'sharded'), ('unsharded_no_overlap_', 'unsharded')):
            print(f'{label} --overlap off: ' + ', '.join(
                f"{r['devices']} devices {r[pre + 'step_ms']:.3f} ms/step, CPU "
                f"{r[pre + 'cpu_ms']:.3f} ms/step, outside compute "
                f"{r[pre + 'outside_compute']:.3f}" for r in rows))
    print('parameters bit-identical sharded and unsharded: yes')
