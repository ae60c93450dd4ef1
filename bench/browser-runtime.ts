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
export const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'];

/** Why the browser runs cannot happen here, or null when they can. */
export function browserUnavailable(): string | null {
  return existsSync(CHROMIUM) ? null : `no Chromium at ${CHROMIUM} (apt-get install chromium, or set LLMC_CHROMIUM)`;
}

/** A model opened on the page: loaded with `threads`, then greedy-generated `maxTokens` ids after `prompt`. */
export interface PageOpen {
  threads: number;
  /** The pool's minWork (default: the runtime's). */
  minWork?: number;
  prompt: number[];
  maxTokens: number;
}
/** The opened model, driven from Node: one timed round per call, so Node's rounds can interleave. */
export interface PageModel {
  ids: number[];
  crossOriginIsolated: boolean;
  /** One round of bench/decode-round.ts's loop on the page: tokens/s. */
  round(steps: number, loop?: DecodeLoop): Promise<number>;
  /** Closes the model; row chunks the pool's workers ran (0 without a pool). */
  close(): Promise<{ workerChunks: number }>;
}

/** One run on the page: open, then `warmup` untimed and `rounds` timed decodes of `steps` tokens from BOS. */
export interface PageRun extends PageOpen {
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
 * The page's script: `llmcOpen(o)` loads the artifact at art/ through the bundled runtime
 * (./runtime.mjs) and generates; `llmcRound` times bench/decode-round.ts's loop, the one Node runs
 * (./decode-round.mjs); `llmcClose` returns the pool's counts.
 */
const PAGE_SCRIPT = `import * as rt from './runtime.mjs';
import { decodeRound } from './decode-round.mjs';
let model;
window.llmcOpen = async (o) => {
  const manifest = await (await fetch('art/llmc-manifest.json')).text();
  const pool = o.minWork === undefined ? undefined : { minWork: o.minWork };
  model = await rt.load({ manifest, weights: rt.urlSource(new URL('art/weights.bin', location.href).href), name: 'art' }, { threads: o.threads, pool });
  const ids = [];
  for await (const id of model.generate(o.prompt, { maxTokens: o.maxTokens, stopTokens: [] })) ids.push(id);
  return { ids, crossOriginIsolated: self.crossOriginIsolated };
};
window.llmcRound = ([steps, loop]) => decodeRound(model, steps, loop);
window.llmcClose = async () => {
  // The pool's counts, through a weight's arena (the Model keeps its weight table private).
  const stats = model.table.weight('model.embed_tokens.weight').arena?.poolStats() ?? null;
  await model.close();
  return { workerChunks: stats ? stats.workerChunks : 0 };
};
window.llmcReady = true;`;

/** The Node side of the comparison: the page's timing loop (the same file) over a model loaded in this process. */
export { decodeRound as decodeTokensPerSecond } from './decode-round.js';

const TYPES: Record<string, string> = { '.html': 'text/html', '.mjs': 'text/javascript', '.js': 'text/javascript', '.json': 'application/json', '.bin': 'application/octet-stream', '.wasm': 'application/wasm' };

/** A static server on 127.0.0.1 for `root`: Range requests, and the headers that make a page cross-origin isolated (also bench/peers.bench.ts). */
export async function serve(root: string): Promise<{ url: string; close(): Promise<void> }> {
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
 * Bundle the runtime, serve it with the ts artifact at `artifactDir`, start headless Chromium, and
 * call `use` with a function that opens the model on a new page (each page is closed with its
 * model). Throws when Chromium is absent (see browserUnavailable). `extraArgs`: more Chromium flags.
 */
export async function withChromium<T>(artifactDir: string, use: (open: (o: PageOpen) => Promise<PageModel>) => Promise<T>, extraArgs: string[] = []): Promise<T> {
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
    const url = server.url;
    const b = (browser = await chromium.launch({ executablePath: CHROMIUM, args: [...CHROMIUM_ARGS, ...extraArgs] }));
    type PageWindow = { llmcReady?: boolean; llmcOpen(o: PageOpen): Promise<{ ids: number[]; crossOriginIsolated: boolean }>; llmcRound(a: [number, DecodeLoop]): number; llmcClose(): Promise<{ workerChunks: number }> };
    const open = async (o: PageOpen): Promise<PageModel> => {
      const page = await b.newPage();
      const errors: string[] = [];
      page.on('pageerror', (e) => errors.push(e.message));
      const check = <R>(r: R): R => {
        if (errors.length) throw new Error(`page errors: ${errors.join('; ')}`);
        return r;
      };
      await page.goto(url, { waitUntil: 'load' });
      await page.waitForFunction(() => (window as unknown as PageWindow).llmcReady === true, undefined, { timeout: 30_000 });
      const opened = check(await page.evaluate((x) => (window as unknown as PageWindow).llmcOpen(x), o));
      return {
        ...opened,
        round: async (steps, loop = 'reuse') => check(await page.evaluate((a) => (window as unknown as PageWindow).llmcRound(a), [steps, loop] as [number, DecodeLoop])),
        close: async () => {
          const stats = check(await page.evaluate(() => (window as unknown as PageWindow).llmcClose()));
          await page.close();
          return stats;
        },
      };
    };
    return await use(open);
  } finally {
    await browser?.close();
    await server?.close();
    await fsp.rm(root, { recursive: true, force: true });
  }
}

/** Each of `runs` on its own page: open, `warmup` untimed rounds, `rounds` timed ones. */
export async function runInChromium(artifactDir: string, runs: PageRun[], extraArgs: string[] = []): Promise<PageResult[]> {
  return withChromium(
    artifactDir,
    async (open) => {
      const out: PageResult[] = [];
      for (const run of runs) {
        const m = await open(run);
        for (let r = 0; r < (run.warmup ?? 0); r++) await m.round(run.steps, run.loop);
        const tokensPerSecond: number[] = [];
        for (let r = 0; r < run.rounds; r++) tokensPerSecond.push(await m.round(run.steps, run.loop));
        out.push({ ids: m.ids, crossOriginIsolated: m.crossOriginIsolated, tokensPerSecond, ...(await m.close()) });
      }
      return out;
    },
    extraArgs,
  );
}
