/**
 * Where the layer-streaming executor keeps the calibration batch's hidden states between pieces: in
 * memory up to a budget, beyond it in a temporary file (in the cache directory), read back when the
 * next piece runs that batch. Values round-trip exactly (float32 bytes), so results are the same with
 * and without spilling.
 *
 * Every live batch's state is rewritten after each piece (a piece replaces its carried values), so
 * two files suffice, used in turn: piece s writes file s % 2 from its start while reading what piece
 * s − 1 wrote to the other. Disk use is at most twice the states spilled; the files are removed by
 * close() and on Ctrl-C.
 */
import { closeSync, mkdirSync, mkdtempSync, openSync, readSync, rmSync, writeSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { V } from '../../core/ir/ir.js';
import { UsageError } from '../../core/errors.js';
import { onInterrupt } from '../../core/util/interrupt.js';

/** One batch's carried values: in memory, or spilled (their places in one of the two files). */
export interface Slot {
  mem: Map<V, Float32Array>;
  disk: { file: 0 | 1; at: [V, number, number][] } | null;
}

export const emptySlot = (): Slot => ({ mem: new Map(), disk: null });

/** Per batch, the values a piece carries on (read back from the spill file when they spilled). */
export interface CarriedOut {
  readonly length: number;
  get(batch: number): Map<V, Float32Array>;
}

/** CarriedOut of values held in memory. */
export const carriedOf = (maps: Map<V, Float32Array>[]): CarriedOut => ({ length: maps.length, get: (i) => maps[i] });

/** How the streamed executor is used (the CLI's --stream-above, --stream-memory and --cache-dir). */
export interface StreamSettings {
  /** Stream models whose float32 weights are above this many bytes (default STREAM_ABOVE_BYTES, 1 GiB). */
  aboveBytes?: number;
  /** Bytes of carried hidden states held in memory before they spill; default: a quarter of free memory. */
  memoryBytes?: number;
  /** Where the spill files go (default: the OS temp directory). */
  dir?: string;
}

let settings: StreamSettings = {};

/** The process's spill settings (set by `llmc compile`; a child process is sent its parent's). */
export const streamSettings = (): StreamSettings => settings;
export function useStreamSettings(s: StreamSettings): void {
  settings = { ...settings, ...s };
}

/** "512M", "2G", "1.5GB", "4096" (bytes) → bytes; a usage error names the flag otherwise. */
export function parseBytes(flag: string, text: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$/i.exec(text);
  if (!m) throw new UsageError(`${flag} must be a size such as 512M or 2G, got "${text}"`);
  const n = Number(m[1]) * 1024 ** ' kmgt'.indexOf((m[2] || ' ').toLowerCase());
  if (!Number.isFinite(n)) throw new UsageError(`${flag} must be a size such as 512M or 2G, got "${text}"`);
  return Math.floor(n);
}

const bytesOf = (m: Map<V, Float32Array>) => [...m.values()].reduce((a, x) => a + x.byteLength, 0);

export class CarryStore {
  readonly budget: number;
  /** Bytes held in memory now, and the most spilled to disk at once. */
  held = 0;
  spilledBytes = 0;
  private dir: string | null = null;
  private fds: [number, number] = [-1, -1];
  private ends: [number, number] = [0, 0];
  private turnAt: 0 | 1 = 0;
  private unregister: (() => void) | null = null;
  private readonly base: string;

  constructor(s: StreamSettings = streamSettings()) {
    this.budget = s.memoryBytes ?? Math.floor(os.freemem() / 4);
    this.base = s.dir ?? os.tmpdir();
  }

  /** Piece `s` starts: its outputs go to file s % 2, from its start (what is there is two pieces old). */
  turn(s: number): void {
    this.turnAt = (s % 2) as 0 | 1;
    this.ends[this.turnAt] = 0;
  }

  /** Replace `slot`'s values by `values`: in memory while the budget allows, else appended to this piece's file. */
  keep(slot: Slot, values: Map<V, Float32Array>): void {
    this.drop(slot);
    const n = bytesOf(values);
    if (this.held + n <= this.budget) {
      slot.mem = values;
      this.held += n;
      return;
    }
    const f = this.turnAt;
    const fd = this.fd(f);
    const at: [V, number, number][] = [];
    for (const [v, x] of values) {
      writeSync(fd, new Uint8Array(x.buffer, x.byteOffset, x.byteLength), 0, x.byteLength, this.ends[f]);
      at.push([v, this.ends[f], x.length]);
      this.ends[f] += x.byteLength;
    }
    slot.mem = new Map();
    slot.disk = { file: f, at };
    this.spilledBytes = Math.max(this.spilledBytes, this.ends[0] + this.ends[1]);
  }

  /** A slot with the same values (a branch of the model starting from them); counted as held if in memory. */
  copy(slot: Slot): Slot {
    this.held += bytesOf(slot.mem);
    return { mem: new Map(slot.mem), disk: slot.disk };
  }

  /** `slot`'s values, read back from disk when spilled. */
  load(slot: Slot): Map<V, Float32Array> {
    if (!slot.disk) return slot.mem;
    const fd = this.fds[slot.disk.file];
    return new Map(
      slot.disk.at.map(([v, offset, length]) => {
        const x = new Float32Array(length);
        readSync(fd, new Uint8Array(x.buffer), 0, x.byteLength, offset);
        return [v, x];
      }),
    );
  }

  /** Forget `slot`'s values. */
  drop(slot: Slot): void {
    this.held -= bytesOf(slot.mem);
    slot.mem = new Map();
    slot.disk = null;
  }

  /** Remove the spill files. */
  close(): void {
    for (const fd of this.fds) if (fd >= 0) closeSync(fd);
    this.fds = [-1, -1];
    if (this.dir) rmSync(this.dir, { recursive: true, force: true });
    this.dir = null;
    this.unregister?.();
    this.unregister = null;
  }

  private fd(f: 0 | 1): number {
    if (this.fds[f] < 0) {
      if (!this.dir) {
        mkdirSync(this.base, { recursive: true });
        this.dir = mkdtempSync(path.join(this.base, 'llmc-spill-'));
        const dir = this.dir;
        this.unregister = onInterrupt(() => rmSync(dir, { recursive: true, force: true }));
      }
      this.fds[f] = openSync(path.join(this.dir, `carried-${f}.f32`), 'w+');
    }
    return this.fds[f];
  }
}
