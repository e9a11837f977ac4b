"""GPU time of a step and its top kernels, through torch.profiler (CUPTI sees every kernel of the
process, a ptc library's included). Used by bench_train.py and cuda_check.py."""
import time


def gpu_profile(label, step, sync, top):
    """GPU time per step of `step` (3 steps under torch.profiler, which sees every kernel of the
    process, ptc's included) and its `top` kernels by total time."""
    from torch.profiler import ProfilerActivity, profile
    step()
    sync()
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            step()
        sync()
    wall = (time.perf_counter() - t0) / 3
    events = [e for e in prof.key_averages() if e.self_device_time_total > 0]
    total = sum(e.self_device_time_total for e in events) / 3 / 1e3
    n = sum(e.count for e in events) / 3
    print(f"\n{label}: {total:.2f} ms GPU time per step in {n:.0f} kernels and copies ({wall * 1e3:.1f} ms wall per step, "
          "profiled)")
    for e in sorted(events, key=lambda e: -e.self_device_time_total)[:top]:
        print(f"  {e.self_device_time_total / 3 / 1e3:8.3f} ms  {e.count / 3:5.0f}x  {e.key[:110]}")
    # ptc's generated kernels each have their own name: their sum.
    gen = [e for e in events if e.key.startswith("ptc_gen::")]
    if gen:
        print(f"  {sum(e.self_device_time_total for e in gen) / 3 / 1e3:8.3f} ms  {sum(e.count for e in gen) / 3:5.0f}x  "
              "all generated kernels (ptc_gen::) together")
    # The host side: CUDA runtime and driver calls (CUPTI sees every library's), by CPU time.
    api = [e for e in prof.key_averages() if e.key.startswith("cu") and e.self_cpu_time_total > 0]
    print(f"  host: {sum(e.self_cpu_time_total for e in api) / 3 / 1e3:.2f} ms per step in CUDA API calls; the most:")
    for e in sorted(api, key=lambda e: -e.self_cpu_time_total)[:8]:
        print(f"  {e.self_cpu_time_total / 3 / 1e3:8.3f} ms  {e.count / 3:5.0f}x  {e.key[:80]}")
