// test_mpi_serve.mjs PENGINE MODEL MPIRUN...: pengine serve across 2 MPI processes (PP2, one
// stage each) answers as one process does, and stops cleanly.
// - 4 concurrent completions of different prompts: each the same greedy text and token
//   count as from a one-process server on one device.
// - /metrics: no sequence running and no KV block held once they are answered.
// - SIGTERM to process 0's pengine with a request in flight: the request completes (its
//   100 tokens), the followers stop with it, and mpirun exits 0.
import { readFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { once } from 'node:events';
import { check, eq, startServer, waitIdle } from './serve_util.mjs';

const [pengine, model, ...mpirun] = process.argv.slice(2);
const prompts = ['Hello', 'The quick brown fox', 'Once upon a time there was', 'A'];

async function complete(url, prompt, max_tokens) {
    const r = await fetch(url + '/v1/completions', {
        method: 'POST',
        body: JSON.stringify({ prompt, max_tokens, ignore_eos: true, temperature: 0 }),
    });
    eq(r.status, 200, `status of the completion of ${JSON.stringify(prompt)}`);
    const j = await r.json();
    return { text: j.choices[0].text, finish: j.choices[0].finish_reason,
             tokens: j.usage.completion_tokens };
}

async function answers(url) {
    return Promise.all(prompts.map((p) => complete(url, p, 24)));
}

// The pid of the job's process 0: mpirun's child whose environment says rank 0.
function processZero(mpirunPid) {
    const kids = execFileSync('pgrep', ['-P', String(mpirunPid)]).toString().trim().split('\n');
    for (const pid of kids) {
        const env = readFileSync(`/proc/${pid}/environ`).toString().split('\0');
        if (env.includes('OMPI_COMM_WORLD_RANK=0')) return Number(pid);
    }
    throw new Error(`FAIL: no process 0 among mpirun's children ${kids}`);
}

const one = await startServer(pengine, model, ['--gpus', '0']);
const alone = await answers(one.url);
one.p.kill('SIGTERM');
await once(one.p, 'exit');

const job = await startServer(pengine, model, ['--pp', '2', '--gpus', '0'], mpirun);
const across = await answers(job.url);
for (let i = 0; i < prompts.length; i++)
    eq(across[i], alone[i], `prompt ${i} across 2 processes against one`);
console.log('ok: 4 concurrent completions across 2 processes equal one process\'s');
const m = await waitIdle(job.url);
eq(m.pengine_kv_blocks_used, 0, 'KV blocks held once idle');

const inflight = complete(job.url, 'Hello there', 100);
await new Promise((r) => setTimeout(r, 200));
const exited = once(job.p, 'exit');
process.kill(processZero(job.p.pid), 'SIGTERM');
const last = await inflight;
eq([last.tokens, last.finish], [100, 'length'], 'the request in flight at SIGTERM');
eq((await exited)[0], 0, `mpirun's exit code after SIGTERM to process 0 (${job.p.stderrText()})`);
check(/finishing the requests in flight/.test(job.p.stderrText()), 'process 0 said it drains');
console.log('ok: SIGTERM to process 0 finishes the request in flight; the job exits 0');
