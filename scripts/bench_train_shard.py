#!/usr/bin/env python3
"""Step time of `optitpu train --shard-optimizer` against the unsharded data-parallel run.

    scripts/bench_train_shard.py OPTITPU [--rounds R] [--steps S] [--devices 4,8] [--hidden H,H]
                                         [--optimizer O] [--allreduce tree|direct] [--json]

For each device count, each round runs the same job unsharded then sharded (sharded first on odd
rounds, so drift in the machine's load hits both), with --ckpt-dir none --json, and reads the
loop's wall time per step (wall_s / steps_run: forward/backward, reduction, update, all-gather,
and the evaluations, the same in both) and the optimizer state bytes per device. Prints each
figure's median over the rounds and sharded / unsharded; checks that both runs end with the same
params_sha256. Medians and a ratio of one run, never one time: the machines are shared.
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
ap.add_argument('--json', action='store_true')
a = ap.parse_args()

out = tempfile.mkdtemp()
rows = []
for d in [int(x) for x in a.devices.split(',')]:
    runs = {False: [], True: []}
    for r in range(a.rounds):
        for shard in ([False, True] if r % 2 == 0 else [True, False]):
            cmd = [a.optitpu, 'train', '--devices', str(d), '--steps', str(a.steps), '--ckpt-dir',
                   'none', '--json', '--quiet', '--out', out, '--optimizer', a.optimizer,
                   '--allreduce', a.allreduce]
            if a.hidden: cmd += ['--hidden', a.hidden]
            if shard: cmd.append('--shard-optimizer')
            j = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
            runs[shard].append(j)
    shas = {j['params_sha256'] for j in runs[False] + runs[True]}
    if len(shas) != 1:
        sys.exit(f'{d} devices: the sharded and unsharded runs end with different parameters')
    med = {s: statistics.median(1e3 * j['wall_s'] / j['steps_run'] for j in runs[s])
           for s in runs}
    rows.append({'devices': d, 'params': runs[False][0]['param_elements'],
                 'unsharded_step_ms': med[False], 'sharded_step_ms': med[True],
                 'ratio': med[True] / med[False],
                 'unsharded_state_bytes': runs[False][0]['optim_state_bytes_per_device'],
                 'sharded_state_bytes': runs[True][0]['optim_state_bytes_per_device'],
                 'bit_identical': True, 'rounds': a.rounds, 'steps': a.steps})
if a.json:
    print(json.dumps(rows))
else:
    print(f"{'devices':>7} {'params':>9} {'unsharded ms/step':>17} {'sharded ms/step':>15} "
          f"{'sharded/unsharded':>17} {'state B/device (unsh -> sh)':>28}")
    for r in rows:
        st = f"{r['unsharded_state_bytes']} -> {r['sharded_state_bytes']}"
        print(f"{r['devices']:>7} {r['params']:>9} {r['unsharded_step_ms']:>17.3f} "
              f"{r['sharded_step_ms']:>15.3f} {r['ratio']:>17.3f} {st:>28}")
    print('parameters bit-identical sharded and unsharded: yes')
