// tests/web/failure.test.js — failure looks like failure in the dashboard
// (issue 28; docs/scheduler.md "End states"), in headless Chromium against
// the real scheduler and agent tests/web/run.sh starts:
//   - a sweep whose every trial fails (exit 3) ends FAILED; the experiment
//     page's header shows the FAILED badge and, beside it, the reason
//     ("all 2 trials failed; the last: exit code 3");
//   - a sweep that completes shows no reason ("search finished" is what
//     COMPLETED means).
'use strict';
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { api, until, launch } = require('./helpers');

const URL = process.env.HF_URL;
const TOKEN = process.env.HF_USER_TOKEN;
const FAKE = process.env.HF_BIN + '/tests/fake_trial';
if (!URL || !TOKEN) throw new Error('run through tests/web/run.sh (HF_URL, HF_USER_TOKEN)');

let browser, page;
const problems = [];

before(async () => {
  browser = await launch();
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  await ctx.addInitScript((t) => localStorage.setItem('hyperfarm.token', t), TOKEN);
  page = await ctx.newPage();
  page.on('console', (m) => { if (m.type() === 'error') problems.push(`console: ${m.text()}`); });
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
});

after(async () => {
  if (browser) await browser.close();
});

const sweep = (name, command) => ({
  name, objective: { metric: 'val_acc', goal: 'maximize' },
  searcher: { name: 'random', max_trials: 2, max_concurrent_trials: 2, seed: 1 },
  hyperparameters: { x: { type: 'uniform', min: 0, max: 1 }, epochs: 1, sleep_ms: 10 },
  trial: { command, max_restarts: 0 },
});

test('a FAILED experiment shows its state and reason in the header', async () => {
  const { id } = await api('POST', '/api/v1/experiments', sweep('web-all-fail', ['/bin/sh', '-c', 'exit 3']));
  const e = await until('FAILED', async () => {
    const x = await api('GET', '/api/v1/experiments/' + id);
    return x.state === 'FAILED' ? x : null;
  }, 30000);
  assert.match(e.end_reason, /^all 2 trials failed; the last: .*exit code 3/);
  await page.goto(`${URL}/#/experiments/${id}`);
  await until('FAILED badge', () => page.$('.page-head .badge.FAILED'), 20000);
  const reason = await until('reason', async () => {
    const t = await page.$eval('#exp-end-reason', (el) => (el.hidden ? '' : el.textContent));
    return t || null;
  });
  assert.equal(reason, e.end_reason);
  // in the header row, visible, not overflowing the page
  const box = await page.$eval('#exp-end-reason', (el) => {
    const r = el.getBoundingClientRect();
    return { w: r.width, right: r.right, vw: document.documentElement.clientWidth };
  });
  assert.ok(box.w > 0 && box.right <= box.vw, JSON.stringify(box));
});

test('a COMPLETED experiment shows no reason', async () => {
  const { id } = await api('POST', '/api/v1/experiments', sweep('web-ok', [FAKE]));
  await until('COMPLETED', async () => (await api('GET', '/api/v1/experiments/' + id)).state === 'COMPLETED', 30000);
  await page.goto(`${URL}/#/experiments/${id}`);
  await until('COMPLETED badge', () => page.$('.page-head .badge.COMPLETED'), 20000);
  assert.equal(await page.$eval('#exp-end-reason', (el) => el.hidden), true);
});

test('no console errors', () => {
  assert.deepEqual(problems, []);
});
