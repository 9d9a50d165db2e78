#!/usr/bin/env bash
# optitpu bench collectives: the table, the JSON rows, every op, and argument errors.
set -euo pipefail
bin=$1
out=$("$bin" bench collectives --devices 3 --sizes 4K,96K --reps 2 --warmup 0)
grep -q "floor/t" <<<"$out"
[[ $(grep -c "^ *[0-9]" <<<"$out") -eq 2 ]]
for op in allreduce reduce_scatter allgather broadcast reduce alltoall; do
  js=$("$bin" bench collectives --devices 4 --op "$op" --sizes 64K --reps 1 --warmup 0 --json)
  grep -q "\"bench\": *\"collectives\"" <<<"$js" || { echo "no JSON row for $op: $js"; exit 1; }
  grep -q "\"baseline\": *\"N concurrent memcpy (floor)\"" <<<"$js"
done
"$bin" bench collectives --devices 2 --sizes 1M --reps 1 --explain --algo hier2d 2>/dev/null && { echo "hier2d on 2 devices accepted"; exit 1; }
"$bin" bench collectives --devices 4 --sizes 64K --reps 1 --dtype bf16 --redop mean --algo ring >/dev/null
if "$bin" bench collectives --op nope 2>/dev/null; then echo "bad op accepted"; exit 1; fi
echo "bench collectives ok"
