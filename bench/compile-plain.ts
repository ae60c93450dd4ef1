/** Benches' one way to get a plain artifact (as test/ts-artifact.ts for tests): a checkpoint directory compiled with no passes. */
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { compile } from '../src/app/compile/compile.js';
import { silentProgress } from '../src/core/util/progress.js';

export async function compilePlain(modelDir: string, outDir: string, quant: string, target: 'ts' | 'gguf' | 'cuda' = 'ts'): Promise<void> {
  const source = await openCheckpoint(modelDir);
  try {
    await compile({ source, target, outDir, passes: [], quant, progress: silentProgress, note: () => {} });
  } finally {
    await source.close();
  }
}
