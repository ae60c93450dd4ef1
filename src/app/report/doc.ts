/**
 * The report as a document: sections of blocks (text, facts, tables, charts), rendered to HTML
 * (./html.ts), Markdown (./markdown.ts) or JSON (each section's `data`). Sections build documents;
 * they never write markup.
 */
import type { ChartSpec } from './chart.js';

export type Cell = string | number | null;

export type Block =
  | { kind: 'text'; text: string }
  /** Label → value pairs. */
  | { kind: 'facts'; items: [string, string][] }
  | { kind: 'table'; caption?: string; columns: string[]; rows: Cell[][] }
  /** A chart drawn by the chart library; `caption` says what it shows (also its accessible name). */
  | { kind: 'chart'; caption: string; chart: ChartSpec }
  /** Hand-drawn SVG, for what no chart library draws. */
  | { kind: 'svg'; caption: string; svg: string };

export interface Section {
  /** Stable id: the HTML anchor and chart id prefix (lowercase letters, digits, dashes). */
  id: string;
  title: string;
  blocks: Block[];
  /** The figures behind the section, for --json. */
  data: unknown;
}

export interface Report {
  schema: 'llmc-report/1';
  title: string;
  /** What was reported on. */
  input: { kind: 'artifact' | 'profile'; path: string };
  sections: Section[];
}

export function fmtBytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return u === 0 ? `${n} B` : `${v.toFixed(v < 10 ? 2 : v < 100 ? 1 : 0)} ${units[u]}`;
}

/** A number with `digits` significant digits, without exponent noise for ordinary magnitudes. */
export function fmtNum(v: number | null | undefined, digits = 4): string {
  if (v === null || v === undefined || !Number.isFinite(v)) return '—';
  if (v !== 0 && (Math.abs(v) < 1e-3 || Math.abs(v) >= 1e7)) return v.toExponential(digits - 1);
  return Number(v.toPrecision(digits)).toString();
}

export const fmtCount = (n: number) => n.toLocaleString('en-US');
