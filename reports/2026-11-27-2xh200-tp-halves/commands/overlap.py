"""How much of a trace's NCCL kernel time ran beside compute kernels, per stream summary."""
import json, sys, collections
for path in sys.argv[1:]:
    t = json.load(open(path))
    ev = [e for e in t.get("traceEvents", []) if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    if not ev:
        print(path, "no kernels"); continue
    nccl = [(e["ts"], e["ts"] + e["dur"]) for e in ev if "nccl" in e["name"].lower()]
    comp = [(e["ts"], e["ts"] + e["dur"]) for e in ev if "nccl" not in e["name"].lower()]
    def merge(iv):
        iv = sorted(iv); out = []
        for a, b in iv:
            if out and a <= out[-1][1]: out[-1][1] = max(out[-1][1], b)
            else: out.append([a, b])
        return out
    def total(iv): return sum(b - a for a, b in iv)
    def inter(x, y):
        i = j = 0; s = 0
        while i < len(x) and j < len(y):
            a = max(x[i][0], y[j][0]); b = min(x[i][1], y[j][1])
            if a < b: s += b - a
            if x[i][1] < y[j][1]: i += 1
            else: j += 1
        return s
    mn, mc = merge(nccl), merge(comp)
    span = max(e["ts"] + e["dur"] for e in ev) - min(e["ts"] for e in ev)
    busy = total(merge(nccl + comp))
    streams = collections.Counter()
    for e in ev: streams[(e.get("args", {}).get("stream"), "nccl" if "nccl" in e["name"].lower() else "compute")] += e["dur"]
    print(f"{path}: span {span/1e3:.2f} ms, busy {busy/1e3:.2f}, idle {(span-busy)/1e3:.2f}; nccl {total(mn)/1e3:.2f} ms "
          f"of which beside compute {inter(mn, mc)/1e3:.2f}; compute {total(mc)/1e3:.2f}; nccl alone {(total(mn)-inter(mn,mc))/1e3:.2f}")
    print("   by stream (ms):", {f"{k[0]}/{k[1]}": round(v / 1e3, 2) for k, v in sorted(streams.items(), key=lambda kv: -kv[1])[:8]})
