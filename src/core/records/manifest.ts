/**
 * llmc-manifest.json: the one self-describing manifest every target writes, defined once here
 * (browser-safe: the TS runtime reads it). src/app/compile/manifest.ts writes it.
 * Same inputs give the same bytes: keys are written sorted (stableJson) and there are no timestamps.
 */
import type { ArchSpec } from '../arch/spec.js';

export { stableJson } from '../util/stable-json.js';

export const MANIFEST_FILE = 'llmc-manifest.json';
export const MANIFEST_FORMAT = 'llmc-artifact';
export const MANIFEST_VERSION = 1;

export interface ManifestFile {
  path: string;
  size: number;
  sha256: string;
}

/**
 * What one pass recorded: its name, the options it ran with, and its record (`metadata`, a typed
 * record whose `format` names its type and version, e.g. `elastic-prefix/1`; see ./index.ts).
 */
export interface PassRecord {
  name: string;
  options: Record<string, unknown>;
  metadata: Record<string, unknown>;
}

/** What the artifact holds per tensor group (a component of the model) and format. */
export interface ManifestSummary {
  groups: { group: string; format: string; tensors: number; bytes: number }[];
  /** Bytes of the written tensors, and of the same tensors in the source checkpoint. */
  bytes: number;
  sourceBytes: number;
}

export interface Manifest<TargetInfo = Record<string, unknown>> {
  format: typeof MANIFEST_FORMAT;
  version: number;
  llmcVersion: string;
  target: string;
  source: { path: string; sha256: string };
  arch: ArchSpec;
  /** Target-specific section (the ts target's tensor table lives here, GGUF's quant choices ...). */
  targetInfo: TargetInfo;
  passes: PassRecord[];
  files: ManifestFile[];
  /** Per tensor group and format (absent for targets that do not list their tensors). */
  summary?: ManifestSummary;
}
