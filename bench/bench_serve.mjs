// bench_serve.mjs: a load generator for `pengine serve` on loopback (node 18+, global fetch,
// no npm packages). bench_serve.sh starts the server and runs it:
//
//   node bench/bench_serve.mjs --url http://127.0.0.1:PORT --vocab V --batch B
//        [--requests N] [--seed S] [--rates 0.25,0.5,0.75,1] [--trials T] [--lone N]
//        [--prompt-min 16] [--prompt-max 256] [--out-min 8] [--out-max 128]
//        [--json FILE] [--markdown] [--model TEXT]
//
// The workload (seeded, mulberry32): N completions, each a prompt of random token ids and an
// exact output length (max_tokens with ignore_eos, greedy). Both lengths are log-normal with
// sigma 0.8, clamped to their ranges, so each has a long tail: prompts of median
// 2 x prompt-min in [prompt-min, prompt-max] (defaults: median 32, mean about 48), outputs of
// median 4 x out-min in [out-min, out-max] (median 32, mean about 41): about as many output
// tokens as prompt tokens, since on CPUs a prompt token costs about what a decoded one does
// and long prompts would make this a benchmark of prefill. Every run generates the same
// tokens.
// Each request is streamed (server-sent events) with return_token_ids, so each token's
// arrival is seen: TTFT = first token - send; TPOT = (last token - first token) / (tokens - 1).
// Phases, in this order, all through the same server (its --max-seqs is B), after a warm-up
// (the first B requests at once, not measured):
//   static #k   static batching, the baseline: the requests in fixed batches of B, each batch
//               sent at once, the next only when the longest of the batch has finished;
//   saturation #k  all N requests at once (the server runs B, the rest queue);
//               the two, in turn, T times (--trials, default 3); the saturation request rate
//               R is the median of N / the time each saturation phase took;
//   poisson f   the requests at Poisson arrivals of rate f x R, for each f of --rates;
//   lone        the first --lone requests one at a time (the TPOT of a request alone), run
//               just before poisson 0.5 (else last): the machine is shared, so each target's
//               two figures are measured next to each other.
// Targets (issue 12, section 5), printed PASS or MISS:
//   - output tok/s at saturation >= 2 x static batching's (the median of the trials' ratios,
//     since the machine is shared and noisy, as bench_llm_grids takes them);
//   - at 0.5 x R, p99 TPOT <= 1.5 x a lone request's TPOT (the median of the lone phase).
// Exit status: 1 when a request fails or gets other than its max_tokens tokens; a MISS is 0.

import { writeFileSync } from 'node:fs';
import os from 'node:os';

// ---- flags ---------------------------------------------------------------------------------
const DEFAULTS = {
    url: null, vocab: 0, batch: 16, requests: 128, seed: 1, rates: '0.25,0.5,0.75,1',
    trials: 3, lone: 16, 'prompt-min': 16, 'prompt-max': 256, 'out-min': 8, 'out-max': 128, json: null,
    markdown: false, model: '',
};

function parseFlags(argv) {
    const o = { ...DEFAULTS };
    for (let i = 0; i < argv.length; i++) {
        const name = argv[i].replace(/^--/, '');
        if (!argv[i].startsWith('--') || !(name in o))
            throw new Error(`unknown flag '${argv[i]}'; see the comment at the top of ${import.meta.url}`);
        if (typeof o[name] === 'boolean') { o[name] = true; continue; }
        if (i + 1 >= argv.length) throw new Error(`${argv[i]} needs a value`);
        const v = argv[++i];
        o[name] = typeof DEFAULTS[name] === 'number' ? Number(v) : v;
        if (typeof DEFAULTS[name] === 'number' && !(Number.isInteger(o[name]) && o[name] >= 0))
            throw new Error(`${argv[i - 1]} '${v}' is not a whole number`);
    }
    o.rates = String(o.rates).split(',').map(Number);
    if (!o.url || !o.vocab) throw new Error('--url and --vocab are required (bench_serve.sh gives them)');
    if (o.rates.some((f) => !(f > 0))) throw new Error(`--rates: give fractions > 0, e.g. 0.25,0.5`);
    if (o.batch < 1 || o.requests < 1 || o.trials < 1)
        throw new Error('--batch, --requests and --trials must be at least 1');
    if (o['prompt-min'] < 1 || o['prompt-min'] > o['prompt-max'] ||
        o['out-min'] < 1 || o['out-min'] > o['out-max'])
        throw new Error('give 1 <= --prompt-min <= --prompt-max and 1 <= --out-min <= --out-max');
    o.lone = Math.min(o.lone, o.requests);
    return o;
}

// ---- the seeded workload -----------------------------------------------------------------------
function mulberry32(seed) {
    let a = seed >>> 0;
    return () => {
        a = (a + 0x6d2b79f5) >>> 0;
        let t = a;
        t = Math.imul(t ^ (t >>> 15), t | 1);
        t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
        return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
}

const clamp = (x, lo, hi) => Math.min(hi, Math.max(lo, x));

// A standard normal (Box-Muller).
function normal(rand) {
    const u = 1 - rand(), v = rand();
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
}

// The requests: { prompt: ids, maxTokens }. Ids from 3 up, past the usual special tokens.
function makeWorkload(o) {
    const rand = mulberry32(o.seed);
    const [pmin, pmax, omin, omax] = [o['prompt-min'], o['prompt-max'], o['out-min'], o['out-max']];
    const reqs = [];
    for (let i = 0; i < o.requests; i++) {
        const plen = Math.round(clamp(2 * pmin * Math.exp(0.8 * normal(rand)), pmin, pmax));
        const out = Math.round(clamp(4 * omin * Math.exp(0.8 * normal(rand)), omin, omax));
        const prompt = Array.from({ length: plen }, () => 3 + Math.floor(rand() * (o.vocab - 3)));
        reqs.push({ prompt, maxTokens: out });
    }
    return reqs;
}

// Arrival times (seconds from the start) of a Poisson process of the given rate (req/s).
function poissonArrivals(n, rate, seed) {
    const rand = mulberry32(seed);
    const t = [];
    let now = 0;
    for (let i = 0; i < n; i++) {
        t.push(now);
        now += -Math.log(1 - rand()) / rate;
    }
    return t;
}

// ---- one request ---------------------------------------------------------------------------------
const now = () => performance.now(); // ms

// Sends req streamed and times its tokens: { sent, first, last, tokens, usage, finish, error }.
async function runRequest(url, req) {
    const r = { sent: now(), first: 0, last: 0, tokens: 0, usage: -1, finish: null, error: null };
    try {
        const res = await fetch(url + '/v1/completions', {
            method: 'POST', headers: { 'Content-Type': 'application/json' },
            body: JSON.stringify({
                prompt: req.prompt, max_tokens: req.maxTokens, temperature: 0, ignore_eos: true,
                stream: true, return_token_ids: true, stream_options: { include_usage: true } }),
        });
        if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
        await readEvents(res, r);
    } catch (e) {
        r.error = String(e.message ?? e);
    }
    return r;
}

// Reads the server-sent events into r; a token's time is when its bytes arrived.
async function readEvents(res, r) {
    const dec = new TextDecoder();
    let buf = '';
    for await (const piece of res.body) {
        const t = now();
        buf += dec.decode(piece, { stream: true });
        let k;
        while ((k = buf.indexOf('\n\n')) >= 0) {
            const data = buf.slice(0, k).replace(/^data: /, '');
            buf = buf.slice(k + 2);
            if (data === '[DONE]') return;
            const ev = JSON.parse(data);
            if (ev.error) throw new Error(`an error event: ${data}`);
            if (ev.usage) r.usage = ev.usage.completion_tokens;
            const c = ev.choices?.[0];
            if (!c) continue;
            const n = c.token_ids?.length ?? 0;
            if (n && !r.tokens) r.first = t;
            if (n) r.last = t;
            r.tokens += n;
            if (c.finish_reason) r.finish = c.finish_reason;
        }
    }
    throw new Error('the stream ended without [DONE]');
}

// ---- the phases ------------------------------------------------------------------------------
const sleep = (ms) => new Promise((res) => setTimeout(res, ms));

async function oneAtATime(url, reqs) {
    const out = [];
    for (const q of reqs) out.push(await runRequest(url, q));
    return out;
}

async function staticBatches(url, reqs, b) {
    const out = [];
    for (let i = 0; i < reqs.length; i += b)
        out.push(...await Promise.all(reqs.slice(i, i + b).map((q) => runRequest(url, q))));
    return out;
}

const allAtOnce = (url, reqs) => Promise.all(reqs.map((q) => runRequest(url, q)));

async function poisson(url, reqs, rate, seed) {
    const arrivals = poissonArrivals(reqs.length, rate, seed);
    const t0 = now(), pending = [];
    for (let i = 0; i < reqs.length; i++) {
        const wait = t0 + arrivals[i] * 1000 - now();
        if (wait > 0) await sleep(wait);
        pending.push(runRequest(url, reqs[i]));
    }
    return Promise.all(pending);
}

// ---- figures -------------------------------------------------------------------------------------
// The q-quantile of xs, nearest rank (as bench_util's bu_quantile); NaN when empty.
function quantile(xs, q) {
    if (!xs.length) return NaN;
    const s = [...xs].sort((a, b) => a - b);
    return s[clamp(Math.ceil(q * s.length) - 1, 0, s.length - 1)];
}

// A phase's figures from its requests' results (rs[i] answers reqs[i]).
function summarize(name, reqs, rs, t0, t1) {
    const ok = rs.filter((r) => !r.error);
    const exact = rs.filter((r, i) => !r.error && r.tokens === reqs[i].maxTokens &&
                                      r.usage === reqs[i].maxTokens && r.finish === 'length');
    const ttft = ok.map((r) => r.first - r.sent);
    const tpot = ok.filter((r) => r.tokens > 1).map((r) => (r.last - r.first) / (r.tokens - 1));
    const tokens = ok.reduce((a, r) => a + r.tokens, 0);
    const seconds = (t1 - t0) / 1000;
    return {
        phase: name, requests: reqs.length, completed: ok.length, exact_tokens: exact.length,
        tokens_expected: reqs.reduce((a, q) => a + q.maxTokens, 0), tokens_received: tokens,
        errors: rs.filter((r) => r.error).map((r) => r.error).slice(0, 3),
        seconds, req_s: reqs.length / seconds, tok_s: tokens / seconds,
        ttft_ms: { p50: quantile(ttft, 0.5), p99: quantile(ttft, 0.99) },
        tpot_ms: { p50: quantile(tpot, 0.5), p99: quantile(tpot, 0.99) },
    };
}

async function measure(name, reqs, run) {
    const t0 = now(), cpu0 = process.cpuUsage();
    const rs = await run();
    const p = summarize(name, reqs, rs, t0, now());
    const cpu = process.cpuUsage(cpu0);
    p.client_cpu_s = (cpu.user + cpu.system) / 1e6; // this client's share of the cores
    printRow(p);
    return p;
}

// ---- output ----------------------------------------------------------------------------------
const f1 = (x) => (Number.isFinite(x) ? x.toFixed(1) : '-');

function printHeader() {
    console.log(`${'phase'.padEnd(16)} ${'req/s'.padStart(7)} ${'tok/s'.padStart(8)} ` +
                `${'TTFT p50'.padStart(9)} ${'p99 ms'.padStart(8)} ${'TPOT p50'.padStart(9)} ` +
                `${'p99 ms'.padStart(8)}  exact`);
}

function printRow(p) {
    console.log(`${p.phase.padEnd(16)} ${p.req_s.toFixed(2).padStart(7)} ${f1(p.tok_s).padStart(8)} ` +
                `${f1(p.ttft_ms.p50).padStart(9)} ${f1(p.ttft_ms.p99).padStart(8)} ` +
                `${f1(p.tpot_ms.p50).padStart(9)} ${f1(p.tpot_ms.p99).padStart(8)}  ` +
                `${p.exact_tokens}/${p.requests}`);
}

const median = (xs) => quantile(xs, 0.5);

// The targets; the throughput ratio is the median over the trials of each trial's ratio.
function targets(phases, trials) {
    const by = (name) => phases.find((p) => p.phase === name);
    const lone = by('lone'), half = by('poisson 0.5');
    const ratios = [];
    for (let k = 1; k <= trials; k++)
        ratios.push(by(`saturation #${k}`).tok_s / by(`static #${k}`).tok_s);
    const t = [{
        figure: 'output tok/s at saturation / static batching', target: '>=', bound: 2,
        value: median(ratios), trials: ratios,
    }];
    if (half)
        t.push({ figure: 'p99 TPOT at 0.5 x saturation / a lone request\'s TPOT', target: '<=',
                 bound: 1.5, value: half.tpot_ms.p99 / lone.tpot_ms.p50 });
    for (const x of t) x.pass = x.target === '>=' ? x.value >= x.bound : x.value <= x.bound;
    return t;
}

function printTargets(ts) {
    console.log('\ntargets (issue 12, section 5):');
    for (const x of ts)
        console.log(`  ${x.figure}: ${x.value.toFixed(2)} ${x.pass ? 'PASS' : 'MISS'} ` +
                    `(target ${x.target} ${x.bound})` +
                    (x.trials ? `; the median of the trials' ${x.trials.map((r) => r.toFixed(2)).join(', ')}` : ''));
}

function printMarkdown(res) {
    console.log(`\n| phase | req/s | output tok/s | TTFT p50 / p99 (ms) | TPOT p50 / p99 (ms) |\n` +
                '| --- | --- | --- | --- | --- |');
    for (const p of res.phases)
        console.log(`| ${p.phase} | ${p.req_s.toFixed(2)} | ${f1(p.tok_s)} | ` +
                    `${f1(p.ttft_ms.p50)} / ${f1(p.ttft_ms.p99)} | ` +
                    `${f1(p.tpot_ms.p50)} / ${f1(p.tpot_ms.p99)} |`);
    console.log('\n| target (issue 12, section 5) | value | |\n| --- | --- | --- |');
    for (const x of res.targets)
        console.log(`| ${x.figure} ${x.target} ${x.bound} | ${x.value.toFixed(2)}` +
                    (x.trials ? ` (trials: ${x.trials.map((r) => r.toFixed(2)).join(', ')})` : '') +
                    ` | ${x.pass ? 'PASS' : 'MISS'} |`);
}

// ---- main ------------------------------------------------------------------------------------
async function main() {
    const o = parseFlags(process.argv.slice(2));
    const reqs = makeWorkload(o);
    const mean = (xs) => xs.reduce((a, x) => a + x, 0) / xs.length;
    const meanPrompt = mean(reqs.map((q) => q.prompt.length));
    const meanOut = mean(reqs.map((q) => q.maxTokens));
    console.log(`bench_serve: ${o.requests} requests (seed ${o.seed}) on ${o.model || o.url}, ` +
                `server --max-seqs ${o.batch}; prompts ${o['prompt-min']}-${o['prompt-max']} ` +
                `tokens (mean ${meanPrompt.toFixed(1)}), outputs ${o['out-min']}-${o['out-max']} ` +
                `(mean ${meanOut.toFixed(1)})\n`);
    await allAtOnce(o.url, reqs.slice(0, o.batch)); // warm-up: not measured
    const load = [os.loadavg()[0]];
    printHeader();
    const phases = [];
    const lone = async () => phases.push(await measure('lone', reqs.slice(0, o.lone),
                                                       () => oneAtATime(o.url, reqs.slice(0, o.lone))));
    const satRates = [];
    for (let k = 1; k <= o.trials; k++) {
        phases.push(await measure(`static #${k}`, reqs, () => staticBatches(o.url, reqs, o.batch)));
        phases.push(await measure(`saturation #${k}`, reqs, () => allAtOnce(o.url, reqs)));
        satRates.push(phases.at(-1).req_s);
    }
    const satRate = median(satRates);
    for (const [k, f] of o.rates.entries()) {
        if (f === 0.5) await lone(); // side by side with the phase it is held against
        phases.push(await measure(`poisson ${f}`, reqs,
                                  () => poisson(o.url, reqs, f * satRate, o.seed * 1000 + k + 1)));
    }
    if (!phases.some((p) => p.phase === 'lone')) await lone();
    load.push(os.loadavg()[0]);
    const total = (k) => phases.reduce((a, p) => a + p[k], 0);
    console.log(`\nthis client (node) used ${total('client_cpu_s').toFixed(1)} s of CPU in ` +
                `${total('seconds').toFixed(1)} s of phases, on the server's cores`);
    console.log(`the machine's load average (1 min): ${load[0].toFixed(2)} at the start, ` +
                `${load[1].toFixed(2)} at the end, on ${os.cpus().length} cores (other work ` +
                `than the server and this client makes the figures noisy)`);
    const res = {
        config: { url: o.url, model: o.model, requests: o.requests, seed: o.seed, batch: o.batch,
                  rates: o.rates, lone: o.lone, prompt_len: [o['prompt-min'], o['prompt-max']],
                  output_len: [o['out-min'], o['out-max']], mean_prompt_len: meanPrompt,
                  trials: o.trials, mean_output_len: meanOut, saturation_req_s: satRate,
                  load_average: load,
                  cores: os.cpus().length,
                  workload: reqs.map((q) => [q.prompt.length, q.maxTokens]) },
        phases, targets: targets(phases, o.trials),
    };
    printTargets(res.targets);
    if (o.markdown) printMarkdown(res);
    if (o.json) writeFileSync(o.json, JSON.stringify(res, null, 2) + '\n');
    const bad = phases.filter((p) => p.exact_tokens !== p.requests);
    for (const p of bad)
        console.error(`error: ${p.phase}: ${p.requests - p.exact_tokens} requests did not get ` +
                      `exactly their max_tokens tokens ${JSON.stringify(p.errors)}`);
    return bad.length ? 1 : 0;
}

main().then((rc) => process.exit(rc), (e) => {
    console.error(`error: ${e.message}`);
    process.exit(1);
});
