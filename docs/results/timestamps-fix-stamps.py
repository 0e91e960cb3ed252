"""How many of the evaluation windows of the crypto and FX groups get other future stamps with the
fix (the series' calendar) than without (the template learned from each window), horizon 5."""
import collections
import sys

from kronos_core.cli.model_runs import eval_windows
from kronos_core.data.timestamps import future_timestamps
from kronos_core.eval.sources import corpus_source

src = corpus_source(sys.argv[1], markets=["crypto", "FX"], max_per_group=2)


class A:
    lookback, windows, step, start, end, last_fraction = 251, 4, None, None, None, None


w = eval_windows(A, src, 5)
count = collections.Counter()
first = collections.Counter()
for i, k in enumerate(w.series_index):
    info = src.info[k]
    old = future_timestamps(w.context_ts[i], 5)
    key = (info.market, info.frequency, src.series[k].meta.get("exchange"))
    count[key, "windows"] += 1
    count[key, "differ"] += int(list(old) != list(w.future_ts[i]))
    first[key] += int(old[0] != w.future_ts[i][0])
for key in sorted({k for k, _ in count}):
    print(f"| {key[0]} | {key[1]} | {key[2]} | {count[key, 'windows']} | {count[key, 'differ']} "
          f"| {first[key]} |")
