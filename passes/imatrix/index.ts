/**
 * Pass `imatrix`: llama.cpp's importance matrix measured by llmc's calibration. Every linear of the
 * decoder layers gets the sum over calibration tokens of its input x² per column (experts: over the
 * tokens routed to them) as a tensor annotation; the gguf target quantizes with it as
 * `llama-quantize --imatrix` does and writes it as `imatrix.gguf`. The work is in ./run.ts.
 */
import { UsageError } from '../../src/core/errors.js';
import type { PassDescriptor } from '../../src/core/pipeline/pass.js';
import { IMATRIX } from '../../src/core/records/imatrix.js';
import { IMATRIX_OPTIONS, type ImatrixOptions } from './options.js';

export const imatrix: PassDescriptor<ImatrixOptions> = {
  name: 'imatrix',
  description: "llama.cpp's importance matrix (imatrix.gguf) from calibration: the gguf target quantizes with it",
  options: IMATRIX_OPTIONS,
  flags: [],
  after: ['reorder'],
  requires: [],
  produces: IMATRIX,
  check: (_o, target) => {
    if (target.name !== 'gguf') throw new UsageError(`pass imatrix weighs ggml's quantizers, which target ${target.name} does not run: compile with --target gguf`);
  },
  load: async () => (await import('./run.js')).imatrixPass,
};
