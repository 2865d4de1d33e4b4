// Opens a report.html from disk in headless Chromium, checks that every <img> decoded and that
// the page logged no console error or exception, and saves two screenshots (first screen and
// full page). Talks the DevTools protocol over --remote-debugging-pipe: no npm packages.
// Not a layout test: it checks loading, a person looks at the screenshots.
//
// usage: node report_check.mjs CHROMIUM REPORT.html OUT_PREFIX [BANNER]
//   BANNER: the run-end banner (#run-end) the page must show, whole and on the first screen
//   (an interrupted or incomplete run); without it the page must have no banner.
// exit: 0 ok, 1 a check failed, 2 usage or browser trouble.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const [chromium, report, outPrefix, banner] = process.argv.slice(2);
if (!chromium || !report || !outPrefix) {
  console.error('usage: node report_check.mjs CHROMIUM REPORT.html OUT_PREFIX');
  process.exit(2);
}

const profile = mkdtempSync(join(tmpdir(), 'meridian-chromium-'));
const browser = spawn(chromium, [
  '--headless', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage',
  '--no-first-run', '--no-default-browser-check', '--remote-debugging-pipe',
  `--user-data-dir=${profile}`, 'about:blank',
], { stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'pipe'] });
let browserLog = '';
browser.stderr.on('data', (d) => { browserLog += d; });

const deadline = setTimeout(() => fail(2, 'timed out after 60 s'), 60000);
function cleanup() {
  clearTimeout(deadline);
  try { browser.kill('SIGKILL'); } catch { /* already gone */ }
  try { rmSync(profile, { recursive: true, force: true }); } catch { /* best effort */ }
}
function fail(code, message) {
  console.error(`report_check: ${message}`);
  if (code === 2 && browserLog) console.error(browserLog.slice(-2000));
  cleanup();
  process.exit(code);
}
browser.on('error', (e) => fail(2, `cannot start ${chromium}: ${e.message}`));

// DevTools protocol: JSON messages separated by NUL bytes, fd 3 to the browser, fd 4 back.
const toBrowser = browser.stdio[3];
const fromBrowser = browser.stdio[4];
let nextId = 1;
const pending = new Map();
const listeners = [];
let buffer = Buffer.alloc(0);
fromBrowser.on('data', (chunk) => {
  buffer = Buffer.concat([buffer, chunk]);
  let end;
  while ((end = buffer.indexOf(0)) >= 0) {
    const msg = JSON.parse(buffer.subarray(0, end).toString('utf8'));
    buffer = buffer.subarray(end + 1);
    if (msg.id && pending.has(msg.id)) {
      const { ok, ko, method } = pending.get(msg.id);
      pending.delete(msg.id);
      if (msg.error) ko(new Error(`${method}: ${msg.error.message}`));
      else ok(msg.result);
    } else if (msg.method) {
      for (const l of listeners) l(msg);
    }
  }
});
function send(method, params = {}, sessionId = undefined) {
  const id = nextId++;
  const msg = { id, method, params };
  if (sessionId) msg.sessionId = sessionId;
  toBrowser.write(JSON.stringify(msg) + '\0');
  return new Promise((ok, ko) => pending.set(id, { ok, ko, method }));
}
function waitFor(method, sessionId) {
  return new Promise((ok) => {
    const l = (msg) => {
      if (msg.method === method && msg.sessionId === sessionId) {
        listeners.splice(listeners.indexOf(l), 1);
        ok(msg.params);
      }
    };
    listeners.push(l);
  });
}

const problems = [];
try {
  const { targetId } = await send('Target.createTarget', { url: 'about:blank' });
  const { sessionId } = await send('Target.attachToTarget', { targetId, flatten: true });
  listeners.push((msg) => {
    if (msg.sessionId !== sessionId) return;
    const p = msg.params;
    if (msg.method === 'Runtime.consoleAPICalled' && (p.type === 'error' || p.type === 'assert')) {
      problems.push(`console.${p.type}: ${p.args.map((a) => a.value ?? a.description).join(' ')}`);
    } else if (msg.method === 'Runtime.exceptionThrown') {
      problems.push(`exception: ${p.exceptionDetails.exception?.description ?? p.exceptionDetails.text}`);
    } else if (msg.method === 'Log.entryAdded' && p.entry.level === 'error') {
      problems.push(`log error: ${p.entry.text}${p.entry.url ? ' (' + p.entry.url.slice(0, 80) + ')' : ''}`);
    }
  });
  await send('Page.enable', {}, sessionId);
  await send('Runtime.enable', {}, sessionId);
  await send('Log.enable', {}, sessionId);
  await send('Emulation.setDeviceMetricsOverride',
    { width: 1300, height: 1000, deviceScaleFactor: 1, mobile: false }, sessionId);
  const loaded = waitFor('Page.loadEventFired', sessionId);
  const url = pathToFileURL(resolve(report)).href;
  const nav = await send('Page.navigate', { url }, sessionId);
  if (nav.errorText) throw new Error(`cannot open ${url}: ${nav.errorText}`);
  await loaded;

  const { result } = await send('Runtime.evaluate', {
    expression: `JSON.stringify({
      title: document.title,
      images: Array.from(document.images).map((i) => ({
        name: i.alt, ok: i.complete && i.naturalWidth > 0, w: i.naturalWidth, h: i.naturalHeight })),
      external: Array.from(document.querySelectorAll('[src],link[href]'))
        .map((e) => e.getAttribute('src') || e.getAttribute('href'))
        .filter((u) => !u.startsWith('data:')),
      tables: document.querySelectorAll('table').length,
      banner: (() => {
        const b = document.getElementById('run-end');
        if (!b) return null;
        const r = b.getBoundingClientRect(), style = getComputedStyle(b);
        return { text: b.textContent.trim(), top: r.top, bottom: r.bottom, height: r.height,
                 visible: style.display !== 'none' && style.visibility !== 'hidden' };
      })() })`,
    returnByValue: true,
  }, sessionId);
  const page = JSON.parse(result.value);

  const first = await send('Page.captureScreenshot', { format: 'png' }, sessionId);
  writeFileSync(`${outPrefix}-first-screen.png`, Buffer.from(first.data, 'base64'));
  const metrics = await send('Page.getLayoutMetrics', {}, sessionId);
  const size = metrics.cssContentSize;
  const full = await send('Page.captureScreenshot', {
    format: 'png', captureBeyondViewport: true,
    clip: { x: 0, y: 0, width: Math.ceil(size.width), height: Math.ceil(size.height), scale: 1 },
  }, sessionId);
  writeFileSync(`${outPrefix}-full.png`, Buffer.from(full.data, 'base64'));

  if (page.images.length === 0) problems.push('the page has no images');
  for (const img of page.images) if (!img.ok) problems.push(`image '${img.name}' did not load`);
  for (const ext of page.external) problems.push(`external resource: ${ext}`);
  if (page.tables === 0) problems.push('the page has no tables');
  if (banner === undefined) {
    if (page.banner) problems.push(`unexpected run-end banner: "${page.banner.text}"`);
  } else if (!page.banner) {
    problems.push(`no run-end banner (expected "${banner}")`);
  } else {
    if (page.banner.text !== banner)
      problems.push(`banner says "${page.banner.text}", expected "${banner}"`);
    // On the first screen (1000 CSS px high), whole, drawn.
    if (!page.banner.visible || page.banner.height <= 0 || page.banner.bottom > 1000)
      problems.push(`the banner is not on the first screen (${JSON.stringify(page.banner)})`);
  }
  if (page.banner) console.log(`report_check: banner "${page.banner.text}"`);
  console.log(`report_check: ${report}: "${page.title}", ${page.images.length} images ` +
    `(${page.images.map((i) => `${i.name} ${i.w}x${i.h}`).join(', ')}), ${page.tables} tables`);
  console.log(`report_check: screenshots ${outPrefix}-first-screen.png, ${outPrefix}-full.png ` +
    `(page ${Math.ceil(size.width)}x${Math.ceil(size.height)} CSS px)`);
  await send('Browser.close').catch(() => {});
} catch (e) {
  fail(2, e.message);
}
cleanup();
if (problems.length) {
  for (const p of problems) console.error(`report_check: FAIL ${p}`);
  process.exit(1);
}
console.log('report_check: every image loaded, no console errors');
process.exit(0);
