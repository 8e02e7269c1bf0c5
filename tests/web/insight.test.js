// tests/web/insight.test.js — issue 17's dashboard views in headless
// Chromium against the real scheduler and agent of tests/web/run.sh:
//   importance: the experiment page's bar chart ranks x first (fake_trial's
//     val_acc depends on x, hardly on lr, not on the categorical z);
//   compare: two rows ticked in the trial table, "Compare" opens the view:
//     differing hyperparameters highlighted, constants not, two curves
//     overlaid, final metrics side by side;
//   log search: every trial's logs from the experiment page (matches
//     highlighted), a bad regex shows the scheduler's message, one trial's
//     log from the trial page.
// Screenshots: insight-*.png in HF_SHOTS. Console errors fail the suite,
// except the 400 the bad regex provokes on purpose.
'use strict';
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { apiClient: makeApi, until: untilDefault, launch } = require('./helpers');

const URL = process.env.HF_URL;
const TOKEN = process.env.HF_USER_TOKEN;
const FAKE = process.env.HF_FAKE_TRIAL;
const SHOTS = process.env.HF_SHOTS || '/tmp';
if (!URL || !TOKEN || !FAKE) throw new Error('run through tests/web/run.sh (HF_URL, HF_USER_TOKEN, HF_FAKE_TRIAL)');

let browser, page, expId;
const problems = [];
let allow400 = false;

const api = makeApi(URL, TOKEN);
const until = (what, fn, timeoutMs = 30000, everyMs = 200) => untilDefault(what, fn, timeoutMs, everyMs);
async function shot(name) {
  await page.evaluate(() => { document.getElementById('toast').hidden = true; });
  await page.screenshot({ path: path.join(SHOTS, `insight-${name}.png`), fullPage: true });
}

before(async () => {
  expId = (await api('POST', '/api/v1/experiments', {
    name: 'web-insight', objective: { metric: 'val_acc', goal: 'maximize' },
    searcher: { name: 'random', max_trials: 10, max_concurrent_trials: 4, seed: 3 },
    hyperparameters: { x: { type: 'uniform', min: 0, max: 1 }, lr: { type: 'log', min: 0.001, max: 0.01 },
      z: { type: 'categorical', values: ['a', 'b', 'c'] } },
    trial: { command: [FAKE, '--epochs', '3', '--sleep-ms', '30', '--stderr-lines', '2'] },
  })).id;
  browser = await launch();
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  await ctx.addInitScript((t) => localStorage.setItem('hyperfarm.token', t), TOKEN);   // signed in from the start
  page = await ctx.newPage();
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    if (allow400 && /status of 400/.test(m.text())) return;
    problems.push(`console: ${m.text()} (${page.url()})`);
  });
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message} (${page.url()})`));
  await until('the sweep to finish', async () => (await api('GET', `/api/v1/experiments/${expId}`)).state === 'COMPLETED', 120000, 500);
});

after(async () => {
  if (browser) await browser.close();
});

test('the importance panel ranks x first', async () => {
  await page.goto(`${URL}/#/experiments/${expId}`);
  await page.waitForSelector('.page[data-loaded]');
  const params = await until('importance bars', () => page.evaluate(() => document.getElementById('importance-chart').dataset.params));
  assert.equal(params.split(',')[0], 'x');
  assert.deepEqual(params.split(',').sort(), ['lr', 'x', 'z']);
  assert.equal(await page.evaluate(() => document.getElementById('importance-chart').dataset.trials), '10');
  await page.locator('#importance-panel').scrollIntoViewIfNeeded();
  await page.locator('#importance-panel').screenshot({ path: path.join(SHOTS, 'insight-importance-panel.png') });
});

test('two ticked trials open the compare view with differences highlighted', async () => {
  await page.waitForSelector('#trials-table tbody tr[data-id] input[data-pick]');
  assert.equal(await page.isDisabled('#compare-btn'), true, 'Compare needs two trials');
  const ids = await page.evaluate(() => [...document.querySelectorAll('#trials-table tbody tr[data-id]')].slice(0, 2).map((r) => +r.dataset.id));
  for (const id of ids) await page.check(`#trials-table input[data-pick="${id}"]`);
  assert.equal(await page.textContent('#compare-btn'), 'Compare (2)');
  await page.click('#compare-btn');
  await page.waitForSelector('.page[data-page="compare"][data-loaded]');
  assert.equal(page.url().split('#')[1], `/compare/${ids.sort((a, b) => a - b).join(',')}`);
  const diff = (await page.getAttribute('#compare-table', 'data-diff')).split(',');
  assert.ok(diff.includes('x') && diff.includes('lr'), `x and lr differ: ${diff}`);
  assert.ok(!diff.includes('state') && !diff.includes('experiment'), `state and experiment are the same: ${diff}`);
  assert.ok(await page.locator('#compare-table tr.diff td.diff').count() >= 2 * 2);
  assert.equal(await page.getAttribute('#compare-curves', 'data-series'), '2');
  assert.ok((await page.getAttribute('#compare-metrics', 'data-diff')).includes('best val_acc'));
  assert.equal(await page.locator('#compare-metric option').count() >= 2, true);
  await page.selectOption('#compare-metric', 'train_loss');
  await until('the train_loss curves', () => page.evaluate(() => {
    const el = document.getElementById('compare-curves');
    return el.dataset.metric === 'train_loss' && el.dataset.series === '2' && el.querySelector('canvas');
  }));
  await shot('compare');
});

test('log search over the experiment, a bad regex, and one trial', async () => {
  await page.goto(`${URL}/#/experiments/${expId}`);
  await page.waitForSelector('.page[data-loaded]');
  await page.fill('#logsearch-input', 'stderr line 1');
  await page.click('#logsearch-go');
  await until('10 matches', () => page.evaluate(() => document.getElementById('logsearch-results').dataset.count === '10'));
  assert.equal(await page.locator('#logsearch-results mark').count(), 10);
  assert.match(await page.textContent('#logsearch-note'), /10 matching lines/);
  await page.locator('#logsearch-panel').scrollIntoViewIfNeeded();
  await page.locator('#logsearch-panel').screenshot({ path: path.join(SHOTS, 'insight-logsearch-panel.png') });
  await shot('experiment');

  allow400 = true;
  await page.check('#logsearch-regex');
  await page.fill('#logsearch-input', 'line (0');
  await page.click('#logsearch-go');
  await page.waitForSelector('#logsearch-error:not([hidden])');
  assert.match(await page.textContent('#logsearch-error'), /regular expression/);
  allow400 = false;
  await page.fill('#logsearch-input', '^stderr line [01]$');
  await page.click('#logsearch-go');
  await until('20 regex matches', () => page.evaluate(() => document.getElementById('logsearch-results').dataset.count === '20'));
  assert.equal(await page.isHidden('#logsearch-error'), true);

  const tid = (await api('GET', `/api/v1/experiments/${expId}/trials`)).trials[0].id;
  await page.goto(`${URL}/#/trials/${tid}`);
  await page.waitForSelector('#logsearch-input');
  await page.check('#logsearch-icase');
  await page.fill('#logsearch-input', 'STDERR LINE 0');
  await page.click('#logsearch-go');
  await until('one match in the trial', () => page.evaluate(() => document.getElementById('logsearch-results').dataset.count === '1'));
  assert.equal(await page.locator('#logsearch-results a').count(), 0, 'no trial links on a trial page');
  await shot('trial');
});

test('no console error on any page', () => {
  assert.deepEqual(problems, []);
});
