/**
 * Which onnxruntime execution provider the layer-streamed pieces run on (`llmc compile --device`):
 * the CPU by default; CUDA, CoreML or DirectML where the installed onnxruntime-node has that provider
 * (listSupportedBackends, and for one it does not bundle, the provider's library beside its binding).
 * Refused in one line otherwise, before any work. Only the streamed executor takes it: the
 * whole-model Engine of a small model stays on the CPU.
 */
import '../engine/ort-env.js'; // before onnxruntime-node loads
import * as ort from 'onnxruntime-node';
import { existsSync, readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { UsageError } from '../../core/errors.js';

export const DEVICES = ['cpu', 'cuda', 'coreml', 'dml'] as const;
export type Device = (typeof DEVICES)[number];

let current: Device = 'cpu';

/** The device streamed pieces run on (set by the CLI's --device; default cpu). */
export const streamDevice = (): Device => current;

/**
 * Session options of one streamed piece on `device` (default: the current one). A piece runs a few
 * times then is released: onnxruntime's arena and memory pattern would only grow the peak (results
 * are the same without them).
 */
export function pieceSessionOptions(threads?: number, device: Device = current): ort.InferenceSession.SessionOptions {
  const options: ort.InferenceSession.SessionOptions = {
    graphOptimizationLevel: 'all',
    executionMode: 'sequential',
    interOpNumThreads: 1,
    enableCpuMemArena: false,
    enableMemPattern: false,
    extra: { session: { intra_op: { allow_spinning: '0' } } },
  };
  if (threads) options.intraOpNumThreads = threads;
  if (device !== 'cpu') options.executionProviders = [device, 'cpu'];
  return options;
}

/** Check `name` is a device this onnxruntime runs, and make it the streamed pieces' device. */
export function useStreamDevice(name: string): Device {
  const d = checkDevice(name);
  current = d;
  return d;
}

/** `name` as a Device the installed onnxruntime-node has, or a one-line usage error saying what it has. */
export function checkDevice(name: string): Device {
  if (!(DEVICES as readonly string[]).includes(name)) throw new UsageError(`--device must be one of ${DEVICES.join(', ')}, got "${name}"`);
  const have = available();
  if (!have.includes(name as Device)) {
    throw new UsageError(`--device ${name}: the installed onnxruntime-node has no ${name} execution provider (it has ${have.join(', ')}); install an onnxruntime-node build with it, or leave --device out for the CPU`);
  }
  return name as Device;
}

/** The devices of DEVICES this onnxruntime-node runs. */
export function available(): Device[] {
  const listed = ort.listSupportedBackends();
  return DEVICES.filter((d) => d === 'cpu' || listed.some((b) => b.name === d && (b.bundled || providerLibrary(d))));
}

/** A provider onnxruntime-node lists but does not bundle loads from a library beside its binding (libonnxruntime_providers_cuda.so). */
function providerLibrary(d: Device): boolean {
  try {
    const root = path.dirname(path.dirname(createRequire(import.meta.url).resolve('onnxruntime-node')));
    const dir = path.join(root, 'bin', "napi-v6", process.platform, process.arch);
    return existsSync(dir) && readdirSync(dir).some((f) => f.includes(`providers_${d}`));
  } catch {
    return false;
  }
}
