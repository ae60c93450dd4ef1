/**
 * The bytes of a runtime kernel module: functions over an imported `env.memory`, each exported by
 * its name (in order: export i is function i). Shared by the matmul (./wasm.ts), tiled matmul
 * (./gemm.ts) and attention (./attention.ts) modules. Browser-safe.
 */
import { section, str, uleb, vec } from '../../core/util/wasm-asm.js';

export interface KernelFunction {
  name: string;
  /** Parameter value types (I32, F32, ...); no results. */
  params: number[];
  /** Local declarations then code, ending with `end` (0x0b). */
  body: number[];
}

/** `shared`: the memory import is a shared memory (a worker pool's), up to 4 GiB. */
export function kernelModuleBytes(fns: KernelFunction[], shared = false): Uint8Array<ArrayBuffer> {
  const sigs: string[] = [];
  const typeOf = fns.map(({ params }) => {
    const key = params.join(',');
    if (!sigs.includes(key)) sigs.push(key);
    return sigs.indexOf(key);
  });
  const fnType = (key: string) => [0x60, ...vec(key.split(',').filter(Boolean).map((p) => [Number(p)])), ...vec([])];
  const types = section(1, vec(sigs.map(fnType)));
  const limits = shared ? [0x03, ...uleb(1), ...uleb(65536)] : [0x00, ...uleb(1)];
  const imports = section(2, vec([[...str('env'), ...str('memory'), 0x02, ...limits]]));
  const funcs = section(3, vec(typeOf.map((t) => [t])));
  const exports = section(7, vec(fns.map((f, i) => [...str(f.name), 0x00, i])));
  const code = section(10, vec(fns.map(({ body }) => [...uleb(body.length), ...body])));
  return new Uint8Array([0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, ...types, ...imports, ...funcs, ...exports, ...code]);
}
