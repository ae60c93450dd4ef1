/**
 * The Node kernel store (./kernel-store.ts): assembled WebAssembly kernels kept as files in
 * $LLMC_KERNEL_CACHE, else $XDG_CACHE_HOME/llmc/kernels (~/.cache/llmc/kernels), so a process starts
 * without assembling them. A file's name carries a fingerprint of the assembler sources, so changed
 * kernels never load stale bytes; other fingerprints unread for a week are removed when a kernel is written.
 * LLMC_KERNEL_CACHE=off disables it. Every failure only means the kernels are assembled again.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { setKernelStore } from './kernel-store.js';

/** The modules whose code decides the kernels' bytes, relative to this file. */
const ASSEMBLERS = ['./wasm', './qdot', './qact', './qgemm', './gemm', './attention', './activation', './norm', './epilogue', './kernel-module', '../../core/util/wasm-asm', '../../core/util/wasm-ops'];

/** Set by scripts/bundle-run.mjs in its single-file bundle (no sources beside it): kernelFingerprint() of the sources it bundled. */
declare const LLMC_BUNDLED_KERNEL_KEY: string | undefined;

/** The assembler sources' fingerprint, read beside this module (the file names the kernels' cached bytes). */
export function kernelFingerprint(self = fileURLToPath(import.meta.url)): string {
  const ext = path.extname(self);
  // Two FNV-1a hashes (not node:crypto, whose loading alone costs ~10 ms of start-up): this names
  // cache files, it guards against no adversary.
  let a = 0x811c9dc5;
  let b = 0x01000193 ^ 0x5bd1e995;
  for (const f of ASSEMBLERS) {
    for (const byte of fs.readFileSync(path.join(path.dirname(self), f + ext))) {
      a = Math.imul(a ^ byte, 0x01000193);
      b = Math.imul(b ^ byte, 0x01000193) ^ (b >>> 15);
    }
  }
  return (a >>> 0).toString(16).padStart(8, '0') + (b >>> 0).toString(16).padStart(8, '0');
}

export function installKernelFiles(): void {
  const setting = process.env.LLMC_KERNEL_CACHE;
  if (setting === 'off' || setting === '0') return;
  try {
    const key = typeof LLMC_BUNDLED_KERNEL_KEY === 'string' ? LLMC_BUNDLED_KERNEL_KEY : kernelFingerprint();
    const dir = setting || path.join(process.env.XDG_CACHE_HOME || path.join(os.homedir(), '.cache'), 'llmc', 'kernels');
    const file = (name: string) => path.join(dir, `${name}-${key}.wasm`);
    setKernelStore({
      read(name) {
        try {
          return new Uint8Array(fs.readFileSync(file(name)));
        } catch {
          return undefined;
        }
      },
      write(name, bytes) {
        try {
          fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
          // Other fingerprints go once unused for a week: two llmc versions side by side (a global and a
          // project's) would otherwise delete each other's kernels on every run.
          const week = Date.now() - 7 * 86400_000;
          for (const old of fs.readdirSync(dir)) {
            if (!old.startsWith(`${name}-`) || !old.endsWith('.wasm') || old === path.basename(file(name))) continue;
            const at = path.join(dir, old);
            if (fs.statSync(at).atimeMs < week) fs.rmSync(at, { force: true });
          }
          const tmp = `${file(name)}.${process.pid}.tmp`;
          fs.writeFileSync(tmp, bytes);
          fs.renameSync(tmp, file(name));
        } catch {
          // a read-only or missing home: the next process assembles the kernel again
        }
      },
    });
  } catch {
    // the sources cannot be read (a bundle): no store
  }
}
