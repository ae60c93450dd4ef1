/**
 * Bad artifacts: one clear LlmcError from load(), before any weights are used.
 */
import { promises as fsp, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LlmcError } from '../src/core/errors.js';
import { bufferSource } from '../src/exec/runtime/bytes.js';
import { load } from '../src/exec/runtime/load.js';
import { loadDir } from '../src/exec/runtime/node.js';
import { compileTs } from './ts-artifact.js';

const STORIES = path.resolve(__dirname, '../fixtures/models/stories260K');

let tmp: string;
let dir: string;
let manifestText: string;
let weights: Uint8Array;

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-runtime-bad-'));
  dir = path.join(tmp, 'art');
  await compileTs(STORIES, dir, 'Q8_0');
  manifestText = readFileSync(path.join(dir, 'llmc-manifest.json'), 'utf8');
  weights = new Uint8Array(readFileSync(path.join(dir, 'weights.bin')));
});
afterAll(async () => {
  await fsp.rm(tmp, { recursive: true, force: true });
});

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
const edit = (f: (m: Json) => void) => {
  const m = JSON.parse(manifestText) as Json;
  f(m);
  return JSON.stringify(m);
};

async function loadError(manifest: string, bytes: Uint8Array, verifyChecksums = false): Promise<LlmcError> {
  try {
    await load({ manifest, weights: bufferSource(bytes), name: 'art' }, { verifyChecksums });
  } catch (e) {
    expect(e).toBeInstanceOf(LlmcError);
    return e as LlmcError;
  }
  throw new Error('load() accepted a bad artifact');
}

describe('load() rejects bad artifacts with one clear error', () => {
  it('accepts the good artifact (the control)', async () => {
    const m = await load({ manifest: manifestText, weights: bufferSource(weights) }, { verifyChecksums: true });
    expect(m.forward([1]).length).toBe(512);
  });

  it('a manifest of another format version', async () => {
    const e = await loadError(edit((m) => (m.version = 2)), weights);
    expect(e.line).toMatch(/llmc-manifest\.json: unsupported manifest "llmc-artifact" version 2; this runtime reads llmc-artifact version 1/);
    const e2 = await loadError(edit((m) => (m.targetInfo.version = 9)), weights);
    expect(e2.message).toMatch(/unsupported weights format "llmc-ts-weights" version 9/);
    const e3 = await loadError(edit((m) => (m.target = 'gguf')), weights);
    expect(e3.message).toMatch(/target is "gguf"/);
    const e4 = await loadError('{ not json', weights);
    expect(e4.message).toMatch(/not valid JSON/);
  });

  it('a truncated weights.bin', async () => {
    const e = await loadError(manifestText, weights.subarray(0, weights.length - 100));
    expect(e.line).toBe(`art/weights.bin: truncated: ${weights.length - 100} bytes, the manifest says ${weights.length}`);
    // The same through the file-based loader, with the file really cut short.
    const cut = path.join(tmp, 'cut');
    await fsp.mkdir(cut);
    await fsp.writeFile(path.join(cut, 'llmc-manifest.json'), manifestText);
    await fsp.writeFile(path.join(cut, 'weights.bin'), weights.subarray(0, 1000));
    const err = await loadDir(cut).catch((e: LlmcError) => e);
    expect(err).toBeInstanceOf(LlmcError);
    expect((err as LlmcError).line).toBe(`${path.join(cut, 'weights.bin')}: truncated: 1000 bytes, the manifest says ${weights.length}`);
  });

  it('a checksum mismatch (when verification is requested)', async () => {
    const flipped = weights.slice();
    flipped[weights.length >> 1] ^= 0x40;
    const e = await loadError(manifestText, flipped, true);
    expect(e.message).toMatch(/^sha256 mismatch: file has [0-9a-f]{64}, the manifest says [0-9a-f]{64}$/);
    expect(e.file).toBe('art/weights.bin');
  });

  it('a tensor-table entry pointing outside the file', async () => {
    const e = await loadError(
      edit((m) => (m.targetInfo.tensors[3].offset = Math.ceil(weights.length / 64) * 64)),
      weights,
    );
    expect(e.message).toMatch(/tensor ".*": bytes \d+\.\.\d+ lie outside the file \(\d+ bytes\)/);
  });

  it('a tensor-table entry whose byte length disagrees with shape × format', async () => {
    const e = await loadError(edit((m) => (m.targetInfo.tensors[2].bytes -= 34)), weights);
    expect(e.message).toMatch(/byte length \d+ disagrees with shape \[\d+,\d+\] in (Q8_0|F16|F32) \(\d+ bytes\)/);
    const e2 = await loadError(edit((m) => (m.targetInfo.tensors[2].shape = [7, 3])), weights);
    expect(e2.message).toMatch(/rows of 3 are not whole|disagrees with shape/);
  });

  it('other table damage: misaligned offset, overlap, missing or mis-shaped tensor, unknown format', async () => {
    expect((await loadError(edit((m) => (m.targetInfo.tensors[1].offset += 2)), weights)).message).toMatch(/not 64-byte aligned/);
    expect((await loadError(edit((m) => (m.targetInfo.tensors[1].offset = m.targetInfo.tensors[0].offset)), weights)).message).toMatch(/overlap/);
    expect((await loadError(edit((m) => m.targetInfo.tensors.splice(4, 1)), weights)).message).toMatch(/is missing from the tensor table/);
    expect((await loadError(edit((m) => (m.targetInfo.tensors[0].format = 'Q5_K')), weights)).message).toMatch(/unknown format "Q5_K"/);
  });
});
