/**
 * Preloaded into every node process of a measured run (NODE_OPTIONS=--import=…/tree-rss.js, inherited
 * by the child processes llmc forks): at exit each writes its own VmHWM (KiB) to
 * $LLMC_TREE_RSS_DIR/<pid>.json, so bench/scale.bench.ts can report the peak of each process of the
 * tree and their sum (an upper bound of the tree's simultaneous peak), and its CPU time (user + system),
 * which, unlike wall time, does not grow with the machine's load.
 */
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { vmHwmKiB } from './vmhwm.js';

const dir = process.env.LLMC_TREE_RSS_DIR;
if (dir) process.on('exit', () => writeFileSync(path.join(dir, `${process.pid}.json`), JSON.stringify({ pid: process.pid, ppid: process.ppid, vmHwmKiB: vmHwmKiB(), cpuMs: (process.cpuUsage().user + process.cpuUsage().system) / 1000 })));
