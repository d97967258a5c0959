// test_serve_page.mjs PENGINE MODEL_DIR PLAYWRIGHT_DIR SCREENSHOT: pengine serve's chat page
// (GET /) in headless chromium, driven by playwright-core (see test_serve_page.sh). The page's
// replies are compared with the server's own non-streamed greedy answers, fetched from node.
// Every check that fails throws: the exit code is 1 with the reason.
import { mkdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import { check, eq, metrics, startServer as start, stopServer, waitIdle } from './serve_util.mjs';

const [pengine, model, playwrightDir, screenshot] = process.argv.slice(2);
const { chromium } = createRequire(`${playwrightDir}/`)('playwright-core');
const KEY = 'sesame';
const t0 = Date.now();

// ---- the server ----------------------------------------------------------------------------
const startServer = (extra = []) => start(pengine, model, extra);

// The server's own greedy answer to a conversation, not streamed.
async function directAnswer(url, messages, maxTokens) {
    const res = await fetch(url + '/v1/chat/completions', {
        method: 'POST', headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ messages, max_tokens: maxTokens, temperature: 0 }) });
    if (res.status !== 200) throw new Error(`FAIL: the direct answer: ${await res.text()}`);
    return (await res.json()).choices[0].message.content;
}

// ---- the page ------------------------------------------------------------------------------
// A page on url that records every request it makes, the chat requests' bodies, and console
// errors.
async function openPage(browser, url) {
    const page = await (await browser.newContext()).newPage();
    page.setDefaultTimeout(10000); // the tiny model answers in well under a second
    page.requests = [];
    page.chats = [];
    page.consoleErrors = [];
    page.on('request', (r) => {
        page.requests.push(r.url());
        if (r.url().endsWith('/v1/chat/completions')) page.chats.push(JSON.parse(r.postData()));
    });
    page.on('console', (m) => { if (m.type() === 'error') page.consoleErrors.push(m.text()); });
    page.on('pageerror', (e) => page.consoleErrors.push(`uncaught: ${e.message}`));
    const res = await page.goto(url + '/');
    eq([res.status(), res.headers()['content-type']], [200, 'text/html; charset=utf-8'],
       'GET /');
    return page;
}

// Records, in the page, the length of the last reply's text at every change of the log: the
// partial replies the person sees while it streams.
async function watchReply(page) {
    await page.evaluate(() => {
        window.partials = [];
        new MutationObserver(() => {
            const r = [...document.querySelectorAll('[data-role="assistant"]')].at(-1);
            if (r && r.dataset.state === 'streaming')
                window.partials.push(r.querySelector('.text').textContent.length);
        }).observe(document.getElementById('log'),
                   { subtree: true, childList: true, characterData: true, attributes: true });
    });
}

// Clicks Stop, in the page, as soon as the reply streaming has k chunks: however fast the
// model, the click comes long before a 400-token reply ends.
async function stopAtChunk(page, k) {
    await page.evaluate((k) => {
        const o = new MutationObserver(() => {
            const r = document.querySelector('[data-role="assistant"][data-state="streaming"]');
            if (r && Number(r.dataset.chunks) >= k) {
                o.disconnect();
                document.querySelector('[data-testid="stop"]').click();
            }
        });
        o.observe(document.getElementById('log'), { subtree: true, attributes: true });
    }, k);
}

// Types text, presses Enter, and waits for the reply to end: { text, state, chunks, tokS,
// ttftMs, stats, partials }.
async function say(page, text, { stop = false } = {}) {
    const n = await page.locator('[data-role="assistant"]').count();
    await watchReply(page);
    if (stop) await stopAtChunk(page, 3);
    await page.getByTestId('input').fill(text);
    await page.getByTestId('input').press('Enter');
    const reply = page.locator('[data-role="assistant"]').nth(n);
    await page.waitForFunction((k) => {
        const r = document.querySelectorAll('[data-role="assistant"]')[k];
        return (r && r.dataset.state !== 'streaming') ||
            document.getElementById('error').textContent;
    }, n);
    const error = await page.getByTestId('error').textContent();
    if (error) throw new Error(`FAIL: the page shows an error: ${error}`);
    const stats = reply.getByTestId('stats');
    return { text: await reply.locator('.text').textContent(),
             state: await reply.getAttribute('data-state'),
             chunks: Number(await reply.getAttribute('data-chunks')),
             tokS: Number(await stats.getAttribute('data-tok-s')),
             ttftMs: Number(await stats.getAttribute('data-ttft-ms')),
             stats: await stats.textContent(),
             partials: await page.evaluate(() => window.partials) };
}

// ---- the checks ----------------------------------------------------------------------------
async function loadsAndShowsTheModel(page) {
    await page.getByTestId('model').filter({ hasText: 'qwen' }).waitFor();
    await page.getByTestId('max-tokens').fill('48');
    await page.getByTestId('temperature').fill('0');
}

async function aReplyStreamsIn(page, url, convo) {
    const r = await say(page, 'Hello there');
    eq(r.state, 'done', 'the first reply ends');
    const partials = new Set(r.partials.filter((n) => n > 0 && n < r.text.length));
    check(partials.size >= 2, `the reply grows while it streams: partial lengths ` +
          `${JSON.stringify(r.partials)} of ${r.text.length}`);
    check(r.chunks >= 2, `chunks ${r.chunks}`);
    console.log(`  ${partials.size} partial lengths seen of ${r.chunks} chunks`);
    convo.push({ role: 'user', content: 'Hello there' });
    eq(r.text, await directAnswer(url, convo, 48), 'the streamed reply = the direct answer');
    convo.push({ role: 'assistant', content: r.text });
    check(r.tokS > 0 && r.ttftMs > 0, `tok/s ${r.tokS} and TTFT ${r.ttftMs} ms positive`);
    check(/tok\/s/.test(r.stats) && /first token \d+ ms/.test(r.stats), `stats: ${r.stats}`);
    const sent = page.chats.at(-1);
    eq([sent.stream, sent.stream_options, sent.temperature, sent.max_tokens, sent.model],
       [true, { include_usage: true }, 0, 48, 'qwen'], 'the request the page sent');
}

async function aSecondTurnSendsTheConversation(page, url, convo) {
    const r = await say(page, 'Tell me more');
    eq(r.state, 'done', 'the second reply ends');
    convo.push({ role: 'user', content: 'Tell me more' });
    eq(page.chats.at(-1).messages, convo, 'the second turn sends the whole conversation');
    eq(r.text, await directAnswer(url, convo, 48), 'the second reply = the direct answer');
    eq(await page.getByTestId('message').count(), 4, 'four messages shown');
    mkdirSync(dirname(screenshot), { recursive: true });
    await page.screenshot({ path: screenshot, fullPage: true });
    const png = readFileSync(screenshot);
    check(png.length > 1000 && png.subarray(1, 4).toString() === 'PNG',
          `the screenshot is a PNG (${png.length} bytes)`);
    console.log(`screenshot: ${screenshot}`);
}

async function stopEndsTheReply(page, url) {
    await page.getByTestId('new-chat').click();
    eq(await page.getByTestId('message').count(), 0, 'New chat empties the log');
    await page.getByTestId('max-tokens').fill('400');
    const before = await metrics(url);
    const r = await say(page, 'Go on and on', { stop: true });
    eq(r.state, 'stopped', 'the stopped reply');
    check(r.chunks >= 3 && r.chunks < 100, `the stopped reply's chunks: ${r.chunks}`);
    eq(page.chats.at(-1).messages, [{ role: 'user', content: 'Go on and on' }],
       'a new chat sends only its own message');
    check(await page.getByTestId('send').isEnabled(), 'Send is enabled after Stop');
    const after = await waitIdle(url, { othersOpen: true });
    const made = after.pengine_generation_tokens_total - before.pengine_generation_tokens_total;
    check(made >= 3 && made < 200, `Stop cancelled the sequence: ${made} of 400 tokens made`);
    console.log(`  stopped at ${r.chunks} chunks, ${made} tokens made`);
    // the conversation goes on after a stop
    await page.getByTestId('max-tokens').fill('8');
    eq((await say(page, 'Again')).state, 'done', 'a reply after a stop');
    eq(page.chats.at(-1).messages.length, 3, 'the stopped reply stays in the conversation');
}

async function noOtherOrigin(page, url) {
    const foreign = page.requests.filter((u) => new URL(u).origin !== url);
    eq(foreign, [], 'requests to another origin');
    check(page.requests.length >= 4, `the requests seen: ${page.requests.length}`);
    eq(page.consoleErrors, [], 'console errors');
}

// A request the server refuses (400): its message shown, the message back in the input.
async function anErrorIsShown(page) {
    const before = await page.getByTestId('message').count();
    await page.getByTestId('max-tokens').fill('100000');
    await page.getByTestId('input').fill('Too long');
    await page.getByTestId('input').press('Enter');
    await page.getByTestId('error').filter({ hasText: /^400: 'max_tokens' is 100000/ }).waitFor();
    eq([await page.getByTestId('message').count(), await page.getByTestId('input').inputValue()],
       [before, 'Too long'], 'the refused message back in the input');
}

// With --api-key: the page shows the 401 until the key is entered, then works.
async function theApiKey(browser) {
    const server = await startServer(['--api-key', KEY]);
    try {
        const page = await openPage(browser, server.url);
        await page.getByTestId('error').filter({ hasText: '401' }).waitFor();
        await page.getByTestId('max-tokens').fill('4');
        await page.getByTestId('input').fill('Hi');
        await page.getByTestId('input').press('Enter');
        await page.getByTestId('error').filter({ hasText: 'API key' }).waitFor();
        eq([page.chats.length, await page.getByTestId('input').inputValue()], [1, 'Hi'],
           'a refused message goes back to the input');
        eq(await page.getByTestId('message').count(), 0, 'no message kept after the 401');
        await page.getByTestId('api-key').fill(KEY);
        await page.getByTestId('input').press('Enter');
        await page.locator('[data-role="assistant"][data-state="done"]').waitFor();
        await page.getByTestId('model').filter({ hasText: 'qwen' }).waitFor();
        eq(await page.getByTestId('error').textContent(), '', 'no error once the key is in');
        eq(page.chats.length, 2, 'the second try');
        await stopServer(server);
    } catch (e) {
        server.p.kill('SIGKILL');
        throw e;
    }
}

const browser = await chromium.launch({ executablePath: '/usr/bin/chromium',
                                        args: ['--no-sandbox'] });
const server = await startServer();
try {
    const page = await openPage(browser, server.url);
    const convo = [];
    const steps = [['the page loads and shows the model', loadsAndShowsTheModel],
        ['a reply streams in, equal to the direct answer', aReplyStreamsIn],
        ['a second turn sends the conversation', aSecondTurnSendsTheConversation],
        ['Stop ends the reply and its sequence', stopEndsTheReply],
        ['nothing from another origin, no console error', noOtherOrigin],
        ['a 400 is shown', anErrorIsShown]]; // after the console check: it logs the 400
    for (const [name, f] of steps) {
        const t = Date.now();
        await f(page, server.url, convo);
        console.log(`ok: ${name} (${Date.now() - t} ms)`);
    }
    await stopServer(server);
    const t = Date.now();
    await theApiKey(browser);
    console.log(`ok: --api-key: 401 shown, then the key entered works (${Date.now() - t} ms)`);
} catch (e) {
    server.p.kill('SIGKILL');
    console.error(e.message);
    console.error(server.p.stderrText());
    await browser.close();
    process.exit(1);
}
await browser.close();
console.log(`test_serve_page: all ok in ${Date.now() - t0} ms`);
