/**
 * Layout of a report's charts as Chromium draws them: every piece of text (axis labels and names,
 * legend labels, data and mark-line labels) and every legend marker, as the oriented rectangle it
 * covers on the page (its box in its own coordinates through its screen transform, so rotated axis
 * labels are their real slanted boxes, not axis-aligned hulls). Two that intersect, or one outside
 * its chart, is an overlap a reader sees. Legend markers are the icons ECharts draws at a legend
 * item's translation (its hit area there is tagged ecmeta_ssr_type="legend").
 */
import type { Page } from 'playwright-core';

export interface LayoutProblem {
  chart: string;
  what: string;
}

/** Runs in the page: the problems of every chart (`svg[data-chart]`). `slack`: px two boxes may share (anti-aliasing, glyph bearings). */
function checkInPage(slack: number): LayoutProblem[] {
  type Pt = [number, number];
  type Box = { label: string; corners: Pt[] };
  const cornersOf = (el: SVGGraphicsElement): Pt[] | null => {
    const b = el.getBBox();
    const m = el.getScreenCTM();
    // a stroked path covers half its stroke beyond its geometry (a legend's line icon has no height without it)
    const w = el.tagName === 'text' || el.getAttribute('stroke') === null || el.getAttribute('stroke') === 'none' ? 0 : Number(el.getAttribute('stroke-width') ?? 1) / 2;
    if (!m || b.width + 2 * w <= 0 || b.height + 2 * w <= 0) return null;
    // shrink by the slack on each side before transforming
    const [x0, y0, x1, y1] = [b.x - w + slack, b.y - w + slack, b.x + b.width + w - slack, b.y + b.height + w - slack];
    if (x1 <= x0 || y1 <= y0) return null;
    return ([[x0, y0], [x1, y0], [x1, y1], [x0, y1]] as Pt[]).map(([x, y]) => [m.a * x + m.c * y + m.e, m.b * x + m.d * y + m.f]);
  };
  // separating axis theorem for two convex quadrilaterals
  const project = (pts: Pt[], ax: Pt) => pts.map(([x, y]) => x * ax[0] + y * ax[1]);
  const overlap = (a: Pt[], b: Pt[]) => {
    for (const poly of [a, b]) {
      for (let i = 0; i < 4; i++) {
        const [p, q] = [poly[i], poly[(i + 1) % 4]];
        const ax: Pt = [q[1] - p[1], p[0] - q[0]];
        const [pa, pb] = [project(a, ax), project(b, ax)];
        if (Math.max(...pa) <= Math.min(...pb) || Math.max(...pb) <= Math.min(...pa)) return false;
      }
    }
    return true;
  };
  const visible = (el: Element) => {
    for (let e: Element | null = el; e && e.tagName !== 'svg'; e = e.parentElement) {
      const s = getComputedStyle(e);
      if (s.display === 'none' || s.visibility === 'hidden' || s.opacity === '0' || e.getAttribute('opacity') === '0') return false;
    }
    return true;
  };
  const problems: LayoutProblem[] = [];
  for (const svg of Array.from(document.querySelectorAll<SVGSVGElement>('svg[data-chart]'))) {
    const chart = svg.getAttribute('data-chart')!;
    const texts: Box[] = [];
    for (const t of Array.from(svg.querySelectorAll<SVGTextElement>('text'))) {
      const label = (t.textContent ?? '').trim();
      const corners = label && visible(t) ? cornersOf(t) : null;
      if (corners) texts.push({ label: `text "${label}"`, corners });
    }
    // A legend item is drawn at one translation: its marker (icon paths), its text, and its hit area
    // (tagged ecmeta_ssr_type="legend"). The marker is every other shape at that translation.
    const items = new Map<string, string>();
    for (const hit of Array.from(svg.querySelectorAll('[ecmeta_ssr_type="legend"]'))) {
      if (hit.getAttribute('fill') === 'none') items.set(hit.getAttribute('transform') ?? '', hit.getAttribute('ecmeta_data_index') ?? '?');
    }
    const markers: Box[] = [];
    for (const el of Array.from(svg.querySelectorAll<SVGGraphicsElement>('path, rect, circle'))) {
      const item = items.get(el.getAttribute('transform') ?? '');
      if (item === undefined || (el.getAttribute('ecmeta_ssr_type') === 'legend' && el.getAttribute('fill') === 'none')) continue;
      // the legend's own (transparent) background shares its first item's translation
      const painted = (el.getAttribute('fill') !== 'none' && el.getAttribute('fill-opacity') !== '0') || (el.getAttribute('stroke') !== null && el.getAttribute('stroke-width') !== '0');
      if (!painted) continue;
      const corners = visible(el) ? cornersOf(el) : null;
      if (corners) markers.push({ label: `legend marker ${item}`, corners });
    }
    for (let i = 0; i < texts.length; i++) {
      for (let j = i + 1; j < texts.length; j++) if (overlap(texts[i].corners, texts[j].corners)) problems.push({ chart, what: `${texts[i].label} overlaps ${texts[j].label}` });
      for (const m of markers) if (overlap(texts[i].corners, m.corners)) problems.push({ chart, what: `${texts[i].label} overlaps ${m.label}` });
    }
    const r = svg.getBoundingClientRect();
    for (const b of [...texts, ...markers]) {
      const out = b.corners.some(([x, y]) => x < r.left - 1 || x > r.right + 1 || y < r.top - 1 || y > r.bottom + 1);
      if (out) problems.push({ chart, what: `${b.label} is cut off at the chart's edge` });
    }
  }
  return problems;
}

/** Every overlap in the page's charts (none: an empty list). */
export async function chartLayoutProblems(page: Page, slack = 0.5): Promise<LayoutProblem[]> {
  return page.evaluate(checkInPage, slack);
}

/** How many texts and legend markers were checked, so a test knows the check saw the charts. */
export async function chartLayoutCounts(page: Page): Promise<{ charts: number; texts: number; legendItems: number }> {
  return page.evaluate(() => ({
    charts: document.querySelectorAll('svg[data-chart]').length,
    texts: document.querySelectorAll('svg[data-chart] text').length,
    legendItems: document.querySelectorAll('svg[data-chart] [ecmeta_ssr_type="legend"][fill="none"]').length,
  }));
}
