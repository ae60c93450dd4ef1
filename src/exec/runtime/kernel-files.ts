/**
 * The Node kernel store (./kernel-store.ts): assembled WebAssembly kernels kept as files in
 * $LLMC_KERNEL_CACHE, else $XDG_CACHE_HOME/llmc/kernels (~/.cache/llmc/kernels), so a process starts
 * without assembling them. A file's name carries a fingerprint of the assembler sources, so changed
 * kernels never load stale bytes; older fingerprints are removed when a kernel is written.
 * LLMC_KERNEL_CACHE=off disables it. Every failure only means the kernels are assembled again.
 */
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { setKernelStore } from './kernel-store.js';

/** The modules whose code decides the kernels' bytes, relative to this file. */
const ASSEMBLERS = ['./wasm', './gemm', './attention', './activation', './kernel-module', '../../core/util/wasm-asm', '../../core/util/wasm-ops'];

export function installKernelFiles(): void {
  const setting = process.env.LLMC_KERNEL_CACHE;
  if (setting === 'off' || setting === '0') return;
  try {
    const self = fileURLToPath(import.meta.url);
    const ext = path.extname(self);
    const hash = createHash('sha256');
    for (const f of ASSEMBLERS) hash.update(fs.readFileSync(path.join(path.dirname(self), f + ext)));
    const key = hash.digest('hex').slice(0, 16);
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
          for (const old of fs.readdirSync(dir)) if (old.startsWith(`${name}-`) && old.endsWith('.wasm') && old !== path.basename(file(name))) fs.rmSync(path.join(dir, old), { force: true });
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
