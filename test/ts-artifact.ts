/** Tests' one way to get a plain ts artifact: a checkpoint directory compiled with no passes. */
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { compile } from '../src/app/compile/compile.js';
import { silentProgress } from '../src/core/util/progress.js';

export async function compileTs(modelDir: string, outDir: string, quant = 'F32'): Promise<void> {
  const source = await openCheckpoint(modelDir);
  try {
    await compile({ source, target: 'ts', outDir, passes: [], quant, progress: silentProgress, note: () => {} });
  } finally {
    await source.close();
  }
}
