/**
 * Every preset against llama.cpp's own quantizer: llama_model_quantize from the libllama shipped
 * prebuilt inside node-llama-cpp (what `llama-quantize` runs), called through a tiny C shim on our
 * F32 GGUF of the model. Our direct compile from the Hugging Face checkpoint with the same preset must
 * give the same metadata, the same tensors (names, shapes, types: llama.cpp's per-tensor rules and
 * fallbacks) and the same tensor bytes; only the order of the tensors differs (llama-quantize keeps its
 * loader's, we write convert_hf_to_gguf.py's). Models: stories260K (64-wide rows: every K-quant falls
 * back) and generated llama / Mixtral fixtures whose rows are whole 256-blocks, deep enough for the
 * layer-dependent rules. Skipped (with a note) where gcc or the library is not available.
 */
import { execFile, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { generateFixture } from '../fixtures/generate.js';
import { LLAMA_FTYPES } from '../backends/gguf/presets.js';
import { ggufContents } from './gguf-helpers.js';
import { ensureBuilt } from './build-once.js';
import { hasGcc, LLAMA_BINS } from './native.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const STORIES = path.resolve(ROOT, 'fixtures/models/stories260K');
const BINS = LLAMA_BINS;
const LIB = fs.existsSync(BINS) ? fs.readdirSync(BINS).find((f) => /^libllama\.v[\d.]+\.so$/.test(f)) : undefined;

const AVAILABLE = LIB !== undefined && hasGcc();
if (!AVAILABLE) console.warn(`gguf-llama-quantize: skipped (needs gcc and libllama in ${BINS})`);

/**
 * Our own shim: llama.cpp is called, not copied. argv: lib in.gguf out.gguf ftype. Only the first two
 * fields of llama_model_quantize_params are set (nthread, ftype); the struct comes from llama.cpp's
 * defaults, returned into a buffer larger than any version's struct.
 */
const SHIM = String.raw`
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
typedef struct { int32_t nthread; int32_t ftype; unsigned char rest[1024]; } qparams;
int main(int argc, char **argv) {
  if (argc != 5) return 2;
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) { fprintf(stderr, "%s\n", dlerror()); return 3; }
  qparams (*defaults)(void) = (qparams (*)(void))dlsym(h, "llama_model_quantize_default_params");
  uint32_t (*quantize)(const char *, const char *, const qparams *) =
    (uint32_t (*)(const char *, const char *, const qparams *))dlsym(h, "llama_model_quantize");
  void (*backend_init)(void) = (void (*)(void))dlsym(h, "llama_backend_init");
  if (!defaults || !quantize) return 4;
  if (backend_init) backend_init();
  qparams p = defaults();
  p.nthread = 1;
  p.ftype = atoi(argv[4]);
  return quantize(argv[2], argv[3], &p) == 0 ? 0 : 5;
}
`;

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'llmc-llama-quantize-'));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));
let shim = '';

type Built = { compile: (typeof import('../src/app/compile/compile.js'))['compile']; openCheckpoint: (typeof import('../src/core/checkpoint/index.js'))['openCheckpoint'] };
let built: Built;
/**
 * Our compile from the built modules (dist/, loaded by Node: vitest.config.ts externalizes it): under
 * vitest's module transform the JS IQ4_NL / IQ4_XS search ran about 4× slower (most of this file's time).
 */
async function loadBuilt(): Promise<Built> {
  ensureBuilt();
  const load = (rel: string) => import(pathToFileURL(path.join(ROOT, 'dist', rel)).href);
  return { compile: (await load('src/app/compile/compile.js')).compile, openCheckpoint: (await load('src/core/checkpoint/index.js')).openCheckpoint };
}

/** Our direct compile of `model` with `quant` (what test/gguf-helpers' compileGguf does, on the built modules). */
async function compileGguf(model: string, outDir: string, quant: string): Promise<{ file: string }> {
  const source = await built.openCheckpoint(model);
  try {
    await built.compile({ source, target: 'gguf', outDir, passes: [], quant, tensorTypes: [], progress: { start() {}, tick() {}, done() {} }, note: () => {} });
    return { file: path.join(outDir, 'model.gguf') };
  } finally {
    await (source as unknown as { close(): Promise<void> }).close();
  }
}

const PRESETS = Object.keys(LLAMA_FTYPES).filter((p) => p !== 'F32') as (keyof typeof LLAMA_FTYPES)[];

describe.skipIf(!AVAILABLE)('presets equal llama.cpp\'s llama_model_quantize (libllama from node-llama-cpp)', () => {
  const models: Record<string, string> = { stories260K: STORIES };

  beforeAll(async () => {
    fs.writeFileSync(path.join(tmp, 'shim.c'), SHIM);
    shim = path.join(tmp, 'shim');
    execFileSync('gcc', ['-O1', '-o', shim, path.join(tmp, 'shim.c'), '-ldl']);
    built = await loadBuilt();
    // Rows in whole 256-blocks; 8 layers, so the first/last-eighth and every-third-layer rules bite.
    const dims = { hiddenSize: 256, intermediateSize: 512, numLayers: 8, numHeads: 4, numKvHeads: 2, vocabSize: 768, expertIntermediateSize: 256 };
    models.llama = (await generateFixture(path.join(tmp, 'llama'), { arch: 'llama', tokenizer: 'byte-level', dims })).dir;
    models.mixtral = (await generateFixture(path.join(tmp, 'mixtral'), { arch: 'mixtral', tokenizer: 'none', dims: { ...dims, numLayers: 4 } })).dir;
  }, 120_000);

  for (const model of ['stories260K', 'llama', 'mixtral']) {
    test(`${model}: every preset, metadata, tensor types and bytes`, async () => {
      const f32 = await compileGguf(models[model], path.join(tmp, `${model}-F32`), 'F32');
      const mismatches: string[] = [];
      for (const preset of PRESETS) {
        const ref = path.join(tmp, `${model}-${preset}-llama.gguf`);
        // llama.cpp's quantize (a child, one thread) runs while ours does: the two are independent.
        const theirs = promisify(execFile)(shim, [path.join(BINS, LIB!), f32.file, ref, String(LLAMA_FTYPES[preset])]);
        theirs.catch(() => {}); // awaited below; this only keeps an early failure from being unhandled
        const ours = await compileGguf(models[model], path.join(tmp, `${model}-${preset}`), preset);
        await theirs;
        const [a, b] = await Promise.all([ggufContents(ours.file), ggufContents(ref)]);
        expect(a.meta, `${model} ${preset} metadata`).toEqual(b.meta);
        expect(a.tensors.map((t) => [t.name, t.type, t.shape]), `${model} ${preset} tensor infos`).toEqual(b.tensors.map((t) => [t.name, t.type, t.shape]));
        for (let i = 0; i < a.tensors.length; i++) {
          if (a.tensors[i].sha256 !== b.tensors[i].sha256) mismatches.push(`${preset} ${a.tensors[i].name} (${a.tensors[i].type})`);
        }
        fs.rmSync(ref);
        fs.rmSync(path.dirname(ours.file), { recursive: true });
      }
      expect(mismatches).toEqual([]);
    }, 600_000); // IQ4_NL / IQ4_XS: the non-linear search is slow in JS
  }
});
