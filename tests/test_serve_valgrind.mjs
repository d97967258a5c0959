// test_serve_valgrind.mjs URL: the requests of a short pengine serve run under valgrind (see
// test_serve_valgrind.sh): every path a request takes through the server's threads, small.
import { check, metrics } from './serve_util.mjs';

const [url] = process.argv.slice(2);

const post = (path, body, signal) =>
    fetch(url + path, { method: 'POST', headers: { 'Content-Type': 'application/json' },
                        body: JSON.stringify(body), signal });
// The chunks of a stream, until [DONE] or `leave` of them.
async function stream(body, leave = Infinity) {
    const res = await post('/v1/completions', { ...body, stream: true });
    check(res.status === 200, `a stream answered ${res.status}`);
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let text = '', chunks = 0;
    for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        text += dec.decode(value, { stream: true });
        chunks = (text.match(/^data: /gm) || []).length;
        if (chunks >= leave) {
            await reader.cancel();
            return chunks;
        }
    }
    check(text.endsWith('data: [DONE]\n\n'), 'a stream ends with [DONE]');
    return chunks;
}

try {
    const whole = await (await post('/v1/completions', { prompt: 'Hello', max_tokens: 4,
                                                          temperature: 0 })).json();
    check(whole.usage.completion_tokens === 4, `a whole completion: ${JSON.stringify(whole)}`);
    check(await stream({ prompt: 'Hello', max_tokens: 4, temperature: 0, logprobs: 2 }) >= 2,
          'a stream with logprobs: chunks and [DONE]');
    const chat = await (await post('/v1/chat/completions', {
        messages: [{ role: 'user', content: 'Hi' }], max_tokens: 3, temperature: 0,
        logprobs: true, top_logprobs: 2 })).json();
    check(chat.choices[0].message.role === 'assistant' &&
          chat.choices[0].logprobs.content.length === 3, `a chat: ${JSON.stringify(chat)}`);
    // several choices: two prompts with n 2, whole; n 2 streamed
    const many = await (await post('/v1/completions', { prompt: ['Hello', 'Bye'], n: 2,
                                                         max_tokens: 3, temperature: 0 })).json();
    check(many.choices.length === 4 && many.usage.completion_tokens === 12,
          `two prompts, n 2: ${JSON.stringify(many)}`);
    check(await stream({ prompt: 'Hello', n: 2, max_tokens: 3, temperature: 0 }) >= 3,
          'n 2 streamed: chunks and [DONE]');
    // echo with logprobs (the prompt scored beside its sequence), whole and streamed
    const echoed = await (await post('/v1/completions', { prompt: 'Hello there', echo: true,
                                                           max_tokens: 2, logprobs: 1 })).json();
    check(echoed.choices[0].text.startsWith('Hello there') &&
          echoed.choices[0].logprobs.token_logprobs[0] === null,
          `echo: ${JSON.stringify(echoed)}`);
    check(await stream({ prompt: 'Hello there', echo: true, max_tokens: 2, logprobs: 1 }) >= 2,
          'echo streamed: chunks and [DONE]');
    // a JSON schema (compiled per request, freed with it), whole and streamed; a bad one
    const response_format = { type: 'json_schema', json_schema: { name: 'x', schema: {
        type: 'object', properties: {
            a: { enum: [1, 2] }, b: { type: 'string' },
            c: { type: 'string', pattern: '^[a-z]+$', maxLength: 4 } } } } };
    const json = await (await post('/v1/completions', { prompt: 'Hello', max_tokens: 6,
                                                         response_format })).json();
    check(json.choices[0].text.startsWith('{'), `a JSON schema: ${JSON.stringify(json)}`);
    check(await stream({ prompt: 'Hello', max_tokens: 6, response_format }) >= 2,
          'a JSON schema streamed: chunks and [DONE]');
    const bad = await post('/v1/completions', { prompt: 'Hello', response_format: {
        type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object',
        properties: { a: { type: 'string', pattern: '(?=x)' } } } } } });
    check(bad.status === 400 && (await bad.text()).includes('lookaround'),
          `a schema with a pattern pengine refuses: ${bad.status}`);
    // choices (a grammar per request too, freed with it); a pattern refused
    const picked = await (await post('/v1/completions', { prompt: 'Hello', max_tokens: 6,
        guided_choice: ['yes', 'no'] })).json();
    check(['yes', 'no'].includes(picked.choices[0].text), `choices: ${JSON.stringify(picked)}`);
    const badRegex = await post('/v1/completions', { prompt: 'Hello', guided_regex: 'a(b' });
    check(badRegex.status === 400 && (await badRegex.text()).includes('guided_regex'),
          `a bad pattern: ${badRegex.status}`);
    // 4 at once on a pool of 8 blocks: some are preempted
    await Promise.all([0, 1, 2, 3].map((i) => stream({
        prompt: `Stream number ${i} goes on and on`, max_tokens: 24, temperature: 0 })));
    // (each fits the pool of 8 blocks alone: 100 tokens and the prompt, 7 blocks)
    await stream({ prompt: 'Go on', max_tokens: 100, temperature: 0 }, 2); // left mid-stream
    const gone = new AbortController();
    const left = post('/v1/completions', { prompt: 'Go on again', max_tokens: 100 },
                      gone.signal).catch(() => 'aborted');
    setTimeout(() => gone.abort(), 300);
    check(await left === 'aborted', 'a whole answer left');
    let m;
    for (let i = 0; i < 600; i++) { // up to 60 s under valgrind
        m = await metrics(url);
        if (m.pengine_requests_running === 0 && m.pengine_kv_blocks_used === 0) break;
        await new Promise((r) => setTimeout(r, 100));
    }
    check(m.pengine_requests_running === 0 && m.pengine_kv_blocks_used === 0,
          `the server idle with no block held: ${JSON.stringify(m)}`);
    check(m.pengine_generation_tokens_total < 4 + 4 + 3 + 12 + 6 + 2 + 2 + 6 + 6 + 6 + 4 * 24 +
          100 + 100,
          `the requests left were cancelled (${m.pengine_generation_tokens_total} tokens)`);
    console.log(`ok: ${m.pengine_generation_tokens_total} tokens, ` +
                `${m.pengine_kv_preemptions_total} preemptions`);
} catch (e) {
    console.error(e.message);
    process.exit(1);
}
