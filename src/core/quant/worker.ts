/** worker_threads entry for quantizeParallel: quantize one row range, hand the bytes back (transferred). */
import { parentPort } from 'node:worker_threads';
import { quantize } from './quantize.js';
import type { QuantType } from './types.js';

interface Job { id: number; type: QuantType; rowLength: number; data: Float32Array }

parentPort?.on('message', (job: Job) => {
  try {
    const out = quantize(job.type, job.data, job.rowLength);
    parentPort!.postMessage({ id: job.id, out }, [out.buffer as ArrayBuffer]);
  } catch (e) {
    parentPort!.postMessage({ id: job.id, error: e instanceof Error ? e.message : String(e) });
  }
});
