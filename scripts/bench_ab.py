#!/usr/bin/env python3
"""Compares two builds of optitpu on the same machine: a refactor's before (A) and after (B).

    scripts/bench_ab.py A_ROOT B_ROOT [ROUNDS]

A_ROOT and B_ROOT are checkouts with a Release build in build/ (optitpu, bench_dispatch,
bench_dot). Each round runs, for A then B (B then A on odd rounds, so drift in the machine's load
hits both), `optitpu run` on eleven HLO modules (--repeat 11, the run's median), `optitpu bench`
compile / ir / optim (1 and 200 tensors) / train, bench_dispatch and bench_dot, and prints each
figure's median over the rounds for A and B and B/A. The modules are read from A_ROOT, so both
builds run the same files. Medians and a ratio, never one time: the machines are shared.
"""
import json, subprocess, sys, statistics, os, tempfile
A, B = sys.argv[1], sys.argv[2]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
H = os.path.join(A, 'tests', 'data')
progs = [os.path.join(A, 'bench', 'hlo', 'adam_update_4m.hlo'),
         H+'/hlo/backends__cpu__benchmarks__hlo__layer_norm_1x4096x768_bf16.hlo',
         H+'/hlo/backends__cpu__benchmarks__hlo__mha_block_1x12x128x64_bf16.hlo',
         H+'/hlo/backends__cpu__benchmarks__hlo__mean_axis_1x4096x1024_bf16.hlo',
         H+'/hlo/backends__cpu__benchmarks__hlo__depthwise_conv_3x3_1x256x56x56_bf16.hlo',
         H+'/jax/attention_causal/module.hlo', H+'/jax/cnn_forward_backward/module.hlo',
         H+'/jax/mlp_forward_backward/module.hlo', H+'/jax/softmax_cross_entropy/module.hlo',
         H+'/jax/layer_norm/module.hlo', H+'/jax/gelu_erf/module.hlo']
res = {}
def rec(side, key, v): res.setdefault(key, {'A': [], 'B': []})[side].append(v)
def run(side, root):
    exe = root + '/build/optitpu'
    tmp = tempfile.mkdtemp()
    for p in progs:
        out = subprocess.run([exe, 'run', p, '--fill', 'random:1', '--repeat', '11', '--json', '--output-dir', tmp], capture_output=True, text=True)
        try:
            j = json.loads(out.stdout.strip().splitlines()[-1]); rec(side, 'run ms ' + os.path.basename(os.path.dirname(p)) + '/' + os.path.basename(p)[-40:], j['median_ms'])
        except Exception as e: rec(side, 'run FAIL ' + p, float('nan'))
    for args, keyf in [(['bench', 'compile', '--sizes', '100000,200000', '--reps', '3', '--json'], 'compile'),
                       (['bench', 'ir', '--n', '200000', '--reps', '3', '--json'], 'ir'),
                       (['bench', 'optim', '--params', '4M', '--reps', '7', '--no-limits', '--json'], 'optim'),
                       (['bench', 'optim', '--params', '4M', '--tensors', '200', '--reps', '7', '--no-limits', '--json'], 'optim200'),
                       (['bench', 'train', '--reps', '1', '--json'], 'train')]:
        out = subprocess.run([exe] + args, capture_output=True, text=True)
        for line in out.stdout.splitlines():
            try: j = json.loads(line)
            except Exception: continue
            rec(side, f"{keyf}: {j.get('case')} [{j.get('metric')}]", j.get('value'))
    for b, args in [('bench_dispatch', ['--json']), ('bench_dot', ['--json'])]:
        out = subprocess.run([root + '/build/' + b] + args, capture_output=True, text=True)
        for line in out.stdout.splitlines():
            try: j = json.loads(line)
            except Exception: continue
            rec(side, f"{b}: {j.get('case')} [{j.get('metric')}]", j.get('value'))
for r in range(rounds):
    for side, root in (('A', A), ('B', B)) if r % 2 == 0 else (('B', B), ('A', A)):
        run(side, root)
print(f"{'case':70s} {'A med':>10s} {'B med':>10s} {'B/A':>6s}")
for k, v in res.items():
    a = [x for x in v['A'] if isinstance(x,(int,float))]; b = [x for x in v['B'] if isinstance(x,(int,float))]
    if not a or not b: print(f"{k:70s} missing"); continue
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"{k[:70]:70s} {ma:10.4g} {mb:10.4g} {mb/ma if ma else float('nan'):6.3f}")
