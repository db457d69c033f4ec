#!/usr/bin/env node
// The `mcp-store` program run from the TypeScript sources through tsx (`npm run dev -- run api ...`):
// always the code in src/, no build step. Tests and development start the store this way; the
// package's `mcp-store` command and `npm start` run the bundle scripts/build.mjs makes instead.
import { register } from "tsx/esm/api"

register()
await import("../src/cli-entry.ts")
