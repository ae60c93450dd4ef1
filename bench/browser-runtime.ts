/**
 * The TS runtime in a real browser: the runtime bundled with esbuild for the browser, a page that
 * loads a ts artifact over HTTP (Range requests) and generates, served from 127.0.0.1 with COOP/COEP
 * headers (cross-origin isolated, so SharedArrayBuffer and the worker pool work), run in headless
 * Chromium (Debian's /usr/bin/chromium driven by playwright-core). Used by
 * test/runtime-browser.test.ts (reference ids) and bench/pool.bench.ts (tokens/s beside Node's).
 */
import { existsSync, promises as fsp } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import type { DecodeLoop } from './decode-round.js';
import { REPO_ROOT } from './harness.js';

export const CHROMIUM = process.env.LLMC_CHROMIUM ?? '/usr/bin/chromium';
const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'];

/** Why the browser runs cannot happen here, or null when they can. */
export function browserUnavailable(): string | null {
  return existsSync(CHROMIUM) ? null : `no Chromium at ${CHROMIUM} (apt-get install chromium, or set LLMC_CHROMIUM)`;
}

/** One run on the page: load with `threads`, greedy-generate, then time `rounds` decodes of `steps` tokens from BOS. */
export interface PageRun {
  threads: number;
  /** The pool's minWork (default: the runtime's). */
  minWork?: number;
  prompt: number[];
  maxTokens: number;
  steps: number;
  rounds: number;
  /** The timing loop (see DecodeLoop); default 'reuse'. */
  loop?: DecodeLoop;
  /** Untimed rounds before the timed ones (default 0): Chromium page-faults for its first few thousand tokens. */
  warmup?: number;
}

export interface PageResult {
  ids: number[];
  crossOriginIsolated: boolean;
  /** Decode tokens/s of each round. */
  tokensPerSecond: number[];
  /** Row chunks the pool's workers ran (0 without a pool). */
  workerChunks: number;
}

/**
 * The page's script: `llmcRun(run)` loads the artifact at art/ through the bundled runtime
 * (./runtime.mjs) and times bench/decode-round.ts's loop, the one Node runs (./decode-round.mjs).
 */
const PAGE_SCRIPT = `import * as rt from './runtime.mjs';
import { decodeRound } from './decode-round.mjs';
window.llmcRun = async (run) => {
  const manifest = await (await fetch('art/llmc-manifest.json')).text();
  const pool = run.minWork === undefined ? undefined : { minWork: run.minWork };
  const model = await rt.load({ manifest, weights: rt.urlSource(new URL('art/weights.bin', location.href).href), name: 'art' }, { threads: run.threads, pool });
  try {
    const ids = [];
    for await (const id of model.generate(run.prompt, { maxTokens: run.maxTokens, stopTokens: [] })) ids.push(id);
    const tokensPerSecond = [];
    for (let r = 0; r < (run.warmup ?? 0); r++) decodeRound(model, run.steps, run.loop ?? 'reuse');
    for (let r = 0; r < run.rounds; r++) tokensPerSecond.push(decodeRound(model, run.steps, run.loop ?? 'reuse'));
    // The pool's counts, through a weight's arena (the Model keeps its weight table private).
    const stats = model.table.weight('model.embed_tokens.weight').arena?.poolStats() ?? null;
    return { ids, crossOriginIsolated: self.crossOriginIsolated, tokensPerSecond, workerChunks: stats ? stats.workerChunks : 0 };
  } finally {
    await model.close();
  }
};
window.llmcReady = true;`;

/** The Node side of the comparison: the page's timing loop (the same file) over a model loaded in this process. */
export { decodeRound as decodeTokensPerSecond } from './decode-round.js';

const TYPES: Record<string, string> = { '.html': 'text/html', '.mjs': 'text/javascript', '.json': 'application/json', '.bin': 'application/octet-stream' };

/** A static server on 127.0.0.1 for `root`: Range requests, and the headers that make a page cross-origin isolated. */
async function serve(root: string): Promise<{ url: string; close(): Promise<void> }> {
  const server = http.createServer(async (req, res) => {
    const rel = decodeURIComponent(new URL(req.url ?? '/', 'http://x').pathname).replace(/^\/+/, '') || 'index.html';
    const file = path.resolve(root, rel);
    const headers: Record<string, string> = {
      'Cross-Origin-Opener-Policy': 'same-origin',
      'Cross-Origin-Embedder-Policy': 'require-corp',
      'Cross-Origin-Resource-Policy': 'same-origin',
      'Accept-Ranges': 'bytes',
      'Content-Type': TYPES[path.extname(file)] ?? 'application/octet-stream',
    };
    let bytes: Buffer;
    try {
      if (!file.startsWith(root + path.sep)) throw new Error('outside');
      bytes = await fsp.readFile(file);
    } catch {
      res.writeHead(404, headers).end();
      return;
    }
    const range = /^bytes=(\d+)-(\d+)$/.exec(req.headers.range ?? '');
    if (range) {
      const [a, b] = [Number(range[1]), Math.min(Number(range[2]), bytes.length - 1)];
      res.writeHead(206, { ...headers, 'Content-Range': `bytes ${a}-${b}/${bytes.length}`, 'Content-Length': String(b - a + 1) });
      res.end(req.method === 'HEAD' ? undefined : bytes.subarray(a, b + 1));
      return;
    }
    res.writeHead(200, { ...headers, 'Content-Length': String(bytes.length) });
    res.end(req.method === 'HEAD' ? undefined : bytes);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}/`, close: () => new Promise((resolve) => server.close(() => resolve())) };
}

/**
 * Bundle the runtime, serve it with the ts artifact at `artifactDir`, and run each of `runs` on the
 * page in headless Chromium (one page per run). Throws when Chromium is absent (see browserUnavailable).
 */
export async function runInChromium(artifactDir: string, runs: PageRun[], extraArgs: string[] = []): Promise<PageResult[]> {
  const esbuild = await import('esbuild');
  const { chromium } = await import('playwright-core');
  const root = await fsp.realpath(await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-browser-')));
  let server: { url: string; close(): Promise<void> } | undefined;
  let browser: Awaited<ReturnType<typeof chromium.launch>> | undefined;
  try {
    await esbuild.build({ entryPoints: [path.join(REPO_ROOT, 'src/exec/runtime/index.ts')], bundle: true, platform: 'browser', format: 'esm', outfile: path.join(root, 'runtime.mjs'), logLevel: 'silent' });
    // The timing loop is the same source as Node's (bench/decode-round.ts), bundled with its argmax.
    await esbuild.build({ entryPoints: [path.join(REPO_ROOT, 'bench/decode-round.ts')], bundle: true, platform: 'browser', format: 'esm', outfile: path.join(root, 'decode-round.mjs'), logLevel: 'silent' });
    await fsp.writeFile(path.join(root, 'page.mjs'), PAGE_SCRIPT);
    await fsp.writeFile(path.join(root, 'index.html'), '<!doctype html><meta charset="utf-8"><title>llmc runtime</title><script type="module" src="page.mjs"></script>\n');
    await fsp.mkdir(path.join(root, 'art'));
    for (const f of ['llmc-manifest.json', 'weights.bin']) await fsp.copyFile(path.join(artifactDir, f), path.join(root, 'art', f));
    server = await serve(root);
    browser = await chromium.launch({ executablePath: CHROMIUM, args: [...CHROMIUM_ARGS, ...extraArgs] });
    const out: PageResult[] = [];
    for (const run of runs) {
      const page = await browser.newPage();
      const errors: string[] = [];
      page.on('pageerror', (e) => errors.push(e.message));
      await page.goto(server.url, { waitUntil: 'load' });
      await page.waitForFunction(() => (window as unknown as { llmcReady?: boolean }).llmcReady === true, undefined, { timeout: 30_000 });
      const result = await page.evaluate((r) => (window as unknown as { llmcRun(r: PageRun): Promise<PageResult> }).llmcRun(r), run);
      if (errors.length) throw new Error(`page errors: ${errors.join('; ')}`);
      out.push(result);
      await page.close();
    }
    return out;
  } finally {
    await browser?.close();
    await server?.close();
    await fsp.rm(root, { recursive: true, force: true });
  }
}
