/**
 * A full garbage collection, asked for between a streamed generation's steps. Each step's KV cache
 * comes back from onnxruntime as new buffers (a layer's past grows by one position), the last
 * step's becoming garbage; V8 frees them only at its next collection, which its external-memory
 * heuristics put off until several generations have piled up (≈ 1 GB of malloc heap at 1.1B with 80
 * prompts, which glibc then keeps resident: docs/lab/scale-history.md). Collected each step, the
 * heap holds about one generation. Node exposes `gc` only with --expose-gc: the flag is set here
 * and the function taken from a fresh context; where that fails, nothing is collected.
 */
import v8 from 'node:v8';
import vm from 'node:vm';

let collect: (() => void) | null | undefined;

export function reclaim(): void {
  if (collect === undefined) {
    try {
      v8.setFlagsFromString('--expose-gc');
      collect = vm.runInNewContext('gc') as () => void;
    } catch {
      collect = null;
    }
  }
  collect?.();
}
