#!/usr/bin/env node
// Open the dashboard of a live agent in headless Chromium (Debian's, never a downloaded one),
// wait until the avail_bw plot shows enough estimates, check that no error banner is up and that
// the page asked nothing of another host, take a full-page screenshot, print a JSON summary.
//
//   node shot.mjs URL OUT.png [--min-points N] [--timeout SECONDS] [--expect-sse]
//
// Exit status: 0 done; 1 the page did not get there (the reason on stderr, the screenshot is
// still written for a look); 2 bad usage or no browser.
import { existsSync, statSync } from 'node:fs';
import { chromium } from 'playwright-core';

const usage = 'usage: node shot.mjs URL OUT.png [--min-points N] [--timeout SECONDS] [--expect-sse]';
const argv = process.argv.slice(2);
const opt = { minPoints: 5, timeoutS: 60, expectSse: false };
const pos = [];
for (let i = 0; i < argv.length; i++) {
  const a = argv[i];
  if (a === '--min-points') opt.minPoints = Number(argv[++i]);
  else if (a === '--timeout') opt.timeoutS = Number(argv[++i]);
  else if (a === '--expect-sse') opt.expectSse = true;
  else if (a.startsWith('--')) fail(2, `unknown option ${a}\n${usage}`);
  else pos.push(a);
}
if (pos.length !== 2 || !(opt.minPoints >= 1) || !(opt.timeoutS > 0)) fail(2, usage);
const [url, out] = pos;
const executablePath = process.env.CHROMIUM || '/usr/bin/chromium';
if (!existsSync(executablePath)) {
  fail(2, `no browser at ${executablePath}: install Debian's (apt-get install -y chromium) or set CHROMIUM`);
}

function fail(code, msg) {
  process.stderr.write(`shot.mjs: ${msg}\n`);
  process.exit(code);
}

// Whatever happens in the browser, this process ends in bounded time.
const t0 = Date.now();
const deadline = t0 + opt.timeoutS * 1000;
setTimeout(() => fail(1, `gave up after ${opt.timeoutS + 15} s (browser hung?)`), (opt.timeoutS + 15) * 1000).unref();

const browser = await chromium.launch({
  executablePath,
  headless: true,
  timeout: 20000,
  args: [
    '--headless',
    '--no-sandbox',
    '--disable-gpu',
    '--disable-quic',
    '--no-first-run',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
  ],
});
let code = 0;
const summary = { url, out, ok: false };
try {
  // A new context: a fresh profile, nothing cached from an earlier run.
  const context = await browser.newContext({ viewport: { width: 1360, height: 900 }, deviceScaleFactor: 1 });
  const page = await context.newPage();
  const origin = new URL(url).origin;
  const foreign = [];
  const consoleErrors = [];
  const pageErrors = [];
  // The page must work offline: anything asked of another origin is refused and reported.
  await context.route('**/*', (route) => {
    const u = route.request().url();
    if (u.startsWith(origin + '/') || u.startsWith('data:')) return route.continue();
    foreign.push(u);
    return route.abort();
  });
  page.on('console', (m) => m.type() === 'error' && consoleErrors.push(m.text()));
  page.on('pageerror', (e) => pageErrors.push(String(e)));

  await page.goto(url, { waitUntil: 'load', timeout: Math.max(1000, deadline - Date.now()) });
  const want = { min: opt.minPoints, sse: opt.expectSse };
  let waitError = null;
  try {
    await page.waitForFunction(
      (w) => {
        const d = document.body.dataset;
        return d.state === 'live' && Number(d.points) >= w.min && (!w.sse || d.sse === 'open');
      },
      want,
      { timeout: Math.max(1000, deadline - Date.now()), polling: 250 },
    );
  } catch (e) {
    waitError = e;
  }
  const seen = await page.evaluate(() => {
    const d = document.body.dataset;
    const text = (s) => document.querySelector(s)?.textContent.trim().replace(/\s+/g, ' ') ?? null;
    return {
      title: document.title,
      state: d.state,
      points: Number(d.points),
      sse: d.sse,
      banner: document.querySelector('#error')?.hidden === false ? text('#error') : null,
      path: document.querySelector('#path')?.value ?? null,
      avail_bw: text('#card-avail_bw .value'),
      avail_bw_range: text('#card-avail_bw .range'),
      avail_bw_quality: text('#card-avail_bw .quality'),
      status: text('#status'),
      transfer: d.transfer,
      transfer_status: document.querySelector('#transfer')?.hidden === false ? text('#transfer .tstatus') : null,
    };
  });
  await page.screenshot({ path: out, fullPage: true });
  Object.assign(summary, seen, {
    elapsed_s: Math.round((Date.now() - t0) / 100) / 10,
    png_bytes: statSync(out).size,
    foreign_requests: foreign,
    console_errors: consoleErrors,
    page_errors: pageErrors,
  });

  const why = [];
  if (waitError) {
    why.push(
      `within ${opt.timeoutS} s the avail_bw plot did not show ${opt.minPoints} live points` +
        `${opt.expectSse ? ' with the event stream open' : ''} ` +
        `(state=${seen.state}, points=${seen.points}, sse=${seen.sse})`,
    );
  }
  if (seen.banner) why.push(`error banner shown: ${seen.banner}`);
  if (foreign.length) why.push(`the page asked other hosts: ${foreign.join(', ')}`);
  if (pageErrors.length) why.push(`script errors: ${pageErrors.join(' | ')}`);
  summary.ok = why.length === 0;
  if (!summary.ok) {
    code = 1;
    process.stderr.write(`shot.mjs: FAILED: ${why.join('; ')} (screenshot: ${out})\n`);
  }
} catch (e) {
  code = 1;
  summary.error = String(e && e.message ? e.message : e);
  process.stderr.write(`shot.mjs: FAILED: ${summary.error}\n`);
} finally {
  await browser.close().catch(() => {});
}
process.stdout.write(JSON.stringify(summary) + '\n');
process.exit(code);
