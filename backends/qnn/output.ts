/**
 * Where a qnn artifact goes: its directory (emit), or a list of files and sizes (plan, --dry-run).
 * emit lays the artifact out once through an Output, so the dry run is the real compile's code path.
 */
import { existsSync, promises as fsp } from 'node:fs';
import path from 'node:path';
import { ensureOutputDir, writeFileAtomic } from '../../src/core/util/atomic.js';
import { ExternalData, externalSizes, writeOnnx } from '../../src/exec/onnx/external.js';
import { splicedModel } from '../../src/exec/onnx/lower.js';
import type { LoweredGraph } from './lower.js';
import { SHADOW_COLD, SHADOW_HOT, SHADOW_INDEX, ShadowWriter, type ShadowIndex } from './shadow.js';

/** The data file of a graph written with external data: beside it, onnx's `<graph>.data` convention. */
export const dataFileOf = (file: string): string => `${file}.data`;

export interface Output {
  /** Write a graph (its folder made as needed), its weights in dataFileOf(file) when `external`; the files written. */
  onnx(file: string, g: LoweredGraph, external?: boolean): Promise<string[]>;
  /** Bytes of a graph or file written through this output (a graph's with its data file). */
  size(file: string): Promise<number>;
  text(file: string, text: string): Promise<void>;
  shadow(): Promise<ShadowWriter>;
  /** The shadow files are complete (their index and its text). */
  shadowWritten(index: ShadowIndex, indexText: string): void;
}

export function diskOutput(dir: string): Output {
  return {
    onnx: async (file, g, external = false) => {
      await ensureOutputDir(path.dirname(path.join(dir, file)));
      if (!external) {
        await writeOnnx(path.join(dir, file), g, null);
        return [file];
      }
      const data = await ExternalData.create(path.join(dir, dataFileOf(file)), path.basename(dataFileOf(file)), g.tensors.reduce((a, t) => a + t.byteLength, 0));
      try {
        await writeOnnx(path.join(dir, file), g, data);
        await data.commit();
      } catch (err) {
        await data.abort();
        throw err;
      }
      return [file, dataFileOf(file)];
    },
    size: async (file) => (await fsp.stat(path.join(dir, file))).size + (existsSync(path.join(dir, dataFileOf(file))) ? (await fsp.stat(path.join(dir, dataFileOf(file)))).size : 0),
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
    onnx: async (file, g, external = false) => {
      if (!external) {
        sizes.set(file, splicedModel({ ...g.model }, g.graph, g.tensors).total);
        return [file];
      }
      const { graphBytes, dataBytes } = externalSizes(g, path.basename(dataFileOf(file)));
      sizes.set(file, graphBytes);
      sizes.set(dataFileOf(file), dataBytes);
      return [file, dataFileOf(file)];
    },
    size: async (file) => sizes.get(file)! + (sizes.get(dataFileOf(file)) ?? 0),
    text: async (file, text) => void sizes.set(file, Buffer.byteLength(text)),
    shadow: async () => ShadowWriter.planned(),
    shadowWritten: (index, indexText) => {
      sizes.set(SHADOW_HOT, index.hotBytes);
      sizes.set(SHADOW_COLD, index.coldBytes);
      sizes.set(SHADOW_INDEX, Buffer.byteLength(indexText));
    },
  };
}
