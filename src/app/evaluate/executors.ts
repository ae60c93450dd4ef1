/** Which artifacts have quality metrics, and what runs them (light: no executor is imported here). */
export const EVALUATED_TARGETS = { ts: 'ts-runtime', hf: 'onnxruntime' } as const;
export type Executor = (typeof EVALUATED_TARGETS)[keyof typeof EVALUATED_TARGETS];

export function executorOf(target: string): Executor | null {
  return (EVALUATED_TARGETS as Record<string, Executor>)[target] ?? null;
}
