// tests/web/roles.test.js — the dashboard disables what the token may not do
// (docs/dashboard.md "Roles"), against the real scheduler of tests/web/run.sh
// (HF_URL; tokens HF_ALICE_TOKEN "user:alice", HF_USER_TOKEN "user:TOKEN"
// whose user is "default", HF_VIEWER_TOKEN "viewer:wall").
//
// alice submits a sweep. On its page, the viewer finds every control that
// changes something (pause, cancel, archive, delete, extend, tags,
// description, fork, the trial's kill and notes, "New experiment")
// disabled with a tooltip that says why, and its name and role in the
// header; the default user finds alice's controls disabled ("owned by
// alice") but may fork; alice finds them enabled. A change the viewer
// forces through the API anyway is refused (403). Screenshots:
// roles-viewer-experiment.png, roles-other-user-experiment.png.
'use strict';
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');

const URL = process.env.HF_URL;
const ALICE = process.env.HF_ALICE_TOKEN;
const OTHER = process.env.HF_USER_TOKEN;
const VIEWER = process.env.HF_VIEWER_TOKEN;
const FAKE = process.env.HF_FAKE_TRIAL;
const SHOTS = process.env.HF_SHOTS || '/tmp';
if (!URL || !ALICE || !OTHER || !VIEWER || !FAKE)
  throw new Error('run through tests/web/run.sh (HF_URL, HF_ALICE_TOKEN, HF_USER_TOKEN, HF_VIEWER_TOKEN, HF_FAKE_TRIAL)');

const { apiClient, until, launch, screenshot } = require('./helpers');
const alice = apiClient(URL, ALICE);
const viewer = apiClient(URL, VIEWER);
let browser, expId, trialId;
const problems = [];

before(async () => {
  expId = (await alice('POST', '/api/v1/experiments', {
    name: 'roles-alice', objective: { metric: 'val_acc', goal: 'maximize' }, tags: ['team'],
    description: 'alice\'s sweep: **read-only** for the others',
    searcher: { name: 'random', max_trials: 2, max_concurrent_trials: 1, seed: 5 },
    hyperparameters: { x: { type: 'uniform', min: -1, max: 1 } },
    trial: { command: [FAKE, '--epochs', '400', '--sleep-ms', '50'] },
  })).id;
  trialId = await until('a trial of alice\'s sweep', async () => {
    const r = await alice('GET', `/api/v1/experiments/${expId}/trials`);
    const t = (r.trials || []).find((x) => x.state === 'RUNNING');
    return t && t.id;
  }, 30000);
  browser = await launch();
});

after(async () => {
  if (browser) await browser.close();
  if (expId) await alice('POST', `/api/v1/experiments/${expId}/cancel`).catch(() => {});
});

async function pageAs(token) {
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  await ctx.addInitScript((tok) => localStorage.setItem('hyperfarm.token', tok), token);
  const page = await ctx.newPage();
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
  page.on('console', (m) => { if (m.type() === 'error') problems.push(`console: ${m.text()}`); });
  return page;
}

/* {disabled, title} of every selector on the page. */
const states = (page, sels) => page.evaluate((ss) => ss.map((s) => {
  const el = document.querySelector(s);
  return el ? { sel: s, disabled: el.disabled, title: el.title } : { sel: s, missing: true };
}), sels);

const EXP_CONTROLS = ['[data-action="pause"]', '[data-action="cancel"]', '#exp-lifecycle [data-action="archive"]',
  '#exp-lifecycle [data-action="delete"]', '#extend-exp', '#tag-add', '#tag-input', '#desc-edit'];

test('a viewer sees every change disabled, with the reason', async () => {
  const page = await pageAs(VIEWER);
  await page.goto(`${URL}/#/experiments/${expId}`);
  await page.waitForSelector('#exp-workflow #exp-meta b');
  await page.waitForSelector('[data-action="pause"][data-denied]');
  assert.match(await page.textContent('#whoami'), /wall · viewer/);
  for (const s of await states(page, [...EXP_CONTROLS, '#fork-exp'])) {
    assert.ok(!s.missing, `${s.sel} missing`);
    assert.ok(s.disabled, `${s.sel} is enabled for a viewer`);
    assert.match(s.title, /viewer wall: a viewer may only read/, `${s.sel} tooltip`);
  }
  assert.equal(await page.locator('#exp-tags [data-remove]').count(), 0, 'tag remove buttons shown to a viewer');
  await screenshot(page, SHOTS, 'roles-viewer-experiment.png');

  await page.goto(`${URL}/#/trials/${trialId}`);
  await page.waitForSelector('#kill-trial[data-denied]');
  assert.ok(await page.isDisabled('#kill-trial'));
  assert.ok(await page.isDisabled('#trial-notes #notes-edit'));

  await page.goto(`${URL}/#/experiments`);
  await page.waitForSelector(`#experiments-table tr[data-id="${expId}"] [data-action="cancel"][data-denied]`);
  assert.ok(await page.isDisabled('#new-exp'));
  // The scheduler refuses what the page does not offer.
  await assert.rejects(viewer('POST', `/api/v1/experiments/${expId}/pause`), (e) => e.status === 403);
  await page.context().close();
});

test('another user sees alice\'s controls disabled but may fork', async () => {
  const page = await pageAs(OTHER);
  await page.goto(`${URL}/#/experiments/${expId}`);
  await page.waitForSelector('[data-action="pause"][data-denied]');
  assert.match(await page.textContent('#whoami'), /default · user/);
  for (const s of await states(page, EXP_CONTROLS)) {
    assert.ok(s.disabled, `${s.sel} is enabled for a user who does not own it`);
    assert.match(s.title, /owned by alice: only its owner or an admin may change it/, `${s.sel} tooltip`);
  }
  assert.ok(!(await page.isDisabled('#fork-exp')), 'fork is disabled for a user');
  await screenshot(page, SHOTS, 'roles-other-user-experiment.png');
  await page.context().close();
});

test('the owner has every control', async () => {
  const page = await pageAs(ALICE);
  await page.goto(`${URL}/#/experiments/${expId}`);
  await page.waitForSelector('#exp-workflow #exp-meta b');
  await page.waitForSelector('[data-action="pause"]:not([disabled])');
  for (const s of await states(page, ['[data-action="pause"]', '[data-action="cancel"]', '#extend-exp', '#desc-edit', '#fork-exp']))
    assert.ok(!s.disabled, `${s.sel} is disabled for its owner`);
  assert.equal(await page.locator('[data-denied]').count(), 0);
  await page.context().close();
  assert.deepEqual(problems, []);
});
