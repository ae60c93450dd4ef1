/**
 * The profile cache: measurements of a model on calibration data, computed once per
 * (checkpoint identity, calibration set, options) and reused by every pass and by `llmc report`.
 *
 * A profile is JSON (`meta`, any shape) plus named float64 arrays (and optionally float32 ones, for
 * values that are float32 to begin with) stored in a binary file beside it:
 *   <cacheDir>/<kind>-<key>.bin    the arrays, little-endian f64 (then f32), back to back
 *   <cacheDir>/<kind>-<key>.json   {format, version, kind, key, keyParts, meta, arrays: {name: [offset, length]},
 *                                   f32?: {name: [offset, length]}}
 * The key is the sha256 of the canonical JSON of `keyParts` and the llmc version (a new release may
 * measure differently, so it never reuses an older release's profiles). The JSON is written last, so a
 * profile exists only once both files are whole. A corrupt or mismatched cache entry is recomputed.
 */
import { createHash } from 'node:crypto';
import { promises as fsp } from 'node:fs';
import path from 'node:path';
import { stableJson } from '../core/util/stable-json.js';
import { LlmcError } from '../core/errors.js';
import { ensureOutputDir, writeFileAtomic } from '../core/util/atomic.js';
import { LLMC_VERSION } from '../core/version.js';
import type { CacheHandle, ProfileCacheRef } from '../core/pipeline/pass.js';
import { z } from 'zod';
import { pidLock } from '../core/util/pid-lock.js';
import { parseJson } from '../core/util/json.js';

export const PROFILE_FORMAT = 'llmc-profile';
export const PROFILE_VERSION = 1;

export interface ProfileData {
  meta: Record<string, unknown>;
  arrays: Record<string, Float64Array>;
  /** Arrays stored as float32 (half the bytes; exact for values that are float32, e.g. carried hidden states). */
  f32?: Record<string, Float32Array>;
}

export interface Profile extends ProfileData {
  kind: string;
  key: string;
  keyParts: Record<string, unknown>;
  /** True when it came from the cache rather than being computed now. */
  cached: boolean;
}

export function profileKey(kind: string, keyParts: Record<string, unknown>): string {
  return createHash('sha256').update(stableJson({ kind, keyParts, version: PROFILE_VERSION, llmc: LLMC_VERSION })).digest('hex');
}

export function profilePaths(cacheDir: string, kind: string, key: string): { json: string; bin: string } {
  const base = path.join(cacheDir, `${kind}-${key.slice(0, 32)}`);
  return { json: `${base}.json`, bin: `${base}.bin` };
}

/** A profile's JSON head, checked before use (a damaged entry is recomputed). */
const PROFILE_HEAD = z.looseObject({
  format: z.string(),
  version: z.number(),
  key: z.string(),
  meta: z.record(z.string(), z.unknown()),
  arrays: z.record(z.string(), z.tuple([z.number().int().nonnegative(), z.number().int().nonnegative()])),
  /** Absent in entries of earlier llmc versions. */
  binSha256: z.string().optional(),
  f32: z.record(z.string(), z.tuple([z.number().int().nonnegative(), z.number().int().nonnegative()])).optional(),
});

const LE = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** Read a cached profile; undefined when absent or unusable (never throws on a bad cache entry). */
export async function loadProfile(cacheDir: string, kind: string, keyParts: Record<string, unknown>): Promise<Profile | undefined> {
  const key = profileKey(kind, keyParts);
  const p = profilePaths(cacheDir, kind, key);
  try {
    const parsed = PROFILE_HEAD.safeParse(parseJson(await fsp.readFile(p.json, 'utf8'), p.json));
    if (!parsed.success) return undefined;
    const head = parsed.data;
    if (head.format !== PROFILE_FORMAT || head.version !== PROFILE_VERSION || head.key !== key) return undefined;
    const bin = await fsp.readFile(p.bin);
    if (head.binSha256 !== undefined && createHash('sha256').update(bin).digest('hex') !== head.binSha256) return undefined;
    const arrays: Record<string, Float64Array> = {};
    for (const [name, [offset, length]] of Object.entries(head.arrays)) {
      if (offset + length * 8 > bin.length) return undefined;
      const a = new Float64Array(length);
      for (let i = 0; i < length; i++) a[i] = bin.readDoubleLE(offset + i * 8);
      arrays[name] = a;
    }
    const f32: Record<string, Float32Array> = {};
    for (const [name, [offset, length]] of Object.entries(head.f32 ?? {})) {
      if (offset + length * 4 > bin.length) return undefined;
      const a = new Float32Array(length);
      if (LE) new Uint8Array(a.buffer).set(bin.subarray(offset, offset + length * 4));
      else for (let i = 0; i < length; i++) a[i] = bin.readFloatLE(offset + i * 4);
      f32[name] = a;
    }
    return { kind, key, keyParts, meta: head.meta, arrays, ...(head.f32 ? { f32 } : {}), cached: true };
  } catch {
    return undefined;
  }
}

export async function saveProfile(cacheDir: string, kind: string, keyParts: Record<string, unknown>, data: ProfileData): Promise<Profile> {
  const key = profileKey(kind, keyParts);
  const p = profilePaths(cacheDir, kind, key);
  await ensureOutputDir(cacheDir);
  const names = Object.keys(data.arrays).sort();
  const index: Record<string, [number, number]> = {};
  let total = 0;
  for (const n of names) {
    index[n] = [total, data.arrays[n].length];
    total += data.arrays[n].length * 8;
  }
  const names32 = Object.keys(data.f32 ?? {}).sort();
  const index32: Record<string, [number, number]> = {};
  for (const n of names32) {
    index32[n] = [total, data.f32![n].length];
    total += data.f32![n].length * 4;
  }
  const bin = Buffer.alloc(total);
  for (const n of names) {
    const [off] = index[n];
    data.arrays[n].forEach((v, i) => bin.writeDoubleLE(v, off + i * 8));
  }
  for (const n of names32) {
    const [off] = index32[n];
    const a = data.f32![n];
    // the float32 bytes as they are (no round trip through a JS number)
    if (LE) bin.set(new Uint8Array(a.buffer, a.byteOffset, a.byteLength), off);
    else a.forEach((v, i) => bin.writeFloatLE(v, off + i * 4));
  }
  // One llmc at a time writes an entry (two compiles sharing a cache directory): the second leaves it
  // to the first. The head names its .bin's sha256, so a reader never pairs a head with another .bin.
  const got = await pidLock(path.join(cacheDir, `.${path.basename(p.json)}.llmc-lock`));
  if (!('release' in got)) return { kind, key, keyParts, ...data, cached: false };
  try {
    await writeFileAtomic(p.bin, bin);
    const binSha256 = createHash('sha256').update(bin).digest('hex');
    await writeFileAtomic(p.json, stableJson({ format: PROFILE_FORMAT, version: PROFILE_VERSION, kind, key, keyParts, meta: data.meta, arrays: index, ...(names32.length ? { f32: index32 } : {}), binSha256 }));
  } finally {
    got.release();
  }
  return { kind, key, keyParts, ...data, cached: false };
}

export type { CachePolicy, CacheHandle, StageEvent } from '../core/pipeline/pass.js';
export { CACHE_POLICIES } from '../core/pipeline/pass.js';

/** Where passes keep profiles: a directory (policy `on`), a handle, or undefined (no store). */
export type ProfileCache = ProfileCacheRef;

export const cacheHandle = (c: ProfileCache | undefined): CacheHandle | undefined => (typeof c === 'string' ? { dir: c, policy: 'on' } : c);

/** The cache's policy lets stored profiles be read (`on`, `readonly`). */
export const readsCache = (h: CacheHandle | undefined): h is CacheHandle => h !== undefined && (h.policy === 'on' || h.policy === 'readonly');
/** The cache's policy lets computed profiles be stored (`on`, `redo`). */
export const writesCache = (h: CacheHandle | undefined): h is CacheHandle => h !== undefined && (h.policy === 'on' || h.policy === 'redo');

/**
 * The one entry point passes use: the stored profile if present, else compute it and store it,
 * as the cache's policy says. Without a cache it just computes.
 */
export async function cachedProfile(
  cache: ProfileCache | undefined,
  kind: string,
  keyParts: Record<string, unknown>,
  compute: () => Promise<ProfileData>,
): Promise<Profile> {
  if (!/^[a-z0-9-]+$/.test(kind)) throw new LlmcError(`bad profile kind "${kind}"`);
  const h = cacheHandle(cache);
  const key = profileKey(kind, keyParts);
  if (readsCache(h)) {
    const hit = await loadProfile(h.dir, kind, keyParts);
    if (hit) {
      h.onStage?.({ kind, key, cached: true, stored: false, ms: 0 });
      return hit;
    }
  }
  const t0 = performance.now();
  const data = await compute();
  const store = writesCache(h);
  const p = store ? await saveProfile(h.dir, kind, keyParts, data) : { kind, key, keyParts, ...data, cached: false };
  h?.onStage?.({ kind, key, cached: false, stored: store, ms: performance.now() - t0 });
  return p;
}

/**
 * Every stored profile of `kind` in `cacheDir` whose keyParts include `match` (equal as JSON, key by
 * key), in file-name order. For readers that know what a profile is about but not its full key
 * (`llmc report` finding a pass's importance profile); unreadable entries are skipped.
 */
export async function findProfiles(cacheDir: string, kind: string, match: Record<string, unknown> = {}): Promise<Profile[]> {
  const names = await fsp.readdir(cacheDir).catch(() => [] as string[]);
  const out: Profile[] = [];
  for (const name of names.sort()) {
    if (!name.startsWith(`${kind}-`) || !name.endsWith('.json') || !/^[0-9a-f]{32}$/.test(name.slice(kind.length + 1, -5))) continue;
    let keyParts: Record<string, unknown>;
    try {
      keyParts = (parseJson(await fsp.readFile(path.join(cacheDir, name), 'utf8'), name) as { keyParts: Record<string, unknown> }).keyParts;
    } catch {
      continue;
    }
    if (!keyParts || Object.entries(match).some(([k, v]) => stableJson(keyParts[k]) !== stableJson(v))) continue;
    const p = await loadProfile(cacheDir, kind, keyParts);
    if (p) out.push(p);
  }
  return out;
}
