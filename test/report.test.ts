/**
 * llmc report: HTML (checked in real headless Chromium: Debian's chromium package; skipped with a
 * message where it is absent), Markdown and JSON of an artifact, the section registry, bad input.
 */
import { existsSync, promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ELASTIC_LEVELS } from '../src/core/records/index.js';
import { RECORD_SECTIONS, SECTION_OF_RECORD } from '../src/app/report/sections/index.js';
import { PASSES } from '../passes/index.js';
import { cumulativeShare } from '../src/app/report/sections/reorder.js';
import { llmcInProcess } from './cli.js';
import { chartLayoutCounts, chartLayoutProblems } from './chart-layout.js';

const ROOT = path.resolve(__dirname, '..');
const STORIES = path.join(ROOT, 'fixtures/models/stories260K');
const CHROMIUM = '/usr/bin/chromium';
/** The flags the report check runs Chromium with: nothing reaches out of the machine. */
const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'];
const SCREENSHOT = path.join(ROOT, 'out/report/report.png');

let tmp: string;
let cache: string;
let artifact: string;
let html: string;
beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-report-'));
  cache = path.join(tmp, 'cache');
  artifact = path.join(tmp, 'model');
  const c = await llmcInProcess('compile', STORIES, '--target', 'ts', '--quant', 'F16', '--passes', 'reorder', '--opt', 'reorder.recover=none', '-o', artifact, '--cache-dir', cache);
  expect(c.code, c.stderr).toBe(0);
  html = path.join(tmp, 'report.html');
  const r = await llmcInProcess('report', artifact, '-o', html, '--cache-dir', cache);
  expect(r.code, r.stderr).toBe(0);
  expect(r.stdout).toBe(`wrote ${html}: summary, sizes, quality, resources, reorder\n`);
});
afterAll(async () => fsp.rm(tmp, { recursive: true, force: true }));

/** A profile of stories260K for reorder, outliers and chunk-partition (made once, by the first test that asks). */
let profiled: Promise<string> | undefined;
const profileDir = () =>
  (profiled ??= (async () => {
    const prof = path.join(tmp, 'profile');
    const pr = await llmcInProcess('profile', STORIES, '--passes', 'reorder,outliers,chunk-partition', '-o', prof);
    expect(pr.code, pr.stderr).toBe(0);
    return prof;
  })());

describe('llmc report (HTML)', () => {
  it('is self-contained: no script, no external reference, a CSP that forbids loading anything', async () => {
    const text = await fsp.readFile(html, 'utf8');
    expect(text).not.toMatch(/<script/i);
    expect(text).not.toMatch(/(src|href)="(https?:|\/\/)/i);
    expect(text).not.toMatch(/url\(\s*['"]?https?:/i);
    expect(text).toContain(`content="default-src 'none'; style-src 'unsafe-inline'; img-src data:"`);
    // Chart ids are the section's, unique on the page.
    const ids = [...text.matchAll(/\sid="([^"]+)"/g)].map((m) => m[1]);
    expect(new Set(ids).size).toBe(ids.length);
    expect(text).not.toMatch(/\bzr\d+-/);
  });

  it.skipIf(!existsSync(CHROMIUM))('loads in headless Chromium without console errors or requests; every section SVG has a size; screenshot saved', async () => {
    const { chromium } = await import('playwright-core');
    const browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
    try {
      const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
      const errors: string[] = [];
      const requests: string[] = [];
      page.on('console', (m) => {
        if (m.type() === 'error' || m.type() === 'warning') errors.push(m.text());
      });
      page.on('pageerror', (e) => errors.push(e.message));
      page.on('request', (r) => {
        if (r.url() !== `file://${html}`) requests.push(r.url());
      });
      await page.goto(`file://${html}`, { waitUntil: 'load' });
      const sections = await page.$$eval('section[data-section]', (els) =>
        els.map((s) => ({
          id: s.getAttribute('data-section'),
          svgs: Array.from(s.querySelectorAll("figure > svg")).map((g) => {
            const r = g.getBoundingClientRect();
            return { w: r.width, h: r.height, marks: g.querySelectorAll('path, rect, text').length };
          }),
        })),
      );
      expect(sections.map((s) => s.id)).toEqual(['summary', 'sizes', 'quality', 'resources', 'reorder']);
      const charts = Object.fromEntries(sections.map((s) => [s.id, s.svgs]));
      expect(charts.sizes).toHaveLength(1);
      expect(charts.reorder).toHaveLength(4); // layer loss, MLP and head importance, levels
      expect(charts.resources).toHaveLength(2); // latency per token, memory by context
      for (const s of sections) for (const g of s.svgs) {
        expect(g.w, s.id!).toBeGreaterThan(100);
        expect(g.h, s.id!).toBeGreaterThan(100);
        expect(g.marks, s.id!).toBeGreaterThan(10);
      }
      expect(errors).toEqual([]);
      expect(requests).toEqual([]);
      await fsp.mkdir(path.dirname(SCREENSHOT), { recursive: true });
      await page.screenshot({ path: SCREENSHOT, fullPage: true });
      expect((await fsp.stat(SCREENSHOT)).size).toBeGreaterThan(20_000);
    } finally {
      await browser.close();
    }
  });
  if (!existsSync(CHROMIUM)) it.skip(`(skipped: ${CHROMIUM} is not installed: apt-get install chromium)`, () => {});
});

describe('llmc report: chart layout in Chromium', () => {
  const withPage = async (f: (page: import('playwright-core').Page) => Promise<void>) => {
    const { chromium } = await import('playwright-core');
    const browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
    try {
      await f(await browser.newPage({ viewport: { width: 1280, height: 900 } }));
    } finally {
      await browser.close();
    }
  };

  it.skipIf(!existsSync(CHROMIUM))('the check finds what overlaps: texts on texts, a label into the next legend marker, slanted labels, text cut off; and passes the same shapes set apart', async () => {
    // ECharts' SVG as it draws a legend item: marker and text at the item's translation, the hit area tagged.
    const item = (x: number, label: string, i: number) =>
      `<path d="M0 7L18 7" transform="translate(${x} 10)" stroke="#3b6ea8" stroke-width="2"/><text x="23" y="7" dominant-baseline="central" style="font-size:11px" transform="translate(${x} 10)">${label}</text>` +
      `<path d="M0 0l60 0l0 14l-60 0Z" transform="translate(${x} 10)" fill="none" ecmeta_ssr_type="legend" ecmeta_data_index="${i}"/>`;
    const slanted = (x: number, label: string) => `<text dominant-baseline="central" text-anchor="end" style="font-size:9px" transform="translate(${x} 150) rotate(-60)">${label}</text>`;
    const page = (crowded: boolean) =>
      `<!doctype html><html><body style="margin:0;font-family:sans-serif"><svg data-chart="t" width="400" height="200">` +
      `<text x="10" y="${crowded ? 60 : 60}" style="font-size:12px">full model 2.587</text><text x="${crowded ? 60 : 160}" y="62" style="font-size:12px">0.4</text>` +
      item(10, 'layer 0 (anchor)', 0) + item(crowded ? 90 : 160, 'layer 1', 1) +
      slanted(200, 'l0.gate_proj') + slanted(crowded ? 205 : 240, 'l0.up_proj') +
      `<text x="${crowded ? 370 : 300}" y="190" style="font-size:12px">cut off here</text></svg></body></html>`;
    await withPage(async (p) => {
      await p.setContent(page(true));
      const found = (await chartLayoutProblems(p)).map((x) => x.what);
      expect(found).toContain('text "full model 2.587" overlaps text "0.4"');
      expect(found).toContain('text "layer 0 (anchor)" overlaps legend marker 1');
      expect(found).toContain('text "l0.gate_proj" overlaps text "l0.up_proj"');
      expect(found).toContain('text "cut off here" is cut off at the chart\'s edge');
      await p.setContent(page(false));
      expect(await chartLayoutProblems(p)).toEqual([]);
    });
  });

  it.skipIf(!existsSync(CHROMIUM))('no text or legend marker overlaps another in any chart of an artifact\'s and a profile\'s report (every section with charts)', async () => {
    const prof = await profileDir();
    const profHtml = path.join(tmp, 'profile.html');
    const r = await llmcInProcess('report', prof, '-o', profHtml);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe(`wrote ${profHtml}: summary, sizes, reorder, outliers, chunk-schedule\n`);
    await withPage(async (p) => {
      for (const [file, charts] of [[html, 7], [profHtml, 6]] as const) {
        await p.goto(`file://${file}`, { waitUntil: 'load' });
        const seen = await chartLayoutCounts(p);
        expect(seen.charts, file).toBe(charts);
        expect(seen.texts, file).toBeGreaterThan(80);
        expect(seen.legendItems, file).toBeGreaterThan(10);
        expect(await chartLayoutProblems(p), file).toEqual([]);
      }
    });
  });
  if (!existsSync(CHROMIUM)) it.skip(`(skipped: ${CHROMIUM} is not installed: apt-get install chromium)`, () => {});
});

describe('llmc report (Markdown, JSON)', () => {
  it('Markdown and --json carry the same sections; JSON figures are the record\'s', async () => {
    const md = path.join(tmp, 'report.md');
    const r = await llmcInProcess('report', artifact, '-o', md, '--cache-dir', cache, '--no-quality');
    expect(r.code, r.stderr).toBe(0);
    const text = await fsp.readFile(md, 'utf8');
    expect(text).toMatch(/^# llmc report: model \(ts artifact\)/);
    expect(text).toContain('## Reorder: unit importance and elastic levels');
    expect(text).toMatch(/\| mlp \| F16 \| 15 \|/);
    expect(text).not.toContain('## Quality');
    const j = await llmcInProcess('report', artifact, '--json', '--cache-dir', cache, '--no-quality');
    expect(j.code, j.stderr).toBe(0);
    const report = JSON.parse(j.stdout);
    expect(report.schema).toBe('llmc-report/1');
    expect(report.sections.map((s: { id: string }) => s.id)).toEqual(['summary', 'sizes', 'resources', 'reorder']);
    const manifest = JSON.parse(await fsp.readFile(path.join(artifact, 'llmc-manifest.json'), 'utf8'));
    const rec = ELASTIC_LEVELS.read(manifest.passes[0].metadata);
    // Memory: per level, its bytes plus a float32 KV cache of 2·layers·KV heads·head dim values per token (config.json).
    const cfg = JSON.parse(await fsp.readFile(path.join(STORIES, 'config.json'), 'utf8'));
    const kvFull = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * (cfg.hidden_size / cfg.num_attention_heads) * 4;
    const resources = report.sections[2].data;
    expect(resources.tokenMs).toBeNull(); // --no-quality: nothing ran
    expect(resources.memory.at(-1)).toMatchObject({ kvPerToken: kvFull, context: cfg.max_position_embeddings });
    expect(resources.memory.map((m: { name: string }) => m.name)).toEqual(report.sections[3].data.levels.map((l: { id: string }) => l.id));
    const reorder = report.sections[3].data;
    expect(reorder.levels.map((l: { heldOutPpl: number }) => l.heldOutPpl)).toEqual(rec.levels.map((l) => l.heldOutPpl));
    expect(reorder.layerLoss).toEqual(rec.layerLoss);
    // The level table has compile's columns: bytes (exact on ts: what a level reads of weights.bin), agreement.
    const weights = (await fsp.stat(path.join(artifact, 'weights.bin'))).size;
    for (const l of reorder.levels) expect(l.bytesExact && l.bytes > 0 && l.bytes <= weights, l.id).toBe(true);
    expect(reorder.levels.map((l: { agreement: number }) => l.agreement)).toEqual(rec.levels.map((l) => l.agreement ?? null));
    // Bytes per group add up to the weights file's tensors (padding aside).
    const sizes = report.sections[1].data;
    const tensorBytes = manifest.targetInfo.tensors.reduce((s: number, t: { bytes: number }) => s + t.bytes, 0);
    expect(sizes.totalBytes).toBe(tensorBytes);
    expect(sizes.byGroupAndFormat.find((g: { group: string }) => g.group === 'norms').format).toBe('F32');
  });

  it('a gguf artifact: sizes from its tensor table, quality measured in llama.cpp, no reorder section', async () => {
    const gguf = path.join(tmp, 'gguf');
    expect((await llmcInProcess('compile', STORIES, '--target', 'gguf', '--quant', 'Q8_0', '-o', gguf)).code).toBe(0);
    // 2048 held-out tokens, not the default 16384: the delta below is paired (0 for an unchanged model
    // at any size), and its 95% interval at 2048 (about ±0.2) stays well inside the bounds checked.
    const r = await llmcInProcess('report', gguf, '-o', path.join(tmp, 'g.md'), '--eval-tokens', '2048');
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/: summary, sizes, quality, resources\n$/);
    const text = await fsp.readFile(path.join(tmp, 'g.md'), 'utf8');
    expect(text).toMatch(/\| attention \| Q8_0 \| 20 \|/);
    expect(text).toMatch(/The source runs on onnxruntime, the artifact on llama\.cpp\./);
    // Q8_0 costs a little perplexity, never nothing and never much (stories260K: +0.8).
    const delta = Number(/\| perplexity \| [\d.]+ \| [\d.]+ \| ([-\d.e]+) \|/.exec(text)?.[1]);
    expect(delta).toBeGreaterThan(0.05);
    expect(delta).toBeLessThan(2);
  });
});

describe('llmc report on a profile directory', () => {
  it('shows every profiled pass: outliers\' and chunk-partition\'s decisions are the ones a compile from the profile writes', async () => {
    const prof = await profileDir();
    const j = await llmcInProcess('report', prof, '--json');
    expect(j.code, j.stderr).toBe(0);
    const report = JSON.parse(j.stdout);
    expect(report.notes).toEqual([]);
    const section = (id: string) => report.sections.find((s: { id: string }) => s.id === id).data;
    expect(report.sections.map((s: { id: string }) => s.id)).toEqual(['summary', 'sizes', 'reorder', 'outliers', 'chunk-schedule']);
    // The reference: the records of a qnn compile that reads the same profile.
    const qnn = path.join(tmp, 'qnn');
    const c = await llmcInProcess('compile', STORIES, '--target', 'qnn', '--passes', 'outliers,chunk-partition', '--profile', prof, '--no-eval', '-o', qnn);
    expect(c.code, c.stderr).toBe(0);
    const passes = JSON.parse(await fsp.readFile(path.join(qnn, 'llmc-manifest.json'), 'utf8')).passes as { name: string; metadata: Record<string, any> }[];
    const [outliers, chunks] = ['outliers', 'chunk-partition'].map((n) => passes.find((p) => p.name === n)!.metadata);
    const decisions = (ls: { weight: string; input: { decision: string; T: number }; output: { decision: string; T: number } }[]) => ls.map((l) => [l.weight, l.input.decision, l.input.T, l.output.decision, l.output.T]);
    expect(decisions(section('outliers').linears)).toEqual(decisions(outliers.linears));
    expect(section('outliers').kept).toBe(outliers.kept);
    expect(outliers.kept).toBeGreaterThan(0);
    expect(section('chunk-schedule').choice).toEqual(chunks.choice);
    expect(section('chunk-schedule').chunks.map((p: { c: number; schedules: unknown }) => [p.c, p.schedules])).toEqual(chunks.chunks.map((p: { c: number; schedules: { N: number; lowerBound: number; makespan: unknown; optimal: boolean }[] }) => [p.c, p.schedules.map((r) => ({ N: r.N, lowerBound: r.lowerBound, makespan: r.makespan, optimal: r.optimal }))]));
  });

  it('a profile whose checkpoint has moved: the decisions are left out with a note naming --source; with --source they are back', async () => {
    const prof = await profileDir();
    const moved = path.join(tmp, 'moved-profile');
    await fsp.cp(prof, moved, { recursive: true });
    const index = JSON.parse(await fsp.readFile(path.join(moved, 'llmc-profile.json'), 'utf8'));
    index.checkpoint.path = path.join(tmp, 'gone');
    await fsp.writeFile(path.join(moved, 'llmc-profile.json'), JSON.stringify(index));
    const j = await llmcInProcess('report', moved, '--json');
    expect(j.code, j.stderr).toBe(0);
    const r = JSON.parse(j.stdout);
    expect(r.sections.map((s: { id: string }) => s.id)).toEqual(['summary', 'sizes', 'reorder']);
    expect(r.notes).toHaveLength(1);
    expect(r.notes[0]).toMatch(/^outliers, chunk-partition: decisions left out: the profile's checkpoint is not readable \(.*\); give it with --source DIR$/);
    const s = await llmcInProcess('report', moved, '--json', '--source', STORIES);
    expect(JSON.parse(s.stdout).sections.map((x: { id: string }) => x.id)).toEqual(['summary', 'sizes', 'reorder', 'outliers', 'chunk-schedule']);
    const wrong = await llmcInProcess('report', moved, '--json', '--source', path.join(ROOT, 'fixtures/models/draft-5M'));
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toMatch(/^llmc: .*moved-profile: is a profile of another checkpoint .*\n$/);
  });
});

describe('llmc report: sizes on targets that write several files or no llmc tensor table', () => {
  const sizesOf = async (dir: string) => {
    const j = await llmcInProcess('report', dir, '--json', '--no-quality');
    expect(j.code, j.stderr).toBe(0);
    return JSON.parse(j.stdout).sections.find((s: { id: string }) => s.id === 'sizes')?.data as { totalBytes: number; byGroupAndFormat: { group: string; format: string }[] } | undefined;
  };

  it('tensorrt-llm: bytes per group add up to rank0.safetensors\' data (its own 8-byte header length read here)', async () => {
    const trt = path.join(tmp, 'trt');
    expect((await llmcInProcess('compile', STORIES, '--target', 'tensorrt-llm', '--no-eval', '-o', trt)).code).toBe(0);
    const file = await fsp.readFile(path.join(trt, 'rank0.safetensors'));
    const sizes = await sizesOf(trt);
    expect(sizes?.totalBytes).toBe(file.length - 8 - Number(file.readBigUInt64LE(0)));
    expect(new Set(sizes!.byGroupAndFormat.map((g) => g.group))).toEqual(new Set(['mlp', 'attention', 'embedding', 'norms']));
  });

  it('gguf-levels: every level file\'s tensors, as @huggingface/gguf reads their types and shapes', async () => {
    const { gguf } = await import('@huggingface/gguf');
    const dir = path.join(tmp, 'levels');
    const c = await llmcInProcess('compile', STORIES, '--target', 'gguf-levels', '--passes', 'reorder', '--opt', 'reorder.recover=none', '--levels', '0.5,1', '--no-eval', '-o', dir, '--cache-dir', cache);
    expect(c.code, c.stderr).toBe(0);
    const BYTES: Record<number, number> = { 0: 4, 1: 2 }; // GGML_TYPE_F32, GGML_TYPE_F16
    let expected = 0;
    for (const lv of ['L0', 'L1']) {
      for (const t of (await gguf(path.join(dir, lv, 'model.gguf'), { allowLocalFile: true })).tensorInfos) {
        expect(BYTES[t.dtype], t.name).toBeDefined();
        expected += t.shape.reduce((a, n) => a * Number(n), 1) * BYTES[t.dtype];
      }
    }
    expect((await sizesOf(dir))?.totalBytes).toBe(expected);
  });
});

describe('report sections', () => {
  it('one registered section per record type; the registry is keyed by record id', () => {
    expect(SECTION_OF_RECORD.get(ELASTIC_LEVELS.id)?.record).toBe(ELASTIC_LEVELS);
    expect(new Set(RECORD_SECTIONS.map((s) => s.record.id)).size).toBe(RECORD_SECTIONS.length);
    // Every registered section belongs to a record some pass writes.
    for (const s of RECORD_SECTIONS) expect(PASSES.some((p) => p.produces.id === s.record.id), s.record.id).toBe(true);
  });

  it('cumulative importance: a brute-force prefix sum at every point', () => {
    const scores = [5, 1, 3, 0, 2, 9, 4];
    const pts = cumulativeShare(scores, 100);
    const sorted = [...scores].sort((a, b) => b - a);
    const total = sorted.reduce((a, b) => a + b);
    expect(pts[0]).toEqual([0, 0]);
    for (const [x, y] of pts.slice(1)) {
      const k = Math.round(x * scores.length);
      expect(y).toBeCloseTo(sorted.slice(0, k).reduce((a, b) => a + b, 0) / total, 12);
    }
    expect(pts.at(-1)).toEqual([1, 1]);
    expect(cumulativeShare(new Float64Array(10_000).fill(1), 50).length).toBeLessThanOrEqual(52);
  });
});

describe('llmc report: bad input', () => {
  it('a directory that is neither a profile nor an artifact; a bad output name', async () => {
    const r = await llmcInProcess('report', STORIES, '-o', path.join(tmp, 'x.html'));
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(`llmc: ${STORIES}: is neither an llmc profile (llmc-profile.json, from llmc profile) nor an artifact (llmc-manifest.json, from llmc compile)\n`);
    expect(existsSync(path.join(tmp, 'x.html'))).toBe(false);
    const bad = await llmcInProcess('report', artifact, '-o', path.join(tmp, 'x.pdf'));
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/x\.pdf: the report is written as \.html, \.md or \.json/);
  });
});
