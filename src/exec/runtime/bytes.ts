/**
 * Byte sources: where the runtime reads weights from. The core only sees this interface, so the same
 * loader runs in Node (src/exec/runtime/node.ts: files), in a browser (fetch with Range requests) or on a
 * buffer already in memory.
 */
import { LlmcError } from '../../core/errors.js';

export interface ByteSource {
  size(): Promise<number>;
  /** Exactly `length` bytes from `offset` (a short read is an error). */
  read(offset: number, length: number): Promise<Uint8Array>;
  /** Optional: exactly `into.length` bytes from `offset` into `into` (load reads weights straight into the kernels' memory). */
  readInto?(offset: number, into: Uint8Array): Promise<void>;
  /** For messages. */
  readonly name?: string;
}

/** Bytes already in memory (a whole weights.bin, e.g. from `await file.arrayBuffer()`). */
export function bufferSource(data: ArrayBuffer | Uint8Array, name = 'weights.bin'): ByteSource {
  const bytes = data instanceof Uint8Array ? data : new Uint8Array(data);
  return {
    name,
    size: async () => bytes.byteLength,
    read: async (offset, length) => {
      if (offset < 0 || offset + length > bytes.byteLength) {
        throw new LlmcError(`read of ${length} bytes at ${offset} is past the end (${bytes.byteLength} bytes)`, name);
      }
      return bytes.subarray(offset, offset + length);
    },
  };
}

/** A URL read with HTTP Range requests (browser or Node's global fetch). */
export function urlSource(url: string, init: RequestInit = {}): ByteSource {
  let size: number | null = null;
  return {
    name: url,
    async size() {
      if (size !== null) return size;
      const res = await fetch(url, { ...init, method: 'HEAD' });
      const len = Number(res.headers.get('content-length'));
      if (!res.ok || !Number.isFinite(len)) throw new LlmcError(`cannot get size (HTTP ${res.status})`, url);
      return (size = len);
    },
    async read(offset, length) {
      if (length === 0) return new Uint8Array(0);
      const headers = new Headers(init.headers);
      headers.set('Range', `bytes=${offset}-${offset + length - 1}`);
      const res = await fetch(url, { ...init, headers });
      if (!res.ok) throw new LlmcError(`read failed (HTTP ${res.status})`, url);
      let buf = new Uint8Array(await res.arrayBuffer());
      // A server that ignores Range sends the whole file (200): cut our part out.
      if (res.status === 200 && buf.byteLength !== length) buf = buf.subarray(offset, offset + length);
      if (buf.byteLength !== length) throw new LlmcError(`short read: wanted ${length} bytes at ${offset}, got ${buf.byteLength}`, url);
      return buf;
    },
  };
}
