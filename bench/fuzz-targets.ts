/**
 * Fuzz targets for every reader of untrusted files: valid inputs mutated at random (seeded), fed to
 * the reader as llmc feeds it. The only allowed outcomes are acceptance or one LlmcError; anything
 * else is a crash, and an input that takes longer than its bound is a hang. Used by
 * test/reliability.test.ts (a few hundred inputs each) and bench/fuzz.bench.ts (100k+ each). In bench/
 * because fast-check is a dev dependency, which the build (tsconfig.json) must not need.
 */
import fc from 'fast-check';
import { mkdtempSync, promises as fsp, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { openCheckpoint } from '../src/core/checkpoint/checkpoint.js';
import { LlmcError } from '../src/core/errors.js';
import { loadTokenizer } from '../src/core/tokenizer/index.js';
import { bufferSource } from '../src/exec/runtime/bytes.js';
import { load } from '../src/exec/runtime/load.js';
import { loadProfile, saveProfile } from '../src/measure/store.js';
import { locate, parseManifestText } from '../src/app/artifact.js';
import { buildTokenizer } from '../fixtures/tokenizer.js';
import { checkGgufModel, readGgufHeader } from '../backends/gguf/read.js';
import { OnnxDecoder } from '../src/exec/engine/decoder-dir.js';

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

/** Every path to a node of a JSON value (root first); not below 16 levels (an inserted deep value is one node). */
function nodes(v: Json, at: (string | number)[] = []): (string | number)[][] {
  const out = [at];
  if (at.length >= 16) return out;
  if (Array.isArray(v)) v.forEach((x, i) => out.push(...nodes(x, [...at, i])));
  else if (v && typeof v === 'object') for (const [k, x] of Object.entries(v)) out.push(...nodes(x, [...at, k]));
  return out;
}

/** Values that break readers: huge, negative, fractional, wrong types, empty containers. */
export const nastyValue: fc.Arbitrary<Json> = fc.oneof(
  fc.constantFrom<Json>(null, 0, -1, 1e308, -1e308, 2.5, 1e7, 2 ** 31, 2 ** 53 + 2, '', 'x', [], {}, [null], true, '../../x', '\u001b[31mX', '(a+)+$'),
  fc.integer(),
  fc.double({ noNaN: true }),
  fc.string({ maxLength: 8 }),
  fc.jsonValue({ maxDepth: 2 }) as fc.Arbitrary<Json>,
  // Deep nesting (what crashed error paths that JSON.stringify'd the value): arrays or objects.
  // Built when applied (structuredClone recurses); 1,500 levels keep JSON.stringify and the readers' limit apart.
  fc.tuple(fc.integer({ min: 60, max: 1500 }), fc.boolean()).map(([n, obj]) => new Deep(n, obj) as unknown as Json),
);

/** A value nested `n` levels (arrays, or objects { a: … }), made fresh for each mutant. */
class Deep {
  constructor(readonly n: number, readonly obj: boolean) {}
  build(): Json {
    let v: Json = 1;
    for (let i = 0; i < this.n; i++) v = this.obj ? { a: v } : [v];
    return v;
  }
}

/** A JSON value with up to 3 nodes replaced or deleted. */
export function mutatedJson(base: Json): fc.Arbitrary<Json> {
  const edits = fc.array(fc.tuple(fc.nat(), nastyValue, fc.boolean()), { minLength: 1, maxLength: 3 });
  return edits.map((list) => {
    let v: Json = structuredClone(base);
    for (const [pick, shared, remove] of list) {
      // fc.constantFrom hands out the same object every time: edit a copy, or inputs grow cycles.
      const value = (shared as unknown) instanceof Deep ? (shared as unknown as Deep).build() : structuredClone(shared);
      const all = nodes(v);
      const p = all[pick % all.length];
      if (p.length === 0) {
        v = value;
        continue;
      }
      let parent: Json = v;
      for (const k of p.slice(0, -1)) parent = (parent as Record<string | number, Json>)[k];
      const last = p[p.length - 1];
      if (remove && parent && typeof parent === 'object' && !Array.isArray(parent)) delete (parent as Record<string, Json>)[last as string];
      else (parent as Record<string | number, Json>)[last] = value;
    }
    return v;
  });
}

export interface FuzzTarget {
  name: string;
  input: fc.Arbitrary<unknown>;
  /** Feed one input to the reader; resolves to whether it was accepted. Throws only on a crash. */
  run(input: unknown): Promise<boolean>;
  close(): void;
}

/** Rejections are LlmcErrors; anything else escapes as a crash. */
async function outcome(f: () => Promise<unknown>): Promise<boolean> {
  try {
    await f();
    return true;
  } catch (e) {
    if (e instanceof LlmcError) return false;
    throw e;
  }
}

/** Artifacts llmc compiled from `stories`: a ts artifact, a GGUF, a cuda target's ONNX decoder graph. */
export interface FuzzArtifacts {
  ts: { manifest: string; weights: Uint8Array };
  gguf: Uint8Array;
  onnx: Uint8Array;
  /** Artifact directories whose JSON files are mutated in place (and put back) and run in-process as `llmc run` runs them. */
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

/** A target that mutates one JSON file of an artifact directory and runs the artifact. */
function artifactJsonTarget(name: string, dir: string, file: string, close: () => void): FuzzTarget {
  const f = path.join(dir, file);
  const original = readFileSync(f, 'utf8');
  return {
    name,
    input: mutatedJson(JSON.parse(original) as Json),
    run: async (v) => {
      writeFileSync(f, JSON.stringify(v));
      try {
        return await outcome(() => runArtifact(dir));
      } finally {
        writeFileSync(f, original);
      }
    },
    close,
  };
}

/** The artifact-directory targets: JSON files of a qnn and a cuda artifact, mutated and run. */
export function artifactJsonTargets(dirs: NonNullable<FuzzArtifacts['dirs']>, close: () => void): FuzzTarget[] {
  return [
    ...(dirs.qnn
      ? [
          artifactJsonTarget('qnn graph/subgraphs.json', dirs.qnn, 'graph/subgraphs.json', close),
          artifactJsonTarget('qnn weights/shadow_index.json', dirs.qnn, 'weights/shadow_index.json', close),
          artifactJsonTarget('qnn config.json', dirs.qnn, 'config.json', close),
        ]
      : []),
    ...(dirs.cuda ? [artifactJsonTarget('cuda config.json', dirs.cuda, 'config.json', close)] : []),
  ];
}

export async function fuzzTargets(stories: string, { ts: tsArtifact, gguf, onnx, dirs = {} }: FuzzArtifacts): Promise<FuzzTarget[]> {
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'llmc-fuzz-'));
  const close = () => rmSync(tmp, { recursive: true, force: true });
  const storiesConfig = JSON.parse(readFileSync(path.join(stories, 'config.json'), 'utf8')) as Json;
  const st = readFileSync(path.join(stories, 'model.safetensors'));
  const hlen = Number(st.readBigUInt64LE(0));
  const header = JSON.parse(st.subarray(8, 8 + hlen).toString()) as Json;
  const data = st.subarray(8 + hlen);
  const tok = buildTokenizer('byte-level', 512, 256);
  const profileDir = path.join(tmp, 'profiles');
  const saved = await saveProfile(profileDir, 'fuzz', { k: 1 }, { meta: { a: 1 }, arrays: { x: Float64Array.from([1, 2, 3]) } });
  const profileFile = path.join(profileDir, `fuzz-${saved.key.slice(0, 32)}.json`);
  const profileJson = readFileSync(profileFile, 'utf8');
  const ggufHeaderBytes = (await (async () => {
    const f = path.join(tmp, 'whole.gguf');
    writeFileSync(f, gguf);
    return readGgufHeader(f);
  })()).dataStart;
  const cfg = storiesConfig as Record<string, number>;
  const ggufModel = { numLayers: cfg.num_hidden_layers, hiddenSize: cfg.hidden_size, vocabSize: cfg.vocab_size };
  let n = 0;
  const dirWith = async (files: Record<string, string | Uint8Array>) => {
    const d = path.join(tmp, `d${n++}`);
    await fsp.mkdir(d);
    for (const [f, c] of Object.entries(files)) writeFileSync(path.join(d, f), c);
    return d;
  };
  // The directory goes whatever happens: a 100k-input run leaves nothing behind (each is a whole model).
  const checkpoint = async (dir: string) => {
    try {
      const ck = await openCheckpoint(dir);
      try {
        for (const t of ck.tensors.slice(0, 3)) await ck.readF32(t.name);
      } finally {
        await ck.close();
      }
    } finally {
      await fsp.rm(dir, { recursive: true, force: true });
    }
  };
  return [
    ...artifactJsonTargets(dirs, close),
    {
      name: 'config.json',
      input: mutatedJson(storiesConfig),
      run: async (cfg) => outcome(async () => checkpoint(await dirWith({ 'config.json': JSON.stringify(cfg), 'model.safetensors': st }))),
      close,
    },
    {
      name: 'safetensors header',
      // The header mutated (or not), its length prefix lying (or not), the data cut short or bits flipped.
      input: fc.tuple(
        fc.option(mutatedJson(header), { freq: 2 }),
        fc.option(fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }), { freq: 5 }),
        fc.option(fc.nat(data.length), { freq: 5 }),
        fc.array(fc.tuple(fc.nat(data.length - 1), fc.integer({ min: 1, max: 255 })), { maxLength: 4 }),
      ),
      run: async ([h, lenLie, cut, flips]) => {
        const json = Buffer.from(JSON.stringify(h ?? header));
        const len = Buffer.alloc(8);
        len.writeBigUInt64LE((lenLie as bigint | null) ?? BigInt(json.length));
        const d = Buffer.from(data);
        for (const [at, x] of flips as [number, number][]) d[at] ^= x;
        const body = Buffer.concat([len, json, d.subarray(0, (cut as number | null) ?? d.length)]);
        return outcome(async () => checkpoint(await dirWith({ 'config.json': JSON.stringify(storiesConfig), 'model.safetensors': body })));
      },
      close,
    },
    {
      name: 'tokenizer.json',
      input: fc.tuple(mutatedJson(JSON.parse(tok.tokenizerJson) as Json), fc.option(mutatedJson(JSON.parse(tok.tokenizerConfigJson) as Json), { freq: 4 })),
      run: async ([tj, cfg]) =>
        outcome(async () => {
          const t = loadTokenizer(JSON.stringify(tj), cfg === null ? tok.tokenizerConfigJson : JSON.stringify(cfg));
          t.decode(t.encode('Once upon a time, a little boat said "héllo" 123 times.'));
        }),
      close,
    },
    {
      name: 'ts artifact (manifest + weights)',
      input: fc.tuple(mutatedJson(JSON.parse(tsArtifact.manifest) as Json), fc.option(fc.tuple(fc.nat(tsArtifact.weights.length - 1), fc.integer({ min: 1, max: 255 })), { freq: 3 })),
      run: async ([m, flip]) =>
        outcome(async () => {
          const w = tsArtifact.weights.slice();
          if (flip) w[(flip as [number, number])[0]] ^= (flip as [number, number])[1];
          const model = await load({ manifest: JSON.stringify(m), weights: bufferSource(w) }, { wasm: false });
          model.forward([1, 2]);
        }),
      close,
    },
    {
      name: 'artifact manifest (CLI)',
      input: mutatedJson(JSON.parse(tsArtifact.manifest) as Json),
      run: async (m) => outcome(async () => parseManifestText(JSON.stringify(m), 'llmc-manifest.json')),
      close,
    },
    {
      name: 'GGUF header',
      // Bytes flipped and u64 counts or lengths lying in the header, or the file cut short; then the
      // header read and checked against the model the manifest names, as `llmc run` does.
      input: fc.tuple(
        fc.array(fc.tuple(fc.nat(ggufHeaderBytes - 1), fc.integer({ min: 1, max: 255 })), { maxLength: 4 }),
        fc.option(fc.tuple(fc.nat(ggufHeaderBytes - 8), fc.oneof(fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }), fc.bigInt({ min: 0n, max: 1n << 20n }))), { freq: 3 }),
        fc.option(fc.nat(gguf.length), { freq: 4 }),
      ),
      run: async ([flips, lie, cut]) => {
        const b = Buffer.from(gguf);
        for (const [at, x] of flips as [number, number][]) b[at] ^= x;
        if (lie) b.writeBigUInt64LE((lie as [number, bigint])[1], (lie as [number, bigint])[0]);
        const file = path.join(tmp, 'fuzz.gguf');
        writeFileSync(file, b.subarray(0, (cut as number | null) ?? b.length));
        return outcome(async () => checkGgufModel(await readGgufHeader(file), ggufModel, file));
      },
      close,
    },
    {
      name: 'ONNX decoder graph',
      // Bytes flipped in the graph's structure (the first 64 kB: nodes, names, shapes, the first
      // initializers' headers) or the file cut short; then loaded and run on onnxruntime, as `llmc run` does.
      input: fc.tuple(fc.array(fc.tuple(fc.nat(Math.min(onnx.length, 1 << 16) - 1), fc.integer({ min: 1, max: 255 })), { minLength: 1, maxLength: 4 }), fc.option(fc.nat(onnx.length), { freq: 4 })),
      run: async ([flips, cut]) => {
        const b = Buffer.from(onnx);
        for (const [at, x] of flips as [number, number][]) b[at] ^= x;
        const file = path.join(tmp, 'fuzz.onnx');
        writeFileSync(file, b.subarray(0, (cut as number | null) ?? b.length));
        return outcome(async () => {
          const decoder = await OnnxDecoder.open(file);
          try {
            await decoder.forward([1, 2], null, 0);
          } finally {
            await decoder.close();
          }
        });
      },
      close,
    },
    {
      name: 'profile file',
      input: mutatedJson(JSON.parse(profileJson) as Json),
      run: async (p) => {
        writeFileSync(profileFile, JSON.stringify(p));
        // A damaged cache entry is recomputed: loadProfile returns undefined, never throws.
        return (await loadProfile(profileDir, 'fuzz', { k: 1 })) !== undefined;
      },
      close,
    },
  ];
}
