#!/usr/bin/env node
// The `mcp-store` command: runs the TypeScript sources through tsx (no build step), then exits
// with the program's code once the server has shut down.
import { register } from "tsx/esm/api"

register()
const { main } = await import("../src/main.ts")
process.exitCode = await main(process.argv.slice(2))
