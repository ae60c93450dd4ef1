/**
 * Both qnn engines on the same feeds, subgraph by subgraph: QnnRunner's `observe` hook runs the
 * simulation beside onnxruntime on every subgraph onnxruntime runs (its outputs carried on), and
 * records per output how far the two are apart. Differences then stay where they arise instead of
 * compounding through later layers, which is what separates "the simulation computes the graph" from
 * "float ops differ in their last bit and a quantizer rounds the other way".
 */
import type { Tensor } from 'onnxruntime-node';
import type { QnnRunner } from '../backends/qnn/run.js';
import { openSimulation } from '../backends/qnn/sim.js';

export interface Gap {
  subgraph: string;
  device: 'NPU' | 'CPU';
  output: string;
  /** max |onnxruntime − sim| over the output */
  maxAbs: number;
  /** max |onnxruntime| over the output */
  scale: number;
  /** values that differ at all */
  differ: number;
  n: number;
}

type Observe = NonNullable<Parameters<typeof QnnRunner.open>[2]>['observe'];

/** An `observe` for QnnRunner.open({ engine: 'onnxruntime' }) that pushes one Gap per float output run to `out`. */
export function simBeside(dir: string, out: Gap[]): Observe {
  return (ort, subgraphs) => {
    const sim = openSimulation(dir, subgraphs);
    return {
      async run(sg, feeds) {
        const [a, b] = [await ort.run(sg, feeds), await sim.run(sg, feeds)];
        for (const [k, t] of Object.entries(a) as [string, Tensor][]) {
          const x = t.data as Float32Array;
          const y = b[k]?.data as Float32Array | undefined;
          if (!(x instanceof Float32Array) || !y) continue;
          let maxAbs = 0;
          let scale = 0;
          let differ = 0;
          for (let i = 0; i < x.length; i++) {
            maxAbs = Math.max(maxAbs, Math.abs(x[i] - y[i]));
            scale = Math.max(scale, Math.abs(x[i]));
            if (x[i] !== y[i]) differ++;
          }
          out.push({ subgraph: sg.id, device: sg.device, output: k, maxAbs, scale, differ, n: x.length });
        }
        return a;
      },
      close: async () => {
        await ort.close();
        await sim.close();
      },
    };
  };
}

/** The layers' quantized NPU outputs (not the shadow split's float intermediates). */
export const npuOutput = (g: Gap): boolean => /_(qkv|mlp)(_p\d+)?$/.test(g.subgraph) && /^l\d+\.(q|k|v|out)$/.test(g.output);
