// tests/web/workflow.test.js — the experiment workflow of issue #17 in
// headless Chromium against the real scheduler and agent of tests/web/run.sh
// (HF_URL, HF_ALICE_TOKEN: a token file line "user:alice TOKEN").
//
// As user alice: the experiments list shows tags and filters by one; the
// experiment page says who submitted it, renders the Markdown description
// safely (a <script>, an onerror handler and a javascript: link in it do
// nothing and are gone from the DOM), edits tags and the description,
// extends the sweep (more trials run), lists what alice did; "Fork…" opens
// the New-experiment editor prefilled with the file and submits a fork that
// records its parent; a trial's notes are written and rendered, and its
// HYPERFARM_SEED is shown. Every answer shown is checked against the API.
// Screenshots: $HF_SHOTS/workflow-*.png. No console error is allowed.
'use strict';
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');

const URL = process.env.HF_URL;
const TOKEN = process.env.HF_ALICE_TOKEN;
const FAKE = process.env.HF_FAKE_TRIAL;
const SHOTS = process.env.HF_SHOTS || '/tmp';
if (!URL || !TOKEN || !FAKE) throw new Error('run through tests/web/run.sh (HF_URL, HF_ALICE_TOKEN, HF_FAKE_TRIAL)');

let browser, page, baseId, otherId, forkId;
const problems = [];

const { apiClient, until, launch, screenshot } = require('./helpers');
const api = apiClient(URL, TOKEN);
const shot = (name) => screenshot(page, SHOTS, `workflow-${name}.png`);

const HOSTILE = '# Baseline\n\nAdam, **cosine** schedule, `lr` searched.\n\n' +
  '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2">\n\n' +
  '[bad link](javascript:window.__xss=3) and [docs](https://example.org/docs)';

const base = {
  name: 'wf-base', objective: { metric: 'val_acc', goal: 'maximize' }, tags: ['baseline', 'lr:sweep'],
  description: HOSTILE,
  searcher: { name: 'random', max_trials: 3, max_concurrent_trials: 3, seed: 17 },
  hyperparameters: { x: { type: 'uniform', min: -1, max: 1 }, lr: { type: 'log', min: 0.01, max: 1 } },
  trial: { command: [FAKE, '--epochs', '3', '--sleep-ms', '30'] },
};

const finished = async (id, n) => {
  const e = await api('GET', '/api/v1/experiments/' + id);
  const c = e.counts;
  return e.state === 'COMPLETED' && c.completed + c.stopped >= n && e;
};

before(async () => {
  baseId = (await api('POST', '/api/v1/experiments', base)).id;
  otherId = (await api('POST', '/api/v1/experiments', { ...base, name: 'wf-untagged', tags: [], description: 'plain' })).id;
  await until('the base sweep to finish', () => finished(baseId, 3), 60000);
  browser = await launch();
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  await ctx.addInitScript((tok) => localStorage.setItem('hyperfarm.token', tok), TOKEN);
  page = await ctx.newPage();
  page.on('console', (m) => { if (m.type() === 'error') problems.push(`console: ${m.text()} (${page.url()})`); });
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message} (${page.url()})`));
  page.on('dialog', (d) => d.accept());
});

after(async () => {
  if (browser) await browser.close();
  for (const e of [baseId, otherId, forkId]) if (e) await api('POST', `/api/v1/experiments/${e}/cancel`).catch(() => {});
});

test('the list shows tags and filters by one', async () => {
  await page.goto(URL + '/#/experiments');
  await page.waitForSelector(`#experiments-table tr[data-id="${baseId}"] .tag[data-tag="baseline"]`);
  assert.equal(await page.locator(`#experiments-table tr[data-id="${otherId}"] .tag`).count(), 0);
  await page.fill('#tag-filter', 'baseline');
  await page.press('#tag-filter', 'Enter');
  await until('only tagged experiments listed', async () => {
    const ids = await page.$$eval('#experiments-table tbody tr[data-id]', (rs) => rs.map((r) => +r.dataset.id));
    return ids.includes(baseId) && !ids.includes(otherId);
  });
  const viaApi = await api('GET', '/api/v1/experiments?tag=baseline');
  assert.ok(viaApi.experiments.every((e) => e.tags.includes('baseline')));
  assert.ok(!viaApi.experiments.some((e) => e.id === otherId));
  await shot('list-filtered');
});

test('the experiment page: submitter, safe Markdown, tags and description edited', async () => {
  await page.goto(`${URL}/#/experiments/${baseId}`);
  await page.waitForSelector('#exp-meta b');
  assert.match(await page.textContent('#exp-meta'), /submitted by\s+alice/);
  // Markdown rendered, the hostile parts gone and never run.
  await page.waitForSelector('#desc-view .md h1');
  assert.equal(await page.textContent('#desc-view .md strong'), 'cosine');
  const dom = await page.$eval('#desc-view', (el) => el.innerHTML);
  assert.ok(!/<script|onerror|javascript:/i.test(dom), 'no script, handler or javascript: URL in ' + dom);
  assert.equal(await page.getAttribute('#desc-view a[href^="https://example.org"]', 'rel'), 'noopener noreferrer');
  assert.equal(await page.evaluate(() => window.__xss), undefined);

  // Tags: add one, remove one; the API agrees.
  await page.fill('#tag-input', 'reviewed');
  await page.press('#tag-input', 'Enter');
  await page.waitForSelector('#exp-tags .tag[data-tag="reviewed"]');
  await page.click('#exp-tags button[data-remove="lr:sweep"]');
  await until('lr:sweep removed', async () => (await page.locator('#exp-tags .tag[data-tag="lr:sweep"]').count()) === 0);
  assert.deepEqual((await api('GET', '/api/v1/experiments/' + baseId)).tags, ['baseline', 'reviewed']);

  // Description: edit, save, rendered from what was stored.
  await page.click('#desc-edit');
  assert.equal(await page.inputValue('#desc-text'), HOSTILE);
  await page.fill('#desc-text', '## Findings\n\n- lr above 0.3 diverges\n- keep `x` near 0');
  await page.click('#desc-save');
  await page.waitForSelector('#desc-view .md h2');
  assert.equal(await page.textContent('#desc-view .md h2'), 'Findings');
  assert.equal(await page.locator('#desc-view .md li').count(), 2);
  assert.match((await api('GET', '/api/v1/experiments/' + baseId)).description, /^## Findings/);
  await shot('experiment');
});

test('Extend runs more trials, and what alice did is listed', async () => {
  await page.fill('#extend-n', '2');
  await page.click('#extend-exp');
  await until('max_trials 5', async () => (await api('GET', '/api/v1/experiments/' + baseId)).max_trials === 5);
  await until('5 trials done', () => finished(baseId, 5), 60000);
  await until('the events list shows the extension', async () => {
    const t = await page.textContent('#exp-events');
    return /alice/.test(t) && /EXTENDED/.test(t) && /EDITED/.test(t) && /submitted/.test(t);
  });
  const evs = (await api('GET', `/api/v1/experiments/${baseId}/events`)).events;
  assert.ok(evs.some((e) => e.type === 'EXTENDED' && e.user === 'alice'));
  assert.ok(evs.some((e) => e.type === 'COMPLETED' && e.user === null), 'the scheduler\'s own events have no user');
});

test('Fork opens the editor prefilled and submits a fork with its parent', async () => {
  await page.click('#fork-exp');
  await page.waitForSelector('#submit-panel:not([hidden])');
  assert.match(await page.textContent('#submit-title'), new RegExp(`Fork experiment #${baseId}`));
  const text = await page.inputValue('#submit-panel textarea');
  const cfg = JSON.parse(text);
  assert.equal(cfg.name, 'wf-base (fork)');
  assert.equal(cfg.searcher.seed, 17);
  assert.deepEqual(cfg.tags, ['baseline', 'reviewed']);
  // Narrow the space and warm-start from the parent, as a user would.
  cfg.hyperparameters.x = { type: 'uniform', min: -0.5, max: 0.5 };
  cfg.searcher = { name: 'tpe', max_trials: 2, seed: 5, n_startup_trials: 2 };
  cfg.warm_start = { experiments: [baseId], enqueue: [{ x: 0.1, lr: 0.05 }] };
  await page.fill('#submit-panel textarea', JSON.stringify(cfg, null, 2));
  await shot('fork');
  await page.click('#submit-exp');
  const href = await (await page.waitForSelector('#submitted-link')).getAttribute('href');
  forkId = +href.split('/').pop();
  const f = await api('GET', '/api/v1/experiments/' + forkId);
  assert.equal(f.parent_experiment, baseId);
  assert.equal(f.submitted_by, 'alice');
  assert.equal(f.warm_start.enqueued, 1);
  assert.ok(f.warm_start.observed >= 1, 'trials of the parent inside the narrowed space are observed');
  const trials = (await api('GET', `/api/v1/experiments/${forkId}/trials`)).trials;
  assert.deepEqual(trials[0].hparams, { x: 0.1, lr: 0.05 }, 'the enqueued configuration runs first');
  await page.click('#submitted-link');
  await page.waitForSelector('#exp-parent');
  assert.equal(await page.textContent('#exp-parent'), '#' + baseId);
  await page.waitForSelector('#exp-warm');
});

test('a trial\'s notes are written, rendered and stored; its seed is shown', async () => {
  const t = (await api('GET', `/api/v1/experiments/${baseId}/trials`)).trials[0];
  await page.goto(`${URL}/#/trials/${t.id}`);
  await page.waitForSelector('#trial-notes #notes-edit');
  await page.click('#notes-edit');
  await page.fill('#notes-text', 'Best of the first batch. **Rerun** with `--epochs 9`.\n\n<iframe src="https://example.org"></iframe>');
  await page.click('#notes-save');
  await page.waitForSelector('#notes-view .md strong');
  assert.equal(await page.locator('#notes-view iframe').count(), 0);
  const stored = await api('GET', '/api/v1/trials/' + t.id);
  assert.match(stored.notes, /^Best of the first batch/);
  assert.ok(stored.events.some((e) => e.type === 'NOTES' && e.user === 'alice'));
  assert.match(await page.textContent('#trial-stats'), new RegExp(String(stored.seed)));
  await page.reload();
  await page.waitForSelector('#notes-view .md strong');
  assert.equal(await page.textContent('#notes-view .md strong'), 'Rerun');
  await shot('trial');
});

test('no console errors or uncaught exceptions', () => {
  assert.deepEqual(problems, []);
});
