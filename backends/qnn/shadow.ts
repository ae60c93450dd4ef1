/**
 * Shadow-outlier weights on the CPU side (SPEC-outliers §1.3, §2): for every linear side with shadow
 * execution, the int8 rows the CPU multiplies outliers with (input side: W_q[k, :] per input channel
 * k; output side: W_q[:, o] per output channel o, to recompute saturated outputs):
 *   weights/shadow_hot.bin     the hot channels' rows, loaded whole (resident memory)
 *   weights/shadow_cold.bin    every other row, row-addressable, read on demand (mmap on a device)
 *   weights/shadow_index.json  per side: rows, rowBytes, hot channels in file order, offsets, and the
 *                              bias of a shadowed linear that has one (its shadow node adds it)
 * A cold row's address: coldOffset + (k − #{hot channels < k}) · rowBytes.
 */
import { closeSync, fstatSync, openSync, readFileSync, readSync } from 'node:fs';
import path from 'node:path';
import { LlmcError } from '../../src/core/errors.js';
import { AtomicFile, ioError, writeFileAtomic } from '../../src/core/util/atomic.js';
import { parseJsonAs } from '../../src/core/util/json-schema.js';
import { SHADOW_INDEX_FILE } from './files.js';
import type { QuantizedWeight } from '../../src/core/quant/w8a8.js';
import type { QLinear } from './plan.js';

export const SHADOW_HOT = 'weights/shadow_hot.bin';
export const SHADOW_COLD = 'weights/shadow_cold.bin';
export const SHADOW_INDEX = 'weights/shadow_index.json';

export interface ShadowEntry {
  weight: string;
  side: 'input' | 'output';
  rows: number;
  rowBytes: number;
  /** Hot channels, in the order their rows sit in the hot file. */
  hot: number[];
  hotOffset: number;
  coldOffset: number;
}

export interface ShadowIndex {
  format: 'llmc-qnn-shadow/1';
  entries: ShadowEntry[];
  /** Biases of shadowed linears, float32 values. */
  biases: Record<string, number[]>;
  hotBytes: number;
  coldBytes: number;
}

/** Row `k` of a side: W_q[k, :] (input) or W_q[:, k] (output). */
function rowOf(w: QuantizedWeight, side: 'input' | 'output', k: number): Int8Array {
  const { q, inFeatures: K, outFeatures: O } = w;
  if (side === 'input') return q.subarray(k * O, (k + 1) * O);
  const col = new Int8Array(K);
  for (let i = 0; i < K; i++) col[i] = q[i * O + k];
  return col;
}

/**
 * Writes the shadow files as linears come (one weight in memory at a time); `planned()` lays out the
 * same index without files or weights (--dry-run).
 */
export class ShadowWriter {
  private readonly index: ShadowIndex = { format: 'llmc-qnn-shadow/1', entries: [], biases: {}, hotBytes: 0, coldBytes: 0 };

  private constructor(private readonly files: { dir: string; hot: AtomicFile; cold: AtomicFile } | null) {}

  static async create(dir: string): Promise<ShadowWriter> {
    const hot = await AtomicFile.open(path.join(dir, SHADOW_HOT));
    const cold = await AtomicFile.open(path.join(dir, SHADOW_COLD)).catch(async (e) => {
      await hot.abort();
      throw e;
    });
    return new ShadowWriter({ dir, hot, cold });
  }

  static planned(): ShadowWriter {
    return new ShadowWriter(null);
  }

  /** `w` is read only when rows are written. */
  async add(lin: QLinear, w: () => Promise<QuantizedWeight>, hot: { input: number[]; output: number[] }, bias: Float32Array | null): Promise<void> {
    for (const side of ['input', 'output'] as const) {
      if (side === 'input' ? !lin.inShadow : !lin.outShadow) continue;
      const rows = side === 'input' ? lin.inFeatures : lin.outFeatures;
      const rowBytes = side === 'input' ? lin.outFeatures : lin.inFeatures;
      const hotSet = new Set(hot[side]);
      const entry: ShadowEntry = { weight: lin.weight, side, rows, rowBytes, hot: hot[side], hotOffset: this.index.hotBytes, coldOffset: this.index.coldBytes };
      if (this.files) {
        const q = await w();
        for (const k of hot[side]) await this.files.hot.write(new Uint8Array(rowOf(q, side, k).slice().buffer));
        const cold = new Uint8Array((rows - hotSet.size) * rowBytes);
        let at = 0;
        for (let k = 0; k < rows; k++) {
          if (hotSet.has(k)) continue;
          cold.set(new Uint8Array(rowOf(q, side, k).slice().buffer), at);
          at += rowBytes;
        }
        await this.files.cold.write(cold);
      }
      this.index.hotBytes += hotSet.size * rowBytes;
      this.index.coldBytes += (rows - hotSet.size) * rowBytes;
      this.index.entries.push(entry);
    }
    if (bias && (lin.inShadow || lin.outShadow)) this.index.biases[lin.weight] = Array.from(bias);
  }

  /** shadow_index.json's text. */
  indexText(): string {
    return JSON.stringify(this.index) + '\n';
  }

  async commit(): Promise<ShadowIndex> {
    if (this.files) {
      await this.files.hot.commit();
      await this.files.cold.commit();
      await writeFileAtomic(path.join(this.files.dir, SHADOW_INDEX), this.indexText());
    }
    return this.index;
  }

  async abort(): Promise<void> {
    await this.files?.hot.abort();
    await this.files?.cold.abort();
  }
}

/** Reads shadow rows at run time: hot rows from memory, cold ones from the file (counted). */
export class ShadowStore {
  private readonly hot: Uint8Array;
  private readonly fd: number;
  private readonly byKey = new Map<string, { entry: ShadowEntry; hotPos: Map<number, number>; hotSorted: number[] }>();
  readonly stats = { coldRows: 0, coldBytes: 0, hotRows: 0 };
  readonly index: ShadowIndex;

  constructor(dir: string) {
    const file = path.join(dir, SHADOW_INDEX);
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (e) {
      throw ioError(e, file, 'read');
    }
    this.index = parseJsonAs(SHADOW_INDEX_FILE, text, file) as ShadowIndex;
    const hotFile = path.join(dir, SHADOW_HOT);
    const coldFile = path.join(dir, SHADOW_COLD);
    try {
      this.hot = readFileSync(hotFile);
      this.fd = openSync(coldFile, 'r');
    } catch (e) {
      throw ioError(e, (e as NodeJS.ErrnoException).path ?? hotFile, 'read');
    }
    const coldSize = fstatSync(this.fd).size;
    if (this.hot.length < this.index.hotBytes || coldSize < this.index.coldBytes) {
      closeSync(this.fd);
      const [f, has, want] = this.hot.length < this.index.hotBytes ? [hotFile, this.hot.length, this.index.hotBytes] : [coldFile, coldSize, this.index.coldBytes];
      throw new LlmcError(`is ${has} bytes, ${SHADOW_INDEX} says ${want}: the artifact is damaged; compile it again`, f);
    }
    for (const e of this.index.entries) {
      this.byKey.set(`${e.weight}|${e.side}`, { entry: e, hotPos: new Map(e.hot.map((k, i) => [k, i])), hotSorted: [...e.hot].sort((a, b) => a - b) });
    }
  }

  has(weight: string, side: 'input' | 'output'): boolean {
    return this.byKey.has(`${weight}|${side}`);
  }

  /** Row k of a side (a fresh copy for cold rows). */
  row(weight: string, side: 'input' | 'output', k: number): Int8Array {
    const s = this.byKey.get(`${weight}|${side}`);
    if (!s) throw new LlmcError(`no shadow rows for the ${side} of ${weight}`);
    const { entry, hotPos, hotSorted } = s;
    const h = hotPos.get(k);
    if (h !== undefined) {
      this.stats.hotRows++;
      const o = entry.hotOffset + h * entry.rowBytes;
      return new Int8Array(this.hot.buffer, this.hot.byteOffset + o, entry.rowBytes);
    }
    let below = 0;
    while (below < hotSorted.length && hotSorted[below] < k) below++;
    const buf = new Uint8Array(entry.rowBytes);
    readSync(this.fd, buf, 0, entry.rowBytes, entry.coldOffset + (k - below) * entry.rowBytes);
    this.stats.coldRows++;
    this.stats.coldBytes += entry.rowBytes;
    return new Int8Array(buf.buffer);
  }

  bias(weight: string): Float32Array | null {
    const b = this.index.biases[weight];
    return b ? Float32Array.from(b) : null;
  }

  close(): void {
    closeSync(this.fd);
  }
}
