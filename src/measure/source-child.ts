/**
 * The child process of sourceLogits (./source-logits.ts): opens the checkpoint directory it is sent,
 * writes every window's streamed logits to the file named, reports progress and the result (or the
 * one-line error) to its parent, and exits, handing back everything onnxruntime and the allocator
 * kept of the pieces it ran.
 */
import { openCheckpoint } from '../core/checkpoint/checkpoint.js';
import { LlmcError } from '../core/errors.js';
import type { Progress } from '../core/util/progress.js';
import { useStreamDevice } from '../exec/stream/device.js';
import { useStreamSettings } from '../exec/stream/spill.js';
import { writeStreamedLogits, type ChildJob, type ChildMessage } from './source-logits.js';

const send = (m: ChildMessage) => new Promise<void>((resolve) => process.send!(m, undefined, {}, () => resolve()));

const progress: Progress = {
  start: (label, total) => void send({ kind: 'start', label, total }),
  tick: (units) => void send({ kind: 'tick', units }),
  status: (text) => void send({ kind: 'status', text }),
  done: () => void send({ kind: 'done' }),
};

process.once('message', (job: ChildJob) => {
  void (async () => {
    try {
      useStreamDevice(job.device);
      useStreamSettings(job.settings);
      const source = await openCheckpoint(job.dir, { allowNonFinite: job.allowNonFinite });
      if ((await source.identity()) !== job.identity) throw new LlmcError('changed while it was being evaluated (its sha256 is not the one the evaluation started with)', job.dir);
      const result = await writeStreamedLogits(source, job.windows, job.file, { threads: job.threads, progress, cacheDir: job.cacheDir });
      await source.close();
      await send({ kind: 'result', result });
    } catch (e) {
      if (e instanceof LlmcError) await send({ kind: 'error', message: e.message, file: e.file, exitCode: e.exitCode });
      else await send({ kind: 'error', message: `internal: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}`, exitCode: 1 });
    }
    process.disconnect();
  })();
});
// the parent gone (Ctrl-C reaches both), this process ends too
process.on('disconnect', () => process.exit(0));
