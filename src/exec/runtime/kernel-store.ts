/**
 * Compiled WebAssembly kernels by name. The runtime assembles its modules byte by byte, which costs
 * tens of milliseconds of start-up; where the platform allows (Node: src/exec/runtime/node.ts installs
 * a file store) the bytes persist between processes, keyed by a fingerprint of the code that
 * assembles them. Browser-safe: without a store the bytes are assembled once per page.
 */

/** Where assembled kernel bytes persist; `name` already carries the assembler's fingerprint. */
export interface KernelStore {
  read(name: string): Uint8Array | undefined;
  write(name: string, bytes: Uint8Array): void;
}

let store: KernelStore | undefined;

export function setKernelStore(s: KernelStore | undefined): void {
  store = s;
}

const modules = new Map<string, WebAssembly.Module | null>();

function compileOrNull(bytes: Uint8Array): WebAssembly.Module | null {
  try {
    return new WebAssembly.Module(bytes as Uint8Array<ArrayBuffer>);
  } catch {
    return null;
  }
}

/** The module `assemble` builds (from the store when it holds valid bytes), or null without WebAssembly (SIMD). */
export function kernelModule(name: string, assemble: () => Uint8Array): WebAssembly.Module | null {
  let m = modules.get(name);
  if (m !== undefined) return m;
  m = null;
  try {
    if (typeof WebAssembly === 'object') {
      // Stored bytes are compiled as they are (compiling checks them; a separate validate decodes them twice).
      const stored = store?.read(name);
      m = stored ? compileOrNull(stored) : null;
      if (!m) {
        const bytes = assemble();
        m = compileOrNull(bytes);
        if (m) store?.write(name, bytes);
      }
    }
  } catch {
    m = null;
  }
  modules.set(name, m);
  return m;
}
