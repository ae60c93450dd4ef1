#!/usr/bin/env node
// The compiled CLI lives in dist/ (built by `npm install` via the prepare script).
import { main } from '../dist/src/app/cli/main.js';

process.exitCode = await main(process.argv.slice(2));
