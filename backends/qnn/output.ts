/**
 * Where a qnn artifact goes: its directory (emit), or a list of files and sizes (plan, --dry-run).
 * emit lays the artifact out once through an Output, so the dry run is the real compile's code path.
 */
import { promises as fsp } from 'node:fs';
import path from 'node:path';
import { ensureOutputDir, writeFileAtomic } from '../../src/core/util/atomic.js';
import { writeOnnx } from '../../src/exec/onnx/external.js';
import { splicedModel } from '../../src/exec/onnx/lower.js';
import type { LoweredGraph } from './lower.js';
import { SHADOW_COLD, SHADOW_HOT, SHADOW_INDEX, ShadowWriter, type ShadowIndex } from './shadow.js';

export interface Output {
  /** Write a graph (its folder made as needed). */
  onnx(file: string, g: LoweredGraph): Promise<void>;
  /** Bytes of a file written through this output. */
  size(file: string): Promise<number>;
  text(file: string, text: string): Promise<void>;
  shadow(): Promise<ShadowWriter>;
  /** The shadow files are complete (their index and its text). */
  shadowWritten(index: ShadowIndex, indexText: string): void;
}

export function diskOutput(dir: string): Output {
  return {
    onnx: async (file, g) => {
      await ensureOutputDir(path.dirname(path.join(dir, file)));
      await writeOnnx(path.join(dir, file), g, null);
    },
    size: async (file) => (await fsp.stat(path.join(dir, file))).size,
    text: (file, text) => writeFileAtomic(path.join(dir, file), text),
    shadow: async () => {
      for (const d of ['npu', 'cpu', 'quant', 'graph', 'weights']) await ensureOutputDir(path.join(dir, d));
      return ShadowWriter.create(dir);
    },
    shadowWritten: () => {},
  };
}

/** Sizes of what `emit` writes, from the same code path; reads no weight data (a shadowed linear's bias aside). */
export function plannedOutput(sizes: Map<string, number>): Output {
  return {
    onnx: async (file, g) => void sizes.set(file, splicedModel({ ...g.model }, g.graph, g.tensors).total),
    size: async (file) => sizes.get(file)!,
    text: async (file, text) => void sizes.set(file, Buffer.byteLength(text)),
    shadow: async () => ShadowWriter.planned(),
    shadowWritten: (index, indexText) => {
      sizes.set(SHADOW_HOT, index.hotBytes);
      sizes.set(SHADOW_COLD, index.coldBytes);
      sizes.set(SHADOW_INDEX, Buffer.byteLength(indexText));
    },
  };
}

