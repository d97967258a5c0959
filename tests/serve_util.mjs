// serve_util.mjs: what the pengine serve tests share (test_serve.mjs, test_serve_page.mjs,
// test_serve_valgrind.mjs): checks that throw, a server started on a free port, /metrics read
// into numbers, and the wait until the server is idle.
import { spawn } from 'node:child_process';
import { once } from 'node:events';

export function check(ok, what) {
    if (!ok) throw new Error(`FAIL: ${what}`);
}

export function eq(a, b, what) {
    check(JSON.stringify(a) === JSON.stringify(b),
          `${what}: got ${JSON.stringify(a)}, expected ${JSON.stringify(b)}`);
}

// `pengine serve --model MODEL --port 0 ARGS...`, once it prints its address:
// { p (the process, with stderrText()), url ("http://127.0.0.1:PORT") }. launcher: words
// before pengine (mpirun and its flags), or none.
export async function startServer(pengine, model, args = [], launcher = []) {
    const argv = [pengine, 'serve', '--model', model, '--port', '0', ...args];
    const p = spawn(launcher.length ? launcher[0] : pengine,
                    launcher.length ? [...launcher.slice(1), ...argv] : argv.slice(1),
                    { stdio: ['ignore', 'pipe', 'pipe'] });
    let err = '';
    p.stderr.on('data', (d) => { err += d; });
    let out = '';
    const url = await new Promise((resolve, reject) => {
        p.stdout.on('data', (d) => {
            out += d;
            const m = out.match(/http:\/\/([0-9.]+):(\d+)\/v1/);
            if (m) resolve(`http://${m[1]}:${m[2]}`);
        });
        p.on('exit', (code) => reject(new Error(`FAIL: the server exited ${code}: ${err}`)));
    });
    p.stderrText = () => err;
    return { p, url };
}

// SIGTERM (or another signal), and the exit code must be 0.
export async function stopServer({ p }, signal = 'SIGTERM') {
    const exited = once(p, 'exit');
    p.kill(signal);
    eq((await exited)[0], 0, `the server's exit code after ${signal} (${p.stderrText()})`);
}

// /metrics as { name or name{labels}: number }.
export async function metrics(url) {
    const m = {};
    for (const line of (await (await fetch(url + '/metrics')).text()).split('\n'))
        if (line && !line.startsWith('#')) {
            const [k, v] = line.split(' ');
            m[k] = Number(v);
        }
    return m;
}

// The metrics once no sequence runs, no KV block is held and (unless others may be open, as a
// browser's) no other HTTP request is open: the scrape itself is the one. Up to 10 s.
export async function waitIdle(url, { othersOpen = false } = {}) {
    for (const end = Date.now() + 10000; Date.now() < end;) {
        const m = await metrics(url);
        if (m.pengine_requests_running === 0 && m.pengine_kv_blocks_used === 0 &&
            (othersOpen || m.pengine_http_requests_active === 1)) return m;
        await new Promise((r) => setTimeout(r, 25));
    }
    throw new Error(`FAIL: the server never went idle: ${JSON.stringify(await metrics(url))}`);
}
