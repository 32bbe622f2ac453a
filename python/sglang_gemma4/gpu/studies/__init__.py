"""Studies: measurements that write tables rather than a verdict: A/B benches, decode, prefill and
speculative-step profiles, step traces, memory, KV capacity, compile caches and start times. They
use serve/ and nothing of checks/ or kernels/."""
