// tests/web/context.test.js — attaching a code context in the dashboard's
// "New experiment" panel, in headless Chromium against the real scheduler
// and agent tests/web/run.sh starts (HF_URL, HF_USER_TOKEN):
//   - a .tar.gz of a small program (run.sh printing a metric line) is
//     hashed in the browser, uploaded with PUT /api/v1/contexts and named
//     in the editor's "context"; the hash is the file's SHA-256 as node
//     computes it, and the scheduler has the object (HEAD 200);
//   - the experiment submitted from the panel with "command":
//     ["./run.sh"] runs that program on the agent, which never had it:
//     every trial completes with the metric it printed;
//   - attaching the same file again uploads nothing ("already on the
//     scheduler"); a file that is not gzip'd is refused in the page;
//   - the plain-JS SHA-256 (used where crypto.subtle is missing: plain
//     http from another host) agrees with crypto.subtle.
'use strict';
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { execFileSync } = require('node:child_process');
const { chromium } = require('playwright-core');
const { until } = require('./helpers');

const URL = process.env.HF_URL;
const TOKEN = process.env.HF_USER_TOKEN;
const SHOTS = process.env.HF_SHOTS || '/tmp';
if (!URL || !TOKEN) throw new Error('run through tests/web/run.sh (HF_URL, HF_USER_TOKEN)');

let browser, page, dir, tgz, sha;
const problems = [];

async function api(method, p) {
  const res = await fetch(URL + p, { method, headers: { Authorization: 'Bearer ' + TOKEN } });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : null };
}

before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hf-web-ctx-'));
  fs.mkdirSync(path.join(dir, 'src'));
  fs.writeFileSync(path.join(dir, 'src', 'run.sh'), '#!/bin/sh\necho "HYPERFARM {\\"step\\": 1, \\"val_acc\\": 0.77}"\n', { mode: 0o755 });
  tgz = path.join(dir, 'code.tar.gz');
  execFileSync('tar', ['-C', path.join(dir, 'src'), '-czf', tgz, '.']);
  sha = crypto.createHash('sha256').update(fs.readFileSync(tgz)).digest('hex');
  fs.writeFileSync(path.join(dir, 'notgz.tar.gz'), 'just text\n');
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  await ctx.addInitScript((t) => localStorage.setItem('hyperfarm.token', t), TOKEN);   // logged in from the start
  page = await ctx.newPage();
  page.on('console', (m) => {
    // HEAD /api/v1/contexts/{sha256} answers 404 before the first upload: expected
    if (m.type() === 'error' && !/status of 404/.test(m.text())) problems.push(`console: ${m.text()}`);
  });
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
  await page.goto(URL + '/#/experiments');
  await page.waitForSelector('#new-exp');
});

after(async () => {
  if (browser) await browser.close();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

test('a .tar.gz attached in "New experiment" is uploaded and runs on the agent', async () => {
  assert.equal((await api('HEAD', '/api/v1/contexts/' + sha)).status, 404, 'not on the scheduler before');
  await page.click('#new-exp');
  const exp = {
    name: 'web-context', objective: { metric: 'val_acc', goal: 'maximize' },
    searcher: { name: 'random', max_trials: 2 },
    hyperparameters: { x: { type: 'uniform', min: 0, max: 1 } },
    trial: { command: ['./run.sh'], max_restarts: 0 },
  };
  await page.fill('#exp-json', JSON.stringify(exp, null, 2));
  await page.setInputFiles('#context-file', tgz);
  await until('the context to be attached', async () => /uploaded; "context" is set/.test(await page.textContent('#context-status')), 30000);
  assert.equal(await page.getAttribute('#context-status', 'data-sha256'), sha, 'the browser hashed the file as node does');
  assert.equal(JSON.parse(await page.inputValue('#exp-json')).context, sha, '"context" is in the editor');
  assert.equal((await api('HEAD', '/api/v1/contexts/' + sha)).status, 200, 'the scheduler has it');
  await page.screenshot({ path: path.join(SHOTS, 'dashboard-context.png'), fullPage: true });
  await page.click('#submit-exp');
  await page.waitForSelector('#submit-panel .ok-msg a');
  const id = +(await page.getAttribute('#submit-panel .ok-msg a', 'href')).split('/').pop();
  assert.ok(id > 0);
  const done = await until('the experiment to end', async () => {
    const r = await api('GET', `/api/v1/experiments/${id}`);
    return ['COMPLETED', 'CANCELED'].includes(r.json.state) ? r.json : null;
  }, 60000);
  assert.equal(done.state, 'COMPLETED');
  const trials = (await api('GET', `/api/v1/experiments/${id}/trials`)).json.trials;
  assert.equal(trials.length, 2);
  for (const t of trials) {
    assert.equal(t.state, 'COMPLETED', `trial ${t.id}`);
    assert.equal(t.objective, 0.77, `trial ${t.id}: the metric ./run.sh printed`);
  }
});

test('the same file again is not uploaded again; a file that is not gzip is refused', async () => {
  await page.fill('#exp-json', '');
  await page.setInputFiles('#context-file', tgz);
  await until('the context to be found', async () => /already on the scheduler/.test(await page.textContent('#context-status')), 30000);
  assert.equal(JSON.parse(await page.inputValue('#exp-json')).context, sha, 'an empty editor gets {"context"}');
  await page.setInputFiles('#context-file', path.join(dir, 'notgz.tar.gz'));
  await page.waitForSelector('#submit-error:not([hidden])');
  assert.match(await page.textContent('#submit-error'), /context.*not a gzip'd tar/);
});

test('the plain-JS SHA-256 agrees with crypto.subtle', async () => {
  const bad = await page.evaluate(async () => {
    const out = [];
    for (const n of [0, 1, 55, 56, 63, 64, 65, 119, 1000, 100003]) {
      const b = new Uint8Array(n);
      for (let i = 0; i < n; i++) b[i] = (i * 7919 + n) & 255;
      const want = Array.from(new Uint8Array(await crypto.subtle.digest('SHA-256', b)), (x) => x.toString(16).padStart(2, '0')).join('');
      if (window.HF.sha256js(b) !== want) out.push(n);
    }
    return out;
  });
  assert.deepEqual(bad, [], 'lengths where the two differ');
  assert.deepEqual(problems, []);
});
