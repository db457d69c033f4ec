#!/usr/bin/env node
// The `mcp-store` command: runs the TypeScript sources through tsx (no build step needed, always
// the code in src/). `npm start` runs the bundle built by scripts/build.mjs instead.
import { register } from "tsx/esm/api"

register()
await import("../src/cli-entry.ts")
