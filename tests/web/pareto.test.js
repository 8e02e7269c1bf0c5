// tests/web/pareto.test.js — the Pareto-front panel (web/js/exp_pareto.js)
// in headless Chromium against a real scheduler and agent (started by
// tests/web/run.sh, which exports HF_URL, HF_USER_TOKEN, HF_SHOTS).
//
// Two real multi-objective TPE sweeps run a small bash trial program that
// reports f1, f2 (both minimised, a trade-off in x, worse with y), f3 and a
// constrained metric mem. Checks: the 2-objective page shows one scatter
// whose highlighted points are exactly the trials of GET .../pareto, with
// the front, dominated and infeasible series populated; the 3-objective
// page shows the three pairwise charts; a single-objective experiment has
// no such panel; clicking a front point opens its trial. Every objective
// is shown: the list's objective cell, the header's objectives stat, the
// trial table's objective columns with the front marked (the API's front);
// importance names the objective it ranks and switches to the second one
// (a chooser the single-objective page lacks); the chart spans the panel,
// zooms, names the hovered trial and takes log scales. Screenshots go to
// HF_SHOTS (dashboard-pareto-2.png, dashboard-pareto-3.png,
// dashboard-importance-objective.png).
'use strict';
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { chromium } = require('playwright-core');

const URL = process.env.HF_URL;
const TOKEN = process.env.HF_USER_TOKEN;
const SHOTS = process.env.HF_SHOTS || '/tmp';
if (!URL || !TOKEN) throw new Error('run through tests/web/run.sh (HF_URL, HF_USER_TOKEN)');

let browser, page;
const problems = [];
const ids = [];

const { api, until: untilMs } = require('./helpers');
const until = (what, fn, timeoutMs = 60000, everyMs = 250) => untilMs(what, fn, timeoutMs, everyMs);

// The trial program: one metric line from the hyperparameters.
// (os.tmpdir() is bound into the agent's trial sandbox by run.sh; the
// trial runs as another user, so the folder must be readable.)
const progDir = fs.mkdtempSync(path.join(os.tmpdir(), 'hf-pareto-'));
fs.chmodSync(progDir, 0o755);
const prog = path.join(progDir, 'mo_trial.sh');
fs.writeFileSync(prog, `#!/usr/bin/env bash
x=$(jq -r .x <<<"$HYPERFARM_HPARAMS"); y=$(jq -r .y <<<"$HYPERFARM_HPARAMS")
awk -v x="$x" -v y="$y" 'BEGIN { g = 1 + 4 * y * y;
  printf "HYPERFARM {\\"epoch\\": 1, \\"f1\\": %.6f, \\"f2\\": %.6f, \\"f3\\": %.6f, \\"mem\\": %.6f}\\n", x, g * (1 - sqrt(x / g)), (1 - x) * g, 4 * y }'
`, { mode: 0o755 });

const space = { x: { type: 'uniform', min: 0, max: 1 }, y: { type: 'uniform', min: 0, max: 1 } };
const two = {
  name: 'web-pareto-2',
  objective: [{ metric: 'f1', goal: 'minimize' }, { metric: 'f2', goal: 'minimize' }],
  constraints: [{ metric: 'mem', max: 2 }],
  searcher: { name: 'tpe', max_trials: 14, max_concurrent_trials: 2, seed: 3, n_startup_trials: 4 },
  hyperparameters: space, trial: { command: [prog], max_restarts: 0 },
};
const three = {
  name: 'web-pareto-3',
  objective: [{ metric: 'f1', goal: 'minimize' }, { metric: 'f2', goal: 'minimize' }, { metric: 'f3', goal: 'minimize' }],
  searcher: { name: 'random', max_trials: 10, max_concurrent_trials: 2, seed: 4 },
  hyperparameters: space, trial: { command: [prog], max_restarts: 0 },
};

async function finished(id) {
  const e = await api('GET', '/api/v1/experiments/' + id);
  return e.state === 'COMPLETED';
}

/* The ECharts series of the pareto chart at index i, by name: [[x, y, id]]. */
function seriesOf(i) {
  return page.evaluate((k) => {
    const el = document.querySelectorAll('#pareto-grid .chart')[k];
    const c = window.echarts.getInstanceByDom(el);
    const out = {};
    for (const s of c.getOption().series) out[s.name] = s.data;
    return out;
  }, i);
}

before(async () => {
  ids.push((await api('POST', '/api/v1/experiments', two)).id);
  ids.push((await api('POST', '/api/v1/experiments', three)).id);
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  await ctx.addInitScript((t) => localStorage.setItem('hyperfarm.token', t), TOKEN);
  page = await ctx.newPage();
  page.on('console', (m) => { if (m.type() === 'error') problems.push(`console: ${m.text()} (${page.url()})`); });
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message} (${page.url()})`));
  for (const id of ids) await until(`experiment ${id} to complete`, () => finished(id), 120000, 500);
});

after(async () => {
  if (browser) await browser.close();
  for (const e of ids) await api('POST', `/api/v1/experiments/${e}/cancel`).catch(() => {});
});

test('two objectives: one scatter, the front highlighted is the API\'s front', async () => {
  const id = ids[0];
  const front = await api('GET', `/api/v1/experiments/${id}/pareto`);
  assert.ok(front.trials.length >= 2, 'a front of at least 2 trials');
  await page.goto(`${URL}/#/experiments/${id}`);
  await page.waitForSelector('#pareto-panel:not([hidden])[data-front]', { timeout: 20000 });
  assert.equal(await page.getAttribute('#pareto-panel', 'data-pairs'), '1');
  assert.equal(await page.getAttribute('#pareto-panel', 'data-front'), String(front.trials.length));
  await until('the chart to be drawn', async () => ((await seriesOf(0))['Pareto front'] || []).length > 0, 10000);
  const s = await seriesOf(0);
  const shown = s['Pareto front'].map((p) => p[2]).sort((a, b) => a - b);
  const want = front.trials.map((t) => t.trial_id).sort((a, b) => a - b);
  assert.deepEqual(shown, want, 'the highlighted points are the front of GET .../pareto');
  for (const t of front.trials) {
    const p = s['Pareto front'].find((q) => q[2] === t.trial_id);
    assert.ok(Math.abs(p[0] - t.values[0]) < 1e-9 && Math.abs(p[1] - t.values[1]) < 1e-9, `trial ${t.trial_id} at its values`);
  }
  const total = s['Pareto front'].length + s.dominated.length + s.infeasible.length;
  assert.equal(total, 14, 'every completed trial is drawn once');
  assert.equal(s.infeasible.length, 14 - front.feasible, 'infeasible trials drawn apart');
  assert.equal(s.front.length, front.trials.length, 'the staircase joins the front');
  const hint = await page.textContent('#pareto-panel .hint');
  assert.match(hint, new RegExp(`${front.trials.length} trials? on the front, of ${front.feasible} feasible and 14 completed`));
  assert.match(hint, /mem ≤ 2/);
  await page.screenshot({ path: path.join(SHOTS, 'dashboard-pareto-2.png'), fullPage: true });
  await page.locator('#pareto-panel').screenshot({ path: path.join(SHOTS, 'dashboard-pareto-2-panel.png') });
});

test('clicking a front point opens its trial', async () => {
  const id = ids[0];
  const front = await api('GET', `/api/v1/experiments/${id}/pareto`);
  const t = front.trials[0];
  const xy = await page.evaluate((v) => {
    const el = document.querySelector('#pareto-grid .chart');
    const c = window.echarts.getInstanceByDom(el);
    const [px, py] = c.convertToPixel({ gridIndex: 0 }, [v[0], v[1]]);
    const r = el.getBoundingClientRect();
    return [r.left + px, r.top + py];
  }, t.values);
  await page.mouse.click(xy[0], xy[1]);
  await until('the trial page', () => page.evaluate(() => location.hash), 5000);
  assert.equal(await page.evaluate(() => location.hash), `#/trials/${t.trial_id}`);
});

test('every objective everywhere: list, header, table with the front marked', async () => {
  const id = ids[0];
  const front = await api('GET', `/api/v1/experiments/${id}/pareto`);
  const want = front.trials.map((t) => t.trial_id).sort((a, b) => a - b);
  await page.goto(`${URL}/#/experiments/${id}`);
  await page.waitForSelector('#pareto-panel:not([hidden])[data-front]', { timeout: 20000 });
  await until('the chart to be drawn', async () => ((await seriesOf(0))['Pareto front'] || []).length > 0, 10000);
  // The header names both objectives.
  assert.match(await page.textContent('#objectives-stat'), /f1 ↓ · f2 ↓/);
  // The trial table: a column per objective (last values) and the front marked.
  await page.waitForSelector('#trials-table th[data-key="front"]');
  const keys = await page.$$eval('#trials-table th[data-key]', (ths) => ths.map((t) => t.dataset.key));
  assert.ok(keys.includes('obj:f1') && keys.includes('obj:f2'), `objective columns (${keys})`);
  await until('the front marked in the table', async () => {
    const marked = await page.$$eval('#trials-table tbody tr[data-id]', (trs) => trs.filter((tr) => tr.querySelector('.front-mark')).map((tr) => +tr.dataset.id));
    return JSON.stringify(marked.sort((a, b) => a - b)) === JSON.stringify(want);
  }, 10000);
  // The importance panel says which objective it ranks.
  await page.waitForSelector('#importance-panel .hint[data-objective="f1"]', { timeout: 15000 });
  assert.match(await page.textContent('#importance-panel .hint'), /f1 \(the first of 2 objectives\)/);
  // ... and has a chooser of the objectives: the second one ranks by f2.
  assert.equal(await page.evaluate(() => document.getElementById('importance-objective-label').hidden), false);
  assert.deepEqual(await page.$$eval('#importance-objective option', (os) => os.map((o) => o.value)), ['f1', 'f2']);
  assert.equal(await page.textContent('#importance-panel h2'), 'Hyperparameter importance for f1');
  const byF2 = await api('GET', `/api/v1/experiments/${id}/importance?objective=f2`);
  assert.equal(byF2.objective, 'f2');
  await page.selectOption('#importance-objective', 'f2');
  await page.waitForSelector('#importance-chart[data-objective="f2"]', { timeout: 10000 });
  assert.equal(await page.textContent('#importance-panel h2'), 'Hyperparameter importance for f2');
  assert.match(await page.textContent('#importance-panel .hint'), /f2 \(objective 2 of 2 objectives\)/);
  assert.equal(await page.getAttribute('#importance-chart', 'data-params'), byF2.params.join(','), 'the bars are f2\'s ranking');
  await page.locator('#importance-panel').scrollIntoViewIfNeeded();
  await page.locator('#importance-panel').screenshot({ path: path.join(SHOTS, 'dashboard-importance-objective.png') });
  await page.selectOption('#importance-objective', 'f1');
  await page.waitForSelector('#importance-chart[data-objective="f1"]', { timeout: 10000 });
  // The chart spans the panel, zooms, names a hovered trial, takes log scales.
  const [box, panel] = await page.evaluate(() => [document.querySelector('#pareto-grid .chart-box').getBoundingClientRect().width,
    document.querySelector('#pareto-panel').clientWidth]);
  assert.ok(box > panel - 40, `full width (${box} of ${panel})`);
  const zoom = await page.evaluate(() => {
    const c = window.echarts.getInstanceByDom(document.querySelector('#pareto-grid .chart'));
    return c.getOption().dataZoom.map((z) => z.type);
  });
  assert.deepEqual(zoom, ['inside', 'inside']);
  const t = front.trials[0];
  const xy = await page.evaluate((v) => {
    const el = document.querySelector('#pareto-grid .chart');
    el.scrollIntoView({ block: 'center' });
    const c = window.echarts.getInstanceByDom(el);
    const [px, py] = c.convertToPixel({ gridIndex: 0 }, [v[0], v[1]]);
    const r = el.getBoundingClientRect();
    return [r.left + px, r.top + py];
  }, t.values);
  await page.mouse.move(xy[0], xy[1]);
  await until('the hovered trial named', async () => {
    const tip = await page.evaluate(() => [...document.querySelectorAll('#pareto-grid div')].map((d) => d.textContent).join('|'));
    return tip.includes(`trial ${t.trial_id}`);
  }, 5000);
  await page.mouse.move(1, 1);
  await page.check('#pareto-log');
  await until('log axes', () => page.evaluate(() => {
    const c = window.echarts.getInstanceByDom(document.querySelector('#pareto-grid .chart'));
    const o = c.getOption();
    return o.xAxis[0].type === 'log' && o.yAxis[0].type === 'log';
  }), 5000);
  assert.equal((await seriesOf(0))['Pareto front'].length, front.trials.length, 'the same points on log axes');
  await page.screenshot({ path: path.join(SHOTS, 'dashboard-pareto-log.png'), fullPage: true });
  await page.uncheck('#pareto-log');
  // The experiment list shows both objectives.
  await page.goto(`${URL}/#/experiments`);
  await page.waitForSelector(`#experiments-table tr[data-id="${id}"]`);
  assert.equal((await page.textContent(`#experiments-table tr[data-id="${id}"] td.objectives`)).trim(), 'f1 ↓ · f2 ↓');
});

test('three objectives: one scatter per pair', async () => {
  const id = ids[1];
  const front = await api('GET', `/api/v1/experiments/${id}/pareto`);
  await page.goto(`${URL}/#/experiments/${id}`);
  await page.waitForSelector('#pareto-panel:not([hidden])[data-front]', { timeout: 20000 });
  assert.equal(await page.getAttribute('#pareto-panel', 'data-pairs'), '3');
  const pairs = await page.$$eval('#pareto-grid .chart-box', (els) => els.map((e) => e.dataset.pair));
  assert.deepEqual(pairs, ['f1|f2', 'f1|f3', 'f2|f3']);
  for (let i = 0; i < 3; i++) {
    await until(`pair ${i} drawn`, async () => ((await seriesOf(i))['Pareto front'] || []).length > 0, 10000);
    const s = await seriesOf(i);
    assert.equal(s['Pareto front'].length, front.trials.length);
    assert.equal(s['Pareto front'].length + s.dominated.length, 10);
  }
  await page.screenshot({ path: path.join(SHOTS, 'dashboard-pareto-3.png'), fullPage: true });
});

test('a single-objective experiment has no Pareto panel', async () => {
  const one = await api('POST', '/api/v1/experiments', {
    name: 'web-pareto-1', objective: { metric: 'f1', goal: 'minimize' },
    searcher: { name: 'random', max_trials: 1 }, hyperparameters: space, trial: { command: [prog] } });
  ids.push(one.id);
  await page.goto(`${URL}/#/experiments/${one.id}`);
  await page.waitForSelector('[data-loaded="1"]', { timeout: 20000 });
  await new Promise((r) => setTimeout(r, 500));
  assert.equal(await page.evaluate(() => document.getElementById('pareto-panel').hidden), true);
  // ... and no objective chooser in the importance panel.
  await page.waitForSelector('#importance-chart[data-trials]', { timeout: 20000 });
  assert.equal(await page.evaluate(() => document.getElementById('importance-objective-label').hidden), true);
  assert.equal(await page.textContent('#importance-panel h2'), 'Hyperparameter importance');
});

test('no console errors or uncaught exceptions', () => {
  assert.deepEqual(problems, []);
});
