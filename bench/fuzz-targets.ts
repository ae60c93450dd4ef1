/**
 * Fuzz targets for every reader of untrusted files: the seed files (valid, llmc's own or the repo's
 * seed corpus in bench/fuzz-corpus/) mutated by ./fuzz-mutate.ts and fed to the reader as llmc feeds
 * it. The only allowed outcomes are acceptance or one LlmcError whose message is one bounded line;
 * anything else is a crash. A target's `read` is llmc's reading of the file (parsing, schema,
 * checks against the other files, the model's first use where that is cheap); `use` is the costly
 * run of an accepted input (the qnn simulation, onnxruntime), which the long run samples.
 * Used by test/reliability.test.ts and test/artifact-files.test.ts (a few hundred mutants each,
 * fast-check) and bench/fuzz.bench.ts (100k+ each). In bench/ because fast-check is a dev dependency.
 */
import fc from 'fast-check';
import { closeSync, cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { gunzipSync, gzipSync } from 'node:zlib';
import { openCheckpoint } from '../src/core/checkpoint/checkpoint.js';
import { normalizeConfig } from '../src/core/arch/spec.js';
import { LlmcError } from '../src/core/errors.js';
import { loadTokenizer } from '../src/core/tokenizer/index.js';
import { readJsonAs } from '../src/core/util/json-file.js';
import { bufferSource } from '../src/exec/runtime/bytes.js';
import { load } from '../src/exec/runtime/load.js';
import { loadProfile, saveProfile } from '../src/measure/store.js';
import { idSequencesOf } from '../src/measure/sequences.js';
import { locate, parseManifestText, verifyFiles } from '../src/app/artifact.js';
import { parseBudgets } from '../src/app/check/budgets.js';
import { readConfig } from '../src/app/compile/config.js';
import { checkGgufModel, readGgufHeader } from '../backends/gguf/read.js';
import { checkSubgraphs, CONFIG_OBJECT, irOp, readSubgraphs } from '../backends/qnn/files.js';
import { ShadowStore } from '../backends/qnn/shadow.js';
import { readLatencyFile } from '../passes/tree-search/latency-file.js';
import { OnnxDecoder } from '../src/exec/engine/decoder-dir.js';
import { buildTokenizer } from '../fixtures/tokenizer.js';
import { mutant, prepare, type Prepared, type SeedFile } from './fuzz-mutate.js';

export interface FuzzTarget {
  name: string;
  /** The llmc command that reads these files (for the table). */
  command: string;
  /** The input's files, one of which each mutant changes. */
  files: Prepared[];
  /** Mutants by index (./fuzz-mutate.ts), as fast-check draws them: the tests' property input. */
  input: fc.Arbitrary<Uint8Array[]>;
  /** llmc's reading of the files: true = accepted, false = one clean LlmcError; throws on a crash. */
  read(files: Uint8Array[]): Promise<boolean>;
  /** The costly run of an accepted input (sampled by the long run): the same outcomes. */
  use?(files: Uint8Array[]): Promise<boolean>;
  /** read, then use where accepted. */
  run(files: Uint8Array[]): Promise<boolean>;
  close(): void;
}

/** The seed corpus: files (valid) the mutants start from where llmc does not write them itself; regressions/ holds inputs that once crashed. */
export const FUZZ_CORPUS = path.resolve(path.dirname(fileURLToPath(import.meta.url)), path.basename(path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')) === 'dist' ? '../../bench/fuzz-corpus' : 'fuzz-corpus');

/** The seed for mutant indices (the bench and the tests share it, so a mutant's index names it everywhere). */
export const FUZZ_SEED = 36;

/** A clean rejection whose message is not one bounded line (what the terminal would show). */
export class BadMessage extends Error {}

/** The line of the last clean rejection (for the shrinker's comparisons). */
let lastRejection = '';

/** Rejections are LlmcErrors with a one-line message; anything else escapes as a crash. */
export async function outcome(f: () => Promise<unknown>): Promise<boolean> {
  try {
    await f();
    return true;
  } catch (e) {
    if (!(e instanceof LlmcError)) throw e;
    const line = e.line; // as the CLI prints it (control characters escaped)
    lastRejection = line;
    if (/[\n\r]/.test(line) || line.length > 2000) throw new BadMessage(`not one bounded line (${line.length} chars): ${JSON.stringify(line.slice(0, 200))}`);
    return false;
  }
}

/**
 * A mutant that once crashed or hung a reader (bench/fuzz-corpus/regressions.json), kept as its bytes in
 * bench/fuzz-corpus/regressions/: replayed as it was found, whatever llmc's writers (and with them the
 * seeds of the artifact readers) do since.
 */
export interface Regression {
  reader: string;
  /** The mutant's index in the run that found it (FUZZ_SEED): for the record only. */
  index: number;
  /** Where it crashed: llmc's reading of the file, or the costly run of an accepted one. */
  stage: 'read' | 'use';
  /** The seed file of the reader's input that the mutant replaces (the others are today's seeds). */
  replaces: string;
  /** Its bytes, in regressions/ (gzip when the name ends in .gz). */
  file: string;
  found: string;
}

export const REGRESSIONS_DIR = path.join(FUZZ_CORPUS, 'regressions');
const REGRESSIONS_JSON = path.join(FUZZ_CORPUS, 'regressions.json');
export const regressions = (): Regression[] => JSON.parse(readFileSync(REGRESSIONS_JSON, 'utf8')) as Regression[];

/** A regression's input: its stored bytes in place of the seed file it replaces. */
export function regressionInput(t: FuzzTarget, r: Regression): Uint8Array[] {
  const i = t.files.findIndex((f) => f.name === r.replaces);
  if (i < 0) throw new Error(`${r.file}: reader ${t.name} has no input file ${r.replaces}`);
  const raw = readFileSync(path.join(REGRESSIONS_DIR, r.file));
  const bytes = new Uint8Array(r.file.endsWith('.gz') ? gunzipSync(raw) : raw);
  return t.files.map((f, j) => (j === i ? bytes : f.bytes));
}

/**
 * Every recorded regression of `targets` replayed from its file: each must end in acceptance or one
 * LlmcError of one line within `limitMs` now; a crash throws (naming the file), a slow one too.
 */
export async function replayRegressions(targets: FuzzTarget[], limitMs = 10_000): Promise<{ replayed: number; slowestMs: number }> {
  let replayed = 0;
  let slowestMs = 0;
  for (const r of regressions()) {
    const t = targets.find((x) => x.name === r.reader);
    if (!t) continue;
    const input = regressionInput(t, r);
    const t0 = performance.now();
    try {
      await (r.stage === 'use' ? t.run(input) : t.read(input));
    } catch (e) {
      throw new Error(`fuzz regression ${r.file} (${r.reader}) crashes again: ${(e as Error)?.message ?? e}`, { cause: e });
    }
    const ms = performance.now() - t0;
    if (ms > limitMs) throw new Error(`fuzz regression ${r.file} (${r.reader}) took ${Math.round(ms)} ms (limit ${limitMs})`);
    slowestMs = Math.max(slowestMs, ms);
    replayed++;
  }
  return { replayed, slowestMs };
}

/** What an input does now: 'accepted', the rejection's line, or 'crash: …' (the shrinker keeps it unchanged). */
async function outcomeOf(t: FuzzTarget, input: Uint8Array[], stage: 'read' | 'use'): Promise<string> {
  lastRejection = '';
  try {
    return (await (stage === 'use' ? t.run(input) : t.read(input))) ? 'accepted' : `rejected: ${lastRejection}`;
  } catch (e) {
    return `crash: ${e instanceof BadMessage ? 'bad message' : String((e as Error)?.message ?? e).slice(0, 200)}`;
  }
}

/**
 * A binary mutant made small for the corpus: blocks (tensor data, mostly) are zeroed wherever the
 * reader's outcome stays exactly what it was, so that gzip leaves little of them.
 */
async function shrink(t: FuzzTarget, input: Uint8Array[], which: number, stage: 'read' | 'use'): Promise<Uint8Array> {
  const want = await outcomeOf(t, input, stage);
  const b = input[which].slice();
  const zero = (x: Uint8Array) => x.every((v) => v === 0);
  for (const block of [1 << 16, 1 << 12, 1 << 9]) {
    for (let at = 0; at < b.length; at += block) {
      const part = b.subarray(at, at + block);
      if (zero(part)) continue;
      const keep = part.slice();
      part.fill(0);
      if ((await outcomeOf(t, input.map((x, j) => (j === which ? b : x)), stage)) !== want) part.set(keep);
    }
  }
  return b;
}

const slug = (s: string) => s.replace(/[^A-Za-z0-9.]+/g, '-').replace(/^[-.]+|-$/g, '');

/**
 * Mutant `index` of `t` stored in the corpus as a regression (bench/fuzz.bench.ts's LLMC_FUZZ_RECORD):
 * the mutated file's bytes, binary ones shrunk, gzip'd over 16 kB; regressions.json lists it.
 */
export async function recordRegression(t: FuzzTarget, index: number, stage: 'read' | 'use', found: string): Promise<Regression> {
  const m = mutant(t.files, FUZZ_SEED, index);
  const which = t.files.findIndex((f) => f.name === m.file);
  const bytes = t.files[which].json ? m.files[which] : await shrink(t, m.files, which, stage);
  const ext = path.extname(m.file) || `.${slug(m.file)}`;
  const gz = bytes.length > 16_384;
  const file = `${slug(t.name)}-${index}${ext}${gz ? '.gz' : ''}`;
  mkdirSync(REGRESSIONS_DIR, { recursive: true });
  writeFileSync(path.join(REGRESSIONS_DIR, file), gz ? gzipSync(bytes, { level: 9 }) : bytes);
  const r: Regression = { reader: t.name, index, stage, replaces: m.file, file, found: found.slice(0, 200) };
  const all = existsSync(REGRESSIONS_JSON) ? regressions().filter((x) => x.file !== file) : [];
  writeFileSync(REGRESSIONS_JSON, `${JSON.stringify([...all, r], null, 1)}\n`);
  return r;
}

function target(t: Omit<FuzzTarget, 'input' | 'run' | 'files'> & { files: SeedFile[] }): FuzzTarget {
  const files = t.files.map(prepare);
  return {
    ...t,
    files,
    // Indices drawn uniformly (fast-check's bias towards small numbers would replay the same few mutants).
    input: fc.noBias(fc.nat()).map((i) => mutant(files, FUZZ_SEED, i).files),
    run: async (input) => (await t.read(input)) && (t.use ? t.use(input) : true),
  };
}

const text = (b: Uint8Array) => Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('utf8');
const json = (name: string, s: string | Uint8Array, weight = 1): SeedFile => ({ name, bytes: typeof s === 'string' ? new Uint8Array(Buffer.from(s)) : s, json: true, weight });

/** Artifacts llmc compiled from `stories`: a ts artifact, a GGUF, a cuda target's ONNX decoder graph. */
export interface FuzzArtifacts {
  ts: { manifest: string; weights: Uint8Array };
  gguf: Uint8Array;
  onnx: Uint8Array;
  /** Artifact directories whose JSON files are mutated (in a copy) and run in-process as `llmc run` runs them. */
  dirs?: { qnn?: string; cuda?: string };
}

/** `llmc run`'s path in-process: locate the artifact, open it on its target, logits of two tokens. */
async function runArtifact(dir: string): Promise<void> {
  const a = await locate(dir);
  if (a.kind !== 'artifact') throw new LlmcError('not an artifact', dir);
  const r = await a.target.open!(a, {});
  try {
    await (r.logits ? r.logits([1, 2]) : r.generate([1, 2], { maxTokens: 2 }));
  } finally {
    await r.close();
  }
}

/** The artifact-directory targets: JSON files of a qnn and a cuda artifact (in a copy), read as their runners read them, then run. */
export function artifactJsonTargets(dirs: NonNullable<FuzzArtifacts['dirs']>, close: () => void): FuzzTarget[] {
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'llmc-fuzz-art-'));
  const copy = (dir: string, name: string) => {
    const d = path.join(tmp, name);
    cpSync(dir, d, { recursive: true });
    return d;
  };
  const closeAll = () => {
    rmSync(tmp, { recursive: true, force: true });
    close();
  };
  const one = (name: string, command: string, dir: string, file: string, read: (dir: string) => Promise<unknown>): FuzzTarget => {
    const f = path.join(dir, file);
    const original = readFileSync(f);
    // The file mutated for one call and put back after it (the targets of one artifact share its directory).
    const withFile = async (b: Uint8Array, f2: () => Promise<boolean>) => {
      writeFileSync(f, b);
      try {
        return await f2();
      } finally {
        writeFileSync(f, original);
      }
    };
    return target({
      name,
      command,
      files: [json(file, new Uint8Array(original))],
      read: async ([b]) => withFile(b, () => outcome(() => read(dir))),
      use: async ([b]) => withFile(b, () => outcome(() => runArtifact(dir))),
      close: closeAll,
    });
  };
  const config = async (dir: string) => {
    const file = path.join(dir, 'config.json');
    return normalizeConfig(await readJsonAs(CONFIG_OBJECT, file), file);
  };
  const out: FuzzTarget[] = [];
  if (dirs.qnn) {
    const q = copy(dirs.qnn, 'qnn');
    const spec = normalizeConfig(JSON.parse(readFileSync(path.join(q, 'config.json'), 'utf8')), 'config.json');
    out.push(
      one('qnn graph/subgraphs.json', 'run', q, 'graph/subgraphs.json', async (dir) => {
        const sg = await readSubgraphs(dir);
        checkSubgraphs(sg, spec, path.join(dir, 'graph/subgraphs.json'));
        sg.subgraphs.forEach((s) => s.ops.forEach(irOp));
      }),
      one('qnn weights/shadow_index.json', 'run', q, 'weights/shadow_index.json', async (dir) => {
        const s = new ShadowStore(dir);
        closeSync((s as unknown as { fd: number }).fd);
      }),
      one('qnn config.json', 'run', q, 'config.json', config),
    );
  }
  if (dirs.cuda) out.push(one('cuda config.json', 'run', copy(dirs.cuda, 'cuda'), 'config.json', config));
  return out;
}

export async function fuzzTargets(stories: string, { ts: tsArtifact, gguf, onnx, dirs = {} }: FuzzArtifacts): Promise<FuzzTarget[]> {
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'llmc-fuzz-'));
  const close = () => rmSync(tmp, { recursive: true, force: true });
  const dir = (name: string) => {
    const d = path.join(tmp, name);
    mkdirSync(d, { recursive: true });
    return d;
  };
  const corpus = (f: string) => new Uint8Array(readFileSync(path.join(FUZZ_CORPUS, f)));
  const storiesConfig = readFileSync(path.join(stories, 'config.json'));
  const st = readFileSync(path.join(stories, 'model.safetensors'));
  const hlen = Number(st.readBigUInt64LE(0));
  const header = st.subarray(8, 8 + hlen);
  const data = st.subarray(8 + hlen);
  const tok = buildTokenizer('byte-level', 512, 256);
  const cfg = JSON.parse(storiesConfig.toString()) as Record<string, number>;

  // A checkpoint read as llmc reads one: config, header (every tensor's offsets checked), the first tensors' bytes.
  const checkpoint = async (d: string) => {
    const ck = await openCheckpoint(d);
    try {
      for (const t of ck.tensors.slice(0, 3)) await ck.readF32(t.name);
    } finally {
      await ck.close();
    }
  };
  const cfgDir = dir('config');
  writeFileSync(path.join(cfgDir, 'model.safetensors'), st);
  const stDir = dir('safetensors');
  writeFileSync(path.join(stDir, 'config.json'), storiesConfig);

  const profileDir = dir('profiles');
  const saved = await saveProfile(profileDir, 'fuzz', { k: 1 }, { meta: { a: 1 }, arrays: { x: Float64Array.from([1, 2, 3]) } });
  const profileFile = path.join(profileDir, `fuzz-${saved.key.slice(0, 32)}.json`);

  const ggufFile = path.join(dir('gguf'), 'model.gguf');
  writeFileSync(ggufFile, gguf);
  const ggufHeaderBytes = (await readGgufHeader(ggufFile)).dataStart;
  const ggufModel = { numLayers: cfg.num_hidden_layers, hiddenSize: cfg.hidden_size, vocabSize: cfg.vocab_size };

  // A ts artifact on disk: weights.bin's sha256 checked as `llmc run` checks it, then loaded and run.
  const tsDir = dir('ts');
  writeFileSync(path.join(tsDir, 'llmc-manifest.json'), tsArtifact.manifest);
  writeFileSync(path.join(tsDir, 'weights.bin'), tsArtifact.weights);
  const tsAccepted = async (manifest: string, weights: Uint8Array) => {
    const model = await load({ manifest, weights: bufferSource(weights) }, { wasm: false });
    model.forward([1, 2]);
  };
  const onnxFile = path.join(dir('onnx'), 'model.onnx');
  const tokConfig = tok.tokenizerConfigJson;
  const calibFile = path.join(dir('calib'), 'calib.txt');
  const write = (file: string, b: Uint8Array) => (writeFileSync(file, b), file);

  return [
    ...artifactJsonTargets(dirs, close),
    target({
      name: 'config.json',
      command: 'inspect / run',
      files: [json('config.json', new Uint8Array(storiesConfig))],
      read: async ([c]) => (write(path.join(cfgDir, 'config.json'), c), outcome(() => checkpoint(cfgDir))),
      close,
    }),
    target({
      name: 'model.safetensors',
      command: 'inspect / run',
      // The header (JSON), the data, and 8 bytes added to the length prefix (zero: the true length; mutated: a lie).
      files: [json('header', new Uint8Array(header), 4), { name: 'data', bytes: new Uint8Array(data), weight: 1 }, { name: 'length lie', bytes: new Uint8Array(8), weight: 1 }],
      read: async ([h, d, lie]) => {
        const len = Buffer.alloc(8);
        const delta = Buffer.alloc(8);
        delta.set(lie.subarray(0, 8)); // a cut or grown lie is still 8 bytes of it
        len.writeBigUInt64LE((BigInt(h.length) + delta.readBigUInt64LE(0)) & (2n ** 64n - 1n));
        writeFileSync(path.join(stDir, 'model.safetensors'), Buffer.concat([len, h, d]));
        return outcome(() => checkpoint(stDir));
      },
      close,
    }),
    target({
      name: 'tokenizer.json',
      command: 'run --prompt',
      files: [json('tokenizer.json', tok.tokenizerJson, 4), json('tokenizer_config.json', tokConfig)],
      read: async ([tj, tc]) =>
        outcome(async () => {
          const t = loadTokenizer(text(tj), text(tc));
          t.decode(t.encode('Once upon a time, a little boat said "héllo" 123 times.'));
        }),
      close,
    }),
    target({
      name: 'ts llmc-manifest.json',
      command: 'run / verify',
      files: [json('llmc-manifest.json', tsArtifact.manifest)],
      read: async ([m]) =>
        outcome(async () => {
          parseManifestText(text(m), 'llmc-manifest.json');
          await tsAccepted(text(m), tsArtifact.weights);
        }),
      close,
    }),
    target({
      name: 'ts weights.bin',
      command: 'run',
      files: [{ name: 'weights.bin', bytes: tsArtifact.weights }],
      read: async ([w]) => {
        write(path.join(tsDir, 'weights.bin'), w);
        return outcome(async () => {
          const a = await locate(tsDir);
          await verifyFiles(a as Parameters<typeof verifyFiles>[0], { hash: true });
          await tsAccepted(tsArtifact.manifest, w);
        });
      },
      close,
    }),
    target({
      name: '.gguf',
      command: 'inspect / run',
      // The header read and checked against the model the manifest names, as `llmc run` does before llama.cpp sees the file.
      files: [{ name: 'model.gguf', bytes: gguf, hot: ggufHeaderBytes }],
      read: async ([b]) => outcome(async () => checkGgufModel(await readGgufHeader(write(ggufFile, b)), ggufModel, ggufFile)),
      close,
    }),
    target({
      name: 'cuda onnx/model.onnx',
      command: 'run',
      // Loaded and run on onnxruntime, as `llmc run` does (its graph structure is in the first 64 kB).
      files: [{ name: 'model.onnx', bytes: onnx, hot: Math.min(onnx.length, 1 << 16) }],
      read: async ([b]) =>
        outcome(async () => {
          // One intra-op thread: a thread pool per mutant would cost more than the graph (the fuzz runs a worker per core).
          const decoder = await OnnxDecoder.open(write(onnxFile, b), { threads: 1 });
          try {
            await decoder.forward([1, 2], null, 0);
          } finally {
            await decoder.close();
          }
        }),
      close,
    }),
    target({
      name: 'budgets.json',
      command: 'check',
      files: [json('budgets.json', corpus('budgets.json'))],
      read: async ([b]) => outcome(async () => parseBudgets(text(b), 'budgets.json')),
      close,
    }),
    target({
      name: 'llmc.config.json',
      command: 'compile --config',
      files: [json('llmc.config.json', corpus('llmc.config.json'))],
      read: async ([b]) => outcome(async () => readConfig(write(path.join(tmp, 'llmc.config.json'), b))),
      close,
    }),
    target({
      name: 'calibration file',
      command: 'profile --calib',
      // Text, or token ids as JSON: both seeds; ids checked against the vocabulary, text tokenized.
      files: [{ name: 'calib.txt', bytes: corpus('calib.txt') }, json('calib-ids.json', corpus('calib-ids.json'))],
      read: async ([t, ids]) =>
        outcome(async () => {
          for (const b of [t, ids]) {
            write(calibFile, b);
            const s = text(b);
            if (!idSequencesOf(s, cfg.vocab_size, calibFile)) tokenizer().encode(s);
          }
        }),
      close,
    }),
    target({
      name: 'tree-search latency file',
      command: 'compile --passes tree-search',
      files: [json('latency.json', corpus('latency.json'))],
      read: async ([b]) => outcome(async () => readLatencyFile(write(path.join(tmp, 'latency.json'), b))),
      close,
    }),
    target({
      name: 'profile cache entry',
      command: 'compile (cache)',
      files: [json('profile.json', readFileSync(profileFile))],
      // A damaged cache entry is recomputed: loadProfile returns undefined, never throws.
      read: async ([b]) => (write(profileFile, b), (await loadProfile(profileDir, 'fuzz', { k: 1 })) !== undefined),
      close,
    }),
  ];
  function tokenizer() {
    return (cachedTok ??= loadTokenizer(tok.tokenizerJson, tokConfig));
  }
}
let cachedTok: ReturnType<typeof loadTokenizer> | undefined;
