#!/usr/bin/env bash
# test_bench_serve.sh PENGINE: a short run of bench/bench_serve.sh (the tiny Llama, 24 requests,
# --max-seqs 8) so that CI exercises the load generator; it checks properties, not speed: the
# run exits 0 (the server too, after SIGTERM), its --json is well formed, every phase's every
# request completed with exactly its max_tokens tokens (the sums match the workload's), and
# each phase's percentiles are ordered (p50 <= p99). Exits 77 (skipped) as bench_serve.sh does.
set -euo pipefail
pengine=$1
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rc=0
"$root/bench/bench_serve.sh" --pengine "$pengine" --tiny --requests 24 --batch 8 --lone 4 \
    --rates 0.5,1 --trials 2 --json "$tmp/bench.json" || rc=$?
if ((rc == 77)); then
    exit 77
fi
((rc == 0)) || { echo "FAIL: bench_serve.sh exited $rc"; exit 1; }
node - "$tmp/bench.json" <<'JS'
const fs = require('fs');
const r = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const check = (ok, what) => { if (!ok) { console.log(`FAIL: ${what}`); process.exit(1); } };
const c = r.config;
check(c.workload.length === 24, `the workload has ${c.workload.length} requests, not 24`);
const sum = (w) => w.reduce((a, [, m]) => a + m, 0);
const names = r.phases.map((p) => p.phase);
check(JSON.stringify(names) ===
      JSON.stringify(['static #1', 'saturation #1', 'static #2', 'saturation #2', 'lone', 'poisson 0.5',
                     'poisson 1']),
      `the phases are ${names}`);
for (const p of r.phases) {
    const w = c.workload.slice(0, p.requests);
    check(p.requests === (p.phase === 'lone' ? 4 : 24), `${p.phase}: ${p.requests} requests`);
    check(p.completed === p.requests && p.exact_tokens === p.requests,
          `${p.phase}: ${p.completed} completed, ${p.exact_tokens} with exactly max_tokens tokens`);
    check(p.tokens_expected === sum(w) && p.tokens_received === sum(w),
          `${p.phase}: ${p.tokens_received} tokens received, ${p.tokens_expected} expected, ` +
          `the workload's max_tokens sum to ${sum(w)}`);
    for (const k of ['ttft_ms', 'tpot_ms']) {
        const { p50, p99 } = p[k];
        check(Number.isFinite(p50) && Number.isFinite(p99) && p50 >= 0 && p50 <= p99,
              `${p.phase}: ${k} p50 ${p50}, p99 ${p99}: not 0 <= p50 <= p99`);
    }
    check(p.seconds > 0 && p.tok_s > 0, `${p.phase}: ${p.seconds} s, ${p.tok_s} tok/s`);
}
check(r.targets.length === 2 && r.targets[0].trials.length === 2 && r.targets.every((t) => Number.isFinite(t.value) &&
                                                       typeof t.pass === 'boolean'),
      `the targets: ${JSON.stringify(r.targets)}`);
console.log(`ok: ${r.phases.length} phases, every request with exactly its max_tokens tokens`);
JS
