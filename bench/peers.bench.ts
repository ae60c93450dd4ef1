/**
 * The TS runtime against its own platform's peers (issue 34, items 1, 2 and 4):
 *  - wllama (`@wllama/wllama`: llama.cpp's server context in WebAssembly SIMD, multi-threaded) on the
 *    gguf target's file of the same model and type (F32, Q8_0, Q4_0, Q4_K);
 *  - transformers.js (`@huggingface/transformers` on onnxruntime-web's WebAssembly backend) on the
 *    cuda target's ONNX directory (fp32, int8, int4 MatMulNBits beside F32, Q8_0, Q4_0);
 *  - native reference rows (Node only): llama.cpp through node-llama-cpp on the same GGUF, and
 *    onnxruntime-node on the same ONNX (the project's OnnxDecoder).
 * In Node and in headless Chromium (the runtime bundled, served cross-origin isolated so
 * SharedArrayBuffer threads work), one thread and all threads, on dense-28M (../shared) and the
 * llama-100M fixture. A round prefills a prompt of P token ids (P = 64 and 512) and greedy-decodes
 * `steps` tokens after it: decode tokens/s "at context P", and the prefill of the 512-token prompt.
 * Prompts are held-out text through the model's tokenizer (wllama's API takes text: it tokenizes
 * the same text itself, and its prompt length is reported where it is not P).
 * Every runner of a group (model, type, platform, threads) is open at once and their rounds
 * alternate after one warm-up each, so a loaded machine slows them alike; a ratio is the median
 * over rounds of that round's llmc / peer ratio of tokens/s (decode, and prefill).
 * Time to first token: `llmc run` on dense-28M's ts artifact with a 64-token prompt and `-n 1`,
 * cold (process start, load, prefill, first id on stdout) against a Node process that loads the
 * same type's GGUF with node-llama-cpp and prints its first id (bench/ttft-llamacpp.ts).
 *
 * The peers live in their own package: `npm --prefix bench/peers install` (skipped, with that
 * line, when absent). wllama has no Node build (its worker is a browser Worker), so its rows are
 * Chromium's. All runners keep an f32 KV cache (llama.cpp's default is f16).
 *
 * Standalone: `npx tsc -p tsconfig.bench.json && node scripts/bundle-run.mjs && node dist/bench/peers.bench.js [--quick]`.
 * LLMC_PEERS=node|chromium limits the platforms, LLMC_PEERS_MODELS=dense-28M,llama-100M the models,
 * LLMC_PEERS_TYPES=F32,Q8_0,Q4_0,Q4_K the types, LLMC_PEERS_STEPS / LLMC_PEERS_ROUNDS the decode steps
 * and timed rounds, LLMC_PEERS_TTFT=no|only skips the time to first token or runs it alone. Each
 * group's figures are also written to stderr as one JSON line as soon as it is measured.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import type { Token } from 'node-llama-cpp';
import { loadDir } from '../src/exec/runtime/node.js';
import { OnnxDecoder } from '../src/exec/engine/decoder-dir.js';
import { argmax } from '../src/core/sampling.js';
import { loadTokenizer } from '../src/core/tokenizer/index.js';
import { browserUnavailable, CHROMIUM, CHROMIUM_ARGS, serve } from './browser-runtime.js';
import { compilePlain } from './compile-plain.js';
import { cachedFixture, REPO_ROOT, round, runIfMain, type BenchSuite } from './harness.js';
import { llmcRunner, RESULT_MARK, type Prompt, type Round, type Runner } from './peer-drivers.js';
import type { PageSpec } from './peers-page.js';

const PEERS = path.join(REPO_ROOT, 'bench/peers/node_modules');
const INSTALL = 'npm --prefix bench/peers install';
const WORK = path.join(os.tmpdir(), 'llmc-bench-peers');
const DENSE = path.resolve(REPO_ROOT, '../shared/models/trained/dense-28M');
/** A ts/gguf type and the cuda target's quant of the same bits (none for Q4_K). */
const TYPES = [
  { ts: 'F32', cuda: 'fp32' },
  { ts: 'Q8_0', cuda: 'int8' },
  { ts: 'Q4_0', cuda: 'int4' },
  { ts: 'Q4_K', cuda: null },
] as const;
const CONTEXTS = [64, 512] as const;
const N_CTX = 1024;
const ALL = os.availableParallelism();

type Platform = 'node' | 'chromium';
const median = (a: number[]) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];
const HELDOUT = path.resolve(REPO_ROOT, '../shared/models/trained/text/heldout.txt');

/**
 * Prompts of each context length from held-out text (any text where ../shared is absent) through
 * the model's tokenizer: ids with the BOS first, and the text of the ids after it for wllama.
 */
async function promptsOf(modelDir: string): Promise<Record<number, Prompt>> {
  const cfg = path.join(modelDir, 'tokenizer_config.json');
  const tok = loadTokenizer(await fsp.readFile(path.join(modelDir, 'tokenizer.json'), 'utf8'), existsSync(cfg) ? await fsp.readFile(cfg, 'utf8') : undefined);
  const raw = existsSync(HELDOUT) ? await fsp.readFile(HELDOUT, 'utf8') : 'The compiler reads a checkpoint and writes an artifact for each target. '.repeat(200);
  const all = tok.encode(raw.slice(raw.indexOf('\n') + 1, 40_000), { addBos: true });
  const notText = Array.from({ length: tok.vocabSize }, (_, id) => id).filter((id) => tok.decode([id]).includes('\uFFFD'));
  return Object.fromEntries(CONTEXTS.map((n) => [n, { ids: all.slice(0, n), text: tok.decode(all.slice(1, n)), notText }]));
}

/** A model's artifacts: name → path under WORK (ts dir, gguf file, cuda dir). */
async function compileAll(name: string, src: string, types: readonly (typeof TYPES)[number][]): Promise<void> {
  for (const t of types) {
    // Always recompiled (seconds): an artifact from an older build would measure old code.
    await compilePlain(src, path.join(WORK, `${name}-ts-${t.ts}`), t.ts);
    await compilePlain(src, path.join(WORK, `${name}-gguf-${t.ts}`), t.ts, 'gguf');
    if (t.cuda) await compilePlain(src, path.join(WORK, `${name}-cuda-${t.cuda}`), t.cuda, 'cuda');
  }
}

/** transformers.js in a child process (onnxruntime-web's threads are set once per process). */
async function childRunner(id: string, threads: number): Promise<Runner> {
  const child: ChildProcess = spawn(process.execPath, [path.join(REPO_ROOT, 'dist/bench/peers-child.js'), PEERS], { stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (d) => (stderr += d));
  const answers: ((line: string) => void)[] = [];
  readline.createInterface({ input: child.stdout! }).on('line', (line) => {
    if (line.startsWith(RESULT_MARK)) answers.shift()?.(line.slice(RESULT_MARK.length));
  });
  const exited = new Promise<never>((_, reject) => child.on('exit', (code) => reject(new Error(`transformers.js child exited ${code}: ${stderr.trim().split('\n').slice(-3).join(' | ')}`))));
  exited.catch(() => {});
  const ask = async <R>(msg: unknown): Promise<R> => {
    const answer = new Promise<string>((resolve) => answers.push(resolve));
    child.stdin!.write(JSON.stringify(msg) + '\n');
    const r = JSON.parse(await Promise.race([answer, exited])) as R & { error?: string };
    if (r.error) throw new Error(`transformers.js: ${r.error}`);
    return r;
  };
  await ask({ open: [WORK, id, threads] });
  return {
    round: (prompt, steps) => ask<Round>({ round: [prompt, steps] }),
    close: async () => {
      await ask({ close: true });
      child.stdin!.end();
    },
  };
}

type Llama = Awaited<ReturnType<(typeof import('node-llama-cpp'))['getLlama']>>;

/** llama.cpp, native (node-llama-cpp): the first id starts the decode clock. */
async function llamaCppRunner(llama: Llama, gguf: string, threads: number): Promise<Runner> {
  const lm = await llama.loadModel({ modelPath: gguf });
  const ctx = await lm.createContext({ contextSize: N_CTX, batchSize: 512, threads, experimentalKvCacheKeyType: 'F32', experimentalKvCacheValueType: 'F32' });
  const seq = ctx.getSequence();
  return {
    async round({ ids: prompt }, steps) {
      await seq.clearHistory();
      const ids: number[] = [];
      const t0 = performance.now();
      let t1 = 0;
      for await (const token of seq.evaluate(prompt as Token[], { temperature: 0 })) {
        if (ids.length === 0) t1 = performance.now();
        ids.push(token as number);
        if (ids.length > steps) break;
      }
      return { prefillTokS: (prompt.length * 1000) / (t1 - t0), promptTokens: prompt.length, decodeTokS: (steps * 1000) / (performance.now() - t1), ids };
    },
    close: async () => {
      await ctx.dispose();
      await lm.dispose();
    },
  };
}

/** onnxruntime-node, native, on the same ONNX graph (the project's OnnxDecoder: Optimum's I/O). */
async function ortRunner(onnx: string, threads: number): Promise<Runner> {
  const dec = await OnnxDecoder.open(onnx, { threads });
  const lastArgmax = (logits: Float32Array, t: number) => argmax(logits.subarray(((t - 1) * logits.length) / t));
  return {
    async round({ ids: prompt }, steps) {
      const t0 = performance.now();
      let { logits, present } = await dec.forward(prompt, null, 0);
      let next = lastArgmax(logits, prompt.length);
      const t1 = performance.now();
      const ids = [next];
      for (let s = 0; s < steps; s++) {
        ({ logits, present } = await dec.forward([next], present, prompt.length + s));
        ids.push((next = lastArgmax(logits, 1)));
      }
      return { prefillTokS: (prompt.length * 1000) / (t1 - t0), promptTokens: prompt.length, decodeTokS: (steps * 1000) / (performance.now() - t1), ids };
    },
    close: () => dec.close(),
  };
}

type Browser = Awaited<ReturnType<(typeof import('playwright-core'))['chromium']['launch']>>;

/** One runner on its own Chromium page (see bench/peers-page.ts). */
async function pageRunner(browser: Browser, url: string, spec: PageSpec): Promise<Runner> {
  const page = await browser.newPage();
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  const check = <R>(r: R): R => {
    if (errors.length) throw new Error(`${spec.kind} page: ${errors.join('; ')}`);
    return r;
  };
  await page.goto(url, { waitUntil: 'load' });
  await page.waitForFunction(() => window.peerReady === true, undefined, { timeout: 60_000 });
  const opened = check(await page.evaluate((s) => window.peerOpen(s), spec));
  if (!opened.crossOriginIsolated) throw new Error('the page is not cross-origin isolated');
  return {
    round: async (prompt, steps) => check(await page.evaluate((a) => window.peerRound(a), [prompt, steps] as [Prompt, number])),
    close: async () => {
      await page.evaluate(() => window.peerClose()).catch(() => {});
      await page.close();
    },
  };
}

/** The page bundle and the files it serves: models/ = WORK, peers/ = bench/peers/node_modules. */
async function startChromium(): Promise<{ browser: Browser; url: string; close(): Promise<void> }> {
  const esbuild = await import('esbuild');
  const { chromium } = await import('playwright-core');
  const root = await fsp.realpath(await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-peers-')));
  await esbuild.build({ entryPoints: [path.join(REPO_ROOT, 'bench/peers-page.ts')], bundle: true, platform: 'browser', format: 'esm', outfile: path.join(root, 'page.mjs'), logLevel: 'silent' });
  const importMap = {
    imports: {
      'onnxruntime-web/webgpu': './peers/onnxruntime-web/dist/ort.webgpu.bundle.min.mjs',
      'onnxruntime-common': './peers/onnxruntime-common/dist/esm/index.js',
      '@huggingface/transformers': './peers/@huggingface/transformers/dist/transformers.web.js',
    },
  };
  await fsp.writeFile(path.join(root, 'index.html'), `<!doctype html><meta charset="utf-8"><title>llmc peers</title><script type="importmap">${JSON.stringify(importMap)}</script><script type="module" src="page.mjs"></script>\n`);
  await fsp.symlink(WORK, path.join(root, 'models'));
  await fsp.symlink(PEERS, path.join(root, 'peers'));
  const server = await serve(root);
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
  return {
    browser,
    url: server.url,
    close: async () => {
      await browser.close();
      await server.close();
      await fsp.rm(root, { recursive: true, force: true });
    },
  };
}

interface Group {
  model: string;
  type: (typeof TYPES)[number];
  platform: Platform;
  threads: number;
}

/** The runners of a group, by name; a peer that cannot open is recorded, not fatal. */
async function openGroup(g: Group, chromium: { browser: Browser; url: string } | null, llama: Llama | null, skipped: Record<string, string>): Promise<Record<string, Runner>> {
  const at = (what: string) => path.join(WORK, `${g.model}-${what}`);
  const runners: Record<string, Runner> = {};
  const tryOpen = async (name: string, open: () => Promise<Runner>) => {
    try {
      runners[name] = await open();
    } catch (e) {
      skipped[`${g.model} ${g.type.ts} ${g.platform} ${g.threads}T ${name}`] = e instanceof Error ? e.message.split('\n')[0] : String(e);
    }
  };
  const cudaId = g.type.cuda ? `${g.model}-cuda-${g.type.cuda}` : null;
  if (g.platform === 'node') {
    await tryOpen('llmc', async () => llmcRunner((await loadDir(at(`ts-${g.type.ts}`), { threads: g.threads })) as never));
    if (cudaId) await tryOpen('transformers.js', () => childRunner(cudaId, g.threads));
    if (llama) await tryOpen('llama.cpp (native)', () => llamaCppRunner(llama, at(`gguf-${g.type.ts}/model.gguf`), g.threads));
    if (g.type.cuda) await tryOpen('onnxruntime (native)', () => ortRunner(path.join(WORK, `${cudaId}/onnx/model.onnx`), g.threads));
  } else if (chromium) {
    const page = (kind: PageSpec['kind'], p: string) => pageRunner(chromium.browser, chromium.url, { kind, path: p, threads: g.threads, nCtx: N_CTX });
    await tryOpen('llmc', () => page('llmc', `${g.model}-ts-${g.type.ts}`));
    await tryOpen('wllama', () => page('wllama', `${g.model}-gguf-${g.type.ts}/model.gguf`));
    if (cudaId) await tryOpen('transformers.js', () => page('transformers.js', cudaId));
  }
  return runners;
}

/** Rounds at each context, alternating the runners; per runner and context: decode tokens/s and prefill ms of every round. */
async function measureGroup(runners: Record<string, Runner>, prompts: Record<number, Prompt>, steps: number, rounds: number, failed: (name: string, e: unknown) => void) {
  const out: Record<number, Record<string, { decode: number[]; prefill: number[]; ids: number[]; promptTokens: number }>> = {};
  const live = new Map(Object.entries(runners));
  // A peer that fails a round leaves the group (recorded); llmc failing ends the run.
  const tryRound = async (name: string, r: Runner, prompt: Prompt) => {
    try {
      return await r.round(prompt, steps);
    } catch (e) {
      if (name === 'llmc') throw e;
      failed(name, e);
      live.delete(name);
      for (const ctx of Object.keys(out)) delete out[Number(ctx)][name];
      return null;
    }
  };
  for (const ctx of CONTEXTS) {
    const prompt = prompts[ctx];
    out[ctx] = {};
    for (const [name, r] of [...live]) {
      const w = await tryRound(name, r, prompt); // warm-up
      if (w) out[ctx][name] = { decode: [], prefill: [], ids: w.ids, promptTokens: w.promptTokens };
    }
    for (let i = 0; i < rounds; i++) {
      for (const [name, r] of [...live]) {
        const x = await tryRound(name, r, prompt);
        if (!x) continue;
        out[ctx][name].decode.push(x.decodeTokS);
        out[ctx][name].prefill.push(x.prefillTokS);
      }
    }
  }
  return out;
}

/** Time to first token, cold: `llmc run` against node-llama-cpp, each a fresh process, alternating. */
async function timeToFirstToken(types: readonly (typeof TYPES)[number][], prompt: Prompt, reps: number) {
  const ids = prompt.ids.join(',');
  const firstLine = (cmd: string[]) =>
    new Promise<number>((resolve, reject) => {
      const t0 = performance.now();
      const child = spawn(process.execPath, cmd, { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
      let err = '';
      let done = false;
      child.stderr.on('data', (d) => (err += d));
      child.stdout.on('data', () => {
        if (!done) resolve(performance.now() - t0);
        done = true;
      });
      child.on('exit', (code) => (done ? undefined : reject(new Error(`${cmd.slice(0, 2).join(' ')} exited ${code} before a token: ${err.trim().split('\n')[0]}`))));
    });
  const out: Record<string, unknown> = {};
  const ratios: Record<string, number> = {};
  for (const t of types) {
    const llmc = [path.join(REPO_ROOT, 'bin/llmc.js'), 'run', path.join(WORK, `dense-28M-ts-${t.ts}`), '--prompt-ids', ids, '-n', '1', '--ids', '--threads', '1'];
    const cpp = [path.join(REPO_ROOT, 'dist/bench/ttft-llamacpp.js'), path.join(WORK, `dense-28M-gguf-${t.ts}/model.gguf`), ids, '1'];
    await firstLine(llmc); // warm the page cache and llmc's kernel cache: "cold" is a new process, not a cold disk
    await firstLine(cpp);
    const a: number[] = [];
    const b: number[] = [];
    for (let i = 0; i < reps; i++) {
      a.push(await firstLine(llmc));
      b.push(await firstLine(cpp));
    }
    const ratio = round(median(a.map((x, i) => x / b[i])));
    ratios[`dense-28M ${t.ts}: llmc run / node-llama-cpp (lower is better, target <= 1.2)`] = ratio;
    out[t.ts] = { 'llmc run ms (best, median)': [round(Math.min(...a), 1), round(median(a), 1)], 'node-llama-cpp ms (best, median)': [round(Math.min(...b), 1), round(median(b), 1)], ratio };
  }
  return { setup: `64-token prompt (ids), first id on stdout, one thread each, ${reps} alternating cold processes after one untimed each`, results: out, ratios };
}

export const suite: BenchSuite = {
  name: 'peers',
  description: 'TS runtime vs wllama and transformers.js (WebAssembly) in Node and Chromium: decode at 64/512 context, 512-token prefill, cold time to first token; native llama.cpp / onnxruntime as reference rows',
  async run(opts) {
    if (!existsSync(path.join(PEERS, '@wllama/wllama')) || !existsSync(path.join(PEERS, '@huggingface/transformers'))) return { skipped: `the peers are not installed: ${INSTALL}` };
    const quick = Boolean(opts.quick);
    const steps = Number(process.env.LLMC_PEERS_STEPS ?? (quick ? 8 : 16));
    const rounds = Number(process.env.LLMC_PEERS_ROUNDS ?? (quick ? 1 : 3));
    const typeNames = (process.env.LLMC_PEERS_TYPES ?? (quick ? 'F32,Q4_K' : TYPES.map((t) => t.ts).join())).split(',');
    const types = TYPES.filter((t) => typeNames.includes(t.ts));
    const platforms = (process.env.LLMC_PEERS ?? 'node,chromium').split(',') as Platform[];
    const wanted = (process.env.LLMC_PEERS_MODELS ?? (quick ? 'dense-28M' : 'dense-28M,llama-100M')).split(',');
    const ttftMode = process.env.LLMC_PEERS_TTFT ?? 'yes';
    const ttftOnly = ttftMode === 'only';
    const skipped: Record<string, string> = {};
    const models: [string, string][] = [];
    if (wanted.includes('dense-28M')) {
      if (existsSync(DENSE)) models.push(['dense-28M', DENSE]);
      else skipped['dense-28M'] = `no ${DENSE} (../shared is absent)`;
    }
    // The byte-level tokenizer: wllama takes text only.
    if (wanted.includes('llama-100M')) models.push(['llama-100M', (await cachedFixture('llama-100M', { arch: 'llama', dtype: 'BF16', seed: 1, tokenizer: 'byte-level', planted: false })).dir]);
    await fsp.mkdir(WORK, { recursive: true });
    const prompts: Record<string, Record<number, Prompt>> = {};
    for (const [name, src] of models) {
      await compileAll(name, src, types);
      prompts[name] = await promptsOf(src);
    }

    let llama: Llama | null = null;
    try {
      const { getLlama, LlamaLogLevel } = await import('node-llama-cpp');
      llama = await getLlama({ gpu: false, build: 'never', logLevel: LlamaLogLevel.error });
    } catch (e) {
      skipped['llama.cpp (native)'] = `node-llama-cpp: ${e instanceof Error ? e.message : e}`;
    }
    const noBrowser = browserUnavailable();
    if (noBrowser && platforms.includes('chromium')) skipped.chromium = noBrowser;
    const chromium = platforms.includes('chromium') && !noBrowser ? await startChromium() : null;
    const results: Record<string, unknown> = {};
    const ratios: Record<string, number> = {};
    const loadBefore = os.loadavg();
    try {
      for (const [model] of models) {
        if (ttftOnly) break;
        for (const type of types) {
          for (const platform of platforms) {
            for (const threads of [...new Set([1, ALL])]) {
              const g: Group = { model, type, platform, threads };
              const runners = await openGroup(g, chromium, llama, skipped);
              if (!runners.llmc) continue;
              let m: Awaited<ReturnType<typeof measureGroup>>;
              try {
                m = await measureGroup(runners, prompts[model], steps, rounds, (n, e) => {
                  const why = `failed a round: ${e instanceof Error ? e.message.split('\n')[0] : e}`;
                  skipped[`${model} ${type.ts} ${platform} ${threads}T ${n}`] = why;
                  process.stderr.write(`${JSON.stringify({ group: `${model} ${type.ts} ${platform} ${threads}T`, failed: n, why })}\n`);
                });
              } finally {
                for (const r of Object.values(runners)) await r.close().catch(() => {});
              }
              const key = `${model} ${type.ts}${type.cuda ? `/${type.cuda}` : ''} ${platform} ${threads}T`;
              const row: Record<string, unknown> = {};
              for (const ctx of CONTEXTS) {
                const by = m[ctx];
                row[`decode tokens/s at ${ctx} (median)`] = Object.fromEntries(Object.entries(by).map(([n, x]) => [n, round(median(x.decode), 1)]));
                for (const [n, x] of Object.entries(by)) {
                  if (n === 'llmc') continue;
                  ratios[`${key} decode@${ctx} llmc / ${n}`] = round(median(by.llmc.decode.map((v, i) => v / x.decode[i])));
                  if (x.ids.length) row[`first 8 ids agree with llmc at ${ctx}: ${n}`] = x.ids.slice(0, 8).join() === by.llmc.ids.slice(0, 8).join();
                }
              }
              const p = m[512];
              row['prefill 512 tokens/s (median)'] = Object.fromEntries(Object.entries(p).map(([n, x]) => [n, round(median(x.prefill), 1)]));
              const odd = Object.entries(p).filter(([, x]) => x.promptTokens !== 512);
              if (odd.length) row['prompt tokens where not 512'] = Object.fromEntries(odd.map(([n, x]) => [n, x.promptTokens]));
              for (const [n, x] of Object.entries(p)) if (n !== 'llmc') ratios[`${key} prefill512 llmc / ${n}`] = round(median(p.llmc.prefill.map((v, i) => v / x.prefill[i])));
              results[key] = row;
              // One line per group on stderr: a run cut short (they take tens of minutes) keeps what it measured.
              process.stderr.write(`${JSON.stringify({ group: key, load1m: round(os.loadavg()[0], 2), row, ratios: Object.fromEntries(Object.entries(ratios).filter(([k]) => k.startsWith(key))) })}\n`);
            }
          }
        }
      }
    } finally {
      await chromium?.close();
    }
    const ttft = ttftMode === 'no' ? { skipped: 'LLMC_PEERS_TTFT=no' } : models.some(([n]) => n === 'dense-28M') && llama ? await timeToFirstToken(types, prompts['dense-28M'][64], quick ? 3 : 7) : { skipped: 'needs dense-28M and node-llama-cpp' };
    const isPeer = (k: string) => /llmc \/ (wllama|transformers\.js)$/.test(k);
    const peerRatios = Object.entries(ratios).filter(([k]) => isPeer(k));
    return {
      setup: `prompts of ${CONTEXTS.join(' and ')} token ids, then ${steps} greedy decode steps; ${rounds} alternating rounds per group after one warm-up each; threads 1 and ${ALL} (all); f32 KV cache everywhere; ratio = median of per-round llmc / peer (>= 1: llmc faster)`,
      machine: { cpus: ALL, loadAverage1mBefore: round(loadBefore[0], 2), loadAverage1mAfter: round(os.loadavg()[0], 2), note: 'shared machine: absolute tokens/s move with the load; ratios are measured in the same rounds' },
      results,
      ratios,
      timeToFirstToken: ttft,
      skipped,
      targets: {
        'decode and prefill >= 1.0x wllama and transformers.js (every measured ratio)': peerRatios.length > 0 && peerRatios.every(([, r]) => r >= 1),
        'peer ratios met / measured': `${peerRatios.filter(([, r]) => r >= 1).length} / ${peerRatios.length}`,
        'time to first token <= 1.2x node-llama-cpp (every type)': 'ratios' in ttft ? Object.values(ttft.ratios).every((r) => r <= 1.2) : false,
      },
    };
  },
};

runIfMain(import.meta.url, suite);
