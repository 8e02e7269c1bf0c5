// tests/web/checkpoints.test.js — checkpoint storage in the dashboard
// (docs/dashboard.md, "Checkpoint storage"), in headless Chromium against
// the real scheduler and agent tests/web/run.sh starts (it exports HF_URL,
// HF_USER_TOKEN, HF_AGENT_TOKEN, HF_FAKE_TRIAL, HF_SHOTS).
//
// A small random sweep of fake_trial runs to the end; then checkpoints of
// random bytes are uploaded into the scheduler's store exactly as an agent
// does (PUT /trials/{id}/checkpoints with the agent token and the SHA-256
// header). The browser then checks, as a user would:
//   - the experiment page shows the storage figure (checkpoint_bytes) and the
//     list page its column;
//   - the trial page lists the stored checkpoints (step, size, short hash)
//     and a Download yields a file whose SHA-256 is the listed one;
//   - Archive (confirmed) drops the storage to 0, shows the archived note,
//     hides the experiment from the list; "show archived" lists it again;
//   - Delete dismissed changes nothing; accepted, the experiment is gone
//     (page and API) and its objects are released.
// Screenshots go to HF_SHOTS as checkpoints-*.png. No console error allowed.
'use strict';
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const { chromium } = require('playwright-core');

const URL = process.env.HF_URL;
const TOKEN = process.env.HF_USER_TOKEN;
const AGENT_TOKEN = process.env.HF_AGENT_TOKEN;
const FAKE = process.env.HF_FAKE_TRIAL;
const SHOTS = process.env.HF_SHOTS || '/tmp';
if (!URL || !TOKEN || !AGENT_TOKEN || !FAKE) throw new Error('run through tests/web/run.sh (HF_URL, HF_USER_TOKEN, HF_AGENT_TOKEN, HF_FAKE_TRIAL)');

let browser, page, expId;
const problems = [];
let dialogAnswer = true;
const uploaded = new Map();   // trial id -> [{step, size, sha256}]
const KiB = 1024;

const { api, until } = require('./helpers');
async function shot(name) {
  await page.evaluate(() => { document.getElementById('toast').hidden = true; });
  await page.screenshot({ path: path.join(SHOTS, `checkpoints-${name}.png`), fullPage: true });
}
const sha256 = (buf) => crypto.createHash('sha256').update(buf).digest('hex');

/* Uploads `bytes` as trial's checkpoint at step, as an agent does. */
async function upload(trial, step, bytes) {
  const sum = sha256(bytes);
  const res = await fetch(`${URL}/api/v1/trials/${trial}/checkpoints?step=${step}&attempt=1`, {
    method: 'PUT', body: bytes,
    headers: { Authorization: 'Bearer ' + AGENT_TOKEN, 'Content-Type': 'application/octet-stream', 'X-Hyperfarm-Sha256': sum },
  });
  assert.equal(res.status, 201, `PUT trial ${trial} step ${step}: ${res.status} ${await res.text()}`);
  (uploaded.get(trial) || uploaded.set(trial, []).get(trial)).push({ step, size: bytes.length, sha256: sum });
}

before(async () => {
  expId = (await api('POST', '/api/v1/experiments', {
    name: 'web-ckpt', objective: { metric: 'val_acc', goal: 'maximize' },
    searcher: { name: 'random', max_trials: 2, max_concurrent_trials: 2 },
    hyperparameters: { x: { type: 'uniform', min: -1, max: 1 } },
    trial: { command: [FAKE, '--epochs', '3', '--sleep-ms', '20'], max_restarts: 0 },
    // Keep every upload: the lists below are exactly what was sent.
    checkpoint_policy: { keep_latest: 10, keep_best_trials: 2 },
  })).id;
  // A later experiment, kept: the one deleted below is then not the newest.
  // (The scheduler's ids are SQLite rowids without AUTOINCREMENT: deleting
  // the newest experiment gives its experiment and trial ids to the next
  // submission, whose trials the agent then never starts. That is a
  // scheduler bug, reported; this keeps it away from dashboard.test.js.)
  const keepId = (await api('POST', '/api/v1/experiments', {
    name: 'web-ckpt-keep', objective: { metric: 'val_acc', goal: 'maximize' },
    searcher: { name: 'random', max_trials: 1, max_concurrent_trials: 1 },
    hyperparameters: { x: 0.5 }, trial: { command: [FAKE, '--epochs', '1', '--sleep-ms', '20'] },
  })).id;
  for (const e of [expId, keepId]) {
    await until(`experiment ${e} to finish`, async () => (await api('GET', `/api/v1/experiments/${e}`)).state === 'COMPLETED', 60000, 300);
  }
  const trials = (await api('GET', `/api/v1/experiments/${expId}/trials`)).trials.map((t) => t.id).sort((a, b) => a - b);
  assert.equal(trials.length, 2);
  // Sizes that are not multiples of anything, random contents.
  for (const [k, t] of trials.entries()) {
    await upload(t, 100, crypto.randomBytes(300 * KiB + 17 * k));
    await upload(t, 300, crypto.randomBytes(1024 * KiB + 5));
  }

  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 900 }, acceptDownloads: true });
  await ctx.addInitScript((tok) => { localStorage.setItem('hyperfarm.token', tok); }, TOKEN);
  page = await ctx.newPage();
  page.on('console', (m) => { if (m.type() === 'error') problems.push(`console: ${m.text()} (${page.url()})`); });
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message} (${page.url()})`));
  page.on('response', (r) => { if (r.status() >= 400) problems.push(`HTTP ${r.status()} ${r.request().method()} ${r.url().replace(URL, '')}`); });
  page.on('dialog', (d) => (dialogAnswer ? d.accept() : d.dismiss()));
});

after(async () => {
  if (browser) await browser.close();
  if (expId) await api('DELETE', `/api/v1/experiments/${expId}`).catch(() => {});
});

const totalBytes = () => [...uploaded.values()].flat().reduce((s, c) => s + c.size, 0);
const fmtMiB = (n) => (n / 1048576).toFixed(2) + ' MiB';

test('the experiment page and the list show the checkpoint storage', async () => {
  const want = totalBytes();
  await until('checkpoint_bytes in the summary', async () => (await api('GET', `/api/v1/experiments/${expId}`)).checkpoint_bytes === want);
  await page.goto(`${URL}/#/experiments/${expId}`);
  await page.waitForSelector('#storage-stat');
  const txt = await until('the storage stat', async () => {
    const t = await page.textContent('#storage-stat');
    return t.includes(fmtMiB(want)) && t;
  });
  assert.match(txt, /checkpoints/);
  // A finished experiment can be archived and deleted.
  assert.equal(await page.isEnabled('#exp-lifecycle [data-action=archive]'), true);
  assert.equal(await page.isEnabled('#exp-lifecycle [data-action=delete]'), true);
  assert.equal(await page.isHidden('#exp-archived-note'), true);
  await shot('experiment');

  await page.goto(`${URL}/#/experiments`);
  const cell = `#experiments-table tr[data-id="${expId}"] td.storage`;
  await page.waitForSelector(cell);
  assert.equal((await page.textContent(cell)).trim(), fmtMiB(want));
});

test('the trial page lists the stored checkpoints and a download is the listed bytes', async () => {
  const [trial, cks] = [...uploaded.entries()][0];
  await page.goto(`${URL}/#/trials/${trial}`);
  await page.waitForSelector('#checkpoints[data-loaded] tbody tr[data-sha256]');
  const rows = await page.$$eval('#checkpoints tbody tr[data-sha256]', (trs) => trs.map((tr) => ({
    sha: tr.dataset.sha256, cells: [...tr.cells].map((c) => c.textContent.trim()),
  })));
  // Newest step first; size, short hash (12 characters, the full one in the title).
  assert.deepEqual(rows.map((r) => +r.cells[0]), [300, 100]);
  for (const r of rows) {
    const c = cks.find((x) => x.sha256 === r.sha);
    assert.ok(c, `row ${r.sha} was not uploaded`);
    assert.equal(r.cells[1], c.size < 1048576 ? (c.size / 1024).toFixed(2) + ' KiB' : fmtMiB(c.size));
    assert.equal(r.cells[2], c.sha256.slice(0, 12));
  }
  assert.match(await page.textContent('#checkpoints-note'), /^2 stored, /);
  await shot('trial');

  // Download the older one (step 100): the file's bytes hash to the listed sha256.
  const c100 = cks.find((x) => x.step === 100);
  const [dl] = await Promise.all([
    page.waitForEvent('download', { timeout: 20000 }),
    page.click(`#checkpoints tr[data-sha256="${c100.sha256}"] [data-action=download]`),
  ]);
  assert.equal(dl.suggestedFilename(), `trial-${trial}-ckpt-000000000100.hfck`);
  const file = await dl.path();
  const bytes = fs.readFileSync(file);
  assert.equal(bytes.length, c100.size);
  assert.equal(sha256(bytes), c100.sha256);
  await until('the verified toast', () => page.evaluate(() => document.getElementById('toast').textContent.includes('SHA-256 verified')));
});

test('archive hides the experiment and frees its storage; "show archived" lists it', async () => {
  await page.goto(`${URL}/#/experiments/${expId}`);
  await page.waitForSelector('#exp-lifecycle [data-action=archive]:not([disabled])');
  dialogAnswer = true;
  await page.click('#exp-lifecycle [data-action=archive]');
  await page.waitForSelector('#exp-archived-note:not([hidden])');
  await until('storage 0 B on the page', async () => (await page.textContent('#storage-stat')).includes('0 B'));
  assert.equal((await api('GET', `/api/v1/experiments/${expId}`)).checkpoint_bytes, 0);
  await page.waitForSelector('#exp-lifecycle [data-action=unarchive]');
  await shot('archived');

  // The trial's list is empty now.
  const [trial] = [...uploaded.keys()];
  await page.goto(`${URL}/#/trials/${trial}`);
  await page.waitForSelector('#checkpoints[data-loaded]');
  assert.equal(await page.$$eval('#checkpoints tbody tr[data-sha256]', (r) => r.length), 0);

  await Promise.all([
    page.waitForResponse((r) => /\/api\/v1\/experiments$/.test(r.url()) && r.ok()),
    page.goto(`${URL}/#/experiments`)]);
  await new Promise((r) => setTimeout(r, 400));   // the list renders throttled (250 ms)
  assert.equal(await page.$(`#experiments-table tr[data-id="${expId}"]`), null, 'archived experiment still listed');
  await page.check('#show-archived');
  await page.waitForSelector(`#experiments-table tr[data-id="${expId}"]`);
  assert.match(await page.textContent(`#experiments-table tr[data-id="${expId}"]`), /ARCHIVED/);
  await shot('list-archived');
  await page.uncheck('#show-archived');
  await until('hidden again', async () => (await page.$(`#experiments-table tr[data-id="${expId}"]`)) === null);
});

test('delete asks first, then removes the experiment', async () => {
  await page.goto(`${URL}/#/experiments/${expId}`);
  await page.waitForSelector('#exp-lifecycle [data-action=delete]:not([disabled])');
  dialogAnswer = false;   // dismissed: nothing happens
  await page.click('#exp-lifecycle [data-action=delete]');
  await new Promise((r) => setTimeout(r, 500));
  assert.equal((await api('GET', `/api/v1/experiments/${expId}`)).id, expId);
  dialogAnswer = true;
  await page.click('#exp-lifecycle [data-action=delete]');
  await page.waitForURL(/#\/experiments$/);
  await until('the API to answer 404', async () => {
    try { await api('GET', `/api/v1/experiments/${expId}`); return false; } catch (e) { return e.status === 404; }
  });
  await page.check('#show-archived');
  await page.waitForSelector('#experiments-table tbody tr[data-id]');
  assert.equal(await page.$(`#experiments-table tr[data-id="${expId}"]`), null, 'deleted experiment still listed');
  await page.uncheck('#show-archived');
  expId = null;
});

test('no console errors or uncaught exceptions', () => {
  assert.deepEqual(problems, []);
});
