"""bench/bench_sides.py -- one cell of the bench tables (gpu_bench.sh, split_ab.sh, busy_host.sh):
which side a one-graph hybrid layer step waited for, from a `moeplan bench` JSON row.

sides(row) -> "GPU / CPU µs (GPU led N %)": the GPU's side of the mean timed hybrid layer step
(`rt_gpu_us`: resident experts and far reads), the CPU experts' time (`cpu_expert_us`) and the
share of steps whose GPU side outlasted the CPU's (`rt_gpu_later_pct`); "-" for rows without timed
one-graph steps (the CPU executor, enqueued steps, rows of builds before the fields)."""


def sides(row):
    if not row.get("rt_measured") or not row.get("rt_gpu_us"):
        return "-"
    return f'{row["rt_gpu_us"]:.1f} / {row.get("cpu_expert_us", 0):.1f} ({row.get("rt_gpu_later_pct", 0):.0f} %)'
